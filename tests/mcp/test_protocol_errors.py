"""What `toolselect mcp` answers to what is not the protocol: over HTTP bytes uvicorn cannot
parse get the API's JSON error (uvicorn alone answers in plain text). A real process, sent raw
bytes on a socket."""

from __future__ import annotations

import pytest
from mcp import Client

from tests.mcp.test_server import text
from tests.services import raw_exchange

SEARCH = {"query": "what's the weather in Turin tomorrow?", "k": 1}
WAIT_S = 60
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
