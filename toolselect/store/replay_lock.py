"""One replay of a spool file at a time, whichever process runs it.

The workers of `serve --workers` share the data folder's spool, and when the store returns each
one's upkeep replays it. Two replays at once read the same head of the file and both write it:
turns and teacher calls are keyed by id, but a usage label recognises only its last turn as seen,
so every sighting replayed twice counted twice. A replay holds this lock (an exclusive `flock`
on a file beside the spool) from its first read to its last removal; another process's replay
waits for it, then finds what is left. The kernel releases the lock of a process that dies, so a
worker killed mid-replay holds nobody up (what it wrote and had not removed is replayed again,
as after any crash: the spool's documented caveat).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator

WAIT_S = 0.05  # between tries while another process replays


class ReplayLock:
    """The replay lock of the spool at `path` (`None`: an in-memory spool, which no other
    process can read, locks nothing)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._fd = None if path is None else os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Hold the lock for the body, waiting (cancellably) while another process holds it."""
        while not self._take():  # noqa: ASYNC110 - another process's lock sets no event
            await asyncio.sleep(WAIT_S)
        try:
            yield
        finally:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _take(self) -> bool:
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
