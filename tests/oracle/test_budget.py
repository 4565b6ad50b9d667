"""Cost controls: the rolling hourly budget, the retry schedule and the in-flight guard."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.oracle.conftest import CANDIDATES, REQUEST, USED
from toolselect.config import Settings
from toolselect.oracle.base import Candidate, match_candidate
from toolselect.oracle.budget import Budget, RetryPolicy
from toolselect.oracle.oracle import DEFAULT_PRICES, InFlight, cost_usd, price_of
from toolselect.service.parts import compose
from toolselect.testing import FakeClock, FakeEmbedder, ScriptedTeacher, memory_store


def test_budget_allows_per_hour_then_refuses() -> None:
    """Exactly `per_hour` reservations succeed inside one hour."""
    budget = Budget(3, clock=FakeClock().timestamp)
    assert [budget.reserve() is not None for _ in range(4)] == [True, True, True, False]
    assert budget.remaining() == 0


def test_budget_window_rolls() -> None:
    """A slot frees exactly one hour after it was taken, not before."""
    clock = FakeClock()
    budget = Budget(2, clock=clock.timestamp)
    budget.reserve()
    clock.advance(seconds=1800)
    budget.reserve()
    clock.advance(seconds=1799)
    assert budget.reserve() is None
    clock.advance(seconds=1)
    assert budget.remaining() == 1
    assert budget.reserve() is not None
    assert budget.reserve() is None


def test_refund_returns_the_slot_once() -> None:
    """A refunded slot is available again; refunding it twice gives nothing extra."""
    budget = Budget(1, clock=FakeClock().timestamp)
    slot = budget.reserve()
    assert slot is not None
    budget.refund(slot)
    budget.refund(slot)
    assert budget.remaining() == 1


async def test_a_services_budget_refills_by_its_injected_clock() -> None:
    """The clock given to `compose` decides the oracle's time: with one call an hour, the next
    flagged request is refused until an hour has passed on that clock (and none in real time),
    and every traced call is stamped with that clock's time."""
    clock = FakeClock()
    settings = Settings(oracle="on", teacher_budget_per_hour=1, embedder="hashing")
    teacher = ScriptedTeacher(unscripted="web_search")
    async with memory_store(clock=clock) as store:
        parts = compose(settings, store, FakeEmbedder(), teacher=teacher, clock=clock)
        try:
            results = []
            for step in (timedelta(), timedelta(minutes=59, seconds=59), timedelta(seconds=1)):
                clock.advance(step)
                answer = await parts.oracle.teach(REQUEST, USED, CANDIDATES)
                results.append(answer.result)
            calls = await parts.store.oracle_calls()
        finally:
            await parts.tuner.close()
            await parts.store.close()
    assert results == ["labeled", "limit_reached", "labeled"]
    assert len(teacher.calls) == 2
    start = clock() - timedelta(hours=1)
    assert sorted(call.at for call in calls) == [start, clock()]


def test_zero_budget_refuses_everything() -> None:
    """A budget of 0 never allows a call."""
    assert Budget(0, clock=FakeClock().timestamp).reserve() is None


def test_negative_budget_is_refused() -> None:
    """A negative budget is a configuration error showing the value."""
    with pytest.raises(ValueError, match="-1"):
        Budget(-1)


def test_backoff_grows_and_is_capped() -> None:
    """Delays double from 250 ms and never exceed the cap."""
    policy = RetryPolicy(retries=8, max_s=1.0)
    assert [policy.delay(a) for a in range(4)] == [0.25, 0.5, 1.0, 1.0]
    assert policy.attempts == 9


def test_retry_after_wins_when_longer_within_the_cap() -> None:
    """A server's retry-after longer than the backoff is honoured, up to the cap."""
    policy = RetryPolicy()
    assert policy.delay(0, 3.0) == 3.0
    assert policy.delay(2, 0.1) == 1.0
    assert policy.delay(0, 3600.0) == 30.0


@pytest.mark.parametrize(
    ("choice", "label"),
    [
        ("web_search", "web_search"),
        ("send_message", "whatsapp__send_message"),
        ("telegram__send_message", None),
        ("search", None),
        ("none", None),
        (None, None),
    ],
)
def test_match_candidate(choice: str | None, label: str | None) -> None:
    """Choices resolve exactly, or a plain name by bare name; never by suffix or namespace swap."""
    assert match_candidate(choice, CANDIDATES) == label


def test_ambiguous_bare_name_is_no_label() -> None:
    """A plain name matching two namespaced candidates resolves to nothing."""
    both = [Candidate("a__send"), Candidate("b__send")]
    assert match_candidate("send", both) is None


def test_prices_match_dated_snapshots() -> None:
    """A dated model name is priced by its family; unknown models cost nothing."""
    assert price_of("claude-haiku-4-5-20251001", DEFAULT_PRICES) == (1.0, 5.0)
    assert price_of("gpt-4o-mini-2024-07-18", DEFAULT_PRICES) == (0.15, 0.6)
    assert price_of("llama3.1:8b", DEFAULT_PRICES) == (0.0, 0.0)
    assert cost_usd("claude-sonnet-4-5", 1_000_000, 1_000_000, DEFAULT_PRICES) == 18.0


def test_in_flight_reserves_each_query_once() -> None:
    """A normalised query can be reserved once until released."""
    flight = InFlight()
    assert flight.reserve("send ana a message")
    assert not flight.reserve("send ana a message")
    assert "send ana a message" in flight and len(flight) == 1
    flight.release("send ana a message")
    assert flight.reserve("send ana a message")
