"""`/openapi.json`: every route the app serves is documented (the key routes with their models),
and `/v1/*` names the bearer key and the refusals of keys and limits (401, 403, 429)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

import toolselect.api
from tests.services import ClientFactory, ServiceFactory
from toolselect.api.app import _app
from toolselect.api.openapi import openapi_document, served_document
from toolselect.config import Settings
from toolselect.keys import TENANT_HEADER
from toolselect.records import Tool

# Served but not API operations: the document itself, Prometheus text and the dashboard's files.
UNDOCUMENTED = {"/openapi.json", "/metrics", "/ui", "/ui/", "/ui/{name}"}
KEY_REFUSALS = {"401", "403", "429"}


def _served() -> set[tuple[str, str]]:
    """(method, path) of every route the served app registers, HEAD left out."""
    app = _app(Settings())
    return {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }


def _ref(content: dict[str, Any]) -> str:
    ref: str = content["application/json"]["schema"]["$ref"]
    return ref.rsplit("/", 1)[1]


def test_every_served_route_is_documented() -> None:
    """Each route of the app (but the document, `/metrics` and the dashboard) is an operation
    of the document, and the document names no route the app does not serve."""
    doc = openapi_document()
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    served = {(method, path) for method, path in _served() if path not in UNDOCUMENTED}
    assert documented == served


def test_key_routes_have_their_models() -> None:
    """`POST /v1/keys` takes `KeyCreateRequest` and answers `201 KeyCreated`; `GET /v1/keys`
    (`?tenant=`) answers `KeyList`; `DELETE /v1/keys/{id}` answers `KeyRevoked`."""
    doc = openapi_document()
    create = doc["paths"]["/v1/keys"]["post"]
    assert _ref(create["requestBody"]["content"]) == "KeyCreateRequest"
    assert _ref(create["responses"]["201"]["content"]) == "KeyCreated"
    listing = doc["paths"]["/v1/keys"]["get"]
    assert _ref(listing["responses"]["200"]["content"]) == "KeyList"
    assert [p["name"] for p in listing["parameters"]] == ["tenant", TENANT_HEADER]
    revoke = doc["paths"]["/v1/keys/{id}"]["delete"]
    assert _ref(revoke["responses"]["200"]["content"]) == "KeyRevoked"
    assert revoke["parameters"][0] == {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }
    schemas = doc["components"]["schemas"]
    assert set(schemas["KeyCreateRequest"]["required"]) == {"tenant", "role"}
    assert schemas["KeyCreateRequest"]["properties"]["role"]["enum"] == ["agent", "editor", "admin"]
    assert "key" in schemas["KeyCreated"]["required"]
    assert "key" not in schemas["KeyOut"]["properties"]
    assert "hash" not in schemas["KeyOut"]["properties"]


def test_v1_operations_name_the_key_and_its_refusals() -> None:
    """Every `/v1/*` operation needs the `bearer` scheme and may answer 401 (with
    `WWW-Authenticate`), 403 and 429 (with `Retry-After`) in the error model; health and
    readiness need no key and answer none of the three. Each `/v1/*` operation may be sent
    the optional X-Toolselect-Tenant header."""
    doc = openapi_document()
    scheme = doc["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            refusals = KEY_REFUSALS & set(op["responses"])
            if not path.startswith("/v1/"):
                assert refusals == set() and "security" not in op, (method, path)
                assert "parameters" not in op, (method, path)
                continue
            assert refusals == KEY_REFUSALS, (method, path)
            assert op["security"] == [{"bearer": []}]
            for status in KEY_REFUSALS:
                assert _ref(op["responses"][status]["content"]) == "ErrorResponse"
            assert "WWW-Authenticate" in op["responses"]["401"]["headers"]
            assert "Retry-After" in op["responses"]["429"]["headers"]
            assert op["responses"]["401"]["description"].startswith("unauthorized")
            assert op["responses"]["403"]["description"].startswith("forbidden")
            assert op["responses"]["429"]["description"].startswith("rate_limited")
            [tenant] = [p for p in op["parameters"] if p["in"] == "header"]
            assert (tenant["name"], tenant["required"]) == (TENANT_HEADER, False), (method, path)


@pytest_asyncio.fixture(loop_scope="function")
async def sqlite(tmp_path: Path) -> AsyncIterator[ServiceFactory]:
    factory = ServiceFactory("sqlite", tmp_path, None)
    yield factory
    await factory.aclose()


async def test_served_document_lists_the_key_routes(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """The running app's `/openapi.json`, open even with keys on, is the whole document with
    `/v1/keys` and `/v1/keys/{id}`."""
    client, _ = await sqlite.serve(aiohttp_client, api_keys=("k-admin-openapi",))
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    doc = await resp.json()
    assert doc == served_document(frozenset(openapi_document()["paths"]), Settings())
    assert set(doc["paths"]["/v1/keys"]) == {"post", "get"}
    assert set(doc["paths"]["/v1/keys/{id}"]) == {"delete"}


async def test_served_document_states_the_configured_limits(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A server configured with other limits says so in its document: `k`'s maximum, the batch
    size and the query size are the ones it enforces, not the defaults."""
    client, _ = await sqlite.serve(aiohttp_client, max_k=10, max_query_bytes=100, max_batch=5)
    schemas = (await (await client.get("/openapi.json")).json())["components"]["schemas"]
    k = schemas["RankRequest"]["properties"]["k"]
    assert (k["maximum"], k["default"]) == (10, 5)
    assert k["description"] == (
        "How many tools to return (1..max_k, 10 here; 5, or max_k when lower, when absent)."
    )
    assert schemas["ObserveBatchRequest"]["properties"]["turns"]["maxItems"] == 5
    query = schemas["RankRequest"]["properties"]["query"]["description"]
    assert query == "The request to rank tools for (1 byte .. 100 bytes UTF-8)."
    rank = await client.post("/v1/rank", json={"query": "weather", "k": 11})
    assert rank.status == 422  # the limit the document states is the one enforced


async def test_a_max_k_below_the_default_k_is_the_default(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """With `TOOLSELECT_MAX_K=3` a rank that names no k answers 3 tools (the document says
    so), while a k of 4 named is still the caller's mistake."""
    client, service = await sqlite.serve(aiohttp_client, max_k=3)
    await service.catalog.upsert_tools([Tool(f"tool_{i}", f"Tool number {i}.") for i in range(6)])
    k = (await (await client.get("/openapi.json")).json())["components"]["schemas"]
    assert (k["RankRequest"]["properties"]["k"]["default"]) == 3
    resp = await client.post("/v1/rank", json={"query": "tool number"})
    assert resp.status == 200, await resp.text()
    assert len((await resp.json())["results"]) == 3
    assert (await client.post("/v1/rank", json={"query": "tool", "k": 4})).status == 422


async def test_documented_pack_limits_are_the_enforced_ones(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Each place a pack is named states its limits, and a pack one past them is refused there
    while one at them is taken: rank's `pack`, select's `PackID`, the catalog's `?pack=`, where
    the empty string names none (the zero value a Go or JS client sends, a query's only way)."""
    client, _ = await sqlite.serve(aiohttp_client)
    doc = await (await client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    rank_pack = schemas["RankRequest"]["properties"]["pack"]
    pack_id = schemas["PromptKitQuery"]["properties"]["PackID"]
    query_packs = [
        param["schema"]
        for method in ("get", "put")
        for param in doc["paths"]["/v1/tools"][method]["parameters"]
        if param["name"] == "pack"
    ]
    longest = rank_pack["maxLength"]
    assert pack_id["maxLength"] == longest
    assert [schema["maxLength"] for schema in query_packs] == [longest, longest]
    assert rank_pack["pattern"] == pack_id["pattern"] == "^$|\\S"
    assert [s["pattern"] for s in query_packs] == ["^$|\\S", "^$|\\S"]

    def select(pack: str) -> dict[str, Any]:
        return {"query": {"Text": "x", "K": 1, "PackID": pack}, "candidates": [{"ID": "a"}]}

    for pack, status in (("p" * longest, 200), ("p" * (longest + 1), 422), (" ", 422)):
        assert (await client.post("/v1/rank", json={"query": "x", "pack": pack})).status == status
        assert (await client.post("/v1/select", json=select(pack))).status == status
        assert (await client.get("/v1/tools", params={"pack": pack})).status == status
    assert (await client.post("/v1/rank", json={"query": "x", "pack": ""})).status == 200
    assert (await client.post("/v1/select", json=select(""))).status == 200
    assert (await client.get("/v1/tools", params={"pack": ""})).status == 200


async def test_documented_tenant_header_limits_are_the_enforced_ones(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """The X-Toolselect-Tenant the document states is the one the server takes: a name at its
    maxLength acts on that tenant, one past it is refused 422 naming the header, and its
    pattern accepts exactly the names the server accepts."""
    client, _ = await sqlite.serve(aiohttp_client)  # no key: any request may name a tenant
    doc = await (await client.get("/openapi.json")).json()
    [header] = [p for p in doc["paths"]["/v1/whoami"]["get"]["parameters"] if p["in"] == "header"]
    schema = header["schema"]
    assert (header["name"], schema["minLength"]) == (TENANT_HEADER, 1)

    async def acts_on(tenant: str) -> bool:
        resp = await client.get("/v1/whoami", headers={TENANT_HEADER: tenant})
        if resp.status == 200:
            assert (await resp.json())["tenant"] == tenant
            return True
        assert resp.status == 422, await resp.text()
        assert (await resp.json())["error"]["field"] == TENANT_HEADER
        return False

    longest = schema["maxLength"]
    assert await acts_on("t" * longest)
    assert not await acts_on("t" * (longest + 1))
    names = ("a", "0", "team-a", "team_b", "-team", "_team", "Team", "team a", "team.a", "tëam")
    for name in names:
        assert await acts_on(name) == (re.search(schema["pattern"], name) is not None), name


async def test_documented_context_and_key_tenant_rules_are_the_enforced_ones(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A `context` message follows the query's rule (not blank) in the document as on the
    server, and `GET /v1/keys?tenant=` the tenant rule: what the document refuses the server
    refuses (422 naming it), and a value the document takes is taken."""
    client, _ = await sqlite.serve(aiohttp_client)
    doc = await (await client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    query = schemas["RankRequest"]["properties"]["query"]
    for model in ("RankRequest", "SelectRequest"):
        context = schemas[model]["properties"]["context"]["anyOf"][0]["items"]
        assert (context["minLength"], context["pattern"]) == (1, query["pattern"]), model
    select = {"query": {"Text": "x", "K": 1}, "candidates": [{"ID": "a"}]}
    for context, status in (([""], 422), ([" "], 422), (["earlier"], 200)):
        rank = await client.post("/v1/rank", json={"query": "x", "context": context})
        assert rank.status == status, await rank.text()
        chosen = await client.post("/v1/select", json={**select, "context": context})
        assert chosen.status == status, await chosen.text()
        if status == 422:
            assert (await rank.json())["error"]["field"] == "context[0]"
    (tenant,) = [
        p["schema"] for p in doc["paths"]["/v1/keys"]["get"]["parameters"] if p["name"] == "tenant"
    ]
    header = doc["paths"]["/v1/keys"]["get"]["parameters"][-1]["schema"]
    assert tenant == header and tenant["minLength"] == 1
    for value, status in (("", 422), ("Team A", 422), ("team-a", 200)):
        resp = await client.get("/v1/keys", params={"tenant": value})
        assert resp.status == status, (value, await resp.text())
        assert re.search(tenant["pattern"], value) is not None or status == 422
        if status == 422:
            assert (await resp.json())["error"]["field"] == "query.tenant"


# Raised by the HTTP API but answering no documented operation: a method a route does not take,
# a client that left (nobody reads the answer).
_UNDOCUMENTED = {("405", "method_not_allowed"), ("499", "client_closed")}


def test_every_error_the_api_raises_is_in_the_document() -> None:
    """Each (status, code) an `HttpError` of the HTTP API is raised with is named in that
    status's response of the `/v1/*` operations: 408, 417 and the twice-sent header were
    answered but not documented."""
    api = Path(toolselect.api.__file__).parent
    raised = {
        (status, code)
        for path in api.glob("*.py")
        for status, code in re.findall(r'HttpError\(\s*(\d{3}),\s*"(\w+)"', path.read_text())
    }
    assert raised  # the pattern still finds the errors as they are written
    op = openapi_document()["paths"]["/v1/rank"]["post"]["responses"]
    missing = {
        (status, code)
        for status, code in raised - _UNDOCUMENTED
        if status != "500" and code not in op.get(status, {}).get("description", "")
    }
    assert missing == set()
