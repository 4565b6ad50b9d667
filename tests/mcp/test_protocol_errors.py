"""What `toolselect mcp` answers to what is not the protocol: over stdio a line that is no
JSON-RPC message gets its JSON-RPC error (the SDK alone drops it and the host waits forever),
over HTTP bytes uvicorn cannot parse get the API's JSON error (uvicorn alone answers in plain
text). Real processes: spoken to in raw lines on stdio, raw bytes on a socket over HTTP."""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path
from typing import IO, Any

import pytest
from mcp import Client

from tests.mcp.conftest import spawn_stdio
from tests.mcp.test_server import text
from tests.services import raw_exchange

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "test", "version": "0"}}}  # fmt: skip
SEARCH = {"query": "what's the weather in Turin tomorrow?", "k": 1}
WAIT_S = 60
PARSE_ERROR, INVALID_REQUEST = -32700, -32600


class Answers:
    """A process's stdout read line by line in a thread, each line taken within `WAIT_S`: a
    line the server leaves unanswered fails the test instead of hanging it."""

    def __init__(self, stdout: IO[str]) -> None:
        self._stdout = stdout
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            self._lines.put(line)
        self._lines.put("")

    def next(self) -> dict[str, Any]:
        line = self._lines.get(timeout=WAIT_S)
        assert line, "the server closed stdout"
        message: dict[str, Any] = json.loads(line)
        return message

    def close(self) -> None:
        """Once the process has ended: the reader done with stdout, which is closed."""
        self._reader.join(timeout=WAIT_S)
        self._stdout.close()


def refused(message: dict[str, Any], code: int, request_id: int | str | None) -> str:
    """The error message of `message`, a JSON-RPC error `code` answering `request_id`."""
    assert message["jsonrpc"] == "2.0" and "result" not in message, message
    assert message["id"] == request_id and message["error"]["code"] == code, message
    error: str = message["error"]["message"]
    return error


def test_stdio_answers_each_line_that_is_no_message(store_db: Path, tmp_path: Path) -> None:
    """A line that is not JSON gets -32700 with the parser's position, JSON that is no request
    (an object without the fields, an array, a method that is no string) -32600 with the
    request's id when it has one, a 100 KB line an answer quoting 80 characters of it, a blank
    line nothing; each in the order sent, and the server goes on serving: the handshake, a tool
    call after another bad line, then exit 0 when stdin closes."""
    log = tmp_path / "mcp.log"
    proc = spawn_stdio(store_db, log)
    assert proc.stdin is not None and proc.stdout is not None
    answers = Answers(proc.stdout)

    def send(*lines: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write("".join(f"{line}\n" for line in lines))
        proc.stdin.flush()

    try:
        send(
            "not json",
            "",
            json.dumps({"foo": 1}),
            "[]",
            json.dumps({"jsonrpc": "2.0", "id": 7, "method": 5}),
            "{" + "x" * 100_000,
            json.dumps(INITIALIZE),
        )
        error = refused(answers.next(), PARSE_ERROR, None)
        assert error.startswith("Parse error: ") and "line 1 column 2" in error, error
        assert "'not json'" in error, error
        error = refused(answers.next(), INVALID_REQUEST, None)  # the blank line: no answer
        assert "expected jsonrpc, got nothing" in error and "expected method" in error, error
        error = refused(answers.next(), INVALID_REQUEST, None)
        assert "input should be an object, got []" in error, error
        error = refused(answers.next(), INVALID_REQUEST, 7)
        assert "expected method: input should be a valid string, got 5" in error, error
        error = refused(answers.next(), PARSE_ERROR, None)
        assert error.startswith("Parse error: ") and len(error) < 200, error
        assert answers.next()["result"]["serverInfo"]["name"] == "toolselect"

        send(
            json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json.dumps({"jsonrpc": "2.0", "id": "q", "method": "tools/list", "params": 3}),
            json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                        "params": {"name": "search_tools", "arguments": SEARCH}}),
        )  # fmt: skip
        error = refused(answers.next(), INVALID_REQUEST, "q")
        assert "expected params: input should be an object, got 3" in error, error
        found = answers.next()
        assert found["id"] == 2, found
        assert found["result"]["structuredContent"]["tools"][0]["name"] == "get_weather", found
        proc.stdin.close()
        assert proc.wait(timeout=WAIT_S) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        answers.close()
    assert "mcp_line_refused" in log.read_text()


NOT_HTTP = "the request is not HTTP the server reads: "
KEY = "tsk_" + "9" * 40  # what a toolselect key looks like
BAD_HEADER = b"GET /mcp HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"
TLS = b"\x16\x03\x01 garbage"  # a TLS hello's first bytes, sent to the plain port
KEYED = b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization Bearer " + KEY.encode() + b"\r\n\r\n"


@pytest.mark.parametrize(
    ("request_bytes", "reason"),
    [(BAD_HEADER, "header"), (TLS, ""), (KEYED, "header")],
    ids=["bad-header", "tls", "key-in-a-bad-header"],
)
async def test_http_answers_what_it_cannot_parse_in_json(
    http_url: str, request_bytes: bytes, reason: str
) -> None:
    """Bytes uvicorn's parser refuses are answered before the app, as the HTTP API answers them:
    400 in JSON, `bad_request` naming the request, with the parser's reason and never a key a
    header held; the connection closes, and an MCP session works on the server afterwards."""
    status, headers, body = raw_exchange(http_url, request_bytes)
    assert status == 400 and headers["content-type"] == "application/json", (headers, body)
    error = body["error"]
    assert error["code"] == "bad_request" and error["field"] == "request", body
    assert error["message"].startswith(NOT_HTTP) and reason in error["message"].lower(), body
    assert len(error["message"]) <= len(NOT_HTTP) + 120, body
    assert KEY[4:] not in error["message"], body
    async with Client(http_url, read_timeout_seconds=WAIT_S) as client:
        found = await client.call_tool("search_tools", SEARCH)
    assert not found.is_error, text(found)
    assert found.structured_content is not None
    assert found.structured_content["tools"][0]["name"] == "get_weather"
