"""How a service is made: every part built from settings and the opened adapters, no I/O.

`compose` is the one place that knows which part needs which; `Service.start` (service/root.py)
opens the adapters and calls it. A test can build its own `Parts` to swap one piece.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolselect.clock import Clock, epoch_seconds, utc_now, window_seconds
from toolselect.config import Settings
from toolselect.embed import (
    CachedEmbedder,
    Embedder,
    HashingEmbedder,
    RecentVectors,
    VectorCache,
    vector_cache_path,
)
from toolselect.keys import KeyRegistry
from toolselect.learn.fit import DEFAULT_TEACHER_DEPTH, FitPolicy, FoldWeights
from toolselect.learn.kept_fold import fold_path
from toolselect.learn.learner import Learner, LearnerConfig
from toolselect.learn.refused import Refused
from toolselect.learn.tuning import Tuner
from toolselect.metrics import Metrics
from toolselect.oracle.base import Teacher
from toolselect.oracle.budget import Budget, RetryPolicy
from toolselect.oracle.oracle import Oracle
from toolselect.ranker import CentroidRanker
from toolselect.ranker.configured import build_ranker, fold_pinned, self_weight, usage_weight
from toolselect.service.catalog import CatalogFacade
from toolselect.service.index import LiveIndex, Progress
from toolselect.service.learning import LearningFacade
from toolselect.service.ranking import RankingFacade
from toolselect.service.retention import RetentionPass
from toolselect.service.searches import SearchLog
from toolselect.service.sessions import SessionSignals
from toolselect.service.teacher_budget import TeacherCalls
from toolselect.store.buffered import BufferedStore
from toolselect.store.port import Store
from toolselect.store.spool import Spool


def build_teacher(settings: Settings) -> Teacher | None:
    """The configured LLM teacher, or None (`TOOLSELECT_TEACHER=none`)."""
    kind = settings.teacher_kind
    if kind == "anthropic":
        from toolselect.oracle.anthropic import DEFAULT_MODEL, AnthropicTeacher, anthropic_client

        client = anthropic_client(
            api_key=settings.anthropic_api_key,
            base_url=settings.anthropic_base_url or None,
            timeout_s=settings.teacher_timeout_s,
        )
        return AnthropicTeacher(client, settings.teacher_model or DEFAULT_MODEL)
    if kind == "openai":
        from toolselect.oracle.openai_compat import OpenAICompatTeacher

        return OpenAICompatTeacher(
            None,
            settings.openai_base_url,
            settings.teacher_model or "default",
            api_key=settings.openai_api_key,
        )
    return None


@dataclass(frozen=True)
class Parts:
    """Everything a service is made of, built by `compose` (or by a test, part by part)."""

    settings: Settings
    metrics: Metrics
    store: BufferedStore
    embedder: Embedder
    queries: Embedder  # the embedder behind the recent-vector cache, for requests
    vectors: VectorCache | None  # tool and label vectors on disk, for the index
    ranker: CentroidRanker
    tuner: Tuner
    index: LiveIndex
    oracle: Oracle
    teacher_calls: TeacherCalls
    learner: Learner
    teacher: Teacher | None
    ranking: RankingFacade
    catalog: CatalogFacade
    learning: LearningFacade
    searches: SearchLog
    sessions: SessionSignals
    keys: KeyRegistry  # the API keys accepted: TOOLSELECT_API_KEYS, and the stored ones
    retention: RetentionPass  # the upkeep's pass over old labels and turns
    clock: Clock = utc_now  # what turns, labels and the teacher's budget are stamped with


def _tuner(
    settings: Settings,
    ranker: CentroidRanker,
    embedder: Embedder,
    metrics: Metrics,
    clock: Clock,
    store: Store,
) -> Tuner:
    ew = settings.exemplar_weight
    prior = FoldWeights(
        settings.centroid_description_weight / (ew or 1.0),
        self_weight=self_weight(settings),
        usage_weight=usage_weight(settings),
    )
    return Tuner(
        ranker,
        FitPolicy(
            prior=prior,
            target_precision=settings.free_tier_precision,
            teacher_recall=settings.teacher_recall,
            teacher_share=settings.teacher_share,
            prior_teacher_depth=settings.teacher_candidates or DEFAULT_TEACHER_DEPTH,
        ),
        embedder=embedder.id,
        pinned_fold=fold_pinned(settings),
        pinned_floor=settings.margin_floor,
        pinned_depth=settings.teacher_candidates is not None,
        metrics=metrics,
        clock=clock,
        kept_at=fold_path(settings.data_dir, store.tenant),
        store=store.uri,
    )


def _vector_cache(settings: Settings, embedder: Embedder) -> VectorCache | None:
    """The vectors kept on disk for tools and labels: none when off, without a data folder (a
    `Settings` built in code, not loaded) or for `hashing` (which computes faster than it reads)."""
    if not settings.vector_cache or not settings.data_dir or isinstance(embedder, HashingEmbedder):
        return None
    return VectorCache(vector_cache_path(settings), max_entries=settings.vector_cache)


def _catalog_embedder(
    embedder: Embedder, vectors: VectorCache | None, metrics: Metrics
) -> Embedder:
    """What the index embeds tools and labels with: through `vectors` when there is one (read
    and written on worker threads, off the event loop)."""
    if vectors is None:
        return embedder

    def count(hits: int, misses: int) -> None:
        metrics.catalog_vectors.labels("hit").inc(hits)
        metrics.catalog_vectors.labels("miss").inc(misses)

    return CachedEmbedder(embedder, vectors, offload=True, on_lookup=count)


def _global_teacher_budget(settings: Settings, clock: Clock) -> Budget | None:
    per_hour = settings.teacher_global_budget_per_hour
    return None if per_hour is None else Budget(per_hour, clock=window_seconds(clock))


def compose(
    settings: Settings,
    store: Store,
    embedder: Embedder,
    *,
    metrics: Metrics | None = None,
    teacher: Teacher | None = None,
    spool: Spool | None = None,
    clock: Clock = utc_now,
    load_progress: Progress | None = None,
    teacher_cap: Budget | None = None,
    teacher_budget: Budget | None = None,
    teacher_refused: Refused | None = None,
    vectors: VectorCache | None = None,
) -> Parts:
    """Build every part of a service from settings and the opened adapters; no I/O.

    `teacher_cap` is the global teacher budget of the process, `teacher_budget` a tenant's own
    from an earlier start of its service (`teacher_refused` the turns that budget refused), and `vectors` the process's vector cache
    (`TenantServices` hands the `default` service's to every other tenant's); without them they
    are made from the settings (`TOOLSELECT_TEACHER_GLOBAL_BUDGET_PER_HOUR`,
    `TOOLSELECT_VECTOR_CACHE`)."""
    metrics = metrics or Metrics()
    buffered = BufferedStore(
        store, spool=spool, metrics=metrics, write_timeout_s=settings.store_write_timeout_s
    )
    # Queries (not tool texts: an import would flush them) go through recent vectors, so the
    # learner does not embed a reported turn whose request was just ranked. The learner only
    # reads them: a burst of turns nobody ranked would push out the ranked requests whose
    # turns are still to come.
    queries: Embedder = embedder
    observed: Embedder = embedder
    if settings.query_cache:

        def count(hits: int, misses: int) -> None:
            metrics.query_vectors.labels("hit").inc(hits)
            metrics.query_vectors.labels("miss").inc(misses)

        recent = RecentVectors(settings.query_cache, on_lookup=count)
        queries = CachedEmbedder(embedder, recent)
        observed = CachedEmbedder(embedder, recent, keep_misses=False)
    ranker = build_ranker(settings)
    tuner = _tuner(settings, ranker, embedder, metrics, clock, store)
    vectors = vectors or _vector_cache(settings, embedder)
    index = LiveIndex(
        buffered,
        _catalog_embedder(embedder, vectors, metrics),
        ranker,
        tuner,
        metrics,
        load_progress=load_progress,
    )
    budget = teacher_budget or Budget(
        settings.teacher_budget_per_hour,
        clock=window_seconds(clock),
        cap=teacher_cap or _global_teacher_budget(settings, clock),
    )
    enabled = settings.oracle == "on"
    calls = TeacherCalls(buffered, budget, clock, active=enabled and teacher is not None)
    oracle = Oracle(
        teacher,
        enabled=enabled,
        budget=budget,
        retry=RetryPolicy(retries=settings.teacher_retries),
        timeout_s=settings.teacher_timeout_s,
        record_call=calls.record,
        clock=epoch_seconds(clock),
        metrics=metrics,
    )
    learner = Learner(
        store=buffered,
        embedder=observed,
        ranker=ranker,
        oracle=oracle,
        on_saved=index.saved,
        describe=index.describe,
        catch_up=index.catch_up,
        config=LearnerConfig(
            fallback_tools=settings.fallback_tools,
            tiers=settings.oracle_tiers,
            queue_size=settings.queue_size,
            teacher_full_catalog=settings.teacher_full_catalog,
            teacher_max_input_tokens=settings.teacher_max_input_tokens,
            usage_without_outcome=settings.usage_without_outcome,
            overlap_writes=settings.store_kind == "neo4j",
        ),
        tuner=tuner,
        metrics=metrics,
        clock=clock,
        refused=teacher_refused,
    )
    searches = SearchLog(settings.searches_kept, settings.search_ttl_s, tenant=buffered.tenant)
    sessions = SessionSignals(buffered, queries, ranker, settings, metrics, clock)
    ranking = RankingFacade(settings, index, queries, metrics, searches, sessions)
    return Parts(
        clock=clock,
        settings=settings,
        metrics=metrics,
        store=buffered,
        embedder=embedder,
        queries=queries,
        vectors=vectors,
        ranker=ranker,
        tuner=tuner,
        index=index,
        oracle=oracle,
        teacher_calls=calls,
        learner=learner,
        teacher=teacher,
        ranking=ranking,
        catalog=CatalogFacade(buffered, index),
        learning=LearningFacade(
            buffered,
            index,
            learner,
            tuner,
            queries,
            ranking,
            clock,
            searches,
            sessions,
            metrics,
            pinned_floor=settings.margin_floor is not None,
        ),
        searches=searches,
        sessions=sessions,
        keys=KeyRegistry(settings.api_keys),
        retention=RetentionPass(buffered, index, learner.refused, settings, clock, metrics),
    )
