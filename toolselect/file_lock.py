"""Exclusive locks on files of the data folder, which every worker of `serve --workers` and every
exec selector spawn share.

Three uses. One writer of MiniLM's kept graph (`embed/onnx.py`, `claim`): spawns started
together on a fresh folder each wrote the 90 MB graph. One replay of a spool file at a time (`held`): when the store returns each worker's
upkeep replays the shared spool, and two replays at once read the same head of the file and both
write it: turns and teacher calls are keyed by id, but a usage label recognises only its last
turn as seen, so every sighting replayed twice counted twice. And one taker of a tenant's
refused turns (`claim`): every worker of a group started again took back the turns its
predecessors' budget refused, and asked the teacher about each (N workers paid N calls a turn).

A lock is an exclusive `flock` on a file beside the spool. The kernel releases it when its
process dies, so a worker killed mid-replay holds nobody up (what it wrote and had not removed
is replayed again, as after any crash: the spool's documented caveat).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator

WAIT_S = 0.05  # between tries while another process holds the lock


class FileLock:
    """The lock of the file at `path` (`None`: nothing another process could share, an
    in-memory spool, so every take succeeds)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._fd = None if path is None else os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Hold the lock for the body, waiting (cancellably) while another process holds it."""
        while not self.claim():  # noqa: ASYNC110 - another process's lock sets no event
            await asyncio.sleep(WAIT_S)
        try:
            yield
        finally:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def claim(self) -> bool:
        """Take the lock if no other process holds it, until `close` (or the end of `held`);
        whether this process holds it now."""
        if self._fd is None:
            return True
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
