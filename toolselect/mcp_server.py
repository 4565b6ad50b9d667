"""toolselect as an MCP server (`toolselect mcp`): tool search, turn reports and labels as MCP tools,
the analyses and the catalog as MCP resources (`mcp_resources`), over stdio (`mcp_stdio`) or
streamable HTTP (`mcp_http`).

One `Service` runs in-process for the life of the server (the SDK's lifespan: entered once per
process on stdio, once for the session manager over HTTP, never once per session). stdout is the
stdio protocol channel, so the service logs only to stderr (`toolselect.logs`).

Errors reach the host as tool results with `isError` and one line naming the field and the rule
(`expected k in 1..100, got 0`); resources answer with a JSON-RPC error. Nothing a caller sends
stops the server. Over HTTP the API keys apply (`mcp_auth`): a request without a valid key is
refused before the SDK sees it, and a tool or resource needs the role `keys.MCP_ROLES` names;
it then acts on the service of the caller's tenant (`Running.tenant_service`: other tenants'
started on first use, as the HTTP API's are).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import anyio
import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import (
    ResourceNotFoundError,
    ToolError,
    UnexpectedToolError,
)
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, INVALID_REQUEST, ToolAnnotations
from mcp.types import Tool as MCPTool
from pydantic import AnyUrl, BaseModel, Field, ValidationError

from toolselect import config
from toolselect.api.models import DEFAULT_COMPANIONS, Companions, CompanionTool, Integer
from toolselect.api.validation import explain
from toolselect.config import Settings
from toolselect.errors import InvalidInput, ToolselectError
from toolselect.mcp_auth import refusal
from toolselect.mcp_resources import BadParameter, Running, add_resources, serves
from toolselect.mcp_stdio import serve_stdio
from toolselect.records import Tool
from toolselect.service import Service, TenantServices
from toolselect.service.ranking import Conversation
from toolselect.turns import Name, Outcome, ReportedTurn, UsedTools, turn_problem

log = structlog.get_logger("toolselect.mcp")

SERVER_NAME = "toolselect"

INSTRUCTIONS = """\
toolselect ranks a tool catalog for a request and learns from what the agent then did.
Call search_tools with the user's request before choosing a tool from a large catalog; after the
turn, call report_turn with the tool actually used, the search_id that search_tools returned and
the outcome, so mis-routes are detected and tools that worked are learned from.
label_turn records a human-confirmed (request, tool) pair."""

ToolContext = Context[Service, Any]


class FoundTool(BaseModel):
    """One ranked tool, with what a host needs to call it."""

    name: str
    score: float
    description: str
    inputSchema: dict[str, Any]  # MCP's own spelling of the field


class SearchResult(BaseModel):
    """`search_tools`: the best tools first; `margin` is the top score minus the runner-up's."""

    tools: list[FoundTool]
    margin: float
    embedder: str
    search_id: str = Field(
        description="Pass it to report_turn with the turn, so toolselect knows what was shown."
    )
    companions: list[CompanionTool] | None = Field(
        default=None, description="When asked for: tools often used with the ranked ones."
    )


class TurnReport(BaseModel):
    """`report_turn`: whether the learner took the turn; a dropped turn is not an error."""

    queued: bool
    reason: str | None = None


class LabelResult(BaseModel):
    """`label_turn`: the stored exemplar (`saved` is false when the same label was there)."""

    saved: bool
    id: str
    query: str
    tool: str
    tier: str


async def _service(ctx: ToolContext, *, writes: bool = False) -> Service:
    """The service of the caller's tenant (`default` over stdio); one that does not exist yet
    is started only by a call that `writes` its data (`Running.tenant_service`)."""
    server = ctx.mcp_server
    if not isinstance(server, ToolselectMCP):
        return ctx.request_context.lifespan_context
    try:
        return await server.running.tenant_service(writes=writes)
    except ToolselectError as exc:
        raise _tool_error(exc) from exc


def _schema(tool: Tool | None) -> dict[str, Any]:
    # MCP requires an object schema at the root; a catalog entry may have been stored without one.
    if tool is None or not tool.input_schema:
        return {"type": "object", "properties": {}}
    return dict(tool.input_schema)


def _tool_error(exc: ToolselectError) -> ToolError:
    message = exc.message if isinstance(exc, InvalidInput) else str(exc)
    return ToolError(" ".join(message.split()))


_COMPANIONS = (
    "Also tools often used with the ranked ones "
    f"(true: {DEFAULT_COMPANIONS}; 0..{config.MAX_COMPANIONS})."
)


async def search_tools(
    query: Annotated[str, Field(description="The user's request, as they wrote it.")],
    ctx: ToolContext,
    # Strict, as `POST /v1/rank` takes k: "5" or true is a mistake, not a 5 or a 1. The bounds
    # are declared, not validated here: the service words the refusal (`expected k in 1..N`),
    # and the maximum is this server's `max_k` (`ToolselectMCP.list_tools`).
    k: Annotated[
        Integer | None,
        Field(
            strict=True,
            description="How many tools to return (1..maximum, the server's max_k; "
            f"{config.DEFAULT_K}, or max_k when lower, when absent).",
            json_schema_extra={"minimum": 1},
        ),
    ] = None,
    pack: Annotated[
        str | None, Field(description="Only tools of this pack (a catalog subset).")
    ] = None,
    session_id: Annotated[
        Name | None, Field(description="The conversation (the one report_turn names).")
    ] = None,
    # The list bounds too are the service's to enforce and word; the schema declares them.
    previous_tools: Annotated[
        list[Name] | None,
        Field(
            description="Tools used earlier in the conversation (else the session's last).",
            json_schema_extra={"maxItems": config.MAX_PREVIOUS_TOOLS},
        ),
    ] = None,
    context: Annotated[
        list[str] | None,
        Field(
            description="Earlier messages of the conversation, most recent last "
            f"(at most {config.MAX_CONTEXT_MESSAGES}).",
            json_schema_extra={"maxItems": config.MAX_CONTEXT_MESSAGES},
        ),
    ] = None,
    companions: Annotated[Companions, Field(strict=True, description=_COMPANIONS)] = 0,
) -> SearchResult:
    """Rank the tool catalog for a request: the k most relevant tools, best first, each with
    its score, description and input schema, and the search_id to pass to report_turn. The
    conversation (session_id, previous_tools, context) weighs in as far as toolselect's
    stored sessions show it helps; companions are answered apart, each with the tool it goes
    with."""
    service = await _service(ctx)
    conversation = Conversation(
        session_id=session_id,
        previous_tools=tuple(previous_tools or ()),
        context=tuple(context or ()),
        companions=companions,
    )
    try:
        search = await service.ranking.search(query, k, pack=pack, conversation=conversation)
    except ToolselectError as exc:
        raise _tool_error(exc) from exc
    ranking = search.ranking
    found = []
    for result in ranking.results:
        tool = service.catalog.tool(result.tool)
        found.append(
            FoundTool(
                name=result.tool,
                score=result.score,
                description=tool.description if tool else "",
                inputSchema=_schema(tool),
            )
        )
    listed = [CompanionTool(tool=c.tool, score=c.score, with_=c.with_) for c in search.companions]
    return SearchResult(
        tools=found,
        margin=ranking.margin,
        embedder=service.ranking.embedder_id,
        search_id=search.search_id,
        companions=listed if companions else None,
    )


async def report_turn(
    request: Annotated[str, Field(description="The user's request of the turn.")],
    ctx: ToolContext,
    used_tool: Annotated[
        Name | None, Field(description="The tool the agent called first (or give used_tools).")
    ] = None,
    outcome: Annotated[
        Outcome | None,
        Field(description="How the call went, when known (`ok` teaches the tool's use)."),
    ] = None,
    search_id: Annotated[
        Name | None,
        Field(description="The search_id of the search_tools result the tool was picked from."),
    ] = None,
    used_tools: Annotated[
        UsedTools | None,
        Field(
            description="Every tool the turn called, in order, when it called several "
            "(used_tool among them)."
        ),
    ] = None,
    session_id: Annotated[
        Name | None, Field(description="The conversation the turn belongs to.")
    ] = None,
    turn_id: Annotated[Name | None, Field(description="Your id of the turn (idempotent).")] = None,
    agent_id: Annotated[Name | None, Field(description="Which agent took the turn.")] = None,
    pack: Annotated[Name | None, Field(description="The pack the turn ranked in.")] = None,
) -> TurnReport:
    """Report which tool the agent used for a request, after the turn, with the search_id of
    the search_tools result it picked from. Returns at once: the turn is queued for the learner
    (or dropped when its queue is full, never an error)."""
    service = await _service(ctx, writes=True)
    # The SDK has validated the arguments against the turn's own field types: the value is
    # made without validating them again, then held to the rules no schema says.
    turn = ReportedTurn.model_construct(
        request=request,
        used_tool=used_tool,
        used_tools=used_tools,
        turn_id=turn_id,
        agent_id=agent_id,
        pack=pack,
        outcome=outcome,
        search_id=search_id,
        session_id=session_id,
    )
    problem = turn_problem(turn, service.settings.max_query_bytes)
    if problem is not None:
        raise ToolError(problem.message)
    queued = service.learning.report(turn)
    return TurnReport(queued=queued, reason=None if queued else "queue_full")


async def label_turn(
    query: Annotated[str, Field(description="A request, as a user would write it.")],
    tool: Annotated[str, Field(description="The catalog tool that should serve it.")],
    ctx: ToolContext,
) -> LabelResult:
    """Record a human-confirmed label: this request should go to this tool. It is used for
    ranking at once and never expires."""
    try:
        service = await _service(ctx)
        saved, exemplar = await service.learning.feedback(query, tool)
    except ToolselectError as exc:
        raise _tool_error(exc) from exc
    return LabelResult(
        saved=saved,
        id=exemplar.id,
        query=exemplar.query,
        tool=exemplar.tool,
        tier=exemplar.tier,
    )


def _with_max_k(tool: MCPTool, max_k: int) -> MCPTool:
    """`search_tools` declaring the largest k this server takes, a setting (`max_k`)."""
    schema = copy.deepcopy(tool.input_schema)
    schema["properties"]["k"]["maximum"] = max_k
    return tool.model_copy(update={"input_schema": schema})


class ToolselectMCP(MCPServer[Service]):
    """The SDK's server, with argument validation errors told in toolselect's words, and each
    tool call and resource read held to the caller's key (`mcp_auth.refusal`)."""

    running: Running
    max_k: int

    async def list_tools(self) -> list[MCPTool]:
        listed = await super().list_tools()
        return [
            _with_max_k(tool, self.max_k) if tool.name == "search_tools" else tool
            for tool in listed
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: ToolContext | None = None
    ) -> Any:
        refused = refusal("tool", name)
        # A name no tool has is the SDK's "Unknown tool", not a role the caller lacks.
        if refused is not None and name in {tool.name for tool in await self.list_tools()}:
            raise ToolError(refused)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            explained = explain(cause.errors(include_url=False))
            raise ToolError(f"Error executing tool {name}: {explained}") from cause

    async def read_resource(self, uri: AnyUrl | str, context: ToolContext | None = None) -> Any:
        refused = refusal("resource", str(uri))
        # A URI no resource has is the SDK's "Unknown resource", not a role the caller lacks.
        if refused is not None and not await serves(self, str(uri)):
            raise ResourceNotFoundError(f"Unknown resource: {uri}")
        if refused is not None:
            raise MCPError(INVALID_REQUEST, refused, {"uri": str(uri)})
        try:
            return await super().read_resource(uri, context)
        except BadParameter as exc:
            raise MCPError(INVALID_PARAMS, str(exc), {"uri": str(uri)}) from exc


def build_server(settings: Settings, service: Service | None = None) -> ToolselectMCP:
    """The MCP server; its lifespan starts a `Service` on `settings` and closes it at the end,
    or serves a started `service` its caller closes (as `create_app(service)` does)."""
    running = Running()

    @asynccontextmanager
    async def lifespan(_: MCPServer[Service]) -> AsyncIterator[Service]:
        try:
            # An unreachable store does not stop the start (a host would see a dead server):
            # tools answer `not ready` until the background connect succeeds.
            current = service or await Service.start(settings, wait_for_store=True)
            running.service = current
            running.tenants = TenantServices(current)
            try:
                yield current
            finally:
                # Shielded: a signal ends stdio by cancelling the serving, and the turns
                # already answered `queued` must still reach the store (`Service.close` drains
                # the learner within the shutdown timeout).
                with anyio.CancelScope(shield=True):
                    try:
                        await running.tenants.close_others()
                    finally:
                        running.service = None
                        running.tenants = None
                    if service is None:
                        await current.close()
                        log.info("mcp_service_closed")
        finally:
            if running.stopped is not None:
                running.stopped.set()

    server = ToolselectMCP(
        SERVER_NAME,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level=_SDK_LEVELS.get(settings.log_level, "WARNING"),
    )
    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    server.add_tool(search_tools, annotations=read_only)
    server.add_tool(
        report_turn, annotations=ToolAnnotations(readOnlyHint=False, openWorldHint=False)
    )
    server.add_tool(
        label_turn,
        annotations=ToolAnnotations(readOnlyHint=False, idempotentHint=True, openWorldHint=False),
    )
    add_resources(server, running)
    server.running = running
    server.max_k = settings.max_k
    return server


def run(server: ToolselectMCP, settings: Settings, transport: Literal["stdio", "http"]) -> None:
    """Serve until stdin closes, SIGINT or SIGTERM (stdio, `mcp_stdio`: exit 0), or until SIGINT
    or SIGTERM (HTTP, `mcp_http`: at `settings.host:port/mcp`, behind the API keys' `KeyGate`),
    the service closed and its learner drained either way. Over HTTP uvicorn then raises the
    signal again, so the process ends as killed by it, the Unix convention."""
    if transport == "stdio":
        anyio.run(serve_stdio, server, server.running)
        return
    # Imported here: a stdio server has no use for uvicorn.
    from toolselect.mcp_http import serve_http

    anyio.run(serve_http, server, server.running, settings)


_SDK_LEVELS: dict[str, Literal["DEBUG", "INFO", "WARNING", "ERROR"]] = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "error": "ERROR",
}
