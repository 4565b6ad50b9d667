"""The client's one-method port to HTTP, and its aiohttp adapter.

`AsyncClient` speaks to a `Transport`: tests and embedders can hand it another (an in-process
app, a recorded exchange) without patching anything. The adapter translates aiohttp's errors
into `Unreachable` at this boundary, so no aiohttp exception reaches the client's callers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from yarl import URL

from toolselect.errors import Unreachable


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
        """Release connections; the transport is not used afterwards."""


class AiohttpTransport:
    """A pooled `aiohttp.ClientSession`, opened on first use (so construction does no I/O and
    needs no running loop) and owned by this transport unless one was passed in."""

    def __init__(self, session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        self._owned = session is None

    async def send(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> Response:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            # `encoded=True`: paths are quoted once by the client (a tool name may hold `%`).
            async with self._session.request(
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

    async def aclose(self) -> None:
        if self._session is not None and self._owned:
            await self._session.close()
        self._session = None
