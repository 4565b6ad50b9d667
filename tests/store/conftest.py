"""Fixtures that hand every contract test a clean store of each kind: SQLite, the shipped
in-memory fake (`toolselect.testing.memory_store`) and real Neo4j.

`store_factory` is parametrised over the three (test ids end in `[sqlite]` / `[memory]` /
`[neo4j]`, so `-k sqlite` runs the embedded half alone); it builds stores with custom retention or
clocks, reopens a store on the same data and opens another tenant's view of the same database
(`tenant`). `store` is a default store from it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.neo4j_server import NEO4J, Neo4jServer
from toolselect.keys import DEFAULT_TENANT
from toolselect.records import Retention
from toolselect.store.port import Store
from toolselect.store.sqlite.store import SqliteStore
from toolselect.testing import memory_store

Clock = Callable[[], datetime]


class StoreFactory:
    """Builds stores of one backend for one test and closes whatever it opened."""

    def __init__(self, backend: str, tmp_path: Path, server: Neo4jServer | None) -> None:
        self.backend = backend
        self._path = tmp_path / "store.db"
        self._server = server
        self._open_stores: dict[int, tuple[Store, Any, Retention, Clock | None, str]] = {}

    @property
    def expected_uri(self) -> str:
        if self.backend == "memory":
            return "sqlite::memory:"
        if self._server is None:
            return f"sqlite:{self._path}"
        return self._server.uri

    async def make(
        self,
        retention: Retention | None = None,
        clock: Clock | None = None,
        fallback_tools: tuple[str, ...] | None = None,
    ) -> Store:
        """A migrated, empty store (the Neo4j database is wiped first); `fallback_tools` for its
        analyses, else the stores' default."""
        return await self._open(
            retention or Retention(), clock, wipe=True, fallback_tools=fallback_tools
        )

    async def reopen(self, store: Store) -> Store:
        """Close `store` and open a new one (new connection or driver) on the same data."""
        assert self.backend != "memory", "mark the test `reopens`: memory data ends with it"
        _, _, retention, clock, tenant = self._open_stores[id(store)]
        await self._close(store)
        return await self._open(retention, clock, wipe=False, tenant=tenant)

    async def tenant(
        self, tenant: str, retention: Retention | None = None, clock: Clock | None = None
    ) -> Store:
        """A migrated store of `tenant` on the database (Neo4j) or file family (SQLite) of the
        stores made here, wiping nothing: another tenant's view beside them. In memory, a
        store of its own (every in-memory store has a private database)."""
        return await self._open(retention or Retention(), clock, wipe=False, tenant=tenant)

    async def _open(
        self,
        retention: Retention,
        clock: Clock | None,
        *,
        wipe: bool,
        tenant: str = DEFAULT_TENANT,
        fallback_tools: tuple[str, ...] | None = None,
    ) -> Store:
        extra: dict[str, Any] = {} if clock is None else {"clock": clock}
        if tenant != DEFAULT_TENANT:
            extra["tenant"] = tenant
        if fallback_tools is not None:
            extra["fallback_tools"] = fallback_tools
        store: Store
        driver: Any = None
        if self.backend == "memory" and (tenant != DEFAULT_TENANT or fallback_tools is not None):
            store = SqliteStore(Path(":memory:"), retention=retention, **extra)
        elif self.backend == "memory":
            # The fake is a context manager; its exit closes the store with the others.
            driver = AsyncExitStack()
            store = await driver.enter_async_context(memory_store(retention=retention, clock=clock))
        elif self._server is None:
            store = SqliteStore(self._path, retention=retention, **extra)
        else:
            import neo4j

            # Imported here so the SQLite half runs even before the Neo4j store exists.
            from toolselect.store.neo4j.store import Neo4jStore

            server = self._server
            driver = neo4j.AsyncGraphDatabase.driver(server.uri, auth=server.auth)
            try:
                if wipe:
                    await driver.execute_query(
                        "MATCH (n) DETACH DELETE n", database_=server.database
                    )
                store = Neo4jStore(
                    driver, server.database, uri=server.uri, retention=retention, **extra
                )
            except BaseException:
                await driver.close()
                raise
        self._open_stores[id(store)] = (store, driver, retention, clock, tenant)
        await store.migrate()
        return store

    async def _close(self, store: Store) -> None:
        _, driver, *_ = self._open_stores.pop(id(store))
        try:
            await store.close()
        finally:
            if isinstance(driver, AsyncExitStack):
                await driver.aclose()
            elif driver is not None:
                await driver.close()

    async def aclose(self) -> None:
        for store, *_ in list(self._open_stores.values()):
            await self._close(store)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `reopens` are not generated for the in-memory store (deselected, not
    skipped: there is nothing to run, rather than something missing)."""
    dropped = [
        item
        for item in items
        if item.get_closest_marker("reopens") is not None and item.name.endswith("[memory]")
    ]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


@pytest_asyncio.fixture(params=["sqlite", "memory", NEO4J], loop_scope="function")
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreFactory]:
    """A factory of clean stores of one backend (the Neo4j one needs the session server)."""
    server: Neo4jServer | None = None
    if request.param == "neo4j":
        server = request.getfixturevalue("neo4j_server")
    factory = StoreFactory(request.param, tmp_path, server)
    try:
        yield factory
    finally:
        await factory.aclose()


@pytest_asyncio.fixture(loop_scope="function")
async def store(store_factory: StoreFactory) -> Store:
    """A migrated, empty store with default retention."""
    return await store_factory.make()
