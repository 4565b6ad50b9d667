"""The live ranker holds what the store holds: a batch that changes a query's label several
times folds where it ended, and labels spooled while the store is down wait for the store
(except a human's), on both stores, through a started service; a human's the replay refuses
stops counting, and so does one the spool's bound drops."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path

from tests.services import ServiceFactory
from toolselect.config import Settings
from toolselect.names import normalise_query
from toolselect.records import Exemplar, SaveResult, Tool
from toolselect.service.parts import Parts, compose
from toolselect.store.port import lookup_one
from toolselect.store.spool import Spool
from toolselect.store.sqlite.store import SqliteStore
from toolselect.testing import FakeEmbedder

TOOLS = [
    Tool("get_weather", "Current weather and forecast for a city."),
    Tool("send_email", "Send an email message to a recipient."),
    Tool("web_search", "Search the web for pages matching a query."),
]
QUERY = "zqx frobnicate the wibble gadget 4471"


async def test_a_batch_that_changes_a_label_twice_folds_where_it_ended(
    services: ServiceFactory,
) -> None:
    """get_weather seen twice; then one batch sees send_email twice and get_weather once: the
    store ends on get_weather (3 sightings to 2), and so must the ranker (it held send_email,
    a state on the way, until a restart)."""
    service = await services.start(embedder="hashing")
    await service.catalog.upsert_tools(TOOLS)
    for tool in ("get_weather", "get_weather"):
        service.learning.observe(QUERY, tool, outcome="ok", turn_id=uuid.uuid4().hex)
        assert await service.learner.drain(30.0)
    for tool in ("send_email", "send_email", "get_weather"):
        service.learning.observe(QUERY, tool, outcome="ok", turn_id=uuid.uuid4().hex)
    assert await service.learner.drain(30.0)
    stored = await lookup_one(service.store, QUERY)
    assert stored is not None and (stored.tool, stored.count) == ("get_weather", 1)
    key = normalise_query(QUERY)
    assert service.ranker.holds(key, "get_weather", "usage")
    assert (await service.ranking.rank(QUERY, 1)).results[0].tool == "get_weather"


async def test_labels_spooled_while_the_store_is_down_wait_for_it_but_a_humans(
    services: ServiceFactory,
) -> None:
    """A save answered from the spool (version 0: the store unreachable) folds only a human's
    label at once; a usage or teacher label may be outranked or outnumbered by what the store
    holds, so the ranker takes it from the store once it is replayed."""
    service = await services.start(embedder="hashing")
    await service.catalog.upsert_tools(TOOLS)
    vector = tuple((await service.embedder.embed([QUERY]))[0].tolist())

    def spooled(tool: str, tier: str, query: str) -> Exemplar:
        now = datetime.now(UTC)
        return Exemplar(uuid.uuid4().hex, query, tool, tier, service.embedder.id, vector, now)  # type: ignore[arg-type]

    await service.index.saved(
        SaveResult(
            changed=(
                spooled("send_email", "usage", QUERY),
                spooled("web_search", "teacher", "another query"),
                spooled("get_weather", "feedback", "a third query"),
            )
        )
    )
    assert not service.ranker.holds(normalise_query(QUERY), "send_email", "usage")
    assert not service.ranker.holds("another query", "web_search", "trusted")
    assert service.ranker.holds("a third query", "get_weather", "trusted")


async def feedback_while_locked(parts: Parts, db: Path) -> None:
    """Load `TOOLS`, then give a human label for `QUERY` while another connection holds the
    SQLite store's write lock: the label is spooled and folded at once."""
    await parts.store.migrate()
    await parts.store.upsert_tools(TOOLS)
    await parts.index.reload()
    parts.index.loaded = True
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        await parts.learning.feedback(QUERY, "get_weather")
    finally:
        lock.execute("ROLLBACK")
        lock.close()


async def test_a_spooled_human_label_the_replay_refuses_stops_counting(tmp_path: Path) -> None:
    """A human label spooled while another connection held the store's write lock (folded at
    once), whose tool another replica deletes before the replay: the replay refuses it, and
    the poll after lets it go, so the tool put back ranks without it (as in every other
    replica), where it kept counting until a restart. Composed parts: no upkeep replays first."""
    db = tmp_path / "toolselect.db"
    parts = compose(Settings(embedder="hashing"), SqliteStore(db, busy_timeout=0.1), FakeEmbedder())
    other = SqliteStore(db)  # another replica
    key = normalise_query(QUERY)
    try:
        await feedback_while_locked(parts, db)
        assert parts.store.backlog == 1 and parts.ranker.holds(key, "get_weather", "trusted")
        assert await other.delete_tool("get_weather")

        await parts.store.flush()  # the upkeep's replay, once the store answers
        assert parts.store.backlog == 0 and await lookup_one(parts.store, QUERY) is None
        await other.upsert_tools(TOOLS)  # put back
        await parts.index.refresh()  # the poll
        assert parts.ranker.has("get_weather")
        assert not parts.ranker.holds(key, "get_weather", "trusted")
        assert parts.ranker.exemplar_count("get_weather") == 0
    finally:
        await other.close()
        await parts.store.close()


async def test_a_human_label_the_full_spool_drops_stops_counting(tmp_path: Path) -> None:
    """A human label spooled while another connection held the store's write lock (folded at
    once) that the spool's bound drops (a spool too small for one label) is lost: once the
    store answers, the poll lets it go, where it kept counting until a restart."""
    db = tmp_path / "toolselect.db"
    parts = compose(
        Settings(embedder="hashing"),
        SqliteStore(db, busy_timeout=0.1),
        FakeEmbedder(),
        spool=Spool.open(tmp_path / "spool.db", max_bytes=1),
    )
    key = normalise_query(QUERY)
    try:
        await feedback_while_locked(parts, db)
        assert parts.store.down and parts.store.backlog == 0  # spooled, then dropped
        assert parts.ranker.holds(key, "get_weather", "trusted")  # folded when it was spooled

        await parts.store.flush()  # the upkeep's replay (nothing left), once the store answers
        await parts.index.refresh()  # the poll
        assert await lookup_one(parts.store, QUERY) is None
        assert not parts.ranker.holds(key, "get_weather", "trusted")
        assert parts.ranker.exemplar_count("get_weather") == 0
    finally:
        await parts.store.close()
