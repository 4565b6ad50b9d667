"""The `KeyStore` contract on every store (SQLite, the in-memory fake, Neo4j), the SQLite file
of an older version gaining the keys table in place, and key writes while the store is down."""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import neo4j
import pytest
import pytest_asyncio

from tests.store.conftest import StoreFactory
from toolselect.errors import StoreError, StoreUnavailable
from toolselect.keys import new_key
from toolselect.metrics import Metrics
from toolselect.records import ApiKey, Tool
from toolselect.store.buffered import BufferedStore
from toolselect.store.neo4j.store import Neo4jStore
from toolselect.store.port import Store
from toolselect.store.spool import Spool
from toolselect.store.sqlite.store import SqliteStore
from toolselect.testing import FakeClock

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def key(tenant: str, role: str = "agent", minutes: int = 0, name: str | None = None) -> ApiKey:
    return new_key(tenant, role, T0 + timedelta(minutes=minutes), name=name)[1]


async def test_saved_keys_are_listed_oldest_first(store: Store) -> None:
    """Saved keys read back field for field; by tenant or all, oldest first."""
    b = key("team-b", "admin", minutes=2, name="ops")
    a1 = key("team-a", "editor", minutes=1)
    a0 = key("team-a", "agent", minutes=0, name="ci bot ✓")
    for k in (b, a1, a0):
        await store.save_key(k)
    assert await store.list_keys() == [a0, a1, b]
    assert await store.list_keys("team-a") == [a0, a1]
    assert await store.list_keys("nobody") == []
    assert await store.active_keys() == [a0, a1, b]


async def test_revoked_keys_stay_listed_but_not_active(store_factory: StoreFactory) -> None:
    """Revoking stamps `revoked_at` by the store's clock, once: a second revocation keeps the
    first time; an unknown id is False; a revoked key is no longer active."""
    clock = FakeClock(T0 + timedelta(hours=1))
    store = await store_factory.make(clock=clock)
    kept, gone = key("t", minutes=0), key("t", minutes=1)
    await store.save_key(kept)
    await store.save_key(gone)
    assert await store.revoke_key(gone.id) is True
    clock.set(T0 + timedelta(hours=2))
    assert await store.revoke_key(gone.id) is True
    assert await store.revoke_key("000000000000") is False
    assert await store.active_keys() == [kept]
    assert await store.list_keys("t") == [kept, replace(gone, revoked_at=T0 + timedelta(hours=1))]


async def test_a_key_is_unique_by_id_and_by_hash(store: Store) -> None:
    """A second key with a stored id or a stored hash is refused; the first stays as it was."""
    first = key("t")
    await store.save_key(first)
    with pytest.raises(StoreError):
        await store.save_key(replace(key("u"), id=first.id))
    with pytest.raises(StoreError):
        await store.save_key(replace(key("u"), hash=first.hash))
    assert await store.list_keys() == [first]


async def test_keys_do_not_touch_the_catalog_versions(store: Store) -> None:
    """Keys are not catalog or labels: saving and revoking one moves no version replicas
    poll for the ranker."""
    await store.upsert_tools([Tool("get_weather", "Weather")])
    before = await store.state()
    k = key("t")
    await store.save_key(k)
    await store.revoke_key(k.id)
    assert await store.state() == before


@pytest.mark.reopens
async def test_keys_outlive_the_connection(store_factory: StoreFactory) -> None:
    """Keys and revocations are durable: a new connection on the same data reads them."""
    store = await store_factory.make()
    a, b = key("t", minutes=0), key("t", minutes=1)
    await store.save_key(a)
    await store.save_key(b)
    await store.revoke_key(a.id)
    store = await store_factory.reopen(store)
    assert [k.id for k in await store.active_keys()] == [b.id]
    assert [k.id for k in await store.list_keys("t")] == [a.id, b.id]


async def test_an_older_sqlite_file_gains_the_keys_table_in_place(tmp_path: Path) -> None:
    """A file made before keys existed gets the table at migrate, its tools kept."""
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    await store.migrate()
    await store.upsert_tools([Tool("get_weather", "Weather")])
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE api_keys")
    store = SqliteStore(path)
    try:
        await store.migrate()
        await store.migrate()  # idempotent
        k = key("t")
        await store.save_key(k)
        assert await store.active_keys() == [k]
        assert [t.name for t in await store.list_tools()] == ["get_weather"]
    finally:
        await store.close()


@pytest_asyncio.fixture(loop_scope="function")
async def down(tmp_path: Path) -> AsyncIterator[BufferedStore]:
    """A buffered store whose backend refuses every connection."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"bolt://127.0.0.1:{port}"
    driver = neo4j.AsyncGraphDatabase.driver(
        uri, connection_timeout=1, max_transaction_retry_time=0
    )
    spool = Spool.open(tmp_path / "spool.db", max_bytes=1 << 20)
    store = BufferedStore(Neo4jStore(driver, uri=uri), spool=spool, metrics=Metrics())
    yield store
    await store.close()
    await driver.close()


async def test_key_writes_are_not_spooled_while_down(down: BufferedStore) -> None:
    """Saving or revoking a key while the store is unreachable fails with StoreUnavailable
    (fast, once it is known down) and leaves nothing in the spool."""
    with pytest.raises(StoreUnavailable):
        await down.save_key(key("t"))
    assert down.down
    with pytest.raises(StoreUnavailable):
        await down.revoke_key("abc")
    with pytest.raises(StoreUnavailable):
        await down.active_keys()
    assert down.backlog == 0
