"""The MCP tools and resources of `toolselect mcp`, through the SDK's client on both transports."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent, TextResourceContents

from tests.mcp.conftest import CATALOG, EXE, Connect, run_cli, stdio_params
from tests.neo4j_server import Neo4jServer
from tests.services import cli_env, free_port, wipe
from toolselect.analytics import registry
from toolselect.config import MAX_CONTEXT_MESSAGES, MAX_PREVIOUS_TOOLS, Settings
from toolselect.mcp_server import build_server
from toolselect.records import Exemplar, Turn
from toolselect.store.factory import open_store
from toolselect.store.port import Store, lookup_one


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def read_json(client: Client, uri: str) -> Any:
    result = await client.read_resource(uri)
    block = result.contents[0]
    assert isinstance(block, TextResourceContents)
    assert block.mime_type == "application/json"
    return json.loads(block.text)


@asynccontextmanager
async def project_store(db: Path) -> AsyncIterator[Store]:
    """The store `db` through the project's own Store API, as another process sees it."""
    store = await open_store(Settings(store=f"sqlite:{db}", data_dir=str(db.parent)))
    try:
        await store.migrate()
        yield store
    finally:
        await store.close()


async def stored_turn(store: Store, turn_id: str) -> Turn:
    """The turn once the server's learner has written it."""
    deadline = time.monotonic() + 30
    while (turn := await store.get_turn(turn_id)) is None:
        assert time.monotonic() < deadline, f"turn {turn_id} never reached the store"
        await asyncio.sleep(0.2)
    return turn


async def stored_label(store: Store, query: str) -> Exemplar:
    """The label the server's learner saved for `query`."""
    deadline = time.monotonic() + 30
    while (exemplar := await lookup_one(store, query)) is None:
        assert time.monotonic() < deadline, f"no label for {query!r} reached the store"
        await asyncio.sleep(0.2)
    return exemplar


async def test_lists_the_three_tools_with_schemas(connect: Connect) -> None:
    """tools/list offers search_tools, report_turn and label_turn, each requiring its fields;
    search_tools answers a search_id that report_turn takes back."""
    async with connect() as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == {"search_tools", "report_turn", "label_turn"}
    assert listed["search_tools"].input_schema["required"] == ["query"]
    output = listed["search_tools"].output_schema
    assert output is not None
    assert "search_id" in output["required"]
    assert "report_turn" in output["properties"]["search_id"]["description"]
    report = listed["report_turn"].input_schema
    assert set(report["required"]) == {"request"}  # used_tool or used_tools: turn_problem
    assert {"search_id", "used_tools", "session_id"} <= set(report["properties"])
    assert "search_id" in (listed["report_turn"].description or "")
    assert set(listed["label_turn"].input_schema["required"]) == {"query", "tool"}
    assert listed["search_tools"].annotations is not None
    assert listed["search_tools"].annotations.read_only_hint is True


async def test_search_tools_declares_the_bounds_it_enforces(connect: Connect) -> None:
    """The input schema states what the service refuses beyond: k in 1..max_k (the server's
    setting), at most 64 previous_tools and 50 context messages (the service's own bounds)."""
    async with connect() as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    small = build_server(Settings(embedder="hashing", max_k=7))
    tuned = {t.name: t for t in await small.list_tools()}["search_tools"].input_schema
    schema = listed["search_tools"].input_schema["properties"]
    assert (schema["k"]["minimum"], schema["k"]["maximum"]) == (1, 100)
    assert tuned["properties"]["k"]["maximum"] == 7
    assert schema["previous_tools"]["maxItems"] == MAX_PREVIOUS_TOOLS == 64
    assert schema["context"]["maxItems"] == MAX_CONTEXT_MESSAGES == 50
    again = {t.name: t for t in await small.list_tools()}["search_tools"].input_schema
    assert again == tuned  # declared afresh on each listing, never stacked


async def test_search_tools_puts_the_obvious_tool_first(connect: Connect) -> None:
    """An email request ranks send_email first, with its description, input schema and margin."""
    async with connect() as client:
        result = await client.call_tool(
            "search_tools", {"query": "send the quarterly report to Marco by email", "k": 2}
        )
    assert not result.is_error, text(result)
    body = result.structured_content
    assert body is not None
    assert body["tools"][0]["name"] == "send_email"
    assert len(body["tools"]) == 2
    top = body["tools"][0]
    assert top["description"] == "Send an email message to a recipient."
    assert top["inputSchema"]["required"] == ["to"]
    assert body["tools"][0]["score"] >= body["tools"][1]["score"]
    assert body["margin"] == pytest.approx(top["score"] - body["tools"][1]["score"])
    assert body["embedder"] == "hashing-v1"
    assert json.loads(text(result)) == body


async def test_report_turn_reaches_the_store(connect: Connect, store_db: Path) -> None:
    """A reported turn is queued and the learner writes it to the store under its turn id."""
    turn_id = uuid.uuid4().hex
    async with connect() as client:
        result = await client.call_tool(
            "report_turn",
            {
                "request": "what's the weather in Turin tomorrow?",
                "used_tool": "web_search",
                "outcome": "ok",
                "turn_id": turn_id,
                "agent_id": "agent-7",
            },
        )
        assert not result.is_error, text(result)
        assert result.structured_content == {"queued": True, "reason": None}
        # Read back while the server still runs: another process's view of the store.
        async with project_store(store_db) as store:
            deadline = time.monotonic() + 30
            while (turn := await store.get_turn(turn_id)) is None:
                assert time.monotonic() < deadline, "the turn never reached the store"
                await asyncio.sleep(0.2)
    assert turn.used_tool == "web_search"
    assert turn.request == "what's the weather in Turin tomorrow?"
    assert turn.agent_id == "agent-7"


async def test_a_search_id_links_the_reported_turn(connect: Connect, store_db: Path) -> None:
    """search_tools answers a search_id; a turn reported with it is stored with where its
    tool stood (`shown` at its place, `not_shown`), a made-up id as `unknown`, still queued."""
    query = f"send the quarterly report to Marco by email {uuid.uuid4().hex[:6]}"
    second, outside, made_up = (uuid.uuid4().hex for _ in range(3))
    async with connect() as client:
        found = await client.call_tool("search_tools", {"query": query, "k": 2})
        assert not found.is_error, text(found)
        body = found.structured_content
        assert body is not None
        search_id = body["search_id"]
        shown = [t["name"] for t in body["tools"]]
        [hidden] = {"send_email", "get_weather", "web_search"} - set(shown)
        reports = [
            {"turn_id": second, "used_tool": shown[1], "search_id": search_id},
            {"turn_id": outside, "used_tool": hidden, "search_id": search_id},
            {"turn_id": made_up, "used_tool": shown[0], "search_id": "not-a-search"},
        ]
        for report in reports:
            result = await client.call_tool("report_turn", {"request": query, **report})
            assert result.structured_content == {"queued": True, "reason": None}, text(result)
        async with project_store(store_db) as store:
            turns = [await stored_turn(store, r["turn_id"]) for r in reports]
    assert isinstance(search_id, str) and search_id
    assert [(t.search_id, t.search_status, t.shown_position, t.shown_k) for t in turns] == [
        (search_id, "shown", 2, 2),
        (search_id, "not_shown", None, 2),
        ("not-a-search", "unknown", None, None),
    ]


async def test_used_tools_and_an_ok_outcome(connect: Connect, store_db: Path) -> None:
    """Several used tools are stored in order with the session; the first, shown and `ok`,
    labels the request with tier `usage`."""
    query = f"email the weather forecast to Marco {uuid.uuid4().hex[:6]}"
    turn_id = uuid.uuid4().hex
    async with connect() as client:
        found = await client.call_tool("search_tools", {"query": query, "k": 3})
        body = found.structured_content
        assert body is not None
        first = body["tools"][0]["name"]
        used = [first, *(t["name"] for t in body["tools"][1:] if t["name"] != first)]
        result = await client.call_tool(
            "report_turn",
            {
                "request": query,
                "used_tool": first,
                "used_tools": used,
                "search_id": body["search_id"],
                "session_id": "conversation-9",
                "outcome": "ok",
                "turn_id": turn_id,
            },
        )
        assert not result.is_error, text(result)
        async with project_store(store_db) as store:
            turn = await stored_turn(store, turn_id)
            label = await stored_label(store, query)
    assert (turn.used_tool, turn.used_tools, turn.session_id) == (
        first,
        tuple(used),
        "conversation-9",
    )
    assert (turn.search_status, turn.shown_position) == ("shown", 1)
    assert (label.tool, label.tier, label.turn_id) == (first, "usage", turn_id)


async def test_label_turn_stores_a_feedback_exemplar(connect: Connect, store_db: Path) -> None:
    """label_turn saves a `feedback` exemplar and the next search ranks the labelled tool first."""
    query = f"quanto costa il bitcoin adesso? {uuid.uuid4().hex[:6]}"
    async with connect() as client:
        result = await client.call_tool("label_turn", {"query": query, "tool": "web_search"})
        assert not result.is_error, text(result)
        body = result.structured_content
        assert body is not None
        assert body["saved"] is True
        assert (body["tool"], body["tier"], body["query"]) == ("web_search", "feedback", query)
        ranked = await client.call_tool("search_tools", {"query": query, "k": 1})
        assert ranked.structured_content is not None
        assert ranked.structured_content["tools"][0]["name"] == "web_search"
    async with project_store(store_db) as store:
        exemplar = await lookup_one(store, query)
    assert exemplar is not None
    assert (exemplar.id, exemplar.tool, exemplar.tier) == (body["id"], "web_search", "feedback")


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("search_tools", {"query": "weather", "k": 0}, "expected k in 1..100, got 0"),
    ("search_tools", {"query": "weather", "k": "many"}, "expected k: input should be a valid integer"),
    ("search_tools", {"query": "weather", "k": "5"}, "expected k: input should be a valid integer"),
    ("search_tools", {"query": "weather", "k": True}, "expected k: input should be a valid integer"),
    ("search_tools", {"query": "weather", "companions": "2"}, "expected companions: input should be a valid integer"),
    ("search_tools", {"k": 3}, "expected query, got nothing"),
    ("search_tools", {"query": "   "}, "query"),
    ("report_turn", {"request": "hi"}, "used_tool or a non-empty used_tools"),
    ("report_turn", {"request": "hi", "used_tool": "x", "outcome": "fine"}, "expected outcome: input should be 'ok', 'error' or 'corrected', got 'fine'"),
    ("report_turn", {"request": "é" * 5000, "used_tool": "x"}, "expected request of at most 8192 bytes, got 10000"),
    ("report_turn", {"request": "hi", "used_tool": "x", "used_tools": ["y", "z"]}, "expected used_tool to be one of used_tools, got 'x'"),
    ("report_turn", {"request": "hi", "used_tool": "x", "used_tools": ["x"] * 65}, "expected used_tools: list should have at most 64 items"),
    ("label_turn", {"query": "weather in Oslo", "tool": "no_such_tool"}, "no tool named 'no_such_tool'"),
]  # fmt: skip


async def test_bad_arguments_are_tool_errors(connect: Connect) -> None:
    """Bad input comes back as isError naming the field and the rule; the server keeps serving."""
    async with connect() as client:
        for tool, arguments, message in BAD_CALLS:
            result = await client.call_tool(tool, arguments)
            assert result.is_error, (tool, arguments)
            assert message in text(result), (tool, arguments)
            assert "\n" not in text(result)
        after = await client.call_tool("search_tools", {"query": "weather in Oslo"})
    assert not after.is_error


async def test_the_tools_take_what_the_http_routes_take(connect: Connect) -> None:
    """At the edges the MCP tools agree with `POST /v1/rank` and `/v1/observe`: a k of 2.0 is
    2 (JSON Schema counts it an integer), and a turn may give `used_tools` alone."""
    async with connect() as client:
        ranked = await client.call_tool("search_tools", {"query": "weather in Oslo", "k": 2.0})
        reported = await client.call_tool(
            "report_turn", {"request": "hi", "used_tools": ["get_weather", "send_email"]}
        )
    assert not ranked.is_error, text(ranked)
    assert len((ranked.structured_content or {})["tools"]) == 2
    assert not reported.is_error, text(reported)
    assert reported.structured_content == {"queued": True, "reason": None}


async def test_a_bad_value_is_repeated_cut_and_a_key_never(connect: Connect) -> None:
    """An argument error repeats the value sent as the HTTP API does (`keys.shown`): a long
    one cut to 80 characters, a key pasted in the wrong field not at all."""
    key = "tsk_" + "a1b2" * 10
    async with connect() as client:
        long = await client.call_tool("search_tools", {"query": "q", "session_id": "s" * 200_000})
        keyed = await client.call_tool("search_tools", {"query": "q", "k": key})
    assert long.is_error and keyed.is_error
    assert text(long).endswith("got '" + "s" * 76 + "..."), text(long)
    assert len(text(long)) < 300, len(text(long))
    assert text(keyed).endswith("got what looks like an API key (not shown)"), text(keyed)
    assert key not in text(keyed)


async def test_resources_list_and_read(connect: Connect) -> None:
    """The catalog and every analysis are listed resources that read as JSON."""
    async with connect() as client:
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        templates = {
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        }
        catalog = await read_json(client, "toolselect://catalog")
        index = await read_json(client, "toolselect://analytics")
        cold = await read_json(client, "toolselect://analytics/cold_tools")
        drift = await read_json(client, "toolselect://analytics/drift?since=2000-01-01")
        learning = await read_json(client, "toolselect://analytics/learning")
    assert {"toolselect://catalog", "toolselect://analytics/misroute_rate"} <= uris
    assert set(index["analyses"]) <= uris
    assert len(index["analyses"]) == len(registry.NAMES) + 1  # and `learning`
    assert templates == {"toolselect://analytics/{name}{?since}"}
    assert {t["name"] for t in catalog["tools"]} == {"send_email", "get_weather", "web_search"}
    assert cold["columns"] == ["tool"]
    assert {row[0] for row in cold["rows"]} <= {"send_email", "get_weather", "web_search"}
    assert drift["name"] == "drift"
    assert drift["columns"] == ["day", "turns", "flagged_rate", "escalation_rate"]
    assert isinstance(learning, dict)
    assert learning


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("toolselect://analytics/nope", "no analysis named 'nope'; known: misroute_rate"),
        ("toolselect://analytics/drift?since=yesterday", "expected since as an ISO-8601 date or datetime, got 'yesterday'"),
        ("toolselect://analytics/learning?since=2025-01-01", "learning takes no since: the fit covers every stored label"),
    ],
)  # fmt: skip
async def test_bad_resource_reads_are_protocol_errors(
    connect: Connect, uri: str, message: str
) -> None:
    """An unknown analysis or a bad `since` (any, for the learning fit, which has no window: it
    was ignored, where HTTP and the CLI refuse it) is a JSON-RPC error with toolselect's
    message, -32602 Invalid params: the caller's to fix, not the server's failing."""
    async with connect() as client:
        with pytest.raises(MCPError, match=message) as caught:
            await client.read_resource(uri)
    assert caught.value.code == INVALID_PARAMS, caught.value


async def test_the_catalog_resource_says_why_the_store_cannot_answer(tmp_path: Path) -> None:
    """With the store unreachable, reading `toolselect://catalog` is an error naming the cause
    (as the analyses' resources and the tools say), not a bare 'Error reading resource'."""
    env = cli_env(tmp_path / "unused.db", TOOLSELECT_STORE="neo4j")
    env["NEO4J_URI"] = f"bolt://127.0.0.1:{free_port()}"
    params = StdioServerParameters(command=EXE[0], args=[*EXE[1:], "mcp"], env=env)
    async with Client(params, read_timeout_seconds=60) as client:
        with pytest.raises(MCPError, match="cannot reach Neo4j"):
            await client.read_resource("toolselect://catalog")


def test_stdout_carries_only_protocol_messages(store_db: Path) -> None:
    """Over stdio, every stdout line is JSON-RPC and the service's log lines go to stderr."""
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    done = subprocess.run(
        [*EXE, "mcp"],
        input=json.dumps(hello) + "\n",
        capture_output=True,
        text=True,
        env=cli_env(store_db, TOOLSELECT_LOG_LEVEL="debug"),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines
    for line in lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert json.loads(lines[0])["result"]["serverInfo"]["name"] == "toolselect"
    assert "catalog_loaded" in done.stderr
    assert "mcp_service_closed" in done.stderr  # stdin closed: the lifespan closed the service


async def test_default_hybrid_embedder_serves(store_db: Path) -> None:
    """With the default dense+hashing embedder the lifespan loads the model and search works."""
    params = stdio_params(store_db)
    assert params.env is not None
    params.env.pop("TOOLSELECT_EMBEDDER")
    async with Client(params, read_timeout_seconds=120) as client:
        result = await client.call_tool(
            "search_tools", {"query": "will it rain in Turin tomorrow?", "k": 1}
        )
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    assert result.structured_content["embedder"].startswith("hybrid")
    assert result.structured_content["tools"][0]["name"] == "get_weather"


async def test_search_ids_over_mcp_on_neo4j(neo4j_server: Neo4jServer, tmp_path: Path) -> None:
    """The same link on the production store: `toolselect mcp` over stdio on the test Neo4j,
    the catalog imported by the CLI, the turns read back through a Neo4j store."""
    await wipe(neo4j_server)
    env = cli_env(tmp_path / "unused.db", TOOLSELECT_STORE="neo4j", **neo4j_server.env())
    catalog = tmp_path / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    done = run_cli(["tools", "import", str(catalog)], env)
    assert done.returncode == 0, done.stderr
    params = StdioServerParameters(command=EXE[0], args=[*EXE[1:], "mcp"], env=env)
    query = "send the quarterly report to Marco by email"
    reports: list[dict[str, Any]] = []
    async with Client(params, read_timeout_seconds=60) as client:
        found = await client.call_tool("search_tools", {"query": query, "k": 2})
        body = found.structured_content
        assert body is not None, text(found)
        shown = [t["name"] for t in body["tools"]]
        reports = [
            {"turn_id": "shown", "used_tool": shown[1], "outcome": "ok"},
            {"turn_id": "not-shown", "used_tool": "shell_exec"},
        ]
        for report in reports:
            arguments = {"request": query, "search_id": body["search_id"], **report}
            result = await client.call_tool("report_turn", arguments)
            assert result.structured_content == {"queued": True, "reason": None}, text(result)
        store = await open_store(
            Settings(
                store="neo4j",
                data_dir=str(tmp_path),
                neo4j_uri=neo4j_server.uri,
                neo4j_username=neo4j_server.username,
                neo4j_password=neo4j_server.password,
                neo4j_database=neo4j_server.database,
            )
        )
        try:
            turns = [await stored_turn(store, r["turn_id"]) for r in reports]
            label = await stored_label(store, query)
        finally:
            await store.close()
    assert [(t.search_id, t.search_status, t.shown_position) for t in turns] == [
        (body["search_id"], "shown", 2),
        (body["search_id"], "not_shown", None),
    ]
    assert (label.tool, label.tier) == (shown[1], "usage")
