"""Every error row of API.md, each at its boundary: JSON body with a stable code and the field."""

from __future__ import annotations

import json
from typing import Any

from aiohttp.test_utils import TestClient

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
    """An empty or blank query answers 422 with field query."""
    for query in ("", "   "):
        resp = await client.post("/v1/rank", json={"query": query})
        err = await error_of(resp, 422, "invalid_request")
        assert err["field"] == "query"


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
    await error_of(resp, 404, "not_found")


async def test_wrong_method_is_405_json(client: Client) -> None:
    """GET on a POST route answers 405 with Allow and the error model."""
    resp = await client.get("/v1/rank")
    await error_of(resp, 405, "method_not_allowed")
    assert resp.headers["Allow"] == "POST"


async def test_unknown_tool_is_404(client: Client) -> None:
    """Reading, deleting or listing exemplars of an unknown tool answers 404."""
    for method, path in (
        ("GET", "/v1/tools/nope"),
        ("DELETE", "/v1/tools/nope"),
        ("GET", "/v1/tools/nope/exemplars"),
        ("DELETE", "/v1/exemplars/nope"),
    ):
        resp = await client.request(method, path)
        await error_of(resp, 404, "not_found")


async def test_bad_tool_bodies_name_the_field(client: Client) -> None:
    """A tool without a name answers 422 naming tools[1].name."""
    resp = await client.put(
        "/v1/tools", json={"tools": [{"name": "a", "description": "x"}, {"description": "y"}]}
    )
    err = await error_of(resp, 422, "invalid_request")
    assert err["field"] == "tools[1].name"


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
