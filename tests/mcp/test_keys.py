"""API keys on `toolselect mcp --transport http`: the same keys as the HTTP API, the role of each
tool and resource (`keys.MCP_ROLES`), tenants, revocation within the poll interval, rate limits
and the public bind. A real process on a SQLite store whose keys the CLI makes, reached with the
MCP SDK's own client and with plain HTTP; the limits on the in-process server behind uvicorn."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pytest
import uvicorn
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import INVALID_PARAMS
from multidict import CIMultiDict

from tests.mcp.conftest import CATALOG, EXE, run_cli, stop, wait_for_port
from tests.mcp.test_readme import block
from tests.mcp.test_server import read_json, text
from tests.services import ServiceFactory, cli_env, free_port
from toolselect.clock import utc_now
from toolselect.config import Settings
from toolselect.keys import MCP_ROLES, TENANT_HEADER, mcp_role, mcp_rule, new_key, tenant_file
from toolselect.mcp_http import http_config
from toolselect.mcp_server import ToolselectMCP, build_server
from toolselect.service import Service

ADMIN = "k-mcp-admin-3b9d"  # the TOOLSELECT_API_KEYS key of the servers here
POLL_S = 0.5
ROLES = {"agent": ("default", "agent"), "editor": ("default", "editor"),
         "team_agent": ("team-a", "agent"), "team_editor": ("team-a", "editor")}  # fmt: skip
SEARCH = {"query": "what's the weather in Turin tomorrow?", "k": 1}
KEY_SHOWN = "tsk_..."  # how the README's block shows a key


@dataclass(frozen=True)
class Keyed:
    """A running `toolselect mcp --transport http` with keys: its URL, store, log and keys."""

    url: str
    db: Path
    log: Path
    keys: dict[str, str]  # name in ROLES -> the key


def create_key(db: Path, tenant: str, role: str) -> dict[str, Any]:
    """`toolselect keys create` on the store `db`: the key's JSON, the key included."""
    done = run_cli(["keys", "create", "--tenant", tenant, "--role", role], cli_env(db))
    assert done.returncode == 0, done.stderr
    made: dict[str, Any] = json.loads(done.stdout)
    return made


def bearer(key: str, tenant: str | None = None) -> dict[str, str]:
    """The headers of a request with `key` (acting on `tenant` when given)."""
    headers = {"Authorization": f"Bearer {key}"}
    if tenant is not None:
        headers["X-Toolselect-Tenant"] = tenant
    return headers


@asynccontextmanager
async def connected(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """An SDK client session on `url` sending `headers` with every request."""
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as client,
    ):
        yield client


async def initialize(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    """An MCP `initialize` POSTed to `url`: status, headers and body (JSON when it is)."""
    ping = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    sent = {"Accept": "application/json, text/event-stream", **(headers or {})}
    async with aiohttp.ClientSession() as session, session.post(url, json=ping, headers=sent) as r:
        raw = await r.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        return r.status, r.headers, body


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    """The three-tool store with one key per entry of ROLES (made by the CLI), served over HTTP
    with the configured admin key ADMIN and a short poll interval."""
    folder = tmp_path_factory.mktemp("mcp-keys")
    db = folder / "store.db"
    catalog = folder / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    assert run_cli(["tools", "import", str(catalog)], cli_env(db)).returncode == 0
    keys = {name: create_key(db, *spec)["key"] for name, spec in ROLES.items()}
    port = free_port()
    log = folder / "mcp-http.log"
    env = cli_env(db, TOOLSELECT_API_KEYS=ADMIN, TOOLSELECT_POLL_INTERVAL=str(POLL_S))
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [*EXE, "mcp", "--transport", "http", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    try:
        wait_for_port(port, proc, log)
        yield Keyed(f"http://127.0.0.1:{port}/mcp", db, log, keys)
    finally:
        stop(proc, log)
    logged = log.read_text()
    assert not [name for name, key in {**keys, "admin": ADMIN}.items() if key in logged]


async def test_every_tool_and_resource_has_a_role() -> None:
    """Each tool, resource and resource template the server registers falls under an entry of
    `MCP_ROLES`, and each entry covers something registered: agents search and report,
    labels and every resource need an editor."""
    server = build_server(Settings(embedder="hashing"))
    registered: list[tuple[Literal["tool", "resource"], str]] = [
        ("tool", t.name) for t in await server.list_tools()
    ]
    registered += [("resource", str(r.uri)) for r in await server.list_resources()]
    registered += [("resource", t.uri_template) for t in await server.list_resource_templates()]
    rules = {(kind, name): mcp_rule(kind, name) for kind, name in registered}
    assert [item for item, rule in rules.items() if rule is None] == []
    assert set(rules.values()) == set(MCP_ROLES)
    assert {name for (kind, name), role in MCP_ROLES.items() if role == "agent"} == {
        "search_tools",
        "report_turn",
    }
    assert mcp_role("resource", "toolselect://analytics/drift?since=2020-01-01") == "editor"
    assert mcp_role("tool", "manage_keys") == "admin"  # without a rule


async def test_requests_without_a_valid_key_are_refused_401(keyed: Keyed) -> None:
    """No `Authorization`, another scheme, or an unknown key: `401 unauthorized` with
    `WWW-Authenticate: Bearer` and the API's JSON error, never echoing the key sent."""
    wrong = "tsk_not-a-key-0123456789"
    for headers in ({}, {"Authorization": f"Basic {wrong}"}, {"Authorization": f"Bearer {wrong}"}):
        status, sent_back, body = await initialize(keyed.url, headers)
        assert status == 401, body
        assert sent_back["WWW-Authenticate"] == "Bearer"
        assert body["error"]["code"] == "unauthorized"
        assert body["error"]["field"] == "Authorization"
        assert "Bearer" in body["error"]["message"]
        assert wrong not in json.dumps(body)
    status, _, body = await initialize(keyed.url, bearer(ADMIN))
    assert status == 200, body
    assert wrong not in keyed.log.read_text()


async def test_a_key_or_tenant_sent_twice_is_refused_400(keyed: Keyed) -> None:
    """Two `Authorization` headers (an agent's and an admin's key, either way round) or two
    tenant headers are `400 bad_request` naming the header, as on the HTTP API."""
    agent, admin = f"Bearer {keyed.keys['agent']}", f"Bearer {ADMIN}"
    twice = [
        [("Authorization", agent), ("Authorization", admin)],
        [("Authorization", admin), ("Authorization", agent)],
        [("Authorization", admin), (TENANT_HEADER, "team-a"), (TENANT_HEADER, "default")],
    ]
    for pairs in twice:
        headers = CIMultiDict([("Accept", "application/json, text/event-stream"), *pairs])
        async with (
            aiohttp.ClientSession() as session,
            session.post(keyed.url, json={}, headers=headers) as resp,
        ):
            body = await resp.json()
        assert (resp.status, body["error"]["code"]) == (400, "bad_request"), body
        assert body["error"]["field"] == pairs[-1][0]


async def test_an_agent_searches_and_reports_but_reads_no_resource(keyed: Keyed) -> None:
    """An agent key lists and calls search_tools and report_turn; label_turn is an `isError`
    result naming the editor role, and a resource read a JSON-RPC error saying the same; a tool
    that does not exist is unknown, not forbidden."""
    async with connected(keyed.url, bearer(keyed.keys["agent"])) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        found = await client.call_tool("search_tools", SEARCH)
        assert not found.is_error, text(found)
        body = found.structured_content
        assert body is not None and body["tools"][0]["name"] == "get_weather"
        report = {"request": SEARCH["query"], "used_tool": "get_weather",
                  "search_id": body["search_id"], "outcome": "ok"}  # fmt: skip
        reported = await client.call_tool("report_turn", report)
        labelled = await client.call_tool("label_turn", {"query": "rain?", "tool": "get_weather"})
        unknown = await client.call_tool("no_such_tool", {})
        refused = []
        for uri in ("toolselect://catalog", "toolselect://analytics/drift?since=2020-01-01"):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            refused.append(caught.value.message)
    assert names == {"search_tools", "report_turn", "label_turn"}
    assert reported.structured_content == {"queued": True, "reason": None}, text(reported)
    assert unknown.is_error and "Unknown tool" in text(unknown), text(unknown)  # not a role
    assert labelled.is_error
    assert text(labelled) == (
        "forbidden: expected a key of role editor or above for tool label_turn, got role agent"
    )
    assert refused == [
        "forbidden: expected a key of role editor or above for resource toolselect://catalog, "
        "got role agent",
        "forbidden: expected a key of role editor or above for resource "
        "toolselect://analytics/drift?since=2020-01-01, got role agent",
    ]


async def test_a_resource_that_does_not_exist_is_unknown_whatever_the_role(
    keyed: Keyed,
) -> None:
    """A URI no resource has is `Unknown resource` (-32602) for an agent as for an editor, not
    a role the agent lacks; an analysis that exists is still forbidden to the agent."""
    unknown = ("toolselect://nope", "toolselect://analytics/nope?since=2020-01-01")
    for key in (keyed.keys["agent"], keyed.keys["editor"]):
        async with connected(keyed.url, bearer(key)) as client:
            with pytest.raises(MCPError) as nope:
                await client.read_resource(unknown[0])
            with pytest.raises(MCPError) as analysis:
                await client.read_resource(unknown[1])
        assert (nope.value.code, nope.value.message) == (
            INVALID_PARAMS,
            "Unknown resource: toolselect://nope",
        )
        assert analysis.value.code == INVALID_PARAMS
        assert "forbidden" not in analysis.value.message, analysis.value.message
    async with connected(keyed.url, bearer(keyed.keys["agent"])) as client:
        with pytest.raises(MCPError, match=r"^forbidden"):
            await client.read_resource("toolselect://analytics/drift")


async def test_an_editor_reads_resources_and_labels(keyed: Keyed) -> None:
    """An editor key reads the catalog and the analyses and records a label; so does the
    configured admin key."""
    for key in (keyed.keys["editor"], ADMIN):
        async with connected(keyed.url, bearer(key)) as client:
            catalog = await read_json(client, "toolselect://catalog")
            index = await read_json(client, "toolselect://analytics")
            drift = await read_json(client, "toolselect://analytics/drift?since=2000-01-01")
            labelled = await client.call_tool(
                "label_turn", {"query": "is it going to rain in Oslo?", "tool": "get_weather"}
            )
        assert {t["name"] for t in catalog["tools"]} == {"send_email", "get_weather", "web_search"}
        assert "toolselect://analytics/drift" in index["analyses"]
        assert drift["name"] == "drift"
        assert not labelled.is_error, text(labelled)


async def test_another_tenants_key_reaches_only_its_own_data(keyed: Keyed) -> None:
    """A key of tenant `team-a` acts on team-a's own (empty) data, never `default`'s: search
    finds nothing, a turn is queued, the catalog reads empty and a label of a default tool is
    an unknown tool; an admin acting on `team-b` (`X-Toolselect-Tenant`), a tenant with no key
    and no data, is told so by a search (which would only make its store) until a reported
    turn starts it; a non-admin naming another tenant is `403 forbidden`."""
    async with connected(keyed.url, bearer(keyed.keys["team_agent"])) as client:
        found = await client.call_tool("search_tools", SEARCH)
        assert not found.is_error, text(found)
        assert found.structured_content is not None
        assert found.structured_content["tools"] == []
        reported = await client.call_tool(
            "report_turn", {"request": "hi", "used_tool": "web_search"}
        )
        assert not reported.is_error, text(reported)
    async with connected(keyed.url, bearer(keyed.keys["team_editor"])) as client:
        assert (await read_json(client, "toolselect://catalog")) == {"tools": []}
        labelled = await client.call_tool("label_turn", {"query": "rain?", "tool": "get_weather"})
        assert labelled.is_error and "get_weather" in text(labelled), text(labelled)
    async with connected(keyed.url, bearer(ADMIN, "team-b")) as client:
        # team-b has no key and no data: a search would only make its store; a turn makes it.
        unknown = await client.call_tool("search_tools", SEARCH)
        assert unknown.is_error and "no tenant 'team-b'" in text(unknown), text(unknown)
        assert not tenant_file(keyed.db, "team-b").exists()
        reported = await client.call_tool("report_turn", {"request": "hi", "used_tool": "x"})
        assert not reported.is_error, text(reported)
        result = await client.call_tool("search_tools", SEARCH)
        assert not result.is_error, text(result)
        assert result.structured_content is not None
        assert result.structured_content["tools"] == []
    status, _, body = await initialize(keyed.url, bearer(keyed.keys["agent"], "team-a"))
    assert status == 403, body
    assert (body["error"]["code"], body["error"]["field"]) == ("forbidden", "X-Toolselect-Tenant")


async def test_a_key_made_or_revoked_by_the_cli_counts_within_the_poll_interval(
    keyed: Keyed,
) -> None:
    """A key created by `toolselect keys create` while the server runs is accepted, and once
    `toolselect keys revoke` has run it is refused 401, each within the poll interval."""

    async def status_after(key: str, wanted: int) -> float:
        started = time.monotonic()
        while (status := (await initialize(keyed.url, bearer(key)))[0]) != wanted:
            assert time.monotonic() - started < 10 * POLL_S, status
            await asyncio.sleep(0.05)
        return time.monotonic() - started

    made = create_key(keyed.db, "default", "agent")
    assert await status_after(made["key"], 200) <= POLL_S + 1.0
    async with connected(keyed.url, bearer(made["key"])) as client:
        assert not (await client.call_tool("search_tools", SEARCH)).is_error
    done = run_cli(["keys", "revoke", made["id"]], cli_env(keyed.db))
    assert done.returncode == 0, done.stderr
    assert await status_after(made["key"], 401) <= POLL_S + 1.0


def test_a_public_bind_needs_keys(tmp_path: Path) -> None:
    """`--host 0.0.0.0` without any key, configured or stored, refuses to start with one line
    saying so, like `serve`."""
    done = run_cli(
        ["mcp", "--transport", "http", "--host", "0.0.0.0", "--port", str(free_port())],
        cli_env(tmp_path / "s.db"),
    )
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]  # after the log of the store looked at for keys
    assert last.startswith("toolselect mcp: refusing to serve on 0.0.0.0 without API keys")


@pytest.fixture
def public(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """`mcp --transport http --host 0.0.0.0` on a store holding one active agent key, and no
    key configured: its loopback URL, the key and its log."""
    db = tmp_path / "store.db"
    catalog = tmp_path / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    assert run_cli(["tools", "import", str(catalog)], cli_env(db)).returncode == 0
    key = create_key(db, "default", "agent")["key"]
    port = free_port()
    log = tmp_path / "mcp.log"
    argv = [*EXE, "mcp", "--transport", "http", "--host", "0.0.0.0", "--port", str(port)]
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            argv, env=cli_env(db), stdout=subprocess.DEVNULL, stderr=stderr, text=True
        )
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}/mcp", key, log
    finally:
        stop(proc, log)
    assert key not in log.read_text()


async def test_a_public_bind_with_a_stored_key_starts(public: tuple[str, str, Path]) -> None:
    """With an active key in the store, `--host 0.0.0.0` serves: no key is 401, the stored
    key searches."""
    url, key, _ = public
    assert (await initialize(url))[0] == 401
    async with connected(url, bearer(key)) as client:
        found = await client.call_tool("search_tools", SEARCH)
    assert not found.is_error, text(found)


async def test_the_readme_keyed_config_block_connects(keyed: Keyed) -> None:
    """The README's `mcpServers` block with a key: its `Authorization` header, the key put in,
    reaches the tools."""
    entry = json.loads(block("mcp-http-keys-config"))["mcpServers"]["toolselect"]
    assert entry["type"] == "http" and entry["url"].endswith("/mcp")
    header = entry["headers"]["Authorization"]
    assert header == f"Bearer {KEY_SHOWN}"
    headers = {**entry["headers"], "Authorization": header.replace(KEY_SHOWN, keyed.keys["agent"])}
    async with connected(keyed.url, headers) as client:
        found = await client.call_tool("search_tools", SEARCH)
    assert not found.is_error, text(found)


@asynccontextmanager
async def serving_server(
    service: Service, **app_options: Any
) -> AsyncIterator[tuple[str, ToolselectMCP]]:
    """The in-process MCP server over `service`, behind uvicorn on a free port (as `run` serves
    it: `http_config`, given `app_options`); yields its URL and the server (its `running`
    holds the tenants' services)."""
    settings = service.settings.override(host="127.0.0.1", port=free_port())
    mcp = build_server(settings, service)
    server = uvicorn.Server(http_config(mcp, mcp.running, settings, **app_options))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), task
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{settings.port}/mcp", mcp
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def serving(service: Service, **app_options: Any) -> AsyncIterator[str]:
    """`serving_server`'s URL alone."""
    async with serving_server(service, **app_options) as (url, _):
        yield url


@asynccontextmanager
async def in_process(services: ServiceFactory, **overrides: Any) -> AsyncIterator[str]:
    """`serving` a service started on these settings."""
    async with serving(await services.start(wait_for_store=True, **overrides)) as url:
        yield url


@pytest.fixture
def sqlite_services(tmp_path: Path) -> Iterator[ServiceFactory]:
    """Services on a SQLite file (closed by the test's own `aclose`)."""
    yield ServiceFactory("sqlite", tmp_path, None)


async def test_the_rate_limit_is_per_tenant(sqlite_services: ServiceFactory) -> None:
    """Beyond `TOOLSELECT_TENANT_RPS` (one request, then one every 2 s) a tenant's next request
    is `429 rate_limited` with `Retry-After: 2`, while another tenant's key still passes; a
    refused key spends nothing."""
    try:
        async with in_process(
            sqlite_services, api_keys=(ADMIN,), tenant_rps=0.5, tenant_burst=1
        ) as url:
            service = sqlite_services.started[0]
            secret, record = new_key("team-a", "agent", utc_now())
            await service.store.save_key(record)
            service.keys.add(record)
            admin = {"Authorization": f"Bearer {ADMIN}"}
            assert (await initialize(url, {"Authorization": "Bearer wrong"}))[0] == 401
            assert (await initialize(url, admin))[0] == 200
            status, headers, body = await initialize(url, admin)
            other = await initialize(url, {"Authorization": f"Bearer {secret}"})
    finally:
        await sqlite_services.aclose()
    assert status == 429, body
    assert headers["Retry-After"] == "2"
    assert body["error"]["code"] == "rate_limited"
    assert body["error"]["message"] == "tenant 'default' sent more than 0.5 requests per second"
    assert other[0] == 200, other


async def test_a_session_answers_only_the_key_that_opened_it(keyed: Keyed) -> None:
    """Another tenant's key holding a session's id can neither use nor end it (404, as for a
    session that does not exist); the key that opened it goes on using it."""
    status, headers, _ = await initialize(keyed.url, bearer(keyed.keys["agent"]))
    assert status == 200
    session = headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}

    async def post(key: str, method: str = "POST") -> tuple[int, Any]:
        sent = {"Accept": "application/json, text/event-stream", "mcp-session-id": session,
                "mcp-protocol-version": "2025-06-18", **bearer(key)}  # fmt: skip
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, keyed.url, json=listing, headers=sent) as r,
        ):
            return r.status, await r.read()

    for method in ("POST", "DELETE"):
        status, body = await post(keyed.keys["team_agent"], method)
        assert status == 404, body
        assert json.loads(body)["error"]["field"] == "mcp-session-id"
    status, body = await post(keyed.keys["agent"])
    assert status == 200 and b"search_tools" in body, body
