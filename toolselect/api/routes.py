"""Route handlers of API v1; each validates with a model from `models.py` and calls the service
of the caller's tenant (`tenant_service`); health, readiness and metrics are `default`'s.

Every handler reads and checks its input before it asks for the tenant's service: starting a
tenant makes its store, so a refused request must not start one. Only the writes that make a
tenant's data (a catalog upload, reported turns) start a tenant that does not exist yet; any
other request for one is `404 unknown_tenant` (`tenant_service`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence

from aiohttp import web

from toolselect.analytics.registry import LEARNING
from toolselect.analytics.surfaces import analyses_payload, parse_since, refuse_learning_since
from toolselect.api import models as m
from toolselect.api.errors import HttpError
from toolselect.api.http import (
    CALLER,
    DEADLINE,
    SERVICE,
    json_response,
    read_body,
    read_model,
    tenant_service,
)
from toolselect.api.openapi import served_document
from toolselect.api.params import checked_query, only_query, path_param
from toolselect.catalog import MAX_TOOLS_PER_PUT, candidates_to_tools, check_pack, parse_tools
from toolselect.config import Settings
from toolselect.keys import DEFAULT_TENANT, TENANT_HEADER
from toolselect.ranker.relations import Companion
from toolselect.records import Exemplar, Tool
from toolselect.service.ranking import Conversation
from toolselect.turns import turn_problem


def _tool_out(tool: Tool) -> m.ToolOut:
    return m.ToolOut(
        name=tool.name,
        description=tool.description,
        input_schema=dict(tool.input_schema),
        packs=list(tool.packs),
    )


def exemplar_out(e: Exemplar) -> m.ExemplarOut:
    return m.ExemplarOut(
        id=e.id,
        query=e.query,
        tool=e.tool,
        tier=e.tier,
        created_at=e.created_at.isoformat(),
        count=e.count,
    )


async def rank(request: web.Request) -> web.Response:
    body = await read_model(request, m.RankRequest)
    service = await tenant_service(request, writes=False)
    started = time.perf_counter()
    k = body.k if "k" in body.model_fields_set else None  # the default within TOOLSELECT_MAX_K
    search = await service.ranking.search(
        body.query, k, tools=body.tools, pack=body.pack, conversation=conversation_of(body)
    )
    ranking = search.ranking
    return json_response(
        m.RankResponse(
            results=[m.RankedTool(tool=r.tool, score=r.score) for r in ranking.results],
            margin=ranking.margin,
            embedder=service.ranking.embedder_id,
            took_ms=round((time.perf_counter() - started) * 1e3, 3),
            search_id=search.search_id,
            companions=companions_out(search.companions, body.companions),
        )
    )


def conversation_of(body: m.RankRequest | m.SelectRequest) -> Conversation:
    """The request's conversation fields as the ranking facade takes them."""
    return Conversation(
        session_id=body.session_id,
        previous_tools=tuple(body.previous_tools or ()),
        context=tuple(body.context or ()),
        companions=body.companions,
    )


def companions_out(found: Sequence[Companion], asked: int) -> list[m.CompanionTool] | None:
    """The answer's `companions`: present (maybe empty) when asked for, absent otherwise."""
    if not asked:
        return None
    return [m.CompanionTool(tool=c.tool, score=c.score, with_=c.with_) for c in found]


async def select(request: web.Request) -> web.Response:
    body = await read_model(request, m.SelectRequest)
    service = await tenant_service(request, writes=False)
    candidates = candidates_to_tools([c.model_dump() for c in body.candidates])
    selection = await service.ranking.select(
        body.query.Text,
        candidates,
        body.query.K,
        pack=body.query.PackID or None,
        conversation=conversation_of(body),
    )
    return json_response(
        m.SelectResponse(
            selected=selection.selected,
            reason=selection.reason,
            search_id=selection.search_id,
            companions=companions_out(selection.companions, body.companions),
        )
    )


async def put_tools(request: web.Request) -> web.Response:
    body = await read_body(request)
    tools, pack = parse_tools(body)
    if len(tools) > MAX_TOOLS_PER_PUT:
        raise HttpError(
            422,
            "invalid_request",
            f"expected at most {MAX_TOOLS_PER_PUT} tools, got {len(tools)}",
            "body" if isinstance(body, list) else "tools",  # an OpenAI list has no "tools"
        )
    pack = checked_query(request, "pack", check_pack) or pack  # `?pack=` empty is none
    service = await tenant_service(request)
    # A size-aware limit: the request timeout plus a share per tool, counted again from every
    # embedded batch, so an import that keeps working is never answered `503 timeout`. The
    # answer comes when the catalog is stored and ranked; the import is shielded, so a client
    # that hangs up leaves the whole old catalog or the whole new one.
    settings = service.settings
    budget = settings.request_timeout_s + len(tools) * settings.import_timeout_per_tool_s
    deadline = request[DEADLINE]
    loop = asyncio.get_running_loop()

    waiting = True  # the import outlives this handler when the client goes

    def progress(done: int = 0, total: int = 0) -> None:
        if waiting:
            deadline.reschedule(loop.time() + budget)

    progress()
    try:
        result = await service.catalog.upsert_tools(tools, pack, progress=progress)
    finally:
        waiting = False
    return json_response(m.UpsertResponse(upserted=result.upserted, unchanged=result.unchanged))


async def list_tools(request: web.Request) -> web.Response:
    pack = checked_query(request, "pack", check_pack)
    service = await tenant_service(request, writes=False)
    tools = await service.catalog.list_tools(pack)
    return json_response(m.ToolList(tools=[_tool_out(t) for t in tools]))


async def get_tool(request: web.Request) -> web.Response:
    name = path_param(request, "name")
    service = await tenant_service(request, writes=False)
    tool = await service.catalog.get_tool(name)
    return json_response(_tool_out(tool))


async def delete_tool(request: web.Request) -> web.Response:
    name = path_param(request, "name")
    service = await tenant_service(request, writes=False)
    await service.catalog.delete_tool(name)
    return json_response(m.DeletedResponse(deleted=True))


async def tool_exemplars(request: web.Request) -> web.Response:
    name = path_param(request, "name")
    service = await tenant_service(request, writes=False)
    exemplars = await service.catalog.exemplars_of(name)
    return json_response(m.ExemplarList(exemplars=[exemplar_out(e) for e in exemplars]))


async def delete_exemplar(request: web.Request) -> web.Response:
    exemplar_id = path_param(request, "id")
    service = await tenant_service(request, writes=False)
    await service.learning.delete_exemplar(exemplar_id)
    return json_response(m.DeletedResponse(deleted=True))


async def observe(request: web.Request) -> web.Response:
    turn = await read_model(request, m.ObserveRequest)
    _check_turn(request.app[SERVICE].settings, turn, "")
    service = await tenant_service(request)
    queued = service.learning.report(turn)
    reason = None if queued else "queue_full"
    return json_response(m.ObserveResponse(queued=queued, reason=reason), status=202)


async def observe_batch(request: web.Request) -> web.Response:
    body = await read_model(request, m.ObserveBatchRequest)
    settings = request.app[SERVICE].settings  # every tenant's limits are the server's
    limit = settings.max_batch
    if len(body.turns) > limit:
        raise HttpError(
            422,
            "invalid_request",
            f"expected at most {limit} turns, got {len(body.turns)}",
            "turns",
        )
    for i, turn in enumerate(body.turns):
        _check_turn(settings, turn, f"turns[{i}].")
    service = await tenant_service(request)
    queued = sum(service.learning.report(turn) for turn in body.turns)
    return json_response(
        m.ObserveBatchResponse(queued=queued, dropped=len(body.turns) - queued), status=202
    )


def _check_turn(settings: Settings, turn: m.ObserveRequest, prefix: str) -> None:
    """The rules of a reported turn (`turn_problem`) as the API words them; `prefix` places
    a batch's turn (`turns[3].`)."""
    problem = turn_problem(turn, settings.max_query_bytes)
    if problem is None:
        return
    field = f"{prefix}{problem.field}"
    if problem.oversized:
        message = f"expected {prefix}{problem.expected}, got {problem.got}"
    else:
        message = f"expected {problem.expected} ({field})"
    raise HttpError(422, "invalid_request", message, field)


async def post_exemplar(request: web.Request) -> web.Response:
    body = await read_model(request, m.FeedbackRequest)
    service = await tenant_service(request, writes=False)
    saved, exemplar = await service.learning.feedback(body.query, body.tool)
    return json_response(
        m.FeedbackResponse(saved=saved, exemplar=exemplar_out(exemplar)), status=201
    )


async def list_analytics(request: web.Request) -> web.Response:
    body = analyses_payload()
    body["analyses"].append(LEARNING)
    return web.json_response(body)


async def learning_fit(request: web.Request) -> web.Response:
    """What the learning loop chose from its labels: fold, calibration curve, teacher depth."""
    checked_query(request, "since", refuse_learning_since)  # as the CLI refuses --since
    service = await tenant_service(request, writes=False)
    payload = service.learning.fit()
    return json_response(m.LearningFit.model_validate(payload, strict=False))


async def get_analytics(request: web.Request) -> web.Response:
    name = path_param(request, "name")
    only_query(request, "since")
    since = checked_query(request, "since", _checked_since)
    service = await tenant_service(request, writes=False)
    body = await service.learning.analysis(name, since)
    return web.json_response(body, dumps=lambda v: json.dumps(v, ensure_ascii=False))


def _checked_since(text: str | None) -> str | None:
    parse_since(text)  # refused before the tenant's service is asked for
    return text


async def healthz(request: web.Request) -> web.Response:
    return json_response(m.Health(status="ok"))


async def readyz(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    await service.check_ready()
    if service.index.from_snapshot:
        return json_response(
            m.Health(
                status="ready",
                reason="ranking from the catalog snapshot: the store has not answered yet",
                snapshot=True,
            )
        )
    return json_response(m.Health(status="ready"))


async def metrics(request: web.Request) -> web.Response:
    """What the caller may read of the metrics. With no key configured, everything (as before
    tenants). Otherwise a request with a key reads its tenant's series (an admin every tenant's,
    or the one it names with `X-Toolselect-Tenant`), and one without (a scraper, when
    `TOOLSELECT_METRICS_AUTH` is off) the process's and `default`'s: no other tenant's series
    is shown without an admin key."""
    service = request.app[SERVICE]
    caller = request.get(CALLER)  # the middleware's, for a key sent even where none is needed
    if caller is None:
        body = service.metrics.render(
            DEFAULT_TENANT if service.keys.enabled else None, process=True
        )
    elif caller.role == "admin" and TENANT_HEADER not in request.headers:
        body = service.metrics.render()
    else:
        body = service.metrics.render(caller.tenant)
    return web.Response(body=body, content_type="text/plain", charset="utf-8")


async def openapi(request: web.Request) -> web.Response:
    served = frozenset(resource.canonical for resource in request.app.router.resources())
    return web.json_response(served_document(served, request.app[SERVICE].settings))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/rank", rank)
    app.router.add_post("/v1/select", select)
    app.router.add_put("/v1/tools", put_tools)
    app.router.add_get("/v1/tools", list_tools)
    app.router.add_get("/v1/tools/{name:[^/]+}", get_tool)
    app.router.add_delete("/v1/tools/{name:[^/]+}", delete_tool)
    app.router.add_get("/v1/tools/{name:[^/]+}/exemplars", tool_exemplars)
    app.router.add_post("/v1/observe", observe)
    app.router.add_post("/v1/observe/batch", observe_batch)
    app.router.add_post("/v1/exemplars", post_exemplar)
    app.router.add_delete("/v1/exemplars/{id}", delete_exemplar)
    app.router.add_get("/v1/analytics", list_analytics)
    app.router.add_get(f"/v1/analytics/{LEARNING}", learning_fit)
    app.router.add_get("/v1/analytics/{name}", get_analytics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)
