"""`toolselect select --url`: PromptKit's exec selector as a thin client of a running server.

Spawned once per agent turn, so only the standard library is imported here: stdin read, one
POST to `/v1/select`, the answer copied to stdout once it is seen to be a selection.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from toolselect.json_text import parse_json


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


def select_remote(url: str, data: dict[str, Any], timeout: float) -> int:
    """Thin client: POST to a running server with the standard library only. A refusal of the
    request (400, 413, 422) exits 2, as bad stdin does; any other error status (a key missing
    or refused, a server not ready) exits 1, as an unreachable server does."""
    import os
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
        answer = _selection(body)
        if answer is None:
            print(f"toolselect select: {url} answered no selection: {body[:80]!r}", file=sys.stderr)
            return 1
        sys.stdout.write(answer + "\n")
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
