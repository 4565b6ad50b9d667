"""The turns a spent teacher budget refused outlive their process: a service started again on the
store takes back those still undecided and asks the teacher about them once its budget has room,
each once, however often the process restarts."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest_asyncio
from structlog.testing import capture_logs

from tests.e2e.test_restart import embeddings_endpoint
from tests.learn.test_learner import TOOLS
from tests.services import ServiceFactory
from tests.stubs import Reply, Stub, anthropic_message, start_stub
from toolselect.records import Turn
from toolselect.service import Service
from toolselect.service.searches import SearchLog
from toolselect.store.factory import open_store

CITIES = ("Rome", "Oslo", "Lima", "Kyiv", "Baku")
REQUESTS = {f"r{i}": f"run the backup script for {city}" for i, city in enumerate(CITIES)}


def asked(stub: Stub) -> list[str]:
    """The requests the teacher was asked about, in the order asked."""
    found = []
    for received in stub.received:
        content: Any = received.body["messages"][0]["content"]
        text = content if isinstance(content, str) else " ".join(b["text"] for b in content)
        match = re.search(r"<request>\s*(.*?)\s*</request>", text, re.S)
        assert match is not None, text
        found.append(match.group(1))
    return found


async def start(services: ServiceFactory, stub: Stub, budget: int, **overrides: Any) -> Service:
    return await services.start(
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=stub.url,
        teacher_budget_per_hour=budget,
        teacher_retries=0,
        **overrides,
    )


async def burst(services: ServiceFactory, stub: Stub) -> list[str]:
    """A service with room for one teacher call sees five fallback turns and stops: the ids
    of the four its budget refused, oldest first."""
    stub.reply(Reply(body=anthropic_message("shell_exec")))
    first = await start(services, stub, budget=1)
    await first.catalog.upsert_tools(TOOLS)
    for turn_id, request in REQUESTS.items():
        assert first.learner.observe(request, "shell_exec", turn_id=turn_id)
    assert await first.learner.drain(30.0)
    turns = [await first.store.get_turn(turn_id) for turn_id in REQUESTS]
    refused = [t.id for t in turns if t is not None and t.result == "limit_reached"]
    assert len(refused) == 4 and len(stub.received) == 1
    await stop(services, first)
    return refused


async def stop(services: ServiceFactory, service: Service) -> None:
    await service.close()
    services.started.remove(service)


async def settled(service: Service, turn_ids: list[str]) -> list[tuple[str | None, ...]]:
    """(result, label) of each turn once none is `limit_reached` any more (or 10 s passed)."""
    await asyncio.wait_for(service.refused_taken_back.wait(), 10.0)
    for _ in range(500):
        turns = [await service.store.get_turn(turn_id) for turn_id in turn_ids]
        if all(t is not None and t.result != "limit_reached" for t in turns):
            break
        await asyncio.sleep(0.02)
    assert await service.learner.drain(10.0)
    turns = [await service.store.get_turn(turn_id) for turn_id in turn_ids]
    return [(t.result, t.label) if t is not None else (None,) for t in turns]


async def test_a_restarted_service_asks_about_the_turns_its_predecessors_budget_refused(
    services: ServiceFactory, anthropic_stub: Stub
) -> None:
    """Four turns refused, one of whose query a human labels meanwhile; started again with
    room, the service asks about the three others, each once, and counts the predecessor's
    billed call against its budget once; started again after that, it asks about none."""
    refused = await burst(services, anthropic_stub)
    human = await start(services, anthropic_stub, budget=1)
    await human.learning.feedback(REQUESTS[refused[0]], "shell_exec")
    await stop(services, human)

    again = await start(services, anthropic_stub, budget=10)
    assert again.oracle.budget.remaining() == 9  # the burst's one billed call
    assert await settled(again, refused[1:]) == [("labeled", "shell_exec")] * 3
    left = await again.store.get_turn(refused[0])
    assert left is not None and left.result == "limit_reached"
    assert sorted(asked(anthropic_stub)[1:]) == sorted(REQUESTS[i] for i in refused[1:])
    assert again.metrics.value("toolselect_teacher_refused_reloaded_total", {}) == 3
    assert again.metrics.value("toolselect_teacher_asked_again_total", {}) == 3
    assert again.oracle.budget.remaining() == 6
    await stop(services, again)

    third = await start(services, anthropic_stub, budget=10)
    await asyncio.wait_for(third.refused_taken_back.wait(), 10.0)
    assert await third.learner.drain(10.0)
    assert len(anthropic_stub.received) == 4
    assert not third.metrics.value("toolselect_teacher_refused_reloaded_total", {})
    assert third.oracle.budget.remaining() == 6  # 4 billed calls in the hour, counted once


async def test_turns_asked_about_before_a_restart_are_not_asked_again_after_it(
    services: ServiceFactory, anthropic_stub: Stub
) -> None:
    """Room for two of the four refused turns: the newest two are asked about; the next
    start, with room for the rest, asks about the two left only."""
    refused = await burst(services, anthropic_stub)
    again = await start(services, anthropic_stub, budget=3)
    results = await settled(again, refused[2:])
    assert results == [("labeled", "shell_exec")] * 2
    await stop(services, again)
    assert sorted(asked(anthropic_stub)[1:]) == sorted(REQUESTS[i] for i in refused[2:])

    third = await start(services, anthropic_stub, budget=5)
    assert third.oracle.budget.remaining() == 2  # 3 billed calls in the hour
    assert await settled(third, refused) == [("labeled", "shell_exec")] * 4
    assert sorted(asked(anthropic_stub)[1:]) == sorted(REQUESTS[i] for i in refused)
    assert third.oracle.budget.remaining() == 0


async def test_the_turns_taken_back_are_the_newest_the_refused_list_holds(
    services: ServiceFactory, anthropic_stub: Stub
) -> None:
    """With `TOOLSELECT_QUEUE_SIZE` 2, a restart takes back the newest two of the four turns
    refused, and only those are asked about."""
    refused = await burst(services, anthropic_stub)
    again = await start(services, anthropic_stub, budget=10, queue_size=2)
    assert await settled(again, refused[2:]) == [("labeled", "shell_exec")] * 2
    assert again.metrics.value("toolselect_teacher_refused_reloaded_total", {}) == 2
    older = [await again.store.get_turn(turn_id) for turn_id in refused[:2]]
    assert [t.result for t in older if t is not None] == ["limit_reached"] * 2
    assert sorted(asked(anthropic_stub)[1:]) == sorted(REQUESTS[i] for i in refused[2:])


def refused_turn(turn_id: str, seconds: int, **fields: Any) -> Turn:
    """A fallback turn a spent budget refused five minutes ago (`seconds` later for order)."""
    at = datetime.now(UTC) - timedelta(minutes=5) + timedelta(seconds=seconds)
    return Turn(turn_id, REQUESTS[turn_id], "shell_exec", at, flagged=True,
                flag_reason="fallback", tier="teacher", result="limit_reached",
                reason="hourly budget of 1 calls spent", **fields)  # fmt: skip


async def left_refused(services: ServiceFactory, turns: list[Turn]) -> None:
    """`turns` in the store, as a stopped process left them."""
    store = await open_store(services.settings())
    await store.migrate()
    await store.record_turns(turns)
    await store.close()


def candidates(stub: Stub, request: str) -> list[str]:
    """The candidates the teacher was shown for `request`, in the listing's order."""
    for received in stub.received:
        text = received.body["messages"][0]["content"]
        text = text if isinstance(text, str) else " ".join(b["text"] for b in text)
        if request in text:
            listing = text.split("Candidate tools:", 1)[1]
            return re.findall(r"^- ([^:\n]+)", listing, re.M)
    raise AssertionError(f"never asked about {request!r}")


async def test_the_tools_a_taken_back_turns_search_showed_go_last_for_the_teacher(
    services: ServiceFactory, anthropic_stub: Stub
) -> None:
    """A refused turn whose fallback came after a search that showed two tools (placed
    `not_shown`): taken back, the teacher is shown those two last, as it would have been
    before the restart; they are read back from the stored search id."""
    first = await start(services, anthropic_stub, budget=1)
    await first.catalog.upsert_tools(TOOLS)
    ranked = {
        i: [r.tool for r in (await first.ranking.rank(REQUESTS[i], len(TOOLS))).results]
        for i in ("r0", "r1")
    }
    await stop(services, first)
    passed = ranked["r0"][:2]  # what the predecessor's search showed
    search_id = SearchLog(100, 3600.0).record(passed)
    await left_refused(
        services,
        [refused_turn("r0", 0, search_id=search_id, search_status="not_shown", shown_k=2),
         refused_turn("r1", 1)],
    )  # fmt: skip

    anthropic_stub.reply(Reply(body=anthropic_message("shell_exec")))
    again = await start(services, anthropic_stub, budget=10, teacher_full_catalog=2,
                        teacher_candidates=len(TOOLS))  # fmt: skip
    assert await settled(again, ["r0", "r1"]) == [("labeled", "shell_exec")] * 2
    assert candidates(anthropic_stub, REQUESTS["r0"]) == [*ranked["r0"][2:], *passed]
    assert candidates(anthropic_stub, REQUESTS["r1"]) == ranked["r1"]


@pytest_asyncio.fixture(loop_scope="function")
async def embeddings_stub() -> AsyncIterator[Stub]:
    async for stub in start_stub("/v1/embeddings"):
        stub.responder = embeddings_endpoint
        yield stub


async def test_a_failed_take_back_is_logged_counted_and_tried_again(
    services: ServiceFactory, anthropic_stub: Stub, embeddings_stub: Stub
) -> None:
    """The embedding endpoint fails the refused turns' requests when a service starts on them:
    it serves all the same, logs and counts the failed take-back, and takes the turns back a
    poll interval after the endpoint answers again."""
    remote = {"embedder": "http", "embed_url": embeddings_stub.url, "embed_model": "stub-model"}
    first = await start(services, anthropic_stub, budget=1, **remote)
    await first.catalog.upsert_tools(TOOLS)
    await stop(services, first)
    await left_refused(services, [refused_turn("r0", 0), refused_turn("r1", 1)])

    anthropic_stub.reply(Reply(body=anthropic_message("shell_exec")))

    def down_for_requests(body: Any) -> Reply:  # the catalog's texts still embed
        if any(text in REQUESTS.values() for text in body["input"]):
            return Reply(status=503, body={"error": {"message": "overloaded"}})
        return embeddings_endpoint(body)

    embeddings_stub.responder = down_for_requests
    with capture_logs() as logs:
        again = await start(services, anthropic_stub, budget=10, **remote)
        failed: tuple[str, dict[str, str]] = ("toolselect_teacher_refused_reload_failed_total", {})
        for _ in range(200):
            if again.metrics.value(*failed):
                break
            await asyncio.sleep(0.02)
        assert again.metrics.value(*failed) == 1
        await again.check_ready()  # serving
        assert not again.refused_taken_back.is_set() and not anthropic_stub.received
        embeddings_stub.responder = embeddings_endpoint
        assert await settled(again, ["r0", "r1"]) == [("labeled", "shell_exec")] * 2
    events = [e["event"] for e in logs]
    assert events.count("teacher_refused_take_back_failed") >= 1
    assert "teacher_refused_taken_back" in events
    assert sorted(asked(anthropic_stub)) == sorted(REQUESTS[i] for i in ("r0", "r1"))
