"""Prometheus metrics, one registry per service (no module globals, so tests can run several).

With `serve --workers N` every worker process writes its values to files in one folder
(prometheus_client's multiprocess mode: the supervisor sets `PROMETHEUS_MULTIPROC_DIR` before a
worker imports prometheus_client) and `/metrics` in any worker aggregates them all: counters
and histograms are summed, and each gauge says how (`multiprocess_mode`, ignored with one
process): work waiting (queue depth, backlog, requests in flight) is the sum over live workers,
fitted values are the most recent, sizes the largest.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
_TEACHER_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0)


class Metrics:
    """Every counter, gauge and histogram toolselect exports at `/metrics`."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.http_requests = Counter(
            "toolselect_http_requests",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=r,
        )
        self.http_latency = Histogram(
            "toolselect_http_request_seconds",
            "HTTP request latency by route",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.http_rejected = Counter(
            "toolselect_http_rejected",
            "Requests refused before handling",
            ["reason"],
            registry=r,
        )
        # Labelled by tenant id and limit: never by key (a key appears in no label).
        self.rate_limited = Counter(
            "toolselect_rate_limited",
            "Requests refused `429 rate_limited`, by tenant and by limit: `tenant` "
            "(TOOLSELECT_TENANT_RPS) or `global` (TOOLSELECT_GLOBAL_RPS)",
            ["tenant", "scope"],
            registry=r,
        )
        self.http_inflight = Gauge(
            "toolselect_http_inflight",
            "Requests in flight",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.catalog_size = Gauge(
            "toolselect_catalog_tools", "Tools in the ranker", multiprocess_mode="max", registry=r
        )
        self.exemplars = Gauge(
            "toolselect_exemplars",
            "Exemplars folded into the ranker",
            multiprocess_mode="max",
            registry=r,
        )
        self.ranker_rebuilds = Counter(
            "toolselect_ranker_rebuilds",
            "Ranker snapshot swaps",
            ["reason"],
            registry=r,
        )
        self.rank_latency = Histogram(
            "toolselect_rank_seconds",
            "In-process rank time (embedding included)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.query_vectors = Counter(
            "toolselect_query_vectors",
            "Query vector lookups in the in-memory cache (TOOLSELECT_QUERY_CACHE) by result",
            ["result"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "toolselect_observe_queue_depth",
            "Turns waiting",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.observed = Counter("toolselect_observed_turns", "Turns queued", registry=r)
        self.dropped = Counter(
            "toolselect_observe_dropped",
            "Turns dropped before processing",
            ["reason"],
            registry=r,
        )
        self.intake_failed_turns = Counter(
            "toolselect_intake_failed_turns",
            "Turns the intake worker could not process even alone (logged with their id)",
            registry=r,
        )
        self.flags = Counter(
            "toolselect_flagged_turns",
            "Mis-routed turns by reason",
            ["reason"],
            registry=r,
        )
        self.decisions = Counter(
            "toolselect_oracle_decisions",
            "Oracle decisions by tier and result",
            ["tier", "result"],
            registry=r,
        )
        self.teacher_latency = Histogram(
            "toolselect_teacher_seconds",
            "Teacher call latency",
            ["provider"],
            buckets=_TEACHER_BUCKETS,
            registry=r,
        )
        self.teacher_tokens = Counter(
            "toolselect_teacher_tokens",
            "Teacher tokens",
            ["provider", "direction"],
            registry=r,
        )
        self.teacher_cost = Counter(
            "toolselect_teacher_cost_usd",
            "Estimated teacher cost",
            ["provider"],
            registry=r,
        )
        self.store_errors = Counter(
            "toolselect_store_errors",
            "Store operations that failed",
            ["operation"],
            registry=r,
        )
        self.backlog = Gauge(
            "toolselect_store_backlog",
            "Writes waiting for the store to return",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.backlog_dropped = Counter(
            "toolselect_store_backlog_dropped",
            "Spooled writes dropped by the spool bound (turns first, labels last) or refused",
            ["kind"],
            registry=r,
        )
        # Every worker counts the one shared spool file, so the latest count is the depth.
        self.spool_depth = Gauge(
            "toolselect_spool_depth",
            "Writes waiting in the durable spool for the store, by kind",
            ["kind"],
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.spool_replayed = Counter(
            "toolselect_spool_replayed",
            "Spooled writes replayed into the store, by kind",
            ["kind"],
            registry=r,
        )
        self.replica_folds = Counter(
            "toolselect_replica_folds",
            "Exemplar deltas folded from the store poll",
            registry=r,
        )

        self.refits = Counter(
            "toolselect_learning_refits",
            "Refits of fold, calibration and teacher depth",
            registry=r,
        )
        self.free_tier_floor = Gauge(
            "toolselect_free_tier_margin_floor",
            "Margin at which the calibrated free tier labels (-1: never)",
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.calibration_labels = Gauge(
            "toolselect_calibration_labels",
            "Trusted labels behind the last fit",
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.fold_description_weight = Gauge(
            "toolselect_fold_description_weight",
            "Description weight of the centroids",
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.fold_shrink = Gauge(
            "toolselect_fold_shrink",
            "Exemplar shrink power of the centroids",
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.fold_self_weight = Gauge(
            "toolselect_fold_self_weight",
            "Weight of the ranker's own (free-tier) labels in the centroids",
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.searched_turns = Counter(
            "toolselect_searched_turns",
            "Observed turns that reported a search id, by where the used tool stood: `shown`"
            " (online recall's numerator), `not_shown`, `unknown` (expired, or from another"
            " replica), `other_pack`",
            ["status"],
            registry=r,
        )
        self.fold_usage_weight = Gauge(
            "toolselect_fold_usage_weight",
            "Weight of the agents' usage labels (successful choices) in the centroids",
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.session_weight = Gauge(
            "toolselect_session_weight",
            "Fitted weight of each conversation signal: `prior` (session prior), `context`,"
            " `companion_share` (least share of a ranked tool's pairs a companion needs; 0: none"
            " offered)",
            ["signal"],
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.session_fits = Counter(
            "toolselect_session_fits",
            "Fits of the conversation signals on the store's sessions, by result",
            ["result"],
            registry=r,
        )
        self.companions_offered = Counter(
            "toolselect_companions_offered",
            "Companion tools answered beside rankings (tools often used with a ranked one)",
            registry=r,
        )
        self.teacher_depth = Gauge(
            "toolselect_teacher_depth",
            "Ranked candidates the teacher is shown",
            multiprocess_mode="mostrecent",
            registry=r,
        )
        self.teacher_candidates = Histogram(
            "toolselect_teacher_candidates",
            "Candidates shown per teacher call",
            buckets=(2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000),
            registry=r,
        )
        self.last_refit = Gauge(
            "toolselect_learning_last_refit_timestamp_seconds",
            "When the last fit ran",
            multiprocess_mode="max",
            registry=r,
        )

        # Which worker answered: one series per live worker process (multiprocess mode only).
        self.worker_requests: Gauge | None = None
        if multiprocess_dir is not None:
            self.worker_requests = Gauge(
                "toolselect_worker_requests",
                "HTTP requests answered by each worker process (serve --workers)",
                multiprocess_mode="liveall",
                registry=r,
            )

    def render(self) -> bytes:
        """The exposition text: this registry, or with workers every live and dead worker's."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(merged)
