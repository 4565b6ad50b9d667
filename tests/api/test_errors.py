"""Every error row of API.md, each at its boundary: JSON body with a stable code and the field."""

from __future__ import annotations

import gzip
import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import urlopen

from aiohttp.test_utils import TestClient
from multidict import CIMultiDict

from tests.live import LiveServer

Client = TestClient[Any, Any]


async def error_of(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return dict(body["error"])


async def test_body_that_is_not_json_is_400(client: Client) -> None:
    """A body that does not parse as JSON answers 400 invalid_json."""
    resp = await client.post(
        "/v1/rank", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    err = await error_of(resp, 400, "invalid_json")
    assert err["field"] == "body"


async def test_a_body_in_utf_8_only_on_every_route(client: Client) -> None:
    """JSON in UTF-8 (API.md): a byte order mark or UTF-16 is refused alike by a route that
    reads its body whole (`PUT /v1/tools`) and by one that parses with its model."""
    tools = json.dumps({"tools": [{"name": "bom_tool", "description": "A tool."}]})
    rank = json.dumps({"query": "weather"})
    for path, text in (("/v1/tools", tools), ("/v1/rank", rank)):
        for data in (b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16")):
            method = client.put if path == "/v1/tools" else client.post
            resp = await method(path, data=data, headers={"Content-Type": "application/json"})
            err = await error_of(resp, 400, "invalid_json")
            assert err["field"] == "body", (path, data[:4])
    assert (await client.get("/v1/tools/bom_tool")).status == 404


async def test_a_pack_is_checked_wherever_it_is_named(client: Client) -> None:
    """Blank or over 256 characters, a pack is refused on `/v1/select` (`query.PackID`; ""
    is no pack) and on `GET /v1/tools?pack=` as on `/v1/rank`."""
    candidates = [{"ID": "get_weather"}]
    for pack in ("   ", "p" * 257):
        body = {"query": {"Text": "weather", "PackID": pack, "K": 1}, "candidates": candidates}
        err = await error_of(await client.post("/v1/select", json=body), 422, "invalid_request")
        assert err["field"] == "query.PackID"
        listed = await client.get("/v1/tools", params={"pack": pack})
        assert (await error_of(listed, 422, "invalid_request"))["field"] == "query.pack"
    body = {"query": {"Text": "weather", "PackID": "", "K": 1}, "candidates": candidates}
    assert (await client.post("/v1/select", json=body)).status == 200
    assert (await client.get("/v1/tools", params={"pack": ""})).status == 200


async def test_wrong_content_type_is_415(client: Client) -> None:
    """A body sent as text/plain answers 415 naming the Content-Type."""
    resp = await client.post(
        "/v1/rank", data=json.dumps({"query": "x"}), headers={"Content-Type": "text/plain"}
    )
    err = await error_of(resp, 415, "unsupported_media_type")
    assert err["field"] == "Content-Type"


async def test_wrong_type_names_the_field(client: Client) -> None:
    """A string where k must be an integer answers 422 with field k."""
    resp = await client.post("/v1/rank", json={"query": "weather", "k": "5"})
    err = await error_of(resp, 422, "invalid_request")
    assert err["field"] == "k"


async def test_missing_query_names_the_field(client: Client) -> None:
    """A body without query answers 422 with field query."""
    resp = await client.post("/v1/rank", json={"k": 3})
    err = await error_of(resp, 422, "invalid_request")
    assert err["field"] == "query"


async def test_unknown_body_field_is_refused(client: Client) -> None:
    """An unexpected field is a caller's mistake, not silently ignored."""
    resp = await client.post("/v1/rank", json={"query": "weather", "kk": 3})
    err = await error_of(resp, 422, "invalid_request")
    assert err["field"] == "kk"


async def test_empty_query_is_422(client: Client) -> None:
    """An empty or blank query answers 422 with field query, and so does one of characters
    that are not printed (zero-width spaces, a byte order mark: every tool scored zero); on
    `/v1/select` too. A combining mark alone is text."""
    for query in ("", "   ", "\u200b\u200b", "\ufeff \u2060\t"):
        resp = await client.post("/v1/rank", json={"query": query})
        err = await error_of(resp, 422, "invalid_request")
        assert err["field"] == "query"
        body = {"query": {"Text": query, "K": 1}, "candidates": [{"ID": "get_weather"}]}
        err = await error_of(await client.post("/v1/select", json=body), 422, "invalid_request")
        assert err["field"] == "query.Text"
    assert (await client.post("/v1/rank", json={"query": "e\u0301"})).status == 200


async def test_query_limit_is_8_kib(client: Client) -> None:
    """A query of exactly 8 KiB is ranked; one byte more answers 422."""
    ok = await client.post("/v1/rank", json={"query": "a" * 8192})
    assert ok.status == 200
    resp = await client.post("/v1/rank", json={"query": "a" * 8193})
    err = await error_of(resp, 422, "invalid_request")
    assert err["field"] == "query"
    assert "8192" in err["message"] and "8193" in err["message"]


async def test_query_limit_counts_utf8_bytes(client: Client) -> None:
    """The query limit is in UTF-8 bytes: 2,731 three-byte characters exceed 8 KiB."""
    resp = await client.post("/v1/rank", json={"query": "€" * 2731})
    await error_of(resp, 422, "invalid_request")
    ok = await client.post("/v1/rank", json={"query": "€" * 2730})
    assert ok.status == 200


async def test_k_bounds(client: Client) -> None:
    """k = 0 and k = 101 answer 422 with the rule; k = 1 and k = 100 are accepted."""
    for k in (0, 101, -1):
        resp = await client.post("/v1/rank", json={"query": "weather", "k": k})
        err = await error_of(resp, 422, "invalid_request")
        assert err["field"] == "k"
        assert err["message"] == f"expected k in 1..100, got {k}"
    for k in (1, 100):
        resp = await client.post("/v1/rank", json={"query": "weather", "k": k})
        assert resp.status == 200
        assert len((await resp.json())["results"]) == min(k, 8)


async def test_body_over_1_mib_is_413(client: Client) -> None:
    """A body over 1 MiB answers 413 too_large; one just under is parsed."""
    big = json.dumps({"query": "x", "pad": "a" * (1 << 20)})
    resp = await client.post("/v1/rank", data=big, headers={"Content-Type": "application/json"})
    await error_of(resp, 413, "too_large")
    under = json.dumps({"query": "x" * 10, "k": 1})
    under += " " * ((1 << 20) - len(under))
    resp = await client.post("/v1/rank", data=under, headers={"Content-Type": "application/json"})
    assert resp.status == 200


async def test_unknown_route_is_404_json(client: Client) -> None:
    """An unknown path answers 404 not_found in the error model."""
    resp = await client.get("/v1/nope")
    assert (await error_of(resp, 404, "not_found"))["field"] == "path"


async def test_wrong_method_is_405_json(client: Client) -> None:
    """GET on a POST route answers 405 with Allow and the error model."""
    resp = await client.get("/v1/rank")
    assert (await error_of(resp, 405, "method_not_allowed"))["field"] == "method"
    assert resp.headers["Allow"] == "POST"


async def test_unknown_tool_is_404(client: Client) -> None:
    """Reading, deleting or listing exemplars of an unknown tool answers 404."""
    for method, path, field in (
        ("GET", "/v1/tools/nope", "name"),
        ("DELETE", "/v1/tools/nope", "name"),
        ("GET", "/v1/tools/nope/exemplars", "name"),
        ("DELETE", "/v1/exemplars/nope", "id"),
        ("GET", "/v1/analytics/nope", "name"),
    ):
        resp = await client.request(method, path)
        assert (await error_of(resp, 404, "not_found"))["field"] == field


async def test_bad_tool_bodies_name_the_field(client: Client) -> None:
    """A tool without a name answers 422 naming tools[1].name."""
    resp = await client.put(
        "/v1/tools", json={"tools": [{"name": "a", "description": "x"}, {"description": "y"}]}
    )
    err = await error_of(resp, 422, "invalid_request")
    assert err["field"] == "tools[1].name"
    for scalar in ('"x"', "5", "null", "true"):
        resp = await client.put(
            "/v1/tools", data=scalar, headers={"Content-Type": "application/json"}
        )
        assert (await error_of(resp, 422, "invalid_request"))["field"] == "body"


async def test_select_needs_query_text(client: Client) -> None:
    """A PromptKit payload without query.Text answers 422 naming it."""
    resp = await client.post("/v1/select", json={"query": {"K": 2}, "candidates": []})
    err = await error_of(resp, 422, "invalid_request")
    assert err["field"] == "query.Text"


async def test_select_candidate_needs_an_id(client: Client) -> None:
    """A PromptKit candidate with an empty ID answers 422 naming it, even when it has a Name:
    the ID is what the selector returns."""
    candidates = [{"ID": "a", "Name": "a"}, {"ID": "", "Name": "b", "Description": "x"}]
    resp = await client.post(
        "/v1/select", json={"query": {"Text": "x", "K": 1}, "candidates": candidates}
    )
    err = await error_of(resp, 422, "invalid_request")
    assert err["field"] == "candidates[1].ID"


async def test_errors_carry_a_request_id(client: Client) -> None:
    """Every response, error or not, carries X-Request-Id (echoed when the caller sends one)."""
    resp = await client.get("/v1/nope", headers={"X-Request-Id": "abc-123"})
    assert resp.headers["X-Request-Id"] == "abc-123"
    resp = await client.post("/v1/rank", json={"query": "weather"})
    assert len(resp.headers["X-Request-Id"]) == 32


async def test_json_without_a_json_value_is_400(client: Client) -> None:
    """NaN, Infinity and a number past a float's range are not JSON: refused as invalid_json,
    not stored (the listing would have given them back as null)."""
    for number in ("NaN", "-Infinity", "1e400"):
        body = '{"tools": [{"name": "t", "inputSchema": {"default": ' + number + "}}]}"
        resp = await client.put(
            "/v1/tools", data=body, headers={"Content-Type": "application/json"}
        )
        err = await error_of(resp, 400, "invalid_json")
        assert err["field"] == "body"
    assert (await client.get("/v1/tools/t")).status == 404


async def test_model_routes_refuse_json_without_a_json_value(client: Client) -> None:
    """pydantic's parser would take NaN where a model holds any JSON (a candidate's Metadata,
    a field the route ignores): refused as the catalog route and the exec selector refuse it,
    while the words in a string still pass."""
    for number in ("NaN", "Infinity", "-1E+400"):
        candidate = '{"ID": "a", "Metadata": {"x": ' + number + "}}"
        for body in (
            '{"query": {"Text": "x", "K": 1}, "candidates": [' + candidate + "]}",
            '{"query": {"Text": "x", "K": 1}, "candidates": [], "later": ' + number + "}",
        ):
            resp = await client.post(
                "/v1/select", data=body, headers={"Content-Type": "application/json"}
            )
            err = await error_of(resp, 400, "invalid_json")
            assert err["field"] == "body"
    words = {"Text": "NaN or Infinity in 1e400 rows", "K": 1}
    resp = await client.post(
        "/v1/select", json={"query": words, "candidates": [{"ID": "a", "Metadata": {"v": 1e300}}]}
    )
    assert resp.status == 200, await resp.text()


async def test_body_nested_past_the_parser_is_400(client: Client) -> None:
    """A body nested deeper than the JSON parser recurses is invalid_json, on the catalog
    route (the standard parser) as on the model routes (pydantic's)."""
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    for method, path, body in (
        ("PUT", "/v1/tools", '{"tools": [{"name": "t", "inputSchema": ' + deep + "}]}"),
        ("POST", "/v1/rank", '{"query": "x", "k": ' + deep + "}"),
    ):
        resp = await client.request(
            method, path, data=body, headers={"Content-Type": "application/json"}
        )
        await error_of(resp, 400, "invalid_json")


async def test_schema_depth_limit(client: Client) -> None:
    """An input schema may nest 64 objects and lists deep; one more is 422 naming it, so no
    stored tool is beyond what a listing can write back."""

    def nested(depth: int) -> dict[str, Any]:
        schema: dict[str, Any] = {}
        for _ in range(depth - 1):
            schema = {"a": schema}
        return schema

    resp = await client.put("/v1/tools", json={"tools": [{"name": "t", "inputSchema": nested(64)}]})
    assert resp.status == 200, await resp.text()
    resp = await client.put("/v1/tools", json={"tools": [{"name": "u", "inputSchema": nested(65)}]})
    err = await error_of(resp, 422, "invalid_request")
    assert err["field"] == "tools[0].inputSchema"
    listing = await client.get("/v1/tools")
    assert listing.status == 200
    assert "u" not in {t["name"] for t in (await listing.json())["tools"]}


async def test_body_that_does_not_decode_is_400(client: Client) -> None:
    """A body whose Content-Encoding does not decode is the caller's: 400 invalid_body."""
    resp = await client.post(
        "/v1/rank",
        data=b"not gzip at all",
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    err = await error_of(resp, 400, "invalid_body")
    assert err["field"] == "body"


async def test_every_coding_aiohttp_names_decodes_and_others_are_415(client: Client) -> None:
    """gzip, deflate, br and zstd bodies are read (br and zstd answered a plain-text 400
    naming a package to install); a coding nobody decodes is a 415 naming the header."""
    import zlib

    import brotli  # type: ignore[import-untyped]
    from backports import zstd

    body = json.dumps({"query": "weather in Turin", "k": 1}).encode()
    deflater = zlib.compressobj(wbits=zlib.MAX_WBITS)
    encoded = {
        "gzip": gzip.compress(body),
        "deflate": deflater.compress(body) + deflater.flush(),
        "br": brotli.compress(body),
        "zstd": zstd.compress(body),
        "identity": body,
    }
    for coding, data in encoded.items():
        headers = {"Content-Type": "application/json", "Content-Encoding": coding}
        resp = await client.post("/v1/rank", data=data, headers=headers)
        assert resp.status == 200, (coding, await resp.text())
    for coding in ("foo", "gzip, br", "compress"):
        headers = {"Content-Type": "application/json", "Content-Encoding": coding}
        resp = await client.post("/v1/rank", data=body, headers=headers)
        err = await error_of(resp, 415, "unsupported_media_type")
        assert err["field"] == "Content-Encoding", coding
    # Two headers: aiohttp decodes by the last, so neither may pass unchecked.
    for first, last, data in (("identity", "rot13", body), ("gzip", "rot13", encoded["gzip"])):
        twice = CIMultiDict([("Content-Type", "application/json"), ("Content-Encoding", first),
                             ("Content-Encoding", last)])  # fmt: skip
        resp = await client.post("/v1/rank", data=data, headers=twice)
        err = await error_of(resp, 415, "unsupported_media_type")
        assert err["field"] == "Content-Encoding"


def test_client_gone_mid_body_is_499_not_500(tmp_path: Path) -> None:
    """A client that closes before its body arrived is counted 499, not 500: a 5xx is only ever
    the server's own. (On the server as `serve` runs it, which lets a handler finish when its
    client hangs up; aiohttp's test server would cancel it instead.)"""
    server = LiveServer(tmp_path)
    try:
        url = urlsplit(server.url)
        with socket.create_connection((url.hostname, url.port)) as sock:
            sock.sendall(
                b"POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"query":'
            )
        gone = 'toolselect_http_requests_total{route="/v1/rank",status="499"} 1.0'
        deadline = time.monotonic() + 10
        while gone not in (metrics := urlopen(f"{server.url}/metrics").read().decode()):
            assert time.monotonic() < deadline, metrics
            time.sleep(0.02)
        assert 'route="/v1/rank",status="500"' not in metrics
    finally:
        server.stop()


async def test_one_put_takes_at_most_10000_tools(client: Client) -> None:
    """10,001 tools in one PUT is 422 naming the list: `tools` in the MCP and native forms,
    the body itself in OpenAI's (a bare list). Nothing of it is stored."""
    names = [f"t{i}" for i in range(10_001)]
    mcp = {"tools": [{"name": name} for name in names]}
    openai = [{"type": "function", "function": {"name": name}} for name in names]
    for body, field in ((mcp, "tools"), (openai, "body")):
        resp = await client.put("/v1/tools", json=body)
        err = await error_of(resp, 422, "invalid_request")
        assert (err["field"], err["message"]) == (field, "expected at most 10000 tools, got 10001")
    assert (await client.get("/v1/tools/t0")).status == 404


async def test_not_found_messages_cut_long_values_and_never_repeat_a_key(client: Client) -> None:
    """An id or name a caller sent comes back in a not-found or bad-value message as the key
    routes word theirs: cut to 80 characters, and never what looks like an API key (pasted in
    the wrong place, say)."""
    key = "tsk_" + "s3cret" * 6
    long = "x" * 5_000
    for value in (key, long):
        for method, path, params in (
            ("GET", f"/v1/tools/{value}", None),
            ("DELETE", f"/v1/tools/{value}", None),
            ("GET", f"/v1/tools/{value}/exemplars", None),
            ("DELETE", f"/v1/exemplars/{value}", None),
            ("GET", f"/v1/analytics/{value}", None),
            ("GET", "/v1/analytics/misroute_rate", {"since": value}),
        ):
            resp = await client.request(method, path, params=params)
            assert resp.status in (404, 422), (path, resp.status)
            message = (await resp.json())["error"]["message"]
            assert "s3cret" not in message and len(message) < 400, (path, message)
    resp = await client.post("/v1/exemplars", json={"query": "q", "tool": key})
    assert resp.status == 404 and "s3cret" not in await resp.text()
