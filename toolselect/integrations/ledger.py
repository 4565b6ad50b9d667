"""The process-wide ledger of the narrowing's catalog uploads (`uploads.Uploader` writes it).

By server, credential (a hash of the bearer key: two tenants' keys on one URL hold two
catalogs) and pack: the content hashes uploaded and when, and the hashes whose upload was
refused, tried again only after a doubling wait; the credentials refused any upload (`403`: an
agent-role key), never tried again in this process; and the uploads in flight, one per content,
shared by every narrower. An upload whose loop or client was closed before it ended (a blocking
`Client` closed mid-PUT stops its loop with the task pending) is dropped, never handed out: the
next narrower starts its own.

A pack keeps at most `HELD_PER_PACK` contents uploaded and as many refused, the oldest forgotten
first: an agent whose tools' descriptions keep changing, or that makes tools as it goes, hashes
a new content at each change, and a ledger keeping every one would grow without end. Forgetting
costs little: a forgotten content that comes back is uploaded again (the server answers the
tools it holds `unchanged`), and a forgotten refusal is tried again without its wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TypeVar

from toolselect.client import AsyncClient

# A refused upload of one content is tried again after this wait, doubled each time up to the cap.
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 900.0
# The contents remembered per pack (and, apart, the refused ones): far more catalogs than one
# agent switches between, so only a catalog that keeps changing is forgotten and re-uploaded.
HELD_PER_PACK = 256

# (server URL, credential hash, pack): the catalogs this process uploaded there.
Key = tuple[str, str, str]

Entry = TypeVar("Entry")


@dataclass
class _Held:
    uploaded_at: float
    refused: frozenset[str]


@dataclass
class _Failure:
    attempts: int
    retry_at: float


@dataclass(frozen=True, slots=True)
class InFlight:
    """An upload in flight: its end, as any thread may wait on it, and the loop and client it
    runs on."""

    ended: Future[bool]
    loop: asyncio.AbstractEventLoop
    client: AsyncClient

    def stranded(self) -> bool:
        """Whether it may never end: a closed loop runs no task (a blocking `Client` stops its
        loop with the upload pending), and a closed client's PUT hangs until its own timeout
        or fails, while a new client would upload at once."""
        return self.loop.is_closed() or self.client.closed


@dataclass
class Ledger:
    """What this process uploaded where; shared by every narrower (an agent rebuilt per request,
    a proxy hook per pack), thread-safe (blocking clients run on their own loop threads)."""

    # Each pack's contents, oldest first (dicts keep the order of insertion).
    held: dict[Key, dict[str, _Held]] = field(default_factory=dict)
    failures: dict[Key, dict[str, _Failure]] = field(default_factory=dict)
    forbidden: set[tuple[str, str]] = field(default_factory=set)
    # The uploads in flight, whichever narrower (and loop) started them: one per content.
    uploads: dict[tuple[Key, str], InFlight] = field(default_factory=dict)
    per_pack: int = HELD_PER_PACK
    lock: threading.Lock = field(default_factory=threading.Lock)

    def upload(
        self, key: Key, digest: str, start: Callable[[], InFlight] | None
    ) -> Future[bool] | None:
        """The upload of this content in flight in this process, else the one `start` begins
        (None: not now); it leaves the ledger when done. A stranded one is dropped and ended
        False (whoever still waits on it stops): it would hold every later turn to its timeout
        and no upload would start again in this process."""
        started = False
        with self.lock:
            found = self.uploads.get((key, digest))
            stranded = found if found is not None and found.stranded() else None
            if stranded is not None:
                del self.uploads[(key, digest)]
                found = None
            if found is None and start is not None:
                found = self.uploads[(key, digest)] = start()
                started = True
        if stranded is not None:  # outside the lock: its callbacks take it
            finish(stranded.ended, False)
        if found is None:
            return None
        if started:
            ended = found.ended
            ended.add_done_callback(lambda _: self._ended(key, digest, ended))
        return found.ended

    def _ended(self, key: Key, digest: str, upload: Future[bool]) -> None:
        with self.lock:
            found = self.uploads.get((key, digest))
            if found is not None and found.ended is upload:
                del self.uploads[(key, digest)]

    def holds(self, key: Key, digest: str, fresh_s: float) -> tuple[bool, bool, frozenset[str]]:
        """Whether the server took this content, whether that is older than `fresh_s` (worth
        uploading again in the background), and the names it refused."""
        with self.lock:
            held = self.held.get(key, {}).get(digest)
        if held is None:
            return False, False, frozenset()
        return True, time.monotonic() - held.uploaded_at > fresh_s, held.refused

    def remember(self, key: Key, digest: str, refused: frozenset[str]) -> None:
        with self.lock:
            self._newest(self.held, key, digest, _Held(time.monotonic(), refused))
            self.failures.get(key, {}).pop(digest, None)

    def forget(self, key: Key, digest: str) -> bool:
        """The server lacks tools of this content: upload it again at the next turn. True when
        it was held (the server lost tools; worth a line in the log)."""
        with self.lock:
            return self.held.get(key, {}).pop(digest, None) is not None

    def failed(self, key: Key, digest: str) -> float:
        """Note a refused upload; the seconds before this content is tried again."""
        with self.lock:
            before = self.failures.get(key, {}).get(digest)
            attempts = 1 if before is None else before.attempts + 1
            wait = min(RETRY_FIRST_S * 2.0 ** (attempts - 1), RETRY_MAX_S)
            self._newest(self.failures, key, digest, _Failure(attempts, time.monotonic() + wait))
            return wait

    def may_try(self, key: Key, digest: str) -> bool:
        """Whether this content may be uploaded now: its key may upload and no wait is running."""
        with self.lock:
            if (key[0], key[1]) in self.forbidden:
                return False
            failure = self.failures.get(key, {}).get(digest)
            return failure is None or time.monotonic() >= failure.retry_at

    def forbid(self, key: Key) -> bool:
        """Note that this credential may not upload; True the first time (log it then)."""
        with self.lock:
            first = (key[0], key[1]) not in self.forbidden
            self.forbidden.add((key[0], key[1]))
            return first

    def _newest(
        self, book: dict[Key, dict[str, Entry]], key: Key, digest: str, entry: Entry
    ) -> None:
        """Note `entry` as the pack's newest, forgetting its oldest past `per_pack` (under the
        lock)."""
        entries = book.setdefault(key, {})
        entries.pop(digest, None)  # moved to the end: its age is this note's
        entries[digest] = entry
        while len(entries) > self.per_pack:
            del entries[next(iter(entries))]


LEDGER = Ledger()


def finish(ended: Future[bool], result: bool) -> None:
    """End an upload with `result` unless it ended already (the ledger may drop it as stranded
    from another thread while its task settles)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        ended.set_result(result)
