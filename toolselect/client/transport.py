"""The client's one-method port to HTTP, and its aiohttp adapter.

`AsyncClient` speaks to a `Transport`: tests and embedders can hand it another (an in-process
app, a recorded exchange) without patching anything. The adapter translates aiohttp's errors
into `Unreachable` at this boundary, so no aiohttp exception reaches the client's callers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from yarl import URL

from toolselect.errors import ClientError, Unreachable


@dataclass(frozen=True)
class Response:
    """What came back: the status, the headers (names lower-cased) and the raw body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Transport(Protocol):
    """Sends one HTTP request and returns the answer, whatever its status.

    Raises `Unreachable` when there is no answer (refused, reset, timed out); never raises
    for an HTTP status.
    """

    async def send(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> Response: ...

    async def aclose(self) -> None:
        """Release connections; the transport sends nothing afterwards (`ClientError`)."""


class AiohttpTransport:
    """A pooled `aiohttp.ClientSession`, opened on first use (so construction does no I/O and
    needs no running loop) and owned by this transport unless one was passed in.

    A session serves only the event loop it was opened on. An owned one is closed when that
    loop shuts down (`asyncio.run` closes every async generator then, while the loop still runs:
    `_closed_with_its_loop`), so a host running each job in its own `asyncio.run` leaves no
    connection open between jobs; used from another loop, the transport opens one there.
    """

    def __init__(self, session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        self._owned = session is None
        self._loop: asyncio.AbstractEventLoop | None = None  # an owned session's
        self._keeper: AsyncGenerator[None, None] | None = None
        self._closed = False

    async def send(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> Response:
        session = await self._session_here()
        try:
            # `encoded=True`: paths are quoted once by the client (a tool name may hold `%`).
            async with session.request(
                method,
                URL(url, encoded=True),
                data=body,
                headers=dict(headers),
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                data = await response.read()
                found = {k.lower(): v for k, v in response.headers.items()}
                return Response(response.status, found, data)
        except (aiohttp.ClientError, TimeoutError) as exc:
            sent = not isinstance(exc, aiohttp.ClientConnectorError)
            raise Unreachable(f"{method} {url}: {type(exc).__name__}: {exc}", sent=sent) from exc

    async def _session_here(self) -> aiohttp.ClientSession:
        """The session of the running loop; an owned one of another loop is let go first."""
        if self._closed:
            # Checked before a session is opened: one opened now would never be closed.
            raise ClientError("the client is closed")
        loop = asyncio.get_running_loop()
        if self._session is not None and self._owned and self._loop is not loop:
            await self._let_go()
        if self._session is None:
            session = aiohttp.ClientSession()
            self._keeper = _closed_with_its_loop(session)
            await anext(self._keeper)  # the running loop now closes it when it shuts down
            self._session, self._loop = session, loop
        return self._session

    async def _let_go(self) -> None:
        keeper, loop = self._keeper, self._loop
        self._session = self._keeper = self._loop = None
        if keeper is None:
            return
        if loop is None or loop.is_closed() or loop is asyncio.get_running_loop():
            # On a loop that ended without closing it (not through `asyncio.run`), aiohttp
            # only marks it closed: its sockets close when collected.
            await keeper.aclose()
        # Else its loop lives on (another thread's): the keeper, dropped, closes it there.

    async def aclose(self) -> None:
        self._closed = True
        if self._owned:
            await self._let_go()
        self._session = None


async def _closed_with_its_loop(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    """Closes `session` when this generator is closed: by the transport, or by the loop that
    first iterated it, when it shuts down (`loop.shutdown_asyncgens`) or collects the
    generator. The only hook asyncio gives to run code on a loop about to end."""
    try:
        yield
    finally:
        await session.close()
