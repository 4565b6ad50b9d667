"""Cost controls: the rolling hourly budget, the retry schedule and the in-flight guard."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.oracle.conftest import CANDIDATES, REQUEST, USED
from tests.services import ServiceFactory
from toolselect.config import Settings, load_settings
from toolselect.errors import ConfigError
from toolselect.oracle.base import Candidate, match_candidate
from toolselect.oracle.budget import Budget, RetryPolicy
from toolselect.oracle.oracle import DEFAULT_PRICES, InFlight, cost_usd, price_of
from toolselect.records import OracleCall
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


def test_a_seeded_budget_counts_the_calls_of_its_hour_once() -> None:
    """Calls paid before the budget existed count against its window (the newest `per_hour`,
    oldest first, each leaving when its hour is up) and against the cap, in time order among
    the cap's own; a second seed, or one into a budget already used, changes nothing."""
    clock = FakeClock()
    cap = Budget(10, clock=clock.timestamp)
    other = cap.reserve()  # another tenant's call, now, paid
    assert other is not None
    cap.settle(other)
    budget = Budget(3, clock=clock.timestamp, cap=cap)
    assert budget.seed([100.0, 3599.0, 3600.0, 10.0, -5.0, 2000.0]) == 3  # 3600 s is past
    assert (budget.remaining(), budget.in_flight(), cap.remaining()) == (0, 0, 6)
    assert budget.seed([1.0]) == 0
    clock.advance(seconds=1601)  # the 2,000 s old call leaves; 100 and 10 stay
    assert (budget.remaining(), cap.remaining()) == (1, 7)
    used = Budget(3, clock=clock.timestamp)
    used.reserve()
    assert used.seed([1.0]) == 0 and used.remaining() == 2


async def test_a_service_started_again_counts_the_hours_billed_calls(
    services: ServiceFactory,
) -> None:
    """The budget lives in memory: a service started again over a store holding the last
    hour's calls counts the billed ones (answered, or tokens reported) against it, so a crash
    loop or a deploy cannot begin a fresh hour of paid calls; an unbilled error and an older
    call do not count."""
    teacher: dict[str, Any] = {
        "teacher": "anthropic", "anthropic_api_key": "test", "teacher_budget_per_hour": 5
    }  # fmt: skip
    first = await services.start(**teacher)
    now = datetime.now(UTC)
    calls = [
        ("labeled", 0, timedelta(minutes=5)),
        ("declined", 0, timedelta(minutes=50)),
        ("error", 120, timedelta(minutes=1)),  # billed with nothing usable in it
        ("error", 0, timedelta(minutes=2)),  # a timeout: never billed
        ("labeled", 0, timedelta(minutes=61)),  # an hour ago and more
    ]
    for i, (result, tokens, age) in enumerate(calls):
        await first.store.record_oracle_call(
            OracleCall(f"c{i}", "anthropic", "claude", result, 10.0, now - age,
                       input_tokens=tokens)
        )  # fmt: skip
    assert first.oracle.budget.remaining() == 5  # counted at start only
    await first.close()
    services.started.remove(first)
    again = await services.start(**teacher)
    assert again.oracle.budget.remaining() == 2
    off = await services.start(teacher="anthropic", anthropic_api_key="test", oracle="off")
    assert off.oracle.budget.remaining() == 60  # no paid call can happen: nothing to count


def test_a_shared_cap_bounds_every_budget_under_it() -> None:
    """Two tenants' budgets of 3 under a global cap of 4: the fifth call is refused by the cap
    (`spent` says `global`) although each tenant has calls left; a refund gives the slot back to
    both; when a tenant's own budget is spent the cap's slots stay for the other."""
    clock = FakeClock()
    cap = Budget(4, clock=clock.timestamp)
    a, b = Budget(3, clock=clock.timestamp, cap=cap), Budget(3, clock=clock.timestamp, cap=cap)
    taken = [a.reserve(), a.reserve(), a.reserve(), a.reserve()]
    assert [slot is not None for slot in taken] == [True, True, True, False]
    assert (a.spent(), b.spent(), cap.remaining(), b.remaining()) == ("tenant", None, 1, 1)
    assert b.reserve() is not None
    assert b.reserve() is None
    assert (b.spent(), b.remaining(), cap.remaining()) == ("global", 0, 0)
    slot = taken[0]
    assert slot is not None
    a.refund(slot)
    assert (a.remaining(), cap.remaining(), b.remaining()) == (1, 1, 1)
    clock.advance(seconds=3600)
    assert (a.remaining(), b.remaining(), cap.remaining()) == (3, 3, 4)


async def test_the_global_cap_refuses_with_its_own_reason_and_metric() -> None:
    """An oracle whose tenant budget has calls left but whose global cap is spent answers
    `limit_reached` naming the global budget, sends nothing and counts
    `toolselect_teacher_budget_spent{scope="global"}`; its own spent budget counts `tenant`."""
    clock = FakeClock()
    settings = Settings(oracle="on", teacher_budget_per_hour=2, embedder="hashing")
    teacher = ScriptedTeacher(unscripted="web_search")
    cap = Budget(1, clock=clock.timestamp)
    async with memory_store(clock=clock) as store:
        parts = compose(
            settings, store, FakeEmbedder(), teacher=teacher, clock=clock, teacher_cap=cap
        )
        try:
            assert parts.oracle.budget.cap is cap
            first = await parts.oracle.teach(REQUEST, USED, CANDIDATES)
            second = await parts.oracle.teach(REQUEST, USED, CANDIDATES)
            refusal = parts.oracle.refusal()
        finally:
            await parts.tuner.close()
            await parts.store.close()
    assert first.result == "labeled" and len(teacher.calls) == 1
    assert (second.result, second.reason) == (
        "limit_reached", "global hourly budget of 1 calls spent"
    )  # fmt: skip
    assert refusal is not None and refusal.reason == second.reason
    spent = parts.metrics.value("toolselect_teacher_budget_spent_total", {"scope": "global"})
    assert spent == 2.0
    assert parts.oracle.budget.remaining() == 0 and parts.oracle.budget.spent() == "global"


def test_the_global_cap_is_made_from_settings_or_off() -> None:
    """`TOOLSELECT_TEACHER_GLOBAL_BUDGET_PER_HOUR` makes the cap (`off`, the default: none)."""
    variable = "TOOLSELECT_TEACHER_GLOBAL_BUDGET_PER_HOUR"
    assert load_settings({}).teacher_global_budget_per_hour is None
    assert load_settings({variable: "off"}).teacher_global_budget_per_hour is None
    assert load_settings({variable: "500"}).teacher_global_budget_per_hour == 500
    with pytest.raises(ConfigError, match=variable):
        load_settings({variable: "-1"})


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
