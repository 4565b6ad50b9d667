"""A TCP relay a test can cut and heal: one replica's network partition from a server the
other replicas still reach (real sockets; the server itself keeps running).

In front of the session's Neo4j it is how a test makes the service lose its store: a cut looks
to the service as a stopped server does (connection refused, open connections closed), and no
JVM is stopped or started for it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tests.neo4j_server import Neo4jServer

T = TypeVar("T")


class Partition:
    """Relays 127.0.0.1:`port` to `host`:`port_to`; `cut` closes every relayed connection and
    refuses new ones (a client sees connection refused), `heal` listens again on the same port."""

    def __init__(self, host: str, port_to: int) -> None:
        self._target = (host, port_to)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self.port = 0

    @classmethod
    def before(cls, server: Neo4jServer) -> Partition:
        """A relay (not listening yet: `heal` it) to `server`'s Bolt port."""
        where = urlsplit(server.uri)
        return cls(where.hostname or "127.0.0.1", where.port or 7687)

    @property
    def uri(self) -> str:
        """The Bolt URI a service reaches the server by through this relay."""
        return f"bolt://127.0.0.1:{self.port}"

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
        if self._server is None:  # cut while this connection was being made: it is cut too
            writer.close()
            up_writer.close()
            return
        self._open.update((writer, up_writer))
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.CancelledError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


class ThreadedPartition:
    """A `Partition` on an event loop of its own thread, for a test that blocks (a process it
    calls with urllib): `cut` and `heal` return once done."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="relay", daemon=True)
        self._thread.start()

    @property
    def uri(self) -> str:
        return self.partition.uri

    def heal(self) -> None:
        self._call(self.partition.heal())

    def cut(self) -> None:
        self._call(self.partition.cut())

    def close(self) -> None:
        """Cut, end every relaying task and stop the thread."""
        self.cut()
        self._call(_end_tasks())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=30)


async def _end_tasks() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.contextmanager
def relay_thread(server: Neo4jServer) -> Iterator[ThreadedPartition]:
    """A healed `ThreadedPartition` in front of `server`, closed afterwards."""
    relay = ThreadedPartition(Partition.before(server))
    try:
        relay.heal()
        yield relay
    finally:
        relay.close()
