"""A tenant's hourly teacher budget is shared by every process on its store: replicas and
`serve --workers` workers each kept their own, so N of them paid N times the budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.e2e.test_learning import eventually
from tests.e2e.test_refused_restart import start, stop
from tests.learn.test_learner import TOOLS
from tests.services import ServiceFactory
from tests.stubs import Reply, Stub, anthropic_message
from toolselect.oracle.budget import Budget
from toolselect.records import OracleCall
from toolselect.service.teacher_budget import TeacherCalls
from toolselect.testing import FakeClock


async def test_replicas_on_one_store_share_a_tenants_hourly_calls(
    services: ServiceFactory, anthropic_stub: Stub
) -> None:
    """Two replicas with a budget of 2 calls an hour: A pays for two fallback turns; B counts
    them by its next poll and refuses its own fallback turn as `limit_reached`, asking nothing,
    while A still counts its two once (its own calls are not counted again as another's). B
    used to ask: the processes paid 3 calls of a budget of 2, and would have paid 4."""
    anthropic_stub.reply(Reply(body=anthropic_message("shell_exec")))
    a = await start(services, anthropic_stub, budget=2, poll_interval_s=0.05)
    b = await start(services, anthropic_stub, budget=2, poll_interval_s=0.05)
    await a.catalog.upsert_tools(TOOLS)
    for i, city in enumerate(("Rome", "Oslo")):
        assert a.learner.observe(f"run the backup script for {city}", "shell_exec", turn_id=f"a{i}")
    assert await a.learner.drain(30.0)
    assert len(anthropic_stub.received) == 2

    async def b_counts_them() -> bool:
        return b.oracle.budget.remaining() == 0 and b.ranker.has("shell_exec")

    await eventually(b_counts_them)
    assert b.oracle.budget.spent() == "tenant"
    assert b.learner.observe("run the backup script for Lima", "shell_exec", turn_id="b0")
    assert await b.learner.drain(30.0)
    turn = await b.store.get_turn("b0")
    assert turn is not None and turn.result == "limit_reached", turn
    assert len(anthropic_stub.received) == 2
    await a.parts.teacher_calls.follow()
    assert a.oracle.budget.remaining() == 0
    await stop(services, a)
    await stop(services, b)


def test_calls_paid_elsewhere_count_until_their_hour_is_up() -> None:
    """`Budget.elsewhere`: the calls other processes paid use the window as this budget's own
    do, each until its hour is up; each call replaces the last count; they never make the budget
    look used by itself (`idle`), and a spent budget says `tenant`. A call from a clock running
    ahead (a negative age) counts as paid now."""
    clock = FakeClock()
    budget = Budget(4, clock=clock.timestamp)
    budget.elsewhere([10.0, 3000.0, 3600.0, -1.0])  # 3600 s is past
    assert (budget.remaining(), budget.idle()) == (1, True)
    slot = budget.reserve()
    assert slot is not None and budget.remaining() == 0 and budget.spent() == "tenant"
    assert budget.reserve() is None
    clock.advance(seconds=601)  # the 3,000 s old call leaves
    assert budget.remaining() == 1
    budget.elsewhere([])
    assert budget.remaining() == 3 and not budget.idle()


async def test_a_replica_counts_only_what_others_traced_since_it_started(
    services: ServiceFactory, anthropic_stub: Stub
) -> None:
    """A call traced before the service started is the start's seed to count (once), not the
    poll's; one another process traced since is counted at each poll (once, however many polls),
    and an unbilled one (a timeout) is not."""
    service = await start(services, anthropic_stub, budget=5)
    now = datetime.now(UTC)
    for call_id, result, age in (
        ("before", "labeled", timedelta(minutes=5)),
        ("after", "labeled", timedelta(seconds=-1)),
        ("timeout", "error", timedelta(seconds=-1)),
    ):
        call = OracleCall(call_id, "anthropic", "claude", result, 10.0, now - age)
        await service.store.record_oracle_call(call)
    await service.parts.teacher_calls.follow()
    assert service.oracle.budget.remaining() == 4
    await service.parts.teacher_calls.follow()
    assert service.oracle.budget.remaining() == 4


async def test_a_kept_budget_goes_on_counting_from_its_first_start(
    services: ServiceFactory, anthropic_stub: Stub
) -> None:
    """A tenant's service closed and started again keeps its budget: counting over it, the new
    service still counts another process's call made before it started (not the seed's: the
    kept budget is not seeded again) and still tells this process's calls from the others'."""
    service = await start(services, anthropic_stub, budget=5)
    now = datetime.now(UTC)
    await service.parts.teacher_calls.record(
        OracleCall("own", "anthropic", "claude", "labeled", 10.0, now)
    )
    await service.store.record_oracle_call(
        OracleCall("other", "anthropic", "claude", "labeled", 10.0, now)
    )
    budget = service.oracle.budget
    again = TeacherCalls(service.store, budget, lambda: now + timedelta(minutes=1), active=True)
    await again.follow()
    assert budget.remaining() == 4
