"""`toolselect select`'s standard-library part: stdin, the bound, and `--url`.

`--url` makes the selector a thin client of a running server: spawned once per agent turn, so
only the standard library is imported here: stdin read, one POST to `/v1/select`, the answer
copied to stdout once it is seen to be a selection.

`Deadline` is `--timeout`, in-process and with `--url`: seconds for the whole process, answer or
not. PromptKit waits for each spawn with a timeout of its own (10 s by default) and includes
every tool past it. What holds a spawn is not always within reach of a cancellation: a SQLite
busy wait or a model load runs on a worker thread, which the interpreter joins before it exits,
and urllib's timeout bounds each read of an answer, not the answer (a server sending a byte at
a time held `--timeout 1` for 44 s). So the bound is a watching thread: at it, a spawn that has
not answered writes its one line to stderr and exits 1, one that has exits 0, at once, whatever
its threads are doing.
"""

from __future__ import annotations

import _thread  # not `threading`: a spawn of `select --url` imports nothing it need not
import json
import os
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from toolselect.json_text import parse_json


class Deadline:
    """`with Deadline(seconds, "toolselect select") as deadline: ... deadline.answer(text)`:
    the process ends by `seconds` after the `with` starts, unless the block is left first;
    `answer` writes the selection to stdout, unless the deadline came first (the process is
    then ending, and nothing more is written)."""

    def __init__(self, seconds: float, command: str) -> None:
        self._seconds = seconds
        self._command = command
        self._lock = _thread.allocate_lock()
        self._answered = False
        self._left = False

    def __enter__(self) -> Deadline:
        _thread.start_new_thread(self._watch, ())
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._left = True

    def answer(self, text: str) -> None:
        """Write `text` and a newline to stdout, flushed."""
        with self._lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            self._answered = True

    def _watch(self) -> None:
        end = time.monotonic() + self._seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 3600.0))  # one sleep of 1e10 s overflows the platform's time_t
        # Under the lock for good: an answer being written is written whole, none starts after.
        self._lock.acquire()
        if self._left:
            self._lock.release()
            return
        if not self._answered:
            print(
                f"{self._command}: no selection within --timeout {self._seconds:g} s",
                file=sys.stderr,
                flush=True,
            )
        # Not sys.exit: the threads that hold the process are what the bound is for.
        os._exit(0 if self._answered else 1)


class UsageError(Exception):
    """Bad input on the command line or stdin: message to stderr, exit 2."""


def read_select_request(max_bytes: int | None = None) -> dict[str, Any]:
    """The one JSON object PromptKit writes on stdin, of at most `max_bytes` (the server's body
    limit, which `--url` meets as a 413, held in-process too)."""
    # Bytes, decoded here: text mode would raise (or, under C.UTF-8, smuggle surrogates past
    # the check) for bytes that are not UTF-8, as a runtime may write by mistake.
    data = sys.stdin.buffer.read()
    if max_bytes is not None and len(data) > max_bytes:
        raise UsageError(f"expected stdin of at most {max_bytes} bytes, got {len(data)}")
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"stdin is not UTF-8: {exc}") from None
    if not raw.strip():
        raise UsageError("expected one JSON object on stdin, got nothing")
    try:
        data = parse_json(raw)
    except ValueError as exc:
        raise UsageError(f"stdin is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"expected a JSON object on stdin, got {type(data).__name__}")
    return data


# The key `select --url` presents (a server with keys refuses a request without one). From the
# environment, not a flag: a flag would show the key to anyone who lists the processes.
API_KEY_VARIABLE = "TOOLSELECT_SELECT_API_KEY"


def select_remote(
    url: str, data: dict[str, Any], timeout: float, answer: Callable[[str], None]
) -> int:
    """Thin client: POST to a running server with the standard library only, the selection
    handed to `answer` (`Deadline.answer`: the process's bound is the caller's; `timeout` here
    only bounds each connect and read). A refusal of the request (400, 413, 422) exits 2, as
    bad stdin does; any other error status (a key missing or refused, a server not ready)
    exits 1, as an unreachable server does."""
    import urllib.error
    import urllib.parse
    import urllib.request

    # urllib reads "localhost:8080" as scheme "localhost", and raises for "http://[::1" or a
    # port that is no number: all checked here, as bad input.
    try:
        parts = urllib.parse.urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and url == url.strip()
        valid = valid and " " not in url and (parts.port is None or parts.port > 0)
    except ValueError:
        valid = False
    if not valid:
        raise UsageError(f"--url: expected http://HOST:PORT, got {url!r}")
    headers = {"Content-Type": "application/json"}
    if key := os.environ.get(API_KEY_VARIABLE, "").strip():
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(
        url.rstrip("/") + "/v1/select",
        data=json.dumps(data).encode(),
        headers=headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        selection = _selection(body)
        if selection is None:
            print(f"toolselect select: {url} answered no selection: {body[:80]!r}", file=sys.stderr)
            return 1
        answer(selection)
        return 0
    except urllib.error.HTTPError as exc:
        try:
            err = json.loads(exc.read())["error"]
            message = f"{err['code']}: {err['message']}"
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {exc.code}"
        if exc.code in (400, 413, 422):
            raise UsageError(f"selector server refused the request: {message}") from None
        print(f"toolselect select: {url} answered {message}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"toolselect select: cannot reach {url}: {exc}", file=sys.stderr)
        return 1


def _selection(body: bytes) -> str | None:
    """The answer's JSON text when it is a selection (an object whose `selected` is a list of
    names), else None: stdout carries a selection or nothing, so the runtime falls back rather
    than trust a proxy's page or a stray answer."""
    try:
        text = body.decode("utf-8")
        answer = parse_json(text)
    except ValueError:
        return None
    selected = answer.get("selected") if isinstance(answer, dict) else None
    if not isinstance(selected, list) or not all(isinstance(n, str) for n in selected):
        return None
    return text.strip()
