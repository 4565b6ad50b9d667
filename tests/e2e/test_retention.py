"""The upkeep's retention pass on a running service, on both stores: a turn past
`TOOLSELECT_TURN_MAX_AGE_DAYS` goes while the label made from it keeps counting, and a label
past `TOOLSELECT_EXEMPLAR_MAX_AGE_DAYS` stops counting in the ranking without any save."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np

from tests.e2e.test_learning import eventually
from tests.services import ServiceFactory
from toolselect.learn.refused import RefusedTurn
from toolselect.records import Tool, Turn
from toolselect.service import Service
from toolselect.service.retention import RetentionPass
from toolselect.testing import FakeClock

# Near the wall clock: the store's own retention (on a save) runs on it, not on the fake.
T0 = datetime.now(UTC).replace(microsecond=0)
TOOLS = [
    Tool("send_email", "Send an email message to a recipient."),
    Tool("get_weather", "Current weather and forecast for a city."),
    Tool("web_search", "Search the web for pages matching a query."),
]
# No word of any description: only a label can put a tool first.
QUERY = "zyx quarterly ledger reconciliation"


async def scores(service: Service) -> list[tuple[str, float]]:
    ranking = await service.ranking.rank(QUERY, k=3)
    return [(r.tool, round(r.score, 5)) for r in ranking.results]


async def test_a_label_outlives_its_turn_then_expires_without_a_save(
    services: ServiceFactory,
) -> None:
    """Past the turns' age the turn goes (its session with it) and the ranking stays as its
    label made it; past the labels' age the label goes, with no save, and the ranking is the one
    before it."""
    clock = FakeClock(T0)
    service = await services.start(clock=clock, exemplar_max_age_days=30.0, turn_max_age_days=10.0)
    await service.catalog.upsert_tools(TOOLS)
    before = await scores(service)
    service.learning.observe(QUERY, "send_email", outcome="ok", turn_id="t1", session_id="chat-1")
    assert await service.learner.drain(30.0)
    labelled = await scores(service)
    assert labelled[0][0] == "send_email" and labelled != before
    version = (await service.store.state()).exemplar_version

    clock.advance(days=11)
    assert not await service.retention.run()  # nothing left for the next tick
    assert await service.store.get_turn("t1") is None
    assert (await service.store.session_tails(["chat-1"])).get("chat-1") is None
    assert [e.turn_id for e in await service.catalog.exemplars_of("send_email")] == ["t1"]
    assert await scores(service) == labelled
    assert (await service.store.state()).exemplar_version == version

    clock.advance(days=20)
    await service.retention.run()
    assert await service.catalog.exemplars_of("send_email") == []
    assert await scores(service) == before
    assert service.index.exemplar_version == version + 1
    assert service.ranker.exemplar_total == 0
    metric = service.metrics.value
    assert metric("toolselect_retention_deleted_total", {"kind": "turn"}) == 1
    assert metric("toolselect_retention_deleted_total", {"kind": "label"}) == 1
    assert metric("toolselect_retention_deleted_total", {"kind": "session"}) == 1


async def test_the_upkeep_deletes_old_turns_once_loaded(services: ServiceFactory) -> None:
    """A started service's upkeep runs the pass without being asked: the turns a predecessor
    left past their age go, the recent ones stay."""
    clock = FakeClock(T0)
    first = await services.start(clock=clock, turn_max_age_days=10.0)
    old = Turn(id="old", request="an old request", used_tool="x", at=T0 - timedelta(days=11))
    new = Turn(id="new", request="a new request", used_tool="x", at=T0 - timedelta(days=9))
    await first.store.record_turns([old, new])
    await first.close()
    services.started.remove(first)
    second = await services.start(clock=clock, turn_max_age_days=10.0)

    async def gone() -> bool:
        return await second.store.get_turn("old") is None

    await eventually(gone)
    assert await second.store.get_turn("new") is not None


async def test_turns_are_kept_for_ever_when_off(services: ServiceFactory) -> None:
    """`TOOLSELECT_TURN_MAX_AGE_DAYS=off` keeps every turn; labels still expire."""
    clock = FakeClock(T0)
    settings = dataclasses.replace(services.settings(), turn_max_age_days=None)
    service = await Service.start(settings, clock=clock)
    services.started.append(service)
    await service.store.record_turns(
        [Turn(id="ancient", request="r", used_tool="x", at=T0 - timedelta(days=4000))]
    )
    assert not await service.retention.run()
    assert await service.store.get_turn("ancient") is not None


async def test_a_backlog_goes_a_batch_at_a_time(services: ServiceFactory) -> None:
    """Once a pass has used its time, it stops after the batch under way and says turns are
    left (the upkeep runs it again at its next tick); the last batch says none is."""
    clock = FakeClock(T0)
    kept = dataclasses.replace(services.settings(), turn_max_age_days=None)
    service = await Service.start(kept, clock=clock)  # its own upkeep deletes no turn
    services.started.append(service)
    await service.store.record_turns(
        [
            Turn(id=f"old-{i}", request="r", used_tool="x", at=T0 - timedelta(days=11))
            for i in range(5)
        ]
    )
    settings = dataclasses.replace(kept, turn_max_age_days=10.0)
    one_batch = RetentionPass(
        service.store,
        service.index,
        service.learner.refused,
        settings,
        clock,
        service.metrics,
        batch=2,
        seconds=0.0,
    )
    assert [await one_batch.run() for _ in range(3)] == [True, True, False]
    assert await service.store.recorded_turn_ids([f"old-{i}" for i in range(5)]) == set()


async def test_refused_turns_past_the_age_are_not_asked_about_again(
    services: ServiceFactory,
) -> None:
    """A turn the spent budget refused and that retention deletes leaves the list the teacher
    is asked again from: asked, it would be recorded anew; a recent one stays."""
    clock = FakeClock(T0)
    service = await services.start(clock=clock, turn_max_age_days=10.0)
    refused = service.learner.refused
    vector = np.zeros(4, dtype=np.float32)
    for turn_id, age in (("old", 11), ("recent", 9)):
        turn = Turn(id=turn_id, request="r", used_tool="x", at=T0 - timedelta(days=age))
        refused.add(RefusedTurn(turn, vector, ()))
    await service.retention.run()
    assert "old" not in refused and "recent" in refused


async def test_a_service_without_upkeep_deletes_nothing_on_the_side(
    services: ServiceFactory,
) -> None:
    """A one-shot command (`toolselect rank`, `analytics learning`...) starts its service
    without the upkeep: after ten of its ticks would have passed, the turns past their age
    are still there (the control above shows the upkeep deleting them)."""
    clock = FakeClock(T0)
    settings = services.settings(turn_max_age_days=10.0, poll_interval_s=0.05)
    service = await Service.start(settings, clock=clock, upkeep=False)
    services.started.append(service)
    old = Turn(id="old", request="an old request", used_tool="x", at=T0 - timedelta(days=11))
    await service.store.record_turns([old])
    await asyncio.sleep(0.5)  # the upkeep ticks every 50 ms here, and runs retention at once
    assert await service.store.get_turn("old") is not None
    assert not service.refused_taken_back.is_set()


async def test_the_store_reads_label_ages_by_the_services_clock(services: ServiceFactory) -> None:
    """A service on an injected clock (a test's `FakeClock`, a replay) stamps its labels by it,
    and the store's retention at a save must read their age by the same clock: reading it by
    the wall clock, a label made on a clock months behind was evicted by the save that wrote it.
    """
    clock = FakeClock(datetime.now(UTC) - timedelta(days=200))
    service = await services.start(clock=clock, exemplar_max_age_days=90.0)
    await service.catalog.upsert_tools(TOOLS)
    service.learning.observe(QUERY, "send_email", outcome="ok", turn_id="t1")
    assert await service.learner.drain(30.0)
    assert [e.turn_id for e in await service.catalog.exemplars_of("send_email")] == ["t1"]
