"""A stopping learner drains its turns without starting teacher calls: the calls in flight end
as answered, the turns waiting for a teacher slot are declined unsent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tests.learn.test_learner import Harness
from tests.stubs import Reply, Stub, anthropic_message
from toolselect.store.sqlite.store import SqliteStore

CITIES = ("Rome", "Oslo", "Lima", "Kyiv", "Pune", "Graz")


async def until(condition: Callable[[], bool], tries: int = 1000) -> None:
    """Wait (10 s at most) until `condition` holds."""
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def test_turns_waiting_for_a_teacher_slot_make_no_call_once_stopping(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> None:
    """Four calls in flight (the teacher concurrency), two turns waiting for a slot: closed,
    the learner lets the four finish and sends no fifth call; the two end `declined`."""
    anthropic_stub.reply(Reply(body=anthropic_message("shell_exec"), held=True))
    h = Harness(sqlite_store, anthropic_stub)
    await h.load_catalog()
    h.learner.start()
    try:
        for i, city in enumerate(CITIES):
            request = f"run the backup script for {city}"
            assert h.learner.observe(request, "shell_exec", turn_id=f"s{i}")
        await until(lambda: len(anthropic_stub.received) == 4)
        closing = asyncio.create_task(h.learner.close(30.0))
        await asyncio.sleep(0)  # close marks the learner stopping before it first waits
        anthropic_stub.release.set()
        await asyncio.wait_for(closing, 30.0)
        assert len(anthropic_stub.received) == 4
        turns = [await h.store.get_turn(f"s{i}") for i in range(len(CITIES))]
        assert (
            sorted((t.tier, t.result) for t in turns if t is not None)
            == [("teacher", "declined")] * 2 + [("teacher", "labeled")] * 4
        )
        calls = await h.store.oracle_calls()
        assert sorted(c.result for c in calls) == ["labeled"] * 4
        assert h.counter("oracle_decisions", tier="teacher", result="declined") == 2
    finally:
        await h.learner.close(1.0)
        await h.teacher.aclose()
