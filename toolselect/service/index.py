"""The live index: the in-memory ranker kept in step with the store.

Every change to what the ranker holds goes through here: a full reload, a fold of saved labels,
a poll for other replicas' writes, an import swapped in, a tool removed. The facades read the
ranker; only this module writes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import structlog

from toolselect.catalog import tool_text
from toolselect.embed import Embedder
from toolselect.errors import NotReady, StoreUnavailable
from toolselect.learn.tuning import Tuner
from toolselect.metrics import Metrics
from toolselect.ranker import CentroidRanker, LearnedVector
from toolselect.records import Exemplar, SaveResult, Tool, label_group
from toolselect.service.snapshot import CatalogSnapshot
from toolselect.store.buffered import BufferedStore
from toolselect.store.rules import last_per_query

log = structlog.get_logger("toolselect.service")

# Called with (texts embedded, texts to embed) after each batch.
Progress = Callable[[int, int], None]

_EMBED_CHUNK = 256


def guarded(progress: Progress) -> Progress:
    """A progress callback whose failure is logged, never the end of the work it reports on."""

    def report(done: int, total: int) -> None:
        try:
            progress(done, total)
        except Exception:
            log.exception("progress_callback_failed", done=done, total=total)

    return report


async def embed_in_batches(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    dim: int,
    progress: Progress | None = None,
    chunk: int = _EMBED_CHUNK,
) -> np.ndarray:
    """Embed many texts `chunk` at a time, telling `progress` after each batch."""
    if len(texts) <= chunk and progress is None:
        return await embedder.embed(texts)
    parts: list[np.ndarray] = []
    for start in range(0, len(texts), chunk):
        parts.append(await embedder.embed(texts[start : start + chunk]))
        if progress is not None:
            progress(min(start + chunk, len(texts)), len(texts))
    if not parts:
        return np.zeros((0, dim or 1), dtype=np.float32)
    return np.vstack(parts)


class LiveIndex:
    """The ranker, the store versions it reflects, and the tools it holds as stored."""

    def __init__(
        self,
        store: BufferedStore,
        embedder: Embedder,
        ranker: CentroidRanker,
        tuner: Tuner,
        metrics: Metrics,
        *,
        load_progress: Progress | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.ranker = ranker
        self._tuner = tuner
        self._metrics = metrics
        self._load_progress = guarded(load_progress) if load_progress is not None else None
        self.catalog_version = -1
        self.exemplar_version = 0
        self.loaded = False
        # Ranking from the catalog snapshot a start read while the store did not answer, until
        # the first load from the store (`reload`) replaces it.
        self.from_snapshot = False
        self.not_ready_reason = "catalog not loaded yet"
        self._held: dict[str, Tool] = {}  # the tools in the ranker, as the store returned them
        # Held by every catalog change: a poll's reload that listed the catalog before an
        # import's write and swapped it in after would drop the imported tools, and with the
        # version already current no later poll would bring them back.
        self.lock = asyncio.Lock()

    def check_ready(self) -> None:
        """`NotReady` until the first load from the store (or from a snapshot) has finished."""
        if not self.loaded and not self.from_snapshot:
            raise NotReady(self.not_ready_reason)

    def tool(self, name: str) -> Tool | None:
        """A tool of the ranker's catalog as the store returned it (schema included), if held."""
        return self._held.get(name)

    def describe(self, name: str) -> str:
        """The description of a held tool ('' when not held), for the teacher's prompt."""
        tool = self._held.get(name)
        return tool.description if tool is not None else ""

    async def embed(
        self, texts: Sequence[str], *, progress: Progress | None = None, chunk: int = _EMBED_CHUNK
    ) -> np.ndarray:
        return await embed_in_batches(
            self.embedder, texts, dim=self.ranker.dim, progress=progress, chunk=chunk
        )

    async def reload(self) -> None:
        """Rebuild the ranker from the store: every tool, then every exemplar."""
        async with self.lock:
            state = await self.store.state()
            tools = await self.store.list_tools()
            vectors = await self.embed([tool_text(t) for t in tools], progress=self._load_progress)
            self.ranker.set_catalog(tools, vectors)
            self._held = {t.name: t for t in tools}
            self.catalog_version = state.catalog_version
            self.exemplar_version = 0
            await self.fold_since(0)
            self.from_snapshot = False
            self._metrics.serving_from_snapshot.set(0)
            self._publish_sizes("reload")
            log.info(
                "catalog_loaded",
                tools=self.ranker.size,
                exemplars=self.ranker.exemplar_total,
                catalog_version=state.catalog_version,
                exemplar_version=self.exemplar_version,
            )

    def capture(self) -> CatalogSnapshot:
        """What the ranker holds now, to be written as the catalog snapshot."""
        names = self.ranker.snapshot.names
        return CatalogSnapshot(
            embedder=self.embedder.id,
            catalog_version=self.catalog_version,
            exemplar_version=self.exemplar_version,
            tools=tuple(self._held[n] for n in names if n in self._held),
            learned=tuple(self.ranker.learned()),
        )

    async def restore(self, snap: CatalogSnapshot) -> None:
        """Rank from a snapshot (the store did not answer at start): its tools embedded again
        (the vector cache has them), its exemplars folded as they were."""
        async with self.lock:
            vectors = await self.embed([tool_text(t) for t in snap.tools])
            self.ranker.set_catalog(snap.tools, vectors)
            self.ranker.fold(snap.learned)
            self._held = {t.name: t for t in snap.tools}
            self.catalog_version = snap.catalog_version
            self.exemplar_version = snap.exemplar_version
            self.from_snapshot = True
            self._metrics.serving_from_snapshot.set(1)
            self._publish_sizes("snapshot")
            self._tuner.labels_changed()

    def needs_vector(self, tool: Tool, pack: str | None) -> bool:
        """Whether importing `tool` (into `pack`) changes what the ranker must embed."""
        held = self._held.get(tool.name)
        return (
            held is None
            or held.content_hash != tool.content_hash
            or (pack is not None and pack not in held.packs)
            or not self.ranker.has(tool.name)
        )

    async def swap_in(self, changed: Sequence[Tool], vectors: np.ndarray, *, moved: bool) -> None:
        """After an import's write (under `lock`; `moved`: whether it moved the catalog version):
        put the embedded tools that the store now holds, as it holds them, into the ranker."""
        stored = {t.name: t for t in await self.store.list_tools()}
        rows = [
            i
            for i, t in enumerate(changed)
            if t.name in stored and stored[t.name].content_hash == t.content_hash
        ]
        fresh = [stored[changed[i].name] for i in rows]
        if fresh:
            self.ranker.upsert_tools(fresh, vectors[rows])
        self._held.update((t.name, t) for t in fresh)
        await self._wrote_catalog(moved)
        self._publish_sizes("upsert")

    async def remove(self, names: Iterable[str]) -> None:
        """After a delete's write (under `lock`): drop the tools from the ranker, and the
        labels the store deleted with them. The ranker keeps a missing tool's labels for its
        return; these ones are gone, so the tool put back (before a poll) must not rank by them."""
        names = list(names)
        self.ranker.remove_tools(names)
        for name in names:
            self._held.pop(name, None)
        await self._wrote_catalog(moved=True)
        # The delete is written: a 503 now would have it sent again (a 404); a poll folds them.
        with contextlib.suppress(StoreUnavailable):
            await self.fold_since(self.exemplar_version)  # the delete's tombstones
        self._publish_sizes("delete")

    async def _wrote_catalog(self, moved: bool) -> None:
        """Take the catalog version this process's own write left, when it is that write's: a
        write that changed something moves it by one, one that changed nothing leaves it. Any
        other step counts another replica's change too, which only a reload brings in, so the
        version stays behind and the next poll reloads. (Taking one step for granted adopted
        another replica's version whenever this replica re-sent what it held stale: a tool
        that replica added was then missing here for good.)"""
        version = (await self.store.state()).catalog_version
        if version == self.catalog_version + int(moved):
            self.catalog_version = version

    async def fold_since(self, version: int) -> int:
        """Fold exemplars written after `version`; re-embed those of another embedder."""
        delta = await self.store.exemplars_since(version)
        if delta.upserted or delta.deleted:
            await self.fold(delta.upserted, delta.deleted)
        self.exemplar_version = max(self.exemplar_version, delta.version)
        return len(delta.upserted) + len(delta.deleted)

    async def fold(self, exemplars: Sequence[Exemplar], deleted: Sequence[str] = ()) -> None:
        """Fold exemplars into the ranker, re-embedding any made by a different embedder; one
        the ranker already holds for its tool and group (a usage label seen again) is skipped
        before its vector is even read."""
        exemplars = [
            e for e in exemplars if not self.ranker.holds(e.query_norm, e.tool, label_group(e.tier))
        ]
        stale = [e for e in exemplars if e.embedder != self.embedder.id or not e.embedding]
        fresh_vectors: dict[str, np.ndarray] = {}
        if stale:
            vectors = await self.embed([e.query for e in stale])
            fresh_vectors = {e.id: vectors[i] for i, e in enumerate(stale)}
        learned = [
            LearnedVector(
                query_norm=e.query_norm,
                tool=e.tool,
                vector=fresh_vectors[e.id]
                if e.id in fresh_vectors
                else np.asarray(e.embedding, dtype=np.float32),
                trusted=label_group(e.tier) == "trusted",
                usage=label_group(e.tier) == "usage",
            )
            for e in exemplars
        ]
        self.ranker.fold(learned, deleted)
        self._publish_sizes("fold")
        self._tuner.labels_changed()

    async def catch_up(self) -> bool:
        """Reload now if another replica changed the catalog since this one read it: a name
        this replica does not know may be a tool another one has just added, whose labels
        would be refused (a human's with a 404) until the next poll. True when it reloaded."""
        if (await self.store.state()).catalog_version == self.catalog_version:
            return False
        await self.reload()
        return True

    async def settle(self) -> None:
        """Fold what is now held for the queries whose spooled human label (folded when it was
        spooled) the replay did not write (its tool was deleted, or a later human label
        replaced it) or the spool's bound dropped. Unread while the store is down: kept for the
        next call."""
        keys = set(self.store.unsettled)
        if not keys:
            return
        held = await self.store.exemplars_for_queries(sorted(keys))  # a pending one first
        if self.store.down:
            return
        kept = [e for e in held.values() if e.version or e.tier == "feedback"]
        gone = keys - {e.query_norm for e in kept}
        await self.fold(kept, sorted(gone))
        self.store.unsettled -= keys

    async def refresh(self) -> bool:
        """Pick up other replicas' writes: reload on a catalog change, fold new exemplars."""
        await self.settle()
        state = await self.store.state()
        if state.catalog_version != self.catalog_version:
            await self.reload()
            return True
        if state.exemplar_version > self.exemplar_version:
            folded = await self.fold_since(self.exemplar_version)
            self._metrics.replica_folds.inc()
            log.info("replica_exemplars_folded", changes=folded, version=self.exemplar_version)
            return True
        return False

    async def saved(self, result: SaveResult) -> None:
        """Labels were saved here: fold them into the ranker now.

        One save gives all its exemplars one version. When that is the version after the
        ranker's and the save evicted nothing, the saved exemplars are the whole change, so
        they are folded as they are, without reading them back. Otherwise (retention evicted
        some, or another replica wrote in between) the delta is read from the store and folded
        in version order, as a poll would. A version a delta read has already covered is not
        folded again (that could put back a label a later save replaced). Of a query saved
        several times in one call, what the call left stored is folded, never a state on the way.
        While the store is down the spool holds the labels (version 0): only a human's is
        folded at once, as the store keeps it over anything but a later human's (`settle` then
        lets it go); the others are folded from the store once replayed (a stored label may
        outrank or outnumber them).
        """
        changed = last_per_query(result.changed)
        if not changed:
            return
        version = changed[0].version
        if not version:
            human = [e for e in changed if e.tier == "feedback"]
            if human:
                await self.fold(human)
            return
        if version and version <= self.exemplar_version:
            return
        if version == self.exemplar_version + 1 and not result.evicted:
            await self.fold(changed)
            self.exemplar_version = max(self.exemplar_version, version)
            return
        try:
            await self.fold_since(self.exemplar_version)
        except StoreUnavailable:
            await self.fold(changed)

    def _publish_sizes(self, reason: str) -> None:
        self._metrics.catalog_size.set(self.ranker.size)
        self._metrics.exemplars.set(self.ranker.exemplar_total)
        self._metrics.ranker_rebuilds.labels(reason).inc()
