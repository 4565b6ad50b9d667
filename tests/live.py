"""A real toolselect server (SQLite store, hand-made catalog) on its own thread and event loop.

Blocking callers (the sync `Client`, a README example) can talk to it from the test's thread
without stalling the server; async tests reach it over TCP like any other process would.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from tests.api.conftest import HAND_CATALOG
from tests.services import ServiceFactory
from toolselect.api.app import create_app
from toolselect.records import Turn
from toolselect.service import Service

T = TypeVar("T")


class LiveServer:
    """Starts and stops the server on a private loop; `run` executes a coroutine there."""

    def __init__(self, tmp_path: Path, **overrides: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._factory = ServiceFactory("sqlite", tmp_path, None)
        self._runner: web.AppRunner | None = None
        self.service: Service = self.run(self._start(overrides))
        self.url = self._url()

    async def _start(self, overrides: dict[str, Any]) -> Service:
        service = await self._factory.start(wait_for_store=True, **overrides)
        self._runner = web.AppRunner(create_app(service))
        await self._runner.setup()
        await service.catalog.upsert_tools(HAND_CATALOG, pack="assistant")
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return service

    def _url(self) -> str:
        assert self._runner is not None
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=60)

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self._factory.aclose()

    def stop(self) -> None:
        try:
            self.run(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()


def live_server(tmp_path: Path, **overrides: Any) -> Iterator[LiveServer]:
    """Yields a started server; the fixtures in tests/client and tests/integrations wrap it."""
    server = LiveServer(tmp_path, **overrides)
    try:
        yield server
    finally:
        server.stop()


def wait_for_turn(server: LiveServer, turn_id: str, timeout_s: float = 15.0) -> Turn:
    """The turn once the server's learner has stored it (intake is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        turn = server.run(server.service.store.get_turn(turn_id))
        if turn is not None:
            return turn
        time.sleep(0.1)
    raise AssertionError(f"turn {turn_id!r} not stored within {timeout_s}s")
