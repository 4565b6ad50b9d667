"""A catalog straight from an MCP server: start its command, list its tools, stop it.

`toolselect tools import --mcp "COMMAND"` uses this instead of a JSON file; the tools then go
through `catalog.parse_tools` like any MCP `tools/list` body. The server is started with the SDK's
stdio client and the environment an MCP host gives it (PATH, HOME and the like, not the caller's
whole environment).
"""

from __future__ import annotations

import shlex
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from toolselect.errors import InvalidInput, ToolSourceError

# A server that hands out cursors forever would keep an import waiting until the time limit.
MAX_PAGES = 1000


def parse_command(command: str) -> StdioServerParameters:
    """A command line, split as a POSIX shell would (no shell runs it)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise InvalidInput(
            f"expected a command line for --mcp, got {command!r}: {exc}", "mcp"
        ) from None
    if not argv:
        raise InvalidInput("expected a command line for --mcp, got nothing", "mcp")
    return StdioServerParameters(command=argv[0], args=argv[1:])


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return " ".join(str(exc).split()) or type(exc).__name__


async def list_mcp_tools(command: str, *, timeout_s: float) -> dict[str, Any]:
    """The server's `tools/list` (every page) as an MCP body: `{"tools": [{name, description,
    inputSchema}]}`; `ToolSourceError` when it cannot be started or listed in `timeout_s`."""
    params = parse_command(command)
    tools: list[dict[str, Any]] = []
    try:
        with anyio.fail_after(timeout_s):
            async with Client(params) as client:
                cursor: str | None = None
                for _ in range(MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(
                        {
                            "name": tool.name,
                            "description": tool.description or "",
                            "inputSchema": tool.input_schema,
                        }
                        for tool in page.tools
                    )
                    cursor = page.next_cursor
                    if not cursor:
                        break
                else:
                    raise ToolSourceError(
                        f"MCP server {command!r} listed more than {MAX_PAGES} pages of tools"
                    )
    except TimeoutError:
        raise ToolSourceError(
            f"MCP server {command!r} did not list its tools within {timeout_s:g} s"
        ) from None
    except ToolSourceError:
        raise
    except Exception as exc:
        # Anything from the child or the SDK (spawn failure, a crash mid-handshake, a protocol
        # error) means the same to the caller: no catalog from this command.
        raise ToolSourceError(f"MCP server {command!r} failed: {_describe(exc)}") from exc
    return {"tools": tools}
