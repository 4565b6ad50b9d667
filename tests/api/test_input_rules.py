"""One rule per input, whichever route takes it, against the real app on a real socket: single
query parameters given once, named `query.<name>` in errors; `""` for a pack or a session is
none everywhere and a blank pack or session is refused everywhere; a label's tool is a tool
name; a type error is worded as one; an echoed number is cut; a path's escapes must spell
UTF-8."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from yarl import URL

from tests.api.test_keys import ADMIN, TOOLS, bearer, create, error_of, sqlite
from tests.services import ClientFactory, ServiceFactory
from toolselect.records import Tool
from toolselect.service import Service

__all__ = ["sqlite"]  # the fixture, imported for these tests

Client = TestClient[Any, Any]
TURN = {"request": "weather in Turin", "used_tool": "get_weather"}


async def field_of(resp: Any, status: int = 422) -> str:
    error = await error_of(resp, status)
    return str(error["field"])


async def test_single_query_parameters_are_refused_twice(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A second value of `pack`, `since` or `tenant` is 422 naming it as a query parameter,
    where the first one was taken silently (`since` excepted)."""
    client, _ = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,))
    admin = bearer(ADMIN)
    for path in (
        "/v1/tools?pack=a&pack=b",
        "/v1/analytics/drift?since=2026-01-01&since=2099-01-01",
        "/v1/keys?tenant=team-a&tenant=zzz",
    ):
        resp = await client.get(path, headers=admin)
        name = path.split("?")[1].split("=")[0]
        error = await error_of(resp, 422)
        assert (error["field"], error["message"]) == (
            f"query.{name}",
            f"expected {name} at most once, got it 2 times",
        )
    put = await client.put("/v1/tools?pack=a&pack=b", json=TOOLS, headers=admin)
    assert await field_of(put) == "query.pack"


async def test_one_pack_rule_and_one_session_rule(client: Client, service: Service) -> None:
    """`""` is no pack and no session wherever one is given (a Go or JS client's zero value);
    a blank pack is refused everywhere, the query parameter named `query.pack`, the body
    field `pack`."""
    rank = await client.post("/v1/rank", json={"query": "weather", "pack": "", "session_id": ""})
    assert rank.status == 200, await rank.text()
    put = await client.put("/v1/tools", json={**TOOLS, "pack": ""})
    assert put.status == 200, await put.text()
    put = await client.put("/v1/tools?pack=", json=TOOLS)
    assert put.status == 200, await put.text()
    assert (await service.catalog.get_tool("get_weather")).packs == ("assistant",)
    zero = {**TURN, "turn_id": "zero", "pack": "", "session_id": ""}
    assert (await client.post("/v1/observe", json=zero)).status == 202
    stored = await service.learning.turn_when_done("zero", 15.0)
    assert stored is not None and (stored.pack, stored.session_id) == (None, None)

    assert await field_of(await client.put("/v1/tools?pack=%20", json=TOOLS)) == "query.pack"
    assert await field_of(await client.get("/v1/tools?pack=%20")) == "query.pack"
    assert await field_of(await client.put("/v1/tools", json={**TOOLS, "pack": " "})) == "pack"
    assert await field_of(await client.post("/v1/rank", json={"query": "x", "pack": " "})) == (
        "pack"
    )
    assert await field_of(await client.post("/v1/observe", json={**TURN, "pack": " "})) == "pack"
    batch = await client.post("/v1/observe/batch", json={"turns": [TURN, {**TURN, "pack": " "}]})
    assert await field_of(batch) == "turns[1].pack"


async def test_a_blank_session_is_refused_everywhere(client: Client, service: Service) -> None:
    """A session id of blank spaces (`" "`) is 422 naming it on every route that takes one, as
    a blank pack is: it names no conversation (`""` is none), and taken as an id it joined every
    caller that sent it into one session. No turn of the refused requests is stored."""
    rank = await client.post("/v1/rank", json={"query": "weather", "session_id": " "})
    assert await field_of(rank) == "session_id"
    select = {"query": {"Text": "weather"}, "candidates": [{"ID": "get_weather"}]}
    resp = await client.post("/v1/select", json={**select, "session_id": "\t "})
    assert await field_of(resp) == "session_id"
    blank = {**TURN, "turn_id": "blank", "session_id": " "}
    error = await error_of(await client.post("/v1/observe", json=blank), 422)
    assert (error["code"], error["field"]) == ("invalid_request", "session_id")
    assert error["message"] == "expected a session id that is not blank, got ' ' (session_id)"
    batch = await client.post("/v1/observe/batch", json={"turns": [TURN, blank]})
    assert await field_of(batch) == "turns[1].session_id"
    assert service.sessions.previous(" ") == ()
    assert await service.store.get_turn("blank") is None


async def test_a_label_needs_a_tool_name(client: Client) -> None:
    """`{"tool": ""}` is no tool anybody could have: 422 naming `tool`, not 404."""
    resp = await client.post("/v1/exemplars", json={"query": "weather in Turin", "tool": ""})
    error = await error_of(resp, 422)
    assert (error["code"], error["field"]) == ("invalid_request", "tool")
    missing = await client.post("/v1/exemplars", json={"query": "weather", "tool": "nope"})
    assert await field_of(missing, 404) == "tool"


async def test_a_type_error_is_worded_as_one(client: Client) -> None:
    """A pack that is not a string says so, not that it should be "non-empty"."""
    resp = await client.put("/v1/tools", json={**TOOLS, "pack": 5})
    error = await error_of(resp, 422)
    assert (error["field"], error["message"]) == (
        "pack",
        "expected a pack name (a string), got a number (5)",
    )


async def test_a_huge_number_is_echoed_cut(client: Client) -> None:
    """`k` or `companions` of 1e308 (a 309-digit integer once read) is echoed cut to 80
    characters, as every echoed value is."""
    for field in ("k", "companions"):
        body = b'{"query": "weather", "%s": 1e308}' % field.encode()
        resp = await client.post(
            "/v1/rank", data=body, headers={"Content-Type": "application/json"}
        )
        error = await error_of(resp, 422)
        assert error["field"] == field
        echoed = error["message"].split(", got ")[1]
        assert len(echoed) == 80 and echoed.startswith("1000") and echoed.endswith("...")


async def test_a_path_must_be_well_escaped(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """`/v1/tools/%ff` is no name (`%ff` is not UTF-8; the tool named `%ff` is `%25ff`): 400
    `invalid_path` naming the path parameter, on every route that takes one."""
    client, service = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,))
    await service.catalog.upsert_tools([Tool("%ff", "A tool named with a percent sign.")])
    admin = bearer(ADMIN)
    named = await client.get(URL("/v1/tools/%25ff", encoded=True), headers=admin)
    assert named.status == 200 and (await named.json())["name"] == "%ff"
    made = await create(client, "default", "agent")
    for method, path, field in (
        ("GET", "/v1/tools/%ff", "name"),
        ("GET", "/v1/tools/%zz", "name"),
        ("GET", "/v1/tools/%ff/exemplars", "name"),
        ("DELETE", "/v1/tools/%ff", "name"),
        ("DELETE", "/v1/exemplars/%C3%28", "id"),
        ("GET", "/v1/analytics/%ff", "name"),
        ("DELETE", "/v1/keys/%ff", "id"),
    ):
        resp = await client.request(method, URL(path, encoded=True), headers=admin)
        error = await error_of(resp, 400)
        assert (error["code"], error["field"]) == ("invalid_path", field), path
        assert path in error["message"]
    assert [t.name for t in await service.store.list_tools()] == ["%ff"]
    assert made["id"] in [k.id for k in await service.store.list_keys() if k.active]
