"""One request of the client, tried until it is answered: its attempts, the waits between them,
and the one rule of what is worth another attempt (`AsyncClient.call` and the observe buffer
both follow it).

Worth another attempt for any call: no answer (a refused connection, a timeout, a dropped
connection: `Unreachable`), a 503 (the server is busy or not ready) or a 429 (the tenant's rate
is spent for now). For a call that repeats without harm (every one but `create_key`; a turn sent
again is stored once, by its `turn_id`) also what a reverse proxy answers while the server
restarts or hangs: a 502 or a 504, and a 2xx whose body is not JSON (the proxy's own page where
the server's answer should be). After those the server may have acted, so a call that would
make something twice is not sent again. A 500 (a bug) and a 4xx (the caller's mistake) would
fail the same way again: they are answers.

Once closed, nothing is sent: a call, or the next attempt of one under way, raises
`ClientError`, and a wait between attempts is cut short.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from toolselect.client.transport import Response, Transport
from toolselect.errors import ClientError, Unreachable
from toolselect.retry_after import parse_retry_after

# stdlib logging, not structlog: this module runs inside other people's agent processes (see
# `toolselect.client.aio`). Messages are event names; fields go in `extra`.
log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

# The server did not act on the request: it is busy or not ready yet (503), or the tenant's
# request rate is spent for now (429 `rate_limited`).
REFUSED_STATUSES = frozenset({429, 503})
# Those, and a reverse proxy's answer while the server restarts (502 bad gateway) or does not
# answer in time (504 gateway timeout), after which it may have acted.
RETRY_STATUSES = REFUSED_STATUSES | {502, 504}


@dataclass(frozen=True)
class Answer:
    """The response, and its body's JSON when the status is 2xx (None otherwise)."""

    response: Response
    payload: Any


@dataclass(frozen=True)
class Attempts:
    """How one call is tried: `retries` more times after a failure worth another attempt,
    each attempt within `timeout_s`, waiting the server's `Retry-After` (at most
    `max_backoff_s`) or else `backoff_s * 2**attempt`, jittered, at most `max_backoff_s`."""

    retries: int
    timeout_s: float
    backoff_s: float
    max_backoff_s: float

    def delay(self, attempt: int, server_says: float | None) -> float:
        if server_says is not None:
            return min(server_says, self.max_backoff_s)
        # Full jitter: many agents retrying one overloaded server should not retry in step.
        ceiling = min(self.backoff_s * 2**attempt, self.max_backoff_s)
        return random.uniform(ceiling / 2, ceiling)


def worth_again(status: int, *, repeatable: bool) -> bool:
    """Whether an answer with `status` is worth another attempt (the module's rule)."""
    return status in (RETRY_STATUSES if repeatable else REFUSED_STATUSES)


class Exchange:
    """Sends requests through a `Transport`, trying each again as the module's rule says."""

    def __init__(self, transport: Transport, sleep: Sleep) -> None:
        self._transport = transport
        self._sleep = sleep
        self._pauses: set[asyncio.Task[None]] = set()
        self.closed = False

    async def send(
        self,
        method: str,
        url: str,
        data: bytes | None,
        headers: Mapping[str, str],
        attempts: Attempts,
        *,
        repeatable: bool = True,
    ) -> Answer:
        """The last answer (whatever its status), or the last `Unreachable`."""
        attempt = 0
        while True:
            self._check_open()
            try:
                answer = await self._attempt(method, url, data, headers, attempts.timeout_s)
            except Unreachable as exc:
                self._check_open()  # closing aborted the attempt: that is the news
                if attempt >= attempts.retries or (exc.sent and not repeatable):
                    raise
                delay = attempts.delay(attempt, None)
                log.info(
                    "toolselect_retry", extra={"url": url, "error": str(exc), "delay_s": delay}
                )
            else:
                status = answer.response.status
                if attempt >= attempts.retries or not worth_again(status, repeatable=repeatable):
                    return answer
                delay = attempts.delay(attempt, parse_retry_after(answer.response.headers))
                log.info("toolselect_retry", extra={"url": url, "status": status, "delay_s": delay})
            attempt += 1
            await self._pause(delay)

    def _check_open(self) -> None:
        if self.closed:
            raise ClientError("the client is closed")

    async def _pause(self, delay: float) -> None:
        """Wait `delay` before the next attempt, or until `aclose` cuts the wait short."""
        pause = asyncio.ensure_future(self._sleep(delay))
        self._pauses.add(pause)
        try:
            await asyncio.wait({pause})  # returns, not raises, when `aclose` cancels it
        finally:
            self._pauses.discard(pause)
            pause.cancel()

    async def aclose(self) -> None:
        """Refuse every attempt from now on (those waiting to be made at once), then release
        the transport's connections, which ends the attempts in flight."""
        self.closed = True
        loop = asyncio.get_running_loop()
        for pause in self._pauses:
            if pause.get_loop() is loop:  # another loop's ended with it
                pause.cancel()
        await self._transport.aclose()

    async def _attempt(
        self,
        method: str,
        url: str,
        data: bytes | None,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> Answer:
        response = await self._transport.send(
            method, url, body=data, headers=headers, timeout_s=timeout_s
        )
        if not 200 <= response.status < 300:
            return Answer(response, None)
        try:
            return Answer(response, json.loads(response.body))
        except ValueError:
            # Every answer of the server is JSON: this one is not the server's (a proxy's
            # page, a captive portal), which is as good as none.
            raise Unreachable(
                f"{method} {url}: expected JSON, got a {response.status} answer "
                f"{response.body[:200]!r}",
                sent=True,
            ) from None
