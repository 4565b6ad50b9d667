"""Which MCP calls make a tenant, on both stores (a SQLite file family, then a real Neo4j), as
`tests/api/test_tenant_creation.py` holds the HTTP API to it: an admin acting on a tenant with
no key and no data (`X-Toolselect-Tenant`) is told so by a search, a label or a resource read,
which leave no file, no node and no live tenant; a reported turn makes it; a new process over
the same store knows it. The in-process MCP server behind uvicorn (`serving_server`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client, MCPError

from tests.api.test_keys import ADMIN, bearer
from tests.api.test_tenant_creation import files, nodes
from tests.mcp.test_keys import SEARCH, connected, serving_server
from tests.mcp.test_server import text
from tests.services import ServiceFactory
from toolselect.mcp_resources import ANALYTICS_URI, CATALOG_URI
from toolselect.mcp_server import ToolselectMCP

NEW = "team-b"


def live(mcp: ToolselectMCP) -> list[str]:
    tenants = mcp.running.tenants
    assert tenants is not None
    return tenants.live


async def assert_unknown(client: Client, tenant: str) -> None:
    """A search, a label and each resource read that acts on `tenant` answer that it does not
    exist."""
    for tool, arguments in (("search_tools", SEARCH), ("label_turn", {"query": "x", "tool": "y"})):
        result = await client.call_tool(tool, arguments)
        assert result.is_error and f"no tenant {tenant!r}" in text(result), (tool, text(result))
    for uri in (CATALOG_URI, f"{ANALYTICS_URI}/drift", f"{ANALYTICS_URI}/learning"):
        with pytest.raises(MCPError, match=f"no tenant {tenant!r}"):
            await client.read_resource(uri)


async def test_reads_make_no_tenant_and_a_reported_turn_does(
    services: ServiceFactory, tmp_path: Path
) -> None:
    """Calls that make none of an unknown tenant's data leave no trace of it; a reported turn
    starts it, and its search then answers (an empty catalog)."""
    service = await services.start(wait_for_store=True, api_keys=(ADMIN,))
    async with serving_server(service) as (url, mcp):
        before = files(tmp_path)
        async with connected(url, bearer(ADMIN, NEW)) as client:
            await assert_unknown(client, NEW)
            assert files(tmp_path) == before
            assert await nodes(services, NEW) == 0
            assert live(mcp) == []
            reported = await client.call_tool("report_turn", {"request": "hi", "used_tool": "x"})
            assert not reported.is_error, text(reported)
            found = await client.call_tool("search_tools", SEARCH)
            assert not found.is_error, text(found)
            assert found.structured_content is not None
            assert found.structured_content["tools"] == []
        assert live(mcp) == [NEW]


async def test_a_new_process_knows_a_tenant_with_turns_only(
    services: ServiceFactory, tmp_path: Path
) -> None:
    """A tenant whose only data is a reported turn is known to a process started later over
    the same store with a data folder of its own; a tenant with nothing is still unknown."""
    first = await services.start(wait_for_store=True, api_keys=(ADMIN,))
    async with serving_server(first) as (url, _), connected(url, bearer(ADMIN, NEW)) as client:
        reported = await client.call_tool("report_turn", {"request": "hi", "used_tool": "x"})
        assert not reported.is_error, text(reported)
    folder = tmp_path / "second"
    folder.mkdir()
    second = await services.start(wait_for_store=True, api_keys=(ADMIN,), data_dir=str(folder))
    async with serving_server(second) as (url, mcp):
        async with connected(url, bearer(ADMIN, NEW)) as client:
            found = await client.call_tool("search_tools", SEARCH)
            assert not found.is_error, text(found)
        before = files(folder)
        async with connected(url, bearer(ADMIN, "team-c")) as client:
            await assert_unknown(client, "team-c")
        assert files(folder) == before
        assert await nodes(services, "team-c") == 0
        assert live(mcp) == [NEW]
