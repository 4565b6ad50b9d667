"""Fire-and-forget turn reports: a bounded buffer drained in batches by one background task.

`observe` must never slow or break the agent loop that calls it: it appends and returns; when
the buffer is full the turn is dropped and counted. The task sends what is buffered every
`interval_s` (or as soon as a batch fills) through `POST /v1/observe/batch`. While the server
cannot take turns after the client's retries (what `toolselect.client.exchange` tries again:
unreachable, busy or starting, or a proxy's 502, 504 or page in its place), the batch goes back
to the front of the buffer for the next round, so a server restart loses nothing the buffer can
hold (each turn keeps its id, so one that did arrive is stored once). `close` is bounded by
`close_timeout_s`: the batch in flight may finish within it; then each batch goes once, without
retries, in the time left. The first batch that fails or finds no time left fails with all that
is still buffered (counted `failed`), so leaving an agent never waits out a server that hangs or
restarts. A batch the server refuses otherwise is dropped, counted and logged once.

The server refuses a whole batch for one turn over its text limit, or for a body or turn count
over its own limits (its settings, which the client cannot know): such a batch is sent again
without that turn (counted `invalid`), or in halves, so one long request loses no other turn.
What the server would refuse for any batch (a rule of the turn, a lone surrogate in one of its
texts) is refused when the turn is added, and each turn is encoded then: a batch is the
concatenation of encoded turns, so no single turn can fail its batch at sending time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from toolselect.api.models import ObserveBatchResponse, ObserveRequest
from toolselect.client.exchange import worth_again
from toolselect.errors import ApiError, InvalidInput, Unreachable
from toolselect.turns import TurnFields, turn_problem

# stdlib logging, not structlog: this module runs inside other people's agent processes,
# whose logging setup it must follow (an unconfigured structlog would print to stdout, which
# an MCP stdio host reads as protocol). Messages are event names; fields go in `extra`.
log = logging.getLogger(__name__)

# Sends a batch of encoded turns (`encoded`) as one `POST /v1/observe/batch`: with the client's
# retries, or, given a number of seconds (closing), once within them.
Send = Callable[[Sequence[bytes], float | None], Awaitable[ObserveBatchResponse]]


# The server's default `max_batch`; a larger batch would be refused whole.
MAX_BATCH = 1000

# Where the server's refusal of a batch names one of its turns (`turns[3].request`).
_TURN_FIELD = re.compile(r"turns\[(\d+)\]")


def turn_request(request: str, used_tool: str | None, fields: TurnFields) -> ObserveRequest:
    """The turn as the server's request model, held to the rules the server holds a batch's
    turns to (`turn_problem`, and text without a lone surrogate: one bad turn would make it
    refuse the whole batch), but the text sizes, which are the server's settings;
    `InvalidInput` when it breaks a rule."""
    used_tools = fields.get("used_tools")
    given = {
        **fields,
        "request": request,
        "used_tool": used_tool,
        "used_tools": None if used_tools is None else list(used_tools),
        # Named here, not by the server: a batch re-sent after a lost answer is then
        # stored once.
        "turn_id": fields.get("turn_id") or uuid.uuid4().hex,
    }
    turn = ObserveRequest.model_validate(given)
    # Refuses a lone surrogate too: the server refuses a body holding one anywhere, which would
    # lose the turn's whole batch.
    problem = turn_problem(turn)
    if problem is not None:
        raise InvalidInput(problem.message, problem.field)
    return turn


def encoded(turn: ObserveRequest) -> bytes:
    """The turn's JSON as its batch will carry it, made once when it is buffered: a turn that
    cannot be encoded is refused alone here (`InvalidInput`), never with its batch."""
    try:
        return turn.model_dump_json(exclude_none=True, exclude_unset=True).encode()
    except ValueError as exc:  # pydantic's serialisation error
        raise InvalidInput(f"expected a turn JSON can carry, got {exc}") from None


@dataclass
class ObserveStats:
    """Where the turns handed to `observe` went. A turn taken into the buffer is `pending` until
    it has an outcome (`sent`, `rejected`, `failed` or `invalid`): buffered, in a batch on its
    way, or waiting out a retry with it. A host may wait for `pending == 0` before it exits."""

    sent: int = 0  # accepted by the server's queue
    dropped: int = 0  # the client's buffer was full
    rejected: int = 0  # the server's queue was full (`dropped` in its answer)
    failed: int = 0  # the batch could not be delivered (server down, refused)
    invalid: int = 0  # the turn broke the request model or its rules, or the server's text limit
    pending: int = 0  # accepted, no outcome yet (the docstring)


class TurnBuffer:
    """Buffers turns and sends them in batches from a task started on the first turn.

    The task runs on the loop of the call that started it. When that loop ends (a host running
    each job in its own `asyncio.run`, which cancels every task) the batch in flight goes back
    to the buffer, and the next turn or call on another loop starts a new task there."""

    def __init__(
        self,
        send: Send,
        *,
        capacity: int = 10_000,
        batch: int = 500,
        interval_s: float = 1.0,
        close_timeout_s: float = 2.0,
    ) -> None:
        if not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"expected batch in 1..{MAX_BATCH}, got {batch}")
        self._send = send
        self._turns: deque[bytes] = deque()
        self._capacity = capacity
        self._batch = batch
        self._interval_s = interval_s
        self._close_timeout_s = close_timeout_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # Turns taken from the buffer for a batch and not yet answered for: still pending.
        self._in_flight = 0
        self.counts = ObserveStats()

    def stats(self) -> ObserveStats:
        """A snapshot of the counts, with the turns still pending (buffered or in flight)."""
        return replace(self.counts, pending=len(self._turns) + self._in_flight)

    def add(self, turn: bytes) -> None:
        """Buffer one encoded turn (`encoded`); never raises, never waits."""
        if self._closing or len(self._turns) >= self._capacity:
            self.counts.dropped += 1
            if self.counts.dropped == 1 or self.counts.dropped % 1000 == 0:
                event = "observe_after_close" if self._closing else "observe_buffer_full"
                log.warning(event, extra={"dropped": self.counts.dropped})
            return
        # Raises off the loop before the turn is kept (the caller counts it `invalid`).
        self._start()
        self._turns.append(turn)
        if len(self._turns) >= self._batch:
            self._wake.set()

    def resume(self) -> None:
        """Start the sender on the running loop when turns wait and it does not run here: the
        loop it ran on ended with them buffered, and this one's job may never observe."""
        if self._turns and not self._closing:
            self._start()

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        # An Event waits on the loop it was first awaited on: this task needs its own.
        self._wake = asyncio.Event()
        if self._turns:
            self._wake.set()  # turns a task on an ended loop left: they have waited already
        self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
            self._wake.clear()
            await self._drain()

    async def _drain(self, deadline: float | None = None) -> None:
        """Send batch after batch: the task's (no `deadline`) until closing, when `close` sends
        the rest, each batch once, by the loop's clock's `deadline`."""
        while self._turns and (deadline is not None or not self._closing):
            batch = [self._turns.popleft() for _ in range(min(self._batch, len(self._turns)))]
            if not await self._deliver(batch, deadline):
                return

    async def _deliver(self, batch: list[bytes], deadline: float | None = None) -> bool:
        """Send `batch`; what the server refuses for one turn or for its size goes again without
        that turn or in halves (the module's docstring), the turns' order kept. False when the
        server cannot take turns now: the unsent ones are back in the buffer (or, closing,
        failed with everything buffered)."""
        parts = [batch]
        held = 0  # this call's share of `_in_flight` (a task of an ended loop may hold one too)
        try:
            while parts:
                turns = parts.pop()
                unsent = [*turns, *(t for part in reversed(parts) for t in part)]
                self._in_flight += len(unsent) - held
                held = len(unsent)
                left = None if deadline is None else deadline - asyncio.get_running_loop().time()
                if left is not None and left <= 0:
                    self._give_up(unsent, TimeoutError("close_timeout_s spent"))
                    return False
                try:
                    answer = await self._send(turns, left)
                except asyncio.CancelledError:
                    # Its loop is ending (`asyncio.run` cancels every task): the turns wait in
                    # the buffer for the next loop's task, or `close` (sent again, stored once).
                    self._turns.extendleft(reversed(unsent))
                    raise
                except (Unreachable, ApiError) as exc:
                    if isinstance(exc, ApiError) and not worth_again(exc.status, repeatable=True):
                        self._refused(turns, exc, parts)
                        continue
                    if self._closing:
                        self._give_up(unsent, exc)
                    else:
                        self._turns.extendleft(reversed(unsent))
                        log.info("observe_server_unavailable", extra={"error": str(exc)})
                    return False
                except Exception as exc:
                    # Anything, not only `ClientError`: this task is the only one that would
                    # notice, and a dead task would silently drop every later turn.
                    self._failed(turns, exc)
                else:
                    self.counts.sent += answer.queued
                    self.counts.rejected += answer.dropped
            return True
        finally:
            # Whatever is still unsent is back in the buffer or counted failed by now.
            self._in_flight -= held

    def _refused(self, turns: list[bytes], exc: ApiError, parts: list[list[bytes]]) -> None:
        """A refusal about one turn sends the rest again; one about the size, the halves."""
        bad = _refused_turn(exc, len(turns))
        if bad is not None:
            self.counts.invalid += 1
            log.warning("observe_turn_refused", extra={"error": str(exc)})
            rest = turns[:bad] + turns[bad + 1 :]
            parts += [rest] if rest else []
        elif _too_large(exc) and len(turns) > 1:
            half = len(turns) // 2
            parts += [turns[half:], turns[:half]]
        else:
            self._failed(turns, exc)

    def _failed(self, turns: Sequence[bytes], exc: Exception) -> None:
        self.counts.failed += len(turns)
        log.warning("observe_batch_failed", extra={"turns": len(turns), "error": str(exc)})

    def _give_up(self, unsent: Sequence[bytes], exc: Exception) -> None:
        """Closing: `unsent` and everything still buffered fail at once."""
        self._failed([*unsent, *self._turns], exc)
        self._turns.clear()

    async def close(self) -> None:
        """Send everything buffered within `close_timeout_s` (the module's docstring), then
        stop."""
        self._closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._close_timeout_s
        task, self._task = self._task, None
        # A task of an ended loop is gone with it: nothing to wait for.
        if task is not None and not task.done() and task.get_loop() is loop:
            self._wake.set()
            # The loop may be mid-send: its batch may finish in time, then the rest go from
            # here. Else the server gave no answer in all the time there is: neither would it
            # to the rest, which fail with the batch, back in the buffer once cut short.
            finished, _ = await asyncio.wait({task}, timeout=self._close_timeout_s)
            if not finished:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                self._give_up([], TimeoutError("no answer within close_timeout_s"))
        await self._drain(deadline)


def _refused_turn(exc: ApiError, size: int) -> int | None:
    """The index of the turn the server refused the batch for (it checks every turn before it
    queues any, so the others were not taken), None when the refusal is not about one turn."""
    match = _TURN_FIELD.match(exc.field or "") if exc.status == 422 else None
    index = int(match.group(1)) if match else None
    return index if index is not None and index < size else None


def _too_large(exc: ApiError) -> bool:
    """The body over the server's size limit, or more turns than its batch limit."""
    return exc.status == 413 or (exc.status == 422 and exc.field == "turns")
