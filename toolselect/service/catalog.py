"""The catalog facade: import, read and delete tools, the ranker following every write."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from toolselect.catalog import tool_text
from toolselect.errors import NotFound
from toolselect.keys import shown
from toolselect.records import Exemplar, Tool, UpsertResult
from toolselect.service.index import LiveIndex, Progress, guarded
from toolselect.store.buffered import BufferedStore
from toolselect.store.rules import last_per_name

log = structlog.get_logger("toolselect.service")

# An import embeds in smaller batches: each one reports progress (a terminal line in the CLI,
# a fresh time limit over HTTP), and 64 MiniLM texts take about a second on one busy core.
IMPORT_BATCH = 64


class CatalogFacade:
    """The tools: imports that finish whole or not at all, reads, deletes."""

    def __init__(self, store: BufferedStore, index: LiveIndex) -> None:
        self._store = store
        self._index = index
        self._imports: set[asyncio.Task[UpsertResult]] = set()

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

    @property
    def imports_running(self) -> int:
        """Imports (`upsert_tools`) still running, their callers waiting or gone."""
        return len(self._imports)

    async def _import(
        self, tools: Sequence[Tool], pack: str | None, progress: Progress | None
    ) -> UpsertResult:
        index = self._index
        # Embedding first, outside the index lock (tens of seconds for a large catalog with a
        # dense model): ranking and polls go on meanwhile, and nothing is written yet.
        changed = [t for t in last_per_name(tools) if index.needs_vector(t, pack)]
        vectors = await index.embed(
            [tool_text(t) for t in changed],
            progress=guarded(progress) if progress is not None else None,
            chunk=IMPORT_BATCH,
        )
        async with index.lock:
            result = await self._store.upsert_tools(tools, pack)
            if result.moved or changed:
                await index.swap_in(changed, vectors, moved=result.moved)
        return result

    async def close(self, timeout_s: float) -> None:
        """Let running imports finish (an import whose caller went away too); past `timeout_s`
        cancel them, while embedding or inside their one transaction: nothing half-written."""
        if not self._imports:
            return
        pending = list(self._imports)
        _, late = await asyncio.wait(pending, timeout=timeout_s)
        for task in late:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    @property
    def size(self) -> int:
        """Tools the ranker holds."""
        return self._index.ranker.size

    def tool(self, name: str) -> Tool | None:
        """A tool of the ranker's catalog as the store returned it (schema included), if held."""
        return self._index.tool(name)

    async def list_tools(self, pack: str | None = None) -> list[Tool]:
        return await self._store.list_tools(pack)

    async def get_tool(self, name: str) -> Tool:
        """The stored tool; `NotFound` when there is none by that name."""
        tool = await self._store.get_tool(name)
        if tool is None:
            raise NotFound(f"no tool named {shown(name)}", "name")
        return tool

    async def exemplars_of(self, name: str) -> list[Exemplar]:
        """The labels that point at a stored tool; `NotFound` when there is no such tool."""
        await self.get_tool(name)
        return await self._store.exemplars_for_tool(name)

    async def delete_tool(self, name: str) -> None:
        async with self._index.lock:
            if not await self._store.delete_tool(name):
                raise NotFound(f"no tool named {shown(name)}", "name")
            await self._index.remove([name])
