"""The learner stamps turns and labels with the clock it is given, never the wall clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest_asyncio

from tests.learn.test_learner import LOW_MARGIN, Harness, sqlite_store, teacher_answers
from tests.stubs import Stub
from toolselect.learn.learner import Learner, LearnerConfig
from toolselect.names import DEFAULT_FALLBACK_TOOLS
from toolselect.store.sqlite.store import SqliteStore
from toolselect.testing import FakeClock

__all__ = ["sqlite_store"]  # the fixture, imported for the tests below

# Far from today, so a wall-clock stamp could not pass for either.
OBSERVED = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)
LABELLED = OBSERVED + timedelta(seconds=1)


@pytest_asyncio.fixture(loop_scope="function")
async def clocked(
    sqlite_store: SqliteStore, anthropic_stub: Stub
) -> AsyncIterator[tuple[Harness, FakeClock]]:
    h = Harness(sqlite_store, anthropic_stub)
    clock = FakeClock(OBSERVED)
    h.learner = Learner(
        store=h.store,
        embedder=h.embedder,
        ranker=h.ranker,
        oracle=h.oracle,
        on_saved=h._on_saved,
        describe=lambda name: name,
        config=LearnerConfig(fallback_tools=DEFAULT_FALLBACK_TOOLS, margin_floor=0.05),
        metrics=h.metrics,
        clock=clock,
    )
    await h.load_catalog()
    h.learner.open()
    yield h, clock
    await h.learner.close(1.0)
    await h.teacher.aclose()


async def test_turns_and_labels_of_every_tier_carry_the_injected_clock(
    clocked: tuple[Harness, FakeClock],
) -> None:
    """A turn is stamped when observed, a ranker or teacher label when saved, both by `clock`."""
    harness, clock = clocked
    harness.stub.reply(teacher_answers("crypto_price"))
    assert harness.learner.observe("send an email message to Marco", "shell_exec", turn_id="r")
    assert harness.learner.observe(LOW_MARGIN, "shell_exec", turn_id="t")
    clock.advance(seconds=1)  # to LABELLED: labels are stamped after their turns
    harness.learner.start()
    assert await harness.learner.drain(30.0)
    for turn_id in ("r", "t"):
        turn = await harness.store.get_turn(turn_id)
        assert turn is not None and turn.at == OBSERVED
    assert {(e.tier, e.tool) for e in harness.saved} == {
        ("ranker", "send_email"),
        ("teacher", "crypto_price"),
    }
    assert {e.created_at for e in harness.saved} == {LABELLED}
