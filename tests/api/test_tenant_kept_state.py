"""What the process keeps of a closed tenant: its teacher budget and the turns that budget
refused, so that a tenant closed and started again neither gets a fresh hour of paid calls nor
forgets the turns it was to ask about. Kept for the `TOOLSELECT_TENANTS_LIVE` most recently
closed tenants, not for every tenant the process ever served: each kept up to
`TOOLSELECT_QUEUE_SIZE` refused turns with their request vectors (about 10 MB a tenant), so a
process serving tenants in turn grew without end."""

from __future__ import annotations

import numpy as np

from tests.services import ServiceFactory
from toolselect.clock import utc_now
from toolselect.learn.refused import RefusedTurn
from toolselect.records import Turn
from toolselect.service import Service, TenantServices


def refuse_one(service: Service) -> None:
    """A turn the tenant's teacher budget refused, as the learner keeps it."""
    turn = Turn(id=f"refused-{service.store.tenant}", request="a request", used_tool="x",
                at=utc_now())  # fmt: skip
    service.parts.learner.refused.add(RefusedTurn(turn, np.zeros(8, np.float32), ()))


async def test_closed_tenants_keep_their_teacher_state_within_the_bound(
    services: ServiceFactory,
) -> None:
    """With one tenant live, t0's refused turns and budget outlive its eviction by t1, and
    are dropped when t1's eviction by t2 leaves two closed tenants: t0 started again has
    neither, while t1 (then the one closed tenant kept) still had its own."""
    default = await services.start(tenants_live=1)
    tenants = TenantServices(default)
    try:
        for n in range(3):
            refuse_one(await tenants.get(f"t{n}"))
            if n == 1:
                assert set(default.teacher_refused) == {"t0", "t1"}
        assert set(default.teacher_refused) == {"t1", "t2"}
        assert set(default.teacher_budgets) == {"t1", "t2"}
        assert len(default.teacher_refused["t1"]) == 1
        assert len((await tenants.get("t0")).parts.learner.refused) == 0
    finally:
        await tenants.close_others()


async def test_a_budget_with_calls_in_its_hour_is_kept_beyond_the_bound(
    services: ServiceFactory,
) -> None:
    """A closed tenant whose budget paid a call within the hour keeps that budget past the
    bound (started again, it is no way around `TOOLSELECT_TEACHER_BUDGET_PER_HOUR`), though its
    refused turns go."""
    default = await services.start(tenants_live=1, teacher_budget_per_hour=2)
    tenants = TenantServices(default)
    try:
        t0 = await tenants.get("t0")
        refuse_one(t0)
        budget = t0.oracle.budget
        slot = budget.reserve()
        assert slot is not None
        budget.settle(slot)
        await tenants.get("t1")
        await tenants.get("t2")
        assert "t0" not in default.teacher_refused
        again = (await tenants.get("t0")).oracle.budget
        assert again is budget and again.remaining() == 1
    finally:
        await tenants.close_others()
