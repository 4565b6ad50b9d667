"""`toolselect select --url`: PromptKit's exec selector as a thin client of a running server.

Spawned once per agent turn, so only the standard library is imported here: stdin read, one
POST to `/v1/select`, the answer copied to stdout.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from toolselect.json_text import parse_json


class UsageError(Exception):
    """Bad input on the command line or stdin: message to stderr, exit 2."""


def read_select_request() -> dict[str, Any]:
    """The one JSON object PromptKit writes on stdin."""
    raw = sys.stdin.read()
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
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if key := os.environ.get(API_KEY_VARIABLE, "").strip():
        headers["Authorization"] = f"Bearer {key}"
    try:
        req = urllib.request.Request(
            url.rstrip("/") + "/v1/select",
            data=json.dumps(data).encode(),
            headers=headers,
            method="POST",
        )
    except ValueError as exc:  # no scheme or host
        raise UsageError(f"--url: expected http://HOST:PORT, got {url!r} ({exc})") from None
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            sys.stdout.write(resp.read().decode() + "\n")
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
