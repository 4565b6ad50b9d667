"""Prometheus metrics, one registry per process (no module globals, so tests can run several).

Everything a tenant owns (its catalog, queue, learner, teacher, store and fits) is labelled
`tenant`: `Metrics.for_tenant` gives a view whose families are bound to one tenant, so a call
site writes `metrics.flags.labels("fallback").inc()` without naming it. The HTTP front door's
families (requests, latency, refusals, in flight) are the process's and carry no tenant. A
closed tenant's gauges are removed (`forget_tenant`); its counters stay, as counters do, while
it is among the `TOOLSELECT_TENANTS_LIVE` tenants closed last (with workers, for good).
`render(tenant=...)` answers one tenant's series only (`routes.metrics` decides who reads what).

With `serve --workers N` every worker process writes its values to files in one folder
(prometheus_client's multiprocess mode: the supervisor sets `PROMETHEUS_MULTIPROC_DIR` before a
worker imports prometheus_client) and `/metrics` in any worker aggregates them all: counters
and histograms are summed, and each gauge says how (`multiprocess_mode`, ignored with one
process): work waiting in a worker (queue depth, requests in flight) is the sum over live
workers, the shared spool's (backlog, depth) and fitted values the most recent, sizes the
largest; a worker's gauges of a tenant it closed (NaN in its file) are left out (`_Workers`).
"""

from __future__ import annotations

import copy
import glob
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Generic, Self, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from toolselect.keys import DEFAULT_TENANT

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
_TEACHER_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0)
_CANDIDATE_BUCKETS = (2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000)

F = TypeVar("F", Counter, Gauge, Histogram)


class _Bound(Generic[F]):
    """A family whose first label is `tenant`, bound to one tenant."""

    __slots__ = ("family", "tenant")
    family: F
    tenant: str

    def __init__(self, family: F, tenant: str = DEFAULT_TENANT) -> None:
        self.family = family
        self.tenant = tenant

    def labels(self, *values: str) -> F:
        """The series of this tenant with the family's other labels `values`."""
        series: F = self.family.labels(self.tenant, *values)
        return series

    def bound_to(self, tenant: str) -> Self:
        return type(self)(self.family, tenant)


class TenantCounter(_Bound[Counter]):
    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)


class TenantGauge(_Bound[Gauge]):
    def set(self, value: float) -> None:
        self.labels().set(value)


class TenantHistogram(_Bound[Histogram]):
    def observe(self, value: float) -> None:
        self.labels().observe(value)


class _OneTenant(Collector):
    """The samples of `source` labelled `tenant` (and with `process`, the process's: the
    samples with no tenant label), nothing else."""

    def __init__(self, source: Collector, tenant: str, *, process: bool) -> None:
        self._source = source
        self._tenant = tenant
        self._process = process

    def _kept(self, tenant: str | None) -> bool:
        return tenant == self._tenant or (tenant is None and self._process)

    def collect(self) -> Iterable[Metric]:
        for family in self._source.collect():
            samples = [s for s in family.samples if self._kept(s.labels.get("tenant"))]
            if samples:
                kept = copy.copy(family)
                kept.samples = samples
                yield kept


class _Workers(Collector):
    """Every worker's files in `path` merged as prometheus_client merges them, less the gauge
    values a worker marked forgotten (NaN: `Metrics.forget_tenant`), dropped before they are
    summed or compared with other workers' values of the series (a worker can remove no
    series from its files)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def collect(self) -> Iterable[Metric]:
        files = glob.glob(os.path.join(self._path, "*.db"))
        # MultiProcessCollector.collect is these two steps; NaN is dropped between them.
        metrics = MultiProcessCollector._read_metrics(files)  # type: ignore[no-untyped-call]
        for metric in metrics.values():
            if metric.type == "gauge":
                metric.samples = [s for s in metric.samples if not math.isnan(s.value)]
        merged: Iterable[Metric] = MultiProcessCollector._accumulate_metrics(metrics, True)  # type: ignore[no-untyped-call]
        return merged


class Metrics:
    """Every counter, gauge and histogram toolselect exports at `/metrics`, as one tenant's view
    (`tenant`, `default` unless made by `for_tenant`)."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir
        self.tenant = DEFAULT_TENANT
        r = self.registry = CollectorRegistry(auto_describe=True)

        def counter(name: str, doc: str, *labels: str) -> TenantCounter:
            return TenantCounter(Counter(name, doc, ["tenant", *labels], registry=r))

        def gauge(name: str, doc: str, mode: str, *labels: str) -> TenantGauge:
            family = Gauge(name, doc, ["tenant", *labels], multiprocess_mode=mode, registry=r)  # type: ignore[arg-type]
            return TenantGauge(family)

        def histogram(
            name: str, doc: str, buckets: tuple[float, ...], *labels: str
        ) -> TenantHistogram:
            family = Histogram(name, doc, ["tenant", *labels], buckets=buckets, registry=r)
            return TenantHistogram(family)

        # The process's: the HTTP front door, before (or without) a tenant.
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
            "Requests refused, by reason: before handling (limits, keys, time) or for the"
            " catalog or store not being there (`not_ready`, `store_unavailable`; probes not"
            " counted)",
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
        # Not by tenant: the tenants asked about may be any names a caller sends.
        self.tenant_lookups = Counter(
            "toolselect_tenant_lookups",
            "Requests for a tenant neither `default` nor live that asked whether it exists, by"
            " where the answer came from: `store` (a lookup), `joined` (the lookup under way"
            " for the same tenant) or `cached` (unknown, found so within"
            " TOOLSELECT_POLL_INTERVAL)",
            ["result"],
            registry=r,
        )
        self.http_inflight = Gauge(
            "toolselect_http_inflight",
            "Requests in flight",
            multiprocess_mode="livesum",
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

        # The tenant's.
        self.catalog_size = gauge("toolselect_catalog_tools", "Tools in the ranker", "max")
        self.exemplars = gauge("toolselect_exemplars", "Exemplars folded into the ranker", "max")
        self.ranker_rebuilds = counter(
            "toolselect_ranker_rebuilds", "Ranker snapshot swaps", "reason"
        )
        self.rank_latency = histogram(
            "toolselect_rank_seconds",
            "In-process rank time (embedding included)",
            _LATENCY_BUCKETS,
        )
        self.query_vectors = counter(
            "toolselect_query_vectors",
            "Query vector lookups in the in-memory cache (TOOLSELECT_QUERY_CACHE) by result",
            "result",
        )
        self.catalog_vectors = counter(
            "toolselect_catalog_vectors",
            "Tool and label vectors read from the on-disk cache (TOOLSELECT_VECTOR_CACHE) or"
            " embedded, by result",
            "result",
        )
        self.queue_depth = gauge("toolselect_observe_queue_depth", "Turns waiting", "livesum")
        self.observed = counter("toolselect_observed_turns", "Turns queued")
        self.dropped = counter(
            "toolselect_observe_dropped", "Turns dropped before processing", "reason"
        )
        self.resent = counter(
            "toolselect_observe_resent",
            "Turns sent again under a turn id already stored: not recorded or labelled again",
        )
        self.intake_failed_turns = counter(
            "toolselect_intake_failed_turns",
            "Turns the intake worker could not process even alone (logged with their id)",
        )
        self.flags = counter("toolselect_flagged_turns", "Mis-routed turns by reason", "reason")
        self.decisions = counter(
            "toolselect_oracle_decisions",
            "Results recorded for turns, by tier and result, each when it is recorded: a turn"
            " the spent budget refused and asked about again counts once more with its new"
            " result (toolselect_teacher_asked_again_total counts those)",
            "tier",
            "result",
        )
        self.teacher_abandoned = counter(
            "toolselect_teacher_abandoned",
            "Teacher-tier turns left without a result by a process that stopped (SIGKILL, a"
            " lost host), closed `error` an hour after they were observed",
        )
        self.teacher_asked_again = counter(
            "toolselect_teacher_asked_again",
            "Turns the spent teacher budget refused, asked about once it had room again",
        )
        self.teacher_refused_reloaded = counter(
            "toolselect_teacher_refused_reloaded",
            "Turns a predecessor's spent teacher budget refused, taken back from the store at"
            " start to be asked about once the budget has room",
        )
        self.teacher_refused_reload_failed = counter(
            "toolselect_teacher_refused_reload_failed",
            "Failed attempts to take back the refused turns from the store at start (tried"
            " again every TOOLSELECT_POLL_INTERVAL)",
        )
        self.teacher_budget_spent = counter(
            "toolselect_teacher_budget_spent",
            "Teacher calls not made because an hourly budget was spent, by budget: `tenant`"
            " (TOOLSELECT_TEACHER_BUDGET_PER_HOUR) or `global`"
            " (TOOLSELECT_TEACHER_GLOBAL_BUDGET_PER_HOUR); or because TOOLSELECT_QUEUE_SIZE"
            " turns already waited for the teacher (`backlog`)",
            "scope",
        )
        self.teacher_latency = histogram(
            "toolselect_teacher_seconds", "Teacher call latency", _TEACHER_BUCKETS, "provider"
        )
        self.teacher_tokens = counter(
            "toolselect_teacher_tokens", "Teacher tokens", "provider", "direction"
        )
        self.teacher_cost = counter(
            "toolselect_teacher_cost_usd", "Estimated teacher cost", "provider"
        )
        self.teacher_depth = gauge(
            "toolselect_teacher_depth", "Ranked candidates the teacher is shown", "mostrecent"
        )
        self.teacher_candidates = histogram(
            "toolselect_teacher_candidates", "Candidates shown per teacher call", _CANDIDATE_BUCKETS
        )
        self.store_errors = counter(
            "toolselect_store_errors", "Store operations that failed", "operation"
        )
        # The spool's records: every worker counts the one shared file at each of its writes,
        # so the latest count is the backlog (a sum counted the file once per worker).
        self.backlog = gauge(
            "toolselect_store_backlog", "Writes waiting for the store to return", "mostrecent"
        )
        self.store_up = gauge(
            "toolselect_store_up",
            "1 when the store answered the service's last poll (every TOOLSELECT_POLL_INTERVAL),"
            " 0 when it could not be reached",
            "livemin",
        )
        self.serving_from_snapshot = gauge(
            "toolselect_serving_from_snapshot",
            "1 while the service ranks from the catalog snapshot it read at a start the store did"
            " not answer, until its first load from the store",
            "livemax",
        )
        self.backlog_dropped = counter(
            "toolselect_store_backlog_dropped",
            "Spooled writes dropped by the spool bound (turns first, labels last) or refused",
            "kind",
        )
        # Every worker counts the one shared spool file, so the latest count is the depth.
        self.spool_depth = gauge(
            "toolselect_spool_depth",
            "Writes waiting in the durable spool for the store, by kind",
            "mostrecent",
            "kind",
        )
        self.spool_replayed = counter(
            "toolselect_spool_replayed", "Spooled writes replayed into the store, by kind", "kind"
        )
        self.retention_deleted = counter(
            "toolselect_retention_deleted",
            "What the upkeep's retention pass deleted, by kind: `label` (a label of the loop"
            " past TOOLSELECT_EXEMPLAR_MAX_AGE_DAYS), `turn` (turns and teacher calls past"
            " TOOLSELECT_TURN_MAX_AGE_DAYS), `session` (sessions whose last turn went)",
            "kind",
        )
        self.replica_folds = counter(
            "toolselect_replica_folds", "Exemplar deltas folded from the store poll"
        )
        self.refits = counter(
            "toolselect_learning_refits", "Refits of fold, calibration and teacher depth"
        )
        self.last_refit = gauge(
            "toolselect_learning_last_refit_timestamp_seconds", "When the last fit ran", "max"
        )
        self.free_tier_floor = gauge(
            "toolselect_free_tier_margin_floor",
            "Margin at which the calibrated free tier labels (-1: never)",
            "mostrecent",
        )
        self.calibration_labels = gauge(
            "toolselect_calibration_labels", "Trusted labels behind the last fit", "mostrecent"
        )
        self.fold_description_weight = gauge(
            "toolselect_fold_description_weight",
            "Description weight of the centroids",
            "mostrecent",
        )
        self.fold_shrink = gauge(
            "toolselect_fold_shrink", "Exemplar shrink power of the centroids", "mostrecent"
        )
        self.fold_self_weight = gauge(
            "toolselect_fold_self_weight",
            "Weight of the ranker's own (free-tier) labels in the centroids",
            "mostrecent",
        )
        self.fold_usage_weight = gauge(
            "toolselect_fold_usage_weight",
            "Weight of the agents' usage labels (successful choices) in the centroids",
            "mostrecent",
        )
        self.searched_turns = counter(
            "toolselect_searched_turns",
            "Observed turns that reported a search id, by where the used tool stood: `shown`"
            " (online recall's numerator), `not_shown`, `unknown` (expired, or from another"
            " replica), `other_pack`",
            "status",
        )
        self.session_weight = gauge(
            "toolselect_session_weight",
            "Fitted weight of each conversation signal: `prior` (session prior), `context`,"
            " `companion_share` (least share of a ranked tool's pairs a companion needs; 0: none"
            " offered)",
            "mostrecent",
            "signal",
        )
        self.session_fits = counter(
            "toolselect_session_fits",
            "Fits of the conversation signals on the store's sessions, by result",
            "result",
        )
        self.companions_offered = counter(
            "toolselect_companions_offered",
            "Companion tools answered beside rankings (tools often used with a ranked one)",
        )

    def _bound(self) -> Iterator[tuple[str, _Bound[Counter] | _Bound[Gauge] | _Bound[Histogram]]]:
        for name, value in vars(self).items():
            if isinstance(value, _Bound):
                yield name, value

    def for_tenant(self, tenant: str) -> Metrics:
        """This registry's families bound to `tenant` (the same registry, not a copy of it)."""
        view = copy.copy(self)
        view.tenant = tenant
        for name, family in self._bound():
            setattr(view, name, family.bound_to(tenant))
        return view

    def forget_tenant(self, *, counters: bool = False) -> None:
        """Remove this view's tenant's gauges (its service is closed: a queue depth or a fitted
        weight it last set would be stale); with `counters`, its counters and histograms too
        (`TenantServices` keeps those of the tenants closed last: a scraper reads a counter
        that comes back from 0 as a reset). A worker of `serve --workers` removes nothing from
        its files: it sets its gauges of the tenant to NaN, which `render` leaves out, and
        keeps its counters."""
        tenant = {"tenant": self.tenant}
        if self.multiprocess_dir is not None or "PROMETHEUS_MULTIPROC_DIR" in os.environ:
            for _, bound in self._bound():
                if isinstance(bound, TenantGauge):
                    for family in bound.family.collect():
                        for sample in family.samples:
                            if sample.labels.get("tenant") == self.tenant:
                                bound.family.labels(**sample.labels).set(math.nan)
            return
        for _, bound in self._bound():
            if counters or isinstance(bound, TenantGauge):
                bound.family.remove_by_labels(tenant)
        if counters:
            self.rate_limited.remove_by_labels(tenant)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """Sample `name` with `labels` of this view's tenant (of the process when the family
        has no tenant label), None when it has none; as `CollectorRegistry.get_sample_value`."""
        wanted = dict(labels or {})
        found = self.registry.get_sample_value(name, {"tenant": self.tenant, **wanted})
        return found if found is not None else self.registry.get_sample_value(name, wanted)

    def render(self, tenant: str | None = None, *, process: bool = False) -> bytes:
        """The exposition text: this registry, or with workers every live and dead worker's;
        with `tenant`, only the series labelled with it (and the process's with `process`)."""
        source: Collector = self.registry
        if self.multiprocess_dir is not None:
            merged = CollectorRegistry()
            merged.register(_Workers(self.multiprocess_dir))
            source = merged
        if tenant is None:
            return generate_latest(source)
        one = CollectorRegistry(auto_describe=False)
        one.register(_OneTenant(source, tenant, process=process))
        return generate_latest(one)
