"""The composition root: settings -> store -> embedder -> ranker -> learner; for API and CLI.

`Service.start(settings)` opens everything and loads the catalog and exemplars from the store;
`close()` releases them. Ranking reads only the in-memory ranker snapshot, never the store.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial

import numpy as np
import structlog
from threadpoolctl import threadpool_limits

from toolselect.catalog import load_demo_catalog, tool_text
from toolselect.config import Settings
from toolselect.embed import CachedEmbedder, Embedder, RecentVectors, embedder_for
from toolselect.errors import InvalidInput, NotFound, NotReady, StoreUnavailable, ToolselectError
from toolselect.graph.buffered import BufferedStore
from toolselect.graph.factory import open_store
from toolselect.graph.spool import Spool
from toolselect.graph.store import (
    TRUSTED_TIERS,
    Exemplar,
    SaveResult,
    Store,
    Tool,
    UpsertResult,
)
from toolselect.learn.fit import DEFAULT_TEACHER_DEPTH, FitPolicy, FoldWeights
from toolselect.learn.learner import Learner, LearnerConfig
from toolselect.learn.tuning import Tuner, fit_payload
from toolselect.metrics import Metrics
from toolselect.oracle.base import Teacher
from toolselect.oracle.budget import Budget, RetryPolicy
from toolselect.oracle.oracle import Oracle
from toolselect.ranker import CentroidRanker, LearnedVector, Ranking
from toolselect.selection import Selection, check_text, choose

log = structlog.get_logger("toolselect.service")

_CANDIDATE_CACHE_SIZE = 10_000
_EMBED_CHUNK = 256
# An import embeds in smaller batches: each one reports progress (a terminal line in the CLI,
# a fresh time limit over HTTP), and 64 MiniLM texts take about a second on one busy core.
IMPORT_BATCH = 64

# Called with (tools embedded, tools to embed) after each batch of an import.
Progress = Callable[[int, int], None]


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


def _guarded(progress: Progress) -> Progress:
    """A progress callback whose failure is logged, never the end of the import."""

    def report(done: int, total: int) -> None:
        try:
            progress(done, total)
        except Exception:
            log.exception("import_progress_failed", done=done, total=total)

    return report


class Service:
    """Everything a request needs, built once from settings."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        embedder: Embedder,
        *,
        metrics: Metrics | None = None,
        teacher: Teacher | None = None,
        spool: Spool | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.store = BufferedStore(store, spool=spool, metrics=self.metrics)
        self.embedder = embedder
        # Queries (not tool texts: an import would flush them) go through recent vectors, so
        # the learner does not embed a reported turn whose request was just ranked. The learner
        # only reads them: a burst of turns nobody ranked would push out the ranked requests
        # whose turns are still to come.
        self.queries: Embedder = embedder
        observed: Embedder = embedder
        if settings.query_cache:
            recent = RecentVectors(settings.query_cache, on_lookup=self._count_query_vectors)
            self.queries = CachedEmbedder(embedder, recent)
            observed = CachedEmbedder(embedder, recent, keep_misses=False)
        ew = settings.exemplar_weight
        prior = FoldWeights(
            settings.centroid_description_weight / (ew or 1.0),
            self_weight=settings.self_label_weight or 0.0,
        )
        self.ranker = CentroidRanker(
            description_weight=settings.centroid_description_weight,
            exemplar_weight=ew,
            self_weight=prior.self_weight,
        )
        self.tuner = Tuner(
            self.ranker,
            FitPolicy(
                prior=prior,
                target_precision=settings.free_tier_precision,
                teacher_recall=settings.teacher_recall,
                teacher_share=settings.teacher_share,
                prior_teacher_depth=settings.teacher_candidates or DEFAULT_TEACHER_DEPTH,
            ),
            embedder=embedder.id,
            pinned_fold=settings.description_weight is not None
            or settings.self_label_weight is not None
            or ew == 0.0,
            pinned_floor=settings.margin_floor,
            pinned_depth=settings.teacher_candidates is not None,
            metrics=self.metrics,
        )
        self.catalog_version = -1
        self.exemplar_version = 0
        self._descriptions: dict[str, str] = {}
        self._held: dict[str, Tool] = {}  # the tools in the ranker, as the store returned them
        self._imports: set[asyncio.Task[UpsertResult]] = set()
        self._candidate_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._reload_lock = asyncio.Lock()
        self._maintenance: asyncio.Task[None] | None = None
        self.loaded = False
        self.not_ready_reason = "catalog not loaded yet"
        self.teacher = teacher
        self.oracle = Oracle(
            teacher,
            enabled=settings.oracle == "on",
            budget=Budget(settings.teacher_budget_per_hour),
            retry=RetryPolicy(retries=settings.teacher_retries),
            timeout_s=settings.teacher_timeout_s,
            record_call=self.store.record_oracle_call,
            metrics=self.metrics,
        )
        self.learner = Learner(
            store=self.store,
            embedder=observed,
            ranker=self.ranker,
            oracle=self.oracle,
            on_saved=self._saved,
            describe=lambda name: self._descriptions.get(name, ""),
            config=LearnerConfig(
                fallback_tools=settings.fallback_tools,
                tiers=settings.oracle_tiers,
                queue_size=settings.queue_size,
                teacher_full_catalog=settings.teacher_full_catalog,
                teacher_max_input_tokens=settings.teacher_max_input_tokens,
                overlap_writes=settings.store_kind == "neo4j",
            ),
            tuner=self.tuner,
            metrics=self.metrics,
        )

    def _count_query_vectors(self, hits: int, misses: int) -> None:
        self.metrics.query_vectors.labels("hit").inc(hits)
        self.metrics.query_vectors.labels("miss").inc(misses)

    @classmethod
    async def start(
        cls, settings: Settings, *, metrics: Metrics | None = None, wait_for_store: bool = False
    ) -> Service:
        """Open the store and the embedder, then load the catalog and exemplars.

        With `wait_for_store` (the server), an unreachable store does not stop the start: the
        service answers `not_ready` and keeps connecting in the background; otherwise (the CLI)
        `StoreUnavailable` is raised at once.
        """
        # One BLAS thread: ranking is a small matrix-vector product, where a second thread buys
        # nothing at the median and multiplies the p99 whenever the other core is busy.
        threadpool_limits(1, user_api="blas")
        # Before the store: a spool that cannot be used stops the start (it may hold labels).
        # On a thread of its own, joined here: the loop's default pool would outlive `close`.
        with ThreadPoolExecutor(1, thread_name_prefix="toolselect-spool-open") as opener:
            spool = await asyncio.get_running_loop().run_in_executor(
                opener, partial(Spool.open, settings.spool_path, max_bytes=settings.spool_max_bytes)
            )
        if any(spool.depth.values()):
            log.info("spool_pending_at_start", spool=spool.path, **spool.depth)
        try:
            store = await open_store(settings, verify=not wait_for_store)
        except BaseException:
            spool.close()
            raise
        embedder = embedder_for(settings)
        service = cls(
            settings, store, embedder, metrics=metrics, teacher=build_teacher(settings), spool=spool
        )
        try:
            try:
                await service.connect()
            except StoreUnavailable as exc:
                if not wait_for_store:
                    raise
                service.not_ready_reason = f"store unreachable: {exc}"
                log.warning("store_unreachable_at_start", error=str(exc))
                service.learner.open()
            service._maintenance = asyncio.create_task(
                service._maintain(), name="toolselect-maintenance"
            )
        except BaseException:
            await service.close()
            raise
        return service

    async def connect(self) -> None:
        """Migrate the store, load the demo catalog if asked and the store is empty, then load."""
        await self.store.migrate()
        # Writes spooled during an outage (or by a process that died in one) land before the
        # load, so the ranker starts with them and reads stop failing fast.
        await self.store.flush()
        if self.store.down:
            raise StoreUnavailable(self.store.last_error or "store lost while replaying the spool")
        if self.settings.load_demo and not await self.store.list_tools():
            result = await self.store.upsert_tools(load_demo_catalog())
            log.info("demo_catalog_loaded", tools=result.upserted)
        await self.reload()
        self.loaded = True
        self.learner.start()

    async def _maintain(self) -> None:
        """Background upkeep: connect until loaded, flush the write backlog, poll for replicas."""
        interval = self.settings.poll_interval_s
        tick = min(1.0, interval)
        since_poll = 0.0
        failing: str | None = None
        while True:
            await asyncio.sleep(tick)
            since_poll += tick
            try:
                if not self.loaded:
                    await self.connect()
                    log.info("store_connected", store=self.store.uri)
                if self.store.backlog or self.store.down:
                    await self.store.ping()
                    await self.store.flush()
                if since_poll >= interval:
                    since_poll = 0.0
                    await self.refresh()
                if failing is not None:
                    log.info("store_recovered", store=self.store.uri)
                failing = None
            except ToolselectError as exc:
                if not self.loaded:
                    self.not_ready_reason = f"store unreachable: {exc}"
                if str(exc) != failing:
                    log.warning("store_maintenance_failed", error=str(exc))
                failing = str(exc)

    async def close(self) -> None:
        """Drain the learner within the shutdown timeout, then release every resource."""
        if self._maintenance is not None:
            self._maintenance.cancel()
            await asyncio.gather(self._maintenance, return_exceptions=True)
        if self._imports:
            # An import whose caller went away still finishes (or, past the shutdown timeout,
            # is cancelled while embedding or inside its one transaction: nothing half-written).
            pending = list(self._imports)
            _, late = await asyncio.wait(pending, timeout=self.settings.shutdown_timeout_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        try:
            await self.learner.close(self.settings.shutdown_timeout_s)
            await self.tuner.close()
        finally:
            if self.teacher is not None:
                await self.teacher.aclose()
            await self.queries.close()  # the embedder too, when it is wrapped
            await self.store.close()

    # -- loading -------------------------------------------------------------------------

    async def _embed(
        self,
        texts: Sequence[str],
        what: str = "",
        *,
        progress: Progress | None = None,
        chunk: int = _EMBED_CHUNK,
    ) -> np.ndarray:
        """Embed many texts in chunks, reporting each to `progress`, or without one with a
        progress line on a terminal for large loads."""
        if len(texts) <= chunk and progress is None:
            return await self.embedder.embed(texts)
        parts: list[np.ndarray] = []
        show = progress is None and sys.stderr.isatty()
        for start in range(0, len(texts), chunk):
            parts.append(await self.embedder.embed(texts[start : start + chunk]))
            done = min(start + chunk, len(texts))
            if progress is not None:
                progress(done, len(texts))
            elif show:
                print(f"\rembedding {what}: {done}/{len(texts)}", end="", file=sys.stderr)
        if show:
            print(file=sys.stderr)
        if not parts:
            return np.zeros((0, self.ranker.dim or 1), dtype=np.float32)
        return np.vstack(parts)

    async def reload(self) -> None:
        """Rebuild the ranker from the store: every tool, then every exemplar."""
        async with self._reload_lock:
            state = await self.store.state()
            tools = await self.store.list_tools()
            vectors = await self._embed([tool_text(t) for t in tools], "tools")
            self.ranker.set_catalog(tools, vectors)
            self._descriptions = {t.name: t.description for t in tools}
            self._held = {t.name: t for t in tools}
            self.catalog_version = state.catalog_version
            self.exemplar_version = 0
            await self._fold_since(0)
            self._publish_sizes("reload")
            log.info(
                "catalog_loaded",
                tools=self.ranker.size,
                exemplars=self.ranker.exemplar_total,
                catalog_version=state.catalog_version,
                exemplar_version=self.exemplar_version,
            )

    async def _fold_since(self, version: int) -> int:
        """Fold exemplars written after `version`; re-embed those of another embedder."""
        delta = await self.store.exemplars_since(version)
        if delta.upserted or delta.deleted:
            await self.fold(delta.upserted, delta.deleted)
        self.exemplar_version = max(self.exemplar_version, delta.version)
        return len(delta.upserted) + len(delta.deleted)

    async def fold(self, exemplars: Sequence[Exemplar], deleted: Sequence[str] = ()) -> None:
        """Fold exemplars into the ranker, re-embedding any made by a different embedder."""
        stale = [e for e in exemplars if e.embedder != self.embedder.id or not e.embedding]
        fresh_vectors: dict[str, np.ndarray] = {}
        if stale:
            vectors = await self._embed([e.query for e in stale], "exemplars")
            fresh_vectors = {e.id: vectors[i] for i, e in enumerate(stale)}
        learned = [
            LearnedVector(
                query_norm=e.query_norm,
                tool=e.tool,
                vector=fresh_vectors[e.id]
                if e.id in fresh_vectors
                else np.asarray(e.embedding, dtype=np.float32),
                trusted=e.tier in TRUSTED_TIERS,
            )
            for e in exemplars
        ]
        self.ranker.fold(learned, deleted)
        self._publish_sizes("fold")
        self.tuner.labels_changed()

    async def refresh(self) -> bool:
        """Pick up other replicas' writes: reload on a catalog change, fold new exemplars."""
        state = await self.store.state()
        if state.catalog_version != self.catalog_version:
            await self.reload()
            return True
        if state.exemplar_version > self.exemplar_version:
            folded = await self._fold_since(self.exemplar_version)
            self.metrics.replica_folds.inc()
            log.info("replica_exemplars_folded", changes=folded, version=self.exemplar_version)
            return True
        return False

    def _publish_sizes(self, reason: str) -> None:
        self.metrics.catalog_size.set(self.ranker.size)
        self.metrics.exemplars.set(self.ranker.exemplar_total)
        self.metrics.ranker_rebuilds.labels(reason).inc()

    # -- ranking -------------------------------------------------------------------------

    def check_query(self, text: str, field: str) -> None:
        check_text(text, field, self.settings.max_query_bytes)

    def _check_ready(self) -> None:
        if not self.loaded:
            raise NotReady(self.not_ready_reason)

    def check_k(self, k: int, field: str = "k") -> None:
        if not 1 <= k <= self.settings.max_k:
            raise InvalidInput(f"expected {field} in 1..{self.settings.max_k}, got {k}", field)

    async def rank(
        self,
        query: str,
        k: int = 5,
        *,
        tools: Sequence[str] | None = None,
        pack: str | None = None,
    ) -> Ranking:
        """Top-k tools for `query`, optionally restricted to names and/or a pack."""
        self.check_query(query, "query")
        self.check_k(k)
        self._check_ready()
        started = time.perf_counter()
        vector = (await self.queries.embed([query]))[0]
        ranking = self.ranker.rank(vector, k, restrict=tools, pack=pack)
        self.metrics.rank_latency.observe(time.perf_counter() - started)
        return ranking

    async def select(
        self, text: str, candidates: Sequence[Tool], k: int, *, pack: str | None = None
    ) -> Selection:
        """PromptKit selection: only candidate names, at most k, unknown ones ranked by text."""
        self.check_query(text, "query.Text")
        self._check_ready()
        if not candidates:
            return choose(self.ranker, np.zeros(0, np.float32), (), None, k, self.settings.max_k)
        vector = (await self.queries.embed([text]))[0]
        unknown = [c for c in candidates if not self.ranker.has(c.name)]
        vectors = await self._candidate_matrix(unknown) if unknown else None
        return choose(self.ranker, vector, candidates, vectors, k, self.settings.max_k)

    async def _candidate_matrix(self, tools: Sequence[Tool]) -> np.ndarray:
        """Vectors of tools not in the catalog, cached by content hash."""
        missing = [t for t in tools if t.content_hash not in self._candidate_vectors]
        if missing:
            vectors = await self.embedder.embed([tool_text(t) for t in missing])
            for tool, vec in zip(missing, vectors, strict=True):
                self._candidate_vectors[tool.content_hash] = vec
            while len(self._candidate_vectors) > _CANDIDATE_CACHE_SIZE:
                self._candidate_vectors.popitem(last=False)
        rows = []
        for tool in tools:
            self._candidate_vectors.move_to_end(tool.content_hash)
            rows.append(self._candidate_vectors[tool.content_hash])
        return np.vstack(rows)

    # -- catalog -------------------------------------------------------------------------

    async def upsert_tools(
        self,
        tools: Sequence[Tool],
        pack: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> UpsertResult:
        """Embed the tools that changed, then write them all in one store transaction and swap
        them into the ranker; `progress` hears of every embedded batch.

        The import runs to its end even when the caller is cancelled (a client that hangs up,
        a request timeout): until the transaction the store holds the old catalog, after it
        the new one, never a part. `close()` waits for imports still running.
        """
        task = asyncio.create_task(self._import(tools, pack, progress), name="toolselect-import")
        self._imports.add(task)
        task.add_done_callback(self._import_done)
        return await asyncio.shield(task)

    def _import_done(self, task: asyncio.Task[UpsertResult]) -> None:
        self._imports.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("import_failed", error=str(exc))

    def tool(self, name: str) -> Tool | None:
        """A tool of the ranker's catalog as the store returned it (schema included), if held."""
        return self._held.get(name)

    @property
    def imports_running(self) -> int:
        """Imports (`upsert_tools`) still running, their callers waiting or gone."""
        return len(self._imports)

    def _needs_vector(self, tool: Tool, pack: str | None) -> bool:
        held = self._held.get(tool.name)
        return (
            held is None
            or held.content_hash != tool.content_hash
            or (pack is not None and pack not in held.packs)
            or not self.ranker.has(tool.name)
        )

    async def _import(
        self, tools: Sequence[Tool], pack: str | None, progress: Progress | None
    ) -> UpsertResult:
        # Embedding first, outside the reload lock (tens of seconds for a large catalog with a
        # dense model): ranking and polls go on meanwhile, and nothing is written yet.
        by_name = {t.name: t for t in tools}  # a name sent twice: the last one wins
        if progress is not None:
            progress = _guarded(progress)
        changed = [t for t in by_name.values() if self._needs_vector(t, pack)]
        vectors = await self._embed(
            [tool_text(t) for t in changed], "tools", progress=progress, chunk=IMPORT_BATCH
        )
        # Under the reload lock: a poll's reload that listed the catalog before this write and
        # swapped it in after would drop these tools, and with the version already current,
        # no later poll would bring them back.
        async with self._reload_lock:
            result = await self.store.upsert_tools(tools, pack)
            if result.upserted or changed:
                stored = {t.name: t for t in await self.store.list_tools()}
                rows = [
                    i
                    for i, t in enumerate(changed)
                    if t.name in stored and stored[t.name].content_hash == t.content_hash
                ]
                fresh = [stored[changed[i].name] for i in rows]
                if fresh:
                    self.ranker.upsert_tools(fresh, vectors[rows])
                self._descriptions.update((t.name, t.description) for t in fresh)
                self._held.update((t.name, t) for t in fresh)
                self.catalog_version = (await self.store.state()).catalog_version
                self._publish_sizes("upsert")
        return result

    async def delete_tool(self, name: str) -> None:
        async with self._reload_lock:
            if not await self.store.delete_tool(name):
                raise NotFound(f"no tool named {name!r}")
            self.ranker.remove_tools([name])
            self._descriptions.pop(name, None)
            self._held.pop(name, None)
            self.catalog_version = (await self.store.state()).catalog_version
            self._publish_sizes("delete")

    async def delete_exemplar(self, exemplar_id: str) -> None:
        if not await self.store.delete_exemplar(exemplar_id):
            raise NotFound(f"no exemplar with id {exemplar_id!r}")
        await self._fold_since(self.exemplar_version)

    # -- learning ------------------------------------------------------------------------

    async def _saved(self, result: SaveResult) -> None:
        """Labels were saved here: fold them into the ranker now.

        One save gives all its exemplars one version. When that is the version after the
        ranker's and the save evicted nothing, the saved exemplars are the whole change, so
        they are folded as they are, without reading them back. Otherwise (retention evicted
        some, or another replica wrote in between) the delta is read from the store and folded
        in version order, as a poll would. A version a delta read has already covered is not
        folded again (that could put back a label a later save replaced). While the store is
        down the backlog holds the labels (version 0) and ranking uses them at once.
        """
        changed = result.changed
        if not changed:
            return
        version = changed[0].version
        if version and version <= self.exemplar_version:
            return
        if version == self.exemplar_version + 1 and not result.evicted:
            await self.fold(changed)
            self.exemplar_version = max(self.exemplar_version, version)
            return
        try:
            await self._fold_since(self.exemplar_version)
        except StoreUnavailable:
            await self.fold(changed)

    def learning_payload(self) -> dict[str, object]:
        """What the tuner chose and why (`GET /v1/analytics/learning`)."""
        return fit_payload(self.tuner.current, pinned_floor=self.settings.margin_floor is not None)

    def observe(
        self,
        request: str,
        used_tool: str,
        *,
        turn_id: str | None = None,
        agent_id: str | None = None,
        pack: str | None = None,
        outcome: str | None = None,
    ) -> bool:
        """Hand a turn to the learner; never blocks, never raises for a full queue."""
        return self.learner.observe(
            request, used_tool, turn_id=turn_id, agent_id=agent_id, pack=pack, outcome=outcome
        )

    async def feedback(self, query: str, tool: str) -> tuple[bool, Exemplar]:
        """Record a human-confirmed label (tier `feedback`): never expired, evicted or overridden."""
        self.check_query(query, "query")
        if not self.ranker.has(tool):
            raise NotFound(f"no tool named {tool!r}")
        vector = (await self.queries.embed([query]))[0]
        exemplar = Exemplar(
            id=uuid.uuid4().hex,
            query=query,
            tool=tool,
            tier="feedback",
            embedder=self.embedder.id,
            embedding=tuple(vector.tolist()),
            created_at=datetime.now(UTC),
        )
        result = await self.store.save_exemplars([exemplar])
        if result.unknown_tool:
            raise NotFound(f"unknown tool {tool!r}")
        await self._saved(result)
        stored = await self.store.exemplar_for_query(query)
        return bool(result.changed), stored or exemplar
