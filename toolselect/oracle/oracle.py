"""The teacher tier with its controls: kill switch, hourly budget, timeout, retries, tracing.

`Oracle.teach` turns one flagged request into a `TeacherAnswer`. The order of the checks is the
cost contract: a disabled oracle (kill switch `TOOLSELECT_ORACLE=off`, or no teacher configured)
answers `declined` without touching the network; a spent budget answers `limit_reached` without
touching it either; otherwise up to `1 + retries` attempts are made, each under its own timeout
and each traced as an `OracleCall`, whatever its result.

Retries: only transient failures (`TeacherUnavailable`: 429, 5xx, 529 overloaded, connection,
our per-attempt timeout) are retried, after `RetryPolicy.delay` (backoff or the server's
`retry-after`, whichever is longer). A permanent `TeacherError` - including a malformed answer -
is NOT retried: the request and the forced tool schema would be the same on the next attempt,
so a retry most likely pays again for the same unusable answer.

Budget: one slot is reserved per `teach` before the first attempt and refunded when no attempt
was paid for, so failures never consume it; a call that finds the last slots held by calls in
flight waits for them rather than answer `limit_reached` for a budget they may not spend. A
successful call that picks `none` or a tool outside the candidates keeps its slot (it was paid
for) and answers `declined`; so does an answer the provider billed (it reported tokens) with
nothing usable in it, which answers `error` with its tokens and cost traced.

Stopping (`stop`, a service shutting down): no attempt starts afterwards, neither a first one
(`declined`, nothing traced: no call was made) nor a retry (`error` with the last attempt's
failure, the wait before it cut short); calls in flight finish. Cancellation propagates out of
`teach`, tracing the attempt it cut and refunding the slot on the way.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime

import structlog

from toolselect.errors import TeacherError, TeacherUnavailable
from toolselect.metrics import Metrics
from toolselect.oracle.base import (
    MAX_ERROR_CHARS,
    Candidate,
    RawAnswer,
    RetryLater,
    Teacher,
    TeacherAnswer,
    TeacherResult,
    quoted,
)
from toolselect.oracle.budget import Budget, RetryPolicy, Slot
from toolselect.records import BUDGET_SPENT, OracleCall

log = structlog.get_logger("toolselect.oracle")

# USD per million (input, output) tokens. Keys match a model name or a prefix of it (dated
# snapshots such as `claude-haiku-4-5-20251001`); unknown models (local servers) cost 0.
DEFAULT_PRICES: Mapping[str, tuple[float, float]] = {
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-3-haiku": (0.25, 1.25),
    "gpt-4o-mini": (0.15, 0.6),
    "gpt-4o": (2.5, 10.0),
    "gpt-4.1-nano": (0.1, 0.4),
    "gpt-4.1-mini": (0.4, 1.6),
    "gpt-4.1": (2.0, 8.0),
}

RecordCall = Callable[[OracleCall], Awaitable[None]]
# Saves a label the teacher gave; why it was not kept (its tool left the catalog), or None.
Keep = Callable[[str], Awaitable[str | None]]
# Why a teacher call, or a turn waiting for one, ended when the service stopped.
SHUTDOWN = "cancelled: the service is shutting down"
# How often a call waiting for a budget slot held in flight looks again (real time: the calls
# it waits for take seconds).
_IN_FLIGHT_POLL_S = 0.05


def price_of(model: str, prices: Mapping[str, tuple[float, float]]) -> tuple[float, float]:
    """The (input, output) price of `model`: exact key, else the longest key it starts with."""
    if model in prices:
        return prices[model]
    keys = [k for k in prices if model.startswith(k)]
    return prices[max(keys, key=len)] if keys else (0.0, 0.0)


def cost_usd(
    model: str, input_tokens: int, output_tokens: int, prices: Mapping[str, tuple[float, float]]
) -> float:
    """Estimated USD cost of one call."""
    price_in, price_out = price_of(model, prices)
    return (input_tokens * price_in + output_tokens * price_out) / 1_000_000


class InFlight:
    """Normalised queries being labelled right now, so one query is never labelled twice at once.

    The caller reserves before planning or teaching and releases when done (in `finally`).
    The event loop is single-threaded, so a set is enough.
    """

    def __init__(self) -> None:
        self._keys: set[str] = set()

    def reserve(self, query_norm: str) -> bool:
        """True when the query was free and is now reserved; False when it is taken."""
        if query_norm in self._keys:
            return False
        self._keys.add(query_norm)
        return True

    def release(self, query_norm: str) -> None:
        self._keys.discard(query_norm)

    def __contains__(self, query_norm: object) -> bool:
        return query_norm in self._keys

    def __len__(self) -> int:
        return len(self._keys)


class Oracle:
    """The LLM teacher tier, guarded by the kill switch, the budget, timeouts and retries."""

    def __init__(
        self,
        teacher: Teacher | None,
        *,
        enabled: bool,
        budget: Budget,
        retry: RetryPolicy,
        timeout_s: float,
        record_call: RecordCall,
        prices: Mapping[str, tuple[float, float]] = DEFAULT_PRICES,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        metrics: Metrics | None = None,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"expected a teacher timeout > 0 s, got {timeout_s}")
        self._teacher = teacher
        self._enabled = enabled
        self.budget = budget
        self.retry = retry
        self._timeout_s = timeout_s
        self._record = record_call
        self._prices = prices
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._metrics = metrics
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Start no attempt from now on (see the module docstring): a stopping service drains
        its turns without paying for calls it would cut short."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def active(self) -> bool:
        """True when a paid call may happen at all (switched on and a teacher configured)."""
        return self._enabled and self._teacher is not None

    async def teach(
        self,
        request: str,
        used_tool: str,
        candidates: Sequence[Candidate],
        *,
        turn_id: str | None = None,
        keep: Keep | None = None,
    ) -> TeacherAnswer:
        """Ask the teacher which candidate the agent should have used.

        `keep` saves the label of an answer before its call is traced, so the trace tells what
        became of the turn: a label it does not keep is `declined` with its reason, one it
        failed to save an `error`.
        Never raises, except `CancelledError` when the caller is cancelled (shutdown).
        """
        teacher = self._teacher
        if not self._enabled or teacher is None:
            return TeacherAnswer("declined", reason="teacher off")
        if not candidates:
            return TeacherAnswer("declined", reason="no candidates")
        if self.stopping:
            return TeacherAnswer("declined", reason=SHUTDOWN)
        slot = await self._reserve()
        if self.stopping:  # while it waited for a slot held in flight
            if slot is not None:
                self.budget.refund(slot)
            return TeacherAnswer("declined", reason=SHUTDOWN)
        if slot is None:
            return self._spent(turn_id)
        try:
            answer = await self._attempts(teacher, request, used_tool, candidates, turn_id, keep)
        except BaseException:
            self.budget.refund(slot)
            raise
        if answer.result == "error" and not (answer.input_tokens or answer.output_tokens):
            self.budget.refund(slot)  # nothing was paid for
        else:
            self.budget.settle(slot)
        return answer

    async def _reserve(self) -> Slot | None:
        """A budget slot; while the last ones are held by calls in flight (which may fail and
        give theirs back), wait for them; None once paid calls have spent the budget."""
        while (slot := self.budget.reserve()) is None:
            if not self.budget.in_flight() or self.stopping:
                return None
            await asyncio.sleep(_IN_FLIGHT_POLL_S)
        return slot

    def refusal(self, turn_id: str | None = None) -> TeacherAnswer | None:
        """The answer `teach` would give now without calling the teacher (it is off, or the
        hourly budget is spent), or None when it would call: lets a caller skip preparing
        candidates that no call will use."""
        if not self._enabled or self._teacher is None:
            return TeacherAnswer("declined", reason="teacher off")
        if self.stopping:
            return TeacherAnswer("declined", reason=SHUTDOWN)
        if self.budget.remaining() == 0 and not self.budget.in_flight():
            return self._spent(turn_id)
        return None

    def _spent(self, turn_id: str | None) -> TeacherAnswer:
        """`limit_reached`, saying (and counting) which budget is spent: this tenant's or the
        global cap shared by every tenant of the process."""
        scope = self.budget.spent() or "tenant"
        cap = self.budget.cap
        per_hour = cap.per_hour if scope == "global" and cap is not None else self.budget.per_hour
        log.warning("teacher_budget_spent", turn_id=turn_id, scope=scope, per_hour=per_hour)
        if self._metrics is not None:
            self._metrics.teacher_budget_spent.labels(scope).inc()
        what = "global hourly budget" if scope == "global" else "hourly budget"
        return TeacherAnswer("limit_reached", reason=f"{what} of {per_hour}{BUDGET_SPENT}")

    async def _attempts(
        self,
        teacher: Teacher,
        request: str,
        used_tool: str,
        candidates: Sequence[Candidate],
        turn_id: str | None,
        keep: Keep | None,
    ) -> TeacherAnswer:
        error = "no attempt made"
        for attempt in range(self.retry.attempts):
            at = datetime.fromtimestamp(self._clock(), tz=UTC)
            started = self._monotonic()
            retry_after: float | None = None
            billed = (0, 0)
            try:
                async with asyncio.timeout(self._timeout_s):
                    raw = await teacher.ask(request, used_tool, candidates)
            except asyncio.CancelledError:
                # Shutdown: the attempt may have been billed, so it is traced like any other.
                latency_ms = (self._monotonic() - started) * 1000.0
                await self._trace(teacher, turn_id, at, latency_ms, "error", error=SHUTDOWN)
                raise
            except TimeoutError:
                error, transient = f"timed out after {self._timeout_s:g} s", True
            except TeacherUnavailable as exc:
                error, transient = quoted(str(exc) or type(exc).__name__, MAX_ERROR_CHARS), True
                retry_after = exc.retry_after if isinstance(exc, RetryLater) else None
            except TeacherError as exc:
                error, transient = quoted(str(exc) or type(exc).__name__, MAX_ERROR_CHARS), False
                billed = (exc.input_tokens, exc.output_tokens)
            except Exception as exc:  # a teacher bug must not kill the learner's worker
                log.exception("teacher_failed_unexpectedly", turn_id=turn_id)
                error, transient = quoted(f"{type(exc).__name__}: {exc}", MAX_ERROR_CHARS), False
            else:
                latency_ms = (self._monotonic() - started) * 1000.0
                return await self._answered(
                    teacher, raw, candidates, turn_id, at, latency_ms, attempt + 1, keep
                )
            latency_ms = (self._monotonic() - started) * 1000.0
            # An answer with nothing usable in it was still billed: traced and charged as such.
            cost = self._charge(teacher, *billed) if any(billed) else 0.0
            await self._trace(
                teacher,
                turn_id,
                at,
                latency_ms,
                "error",
                input_tokens=billed[0],
                output_tokens=billed[1],
                cost=cost,
                error=error,
            )
            last = attempt + 1 >= self.retry.attempts or self.stopping
            delay = None if last or not transient else self.retry.delay(attempt, retry_after)
            log.warning(
                "teacher_attempt_failed",
                turn_id=turn_id,
                provider=teacher.provider,
                attempt=attempt + 1,
                transient=transient,
                retry_in_s=delay,
                error=error,
            )
            if delay is None or not await self._pause(delay):
                return TeacherAnswer(
                    "error",
                    error=error,
                    attempts=attempt + 1,
                    input_tokens=billed[0],
                    output_tokens=billed[1],
                    cost_usd=cost,
                )
        return TeacherAnswer("error", error=error, attempts=self.retry.attempts)

    async def _pause(self, seconds: float) -> bool:
        """Wait `seconds` before a retry; False when the oracle was stopped first (a retry-after
        of 30 s would otherwise hold a stopping service's drain, and then pay)."""
        if self.stopping:
            return False
        sleeping = asyncio.ensure_future(self._sleep(seconds))
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait((sleeping, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            stopped.cancel()
        return not self.stopping

    async def _answered(
        self,
        teacher: Teacher,
        raw: RawAnswer,
        candidates: Sequence[Candidate],
        turn_id: str | None,
        at: datetime,
        latency_ms: float,
        attempts: int,
        keep: Keep | None,
    ) -> TeacherAnswer:
        # Re-checked here rather than trusted: any Teacher implementation may be plugged in.
        names = {c.name for c in candidates}
        label = raw.label if raw.label in names else None
        cost = self._charge(teacher, raw.input_tokens, raw.output_tokens)
        result: TeacherResult = "labeled" if label is not None else "declined"
        reason = error = None
        if label is None:
            reason = (
                "teacher picked none"
                if raw.choice is None
                else f"teacher picked {quoted(repr(raw.choice))}, not a candidate"
            )
        elif keep is not None:
            try:
                reason = await keep(label)
            except asyncio.CancelledError:
                await self._trace(teacher, turn_id, at, latency_ms, "error", error=SHUTDOWN)
                raise
            except Exception as exc:  # the store failed: the answer is lost with the label
                result, label, error = "error", None, quoted(str(exc), MAX_ERROR_CHARS)
            if reason is not None:
                result, label = "declined", None
        await self._trace(
            teacher,
            turn_id,
            at,
            latency_ms,
            result,
            input_tokens=raw.input_tokens,
            output_tokens=raw.output_tokens,
            cost=cost,
            error=error,
        )
        log.info(
            "teacher_answered",
            turn_id=turn_id,
            provider=teacher.provider,
            model=teacher.model,
            result=result,
            label=label,
            attempts=attempts,
            latency_ms=round(latency_ms, 1),
            cost_usd=cost,
        )
        return TeacherAnswer(
            result,
            label=label,
            input_tokens=raw.input_tokens,
            output_tokens=raw.output_tokens,
            reason=reason,
            error=error,
            attempts=attempts,
            cost_usd=cost,
        )

    def _charge(self, teacher: Teacher, input_tokens: int, output_tokens: int) -> float:
        """The estimated cost of a call the provider billed, counted in the metrics."""
        cost = cost_usd(teacher.model, input_tokens, output_tokens, self._prices)
        if self._metrics is not None:
            self._metrics.teacher_tokens.labels(teacher.provider, "input").inc(input_tokens)
            self._metrics.teacher_tokens.labels(teacher.provider, "output").inc(output_tokens)
            self._metrics.teacher_cost.labels(teacher.provider).inc(cost)
        return cost

    async def _trace(
        self,
        teacher: Teacher,
        turn_id: str | None,
        at: datetime,
        latency_ms: float,
        result: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost: float = 0.0,
        error: str | None = None,
    ) -> None:
        if self._metrics is not None:
            self._metrics.teacher_latency.labels(teacher.provider).observe(latency_ms / 1000.0)
        call = OracleCall(
            id=uuid.uuid4().hex,
            provider=teacher.provider,
            model=teacher.model,
            result=result,
            latency_ms=latency_ms,
            at=at,
            turn_id=turn_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=cost,
            error=error,
        )
        try:
            await self._record(call)
        except Exception:  # a store outage loses the trace, not the label
            log.warning("oracle_call_not_recorded", turn_id=turn_id, call_id=call.id, exc_info=True)
