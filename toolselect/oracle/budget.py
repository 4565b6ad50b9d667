"""Cost controls of the teacher tier: the hourly call budget and the retry schedule.

The kill switch is not here: the caller builds the `Oracle` with `enabled=(settings.oracle ==
"on")`, and a disabled oracle never reaches the budget or the network.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

WINDOW_S = 3600.0
Scope = Literal["tenant", "global"]


class Slot:
    """One reserved call in the budget window (and in the shared cap's, when there is one);
    hand it back to `Budget.refund` on failure, or to `Budget.settle` once it was paid."""

    __slots__ = ("at", "capped", "paid")

    def __init__(self, at: float, capped: Slot | None = None) -> None:
        self.at = at
        self.capped = capped
        self.paid = False


class Budget:
    """At most `per_hour` successful paid calls in any rolling hour, and within `cap` too.

    Reserve a slot before a call and refund it when the call failed, so failures do not use up
    the budget while concurrent calls can never overshoot it. Slots leave the window only by
    age: there is deliberately no reset (a restart-free way to bypass the limit is a bug), and a
    process started again counts the calls of its last hour (`seed`).
    `clock` counts seconds: monotonic by default; a service passes its injected clock's
    (`toolselect.clock.window_seconds`), so a test or a replay decides when slots expire.
    `cap` is a budget shared by several (every tenant's in one process: the global cap); a slot
    is taken from both or from neither.
    """

    def __init__(
        self,
        per_hour: int,
        clock: Callable[[], float] = time.monotonic,
        *,
        cap: Budget | None = None,
    ) -> None:
        if per_hour < 0:
            raise ValueError(f"expected a budget per hour >= 0, got {per_hour}")
        self.per_hour = per_hour
        self.cap = cap
        self._clock = clock
        self._slots: deque[Slot] = deque()
        self._elsewhere: deque[float] = deque()  # when other processes paid (`elsewhere`)
        # What tells their calls from this process's, kept with the budget (a tenant's service
        # closed and started again keeps its budget): since when others' calls are counted, and
        # the ids of the calls this process traced (`service.teacher_budget.TeacherCalls`).
        self.elsewhere_since: datetime | None = None
        self.own_calls: dict[str, datetime] = {}
        self.seeded = False

    def seed(self, ages_s: Iterable[float]) -> int:
        """Count calls paid before this budget existed, `ages_s` seconds ago, against its
        window (and the cap's): the newest `per_hour` of those within the hour, each settled;
        how many. Once, and only into a budget not used yet: a process started again (a crash
        loop, a deploy) would otherwise begin a fresh hour of paid calls."""
        if self.seeded or self._slots:
            return 0
        self.seeded = True
        now = self._clock()
        recent = sorted(age for age in ages_s if 0 <= age < WINDOW_S)[: self.per_hour]
        for age in reversed(recent):  # oldest first: the window expires from the left
            slot = Slot(now - age, self.cap._seeded(now - age) if self.cap is not None else None)
            slot.paid = True
            self._slots.append(slot)
        return len(recent)

    def _seeded(self, at: float) -> Slot:
        """A settled slot at `at` in this (shared) budget, in time order among its others."""
        slot = Slot(at)
        slot.paid = True
        index = len(self._slots)
        while index > 0 and self._slots[index - 1].at > at:
            index -= 1
        self._slots.insert(index, slot)
        return slot

    def elsewhere(self, ages_s: Iterable[float]) -> None:
        """The calls other processes on the store paid since this budget started counting them,
        `ages_s` seconds ago, all of them (each call replaces the last): they use this budget's
        window too, so processes sharing a store share its hourly calls (as of the last call).
        Never a slot of this budget's own: `idle` does not see them. A negative age (a process
        whose clock runs ahead) is a call paid now."""
        now = self._clock()
        self._elsewhere = deque(sorted(now - max(age, 0.0) for age in ages_s if age < WINDOW_S))

    def _expire(self) -> None:
        horizon = self._clock() - WINDOW_S
        while self._slots and self._slots[0].at <= horizon:
            self._slots.popleft()
        while self._elsewhere and self._elsewhere[0] <= horizon:
            self._elsewhere.popleft()

    def _own_remaining(self) -> int:
        self._expire()
        return max(self.per_hour - len(self._slots) - len(self._elsewhere), 0)

    def idle(self) -> bool:
        """Whether no call of this budget's own is in its window (paid, or reserved)."""
        self._expire()
        return not self._slots

    def remaining(self) -> int:
        """Calls still allowed in the current window (the shared cap's count too)."""
        own = self._own_remaining()
        return own if self.cap is None else min(own, self.cap.remaining())

    def spent(self) -> Scope | None:
        """Which budget stops the next call: `tenant` (this one), `global` (the cap), or None."""
        if self._own_remaining() == 0:
            return "tenant"
        if self.cap is not None and self.cap.remaining() == 0:
            return "global"
        return None

    def reserve(self) -> Slot | None:
        """Take a slot for a call about to be made, or None when a budget is spent."""
        if self._own_remaining() == 0:
            return None
        capped = None
        if self.cap is not None:
            capped = self.cap.reserve()
            if capped is None:
                return None
        slot = Slot(self._clock(), capped)
        self._slots.append(slot)
        return slot

    def settle(self, slot: Slot) -> None:
        """Mark the slot of a call that was paid for: it stays until it ages out."""
        slot.paid = True
        if slot.capped is not None:
            slot.capped.paid = True

    def in_flight(self) -> int:
        """Slots of calls not settled yet (here or in the shared cap): each may be refunded."""
        self._expire()
        own = sum(not slot.paid for slot in self._slots)
        return own + (self.cap.in_flight() if self.cap is not None else 0)

    def refund(self, slot: Slot) -> None:
        """Give back the slot of a call that failed (no-op when it has already expired)."""
        with contextlib.suppress(ValueError):
            self._slots.remove(slot)
        if self.cap is not None and slot.capped is not None:
            self.cap.refund(slot.capped)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait before retrying a transient teacher failure.

    Exponential backoff from `initial_s` by `factor`, capped at `max_s`; a server's
    `retry-after` is honoured (the longer of the two wins) within the same cap, so a hostile or
    broken header cannot park a worker for an hour.
    """

    retries: int = 2
    initial_s: float = 0.25
    factor: float = 2.0
    max_s: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"expected retries >= 0, got {self.retries}")
        if self.initial_s < 0 or self.factor < 1 or self.max_s < 0:
            raise ValueError(
                "expected initial_s >= 0, factor >= 1 and max_s >= 0, got "
                f"{self.initial_s}, {self.factor}, {self.max_s}"
            )

    @property
    def attempts(self) -> int:
        return 1 + self.retries

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (0 is the first attempt)."""
        backoff = self.initial_s * self.factor ** min(max(attempt, 0), 64)
        wanted = max(backoff, retry_after or 0.0)
        return min(wanted, self.max_s)
