"""What `toolselect serve` logs for requests that are the caller's mistake: a warning line
without a traceback, where aiohttp logs an error with one; the server's own errors keep theirs."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import serving
from tests.services import cli_env, raw_exchange

pytestmark = pytest.mark.slow

JSON_POST = b"POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
MISTAKES = {
    "not gzip": JSON_POST + b'Content-Encoding: gzip\r\nContent-Length: 13\r\n\r\n{"query":"w"}',
    "bad chunk size": JSON_POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "header too long": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 8191 + b"\r\n\r\n",
    "NUL in a header": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
}


def test_callers_mistakes_log_a_warning_without_a_traceback(tmp_path: Path) -> None:
    logged: list[str] = []
    with serving(cli_env(tmp_path / "serve.db", TOOLSELECT_LOG_LEVEL="info"), logged) as url:
        for name, request in MISTAKES.items():
            status, _, body = raw_exchange(url, request)
            assert status == 400, (name, body)
        # The same body well encoded is served: only the coding was wrong.
        well = gzip.compress(b'{"query":"w"}')
        good = JSON_POST + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n" % len(well)
        status, _, _ = raw_exchange(url, good + b"Connection: close\r\n\r\n" + well)
        assert status == 200
    [err] = logged
    events = [json.loads(line) for line in err.splitlines()]
    assert not [e for e in events if e["level"] in ("error", "critical") or "exception" in e]
    warned = [e["event"] for e in events if e.get("logger") == "aiohttp.server"]
    assert len(warned) == len(MISTAKES), warned
    assert {e["level"] for e in events if e.get("logger") == "aiohttp.server"} == {"warning"}
    assert any("Can not decode content-encoding" in w for w in warned)
    assert any("chunk size" in w for w in warned)


SERVER_ERROR = """
import logging
from aiohttp.http_exceptions import BadHttpMessage
from toolselect.logs import configure_logging
configure_logging("info", "json")
server = logging.getLogger("aiohttp.server")
for exc in (RuntimeError("ours"), BadHttpMessage("theirs: b'Bearer tsk_secret'")):
    try:
        raise exc
    except Exception as caught:
        server.exception("Error handling request from %s", "127.0.0.1", exc_info=caught)
"""


def test_the_servers_own_errors_keep_their_traceback() -> None:
    """A record of aiohttp's server whose exception is not the caller's stays an error with its
    traceback; a caller's one loses the traceback and the request bytes quoted after its
    reason."""
    done = subprocess.run(
        [sys.executable, "-c", SERVER_ERROR], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    ours, theirs = (json.loads(line) for line in done.stderr.splitlines())
    assert ours["level"] == "error" and "RuntimeError: ours" in ours["exception"]
    assert theirs["level"] == "warning" and "exception" not in theirs
    assert theirs["event"] == "Error handling request from 127.0.0.1: theirs"
    assert "secret" not in done.stderr
