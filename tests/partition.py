"""A TCP relay a test can cut and heal: one replica's network partition from a server the
other replicas still reach (real sockets; the server itself keeps running)."""

from __future__ import annotations

import asyncio
import contextlib


class Partition:
    """Relays 127.0.0.1:`port` to `host`:`port_to`; `cut` closes every relayed connection and
    refuses new ones (a client sees connection refused), `heal` listens again on the same port."""

    def __init__(self, host: str, port_to: int) -> None:
        self._target = (host, port_to)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def heal(self) -> None:
        """Listen (again) on the relay's port."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def cut(self) -> None:
        """Close the listening socket and every connection relayed so far."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._open):
            writer.close()
        self._open.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._open.update((writer, up_writer))
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.CancelledError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()
