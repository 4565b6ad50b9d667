"""The MCP server's resources: the catalog and the analyses, as JSON (`mcp_server`).

Static resources take no `Context` in the SDK, so they reach the lifespan's service through a
`Running` slot, which also starts other tenants' services (`Running.tenant_service`: each read
acts on the caller's tenant). A failed read is a `ResourceError`, which the SDK answers as a
JSON-RPC error: an unknown analysis a `ResourceNotFoundError` and a bad `since` a
`BadParameter` (both -32602 Invalid params), the store failing -32603; who may read which
resource is `keys.MCP_ROLES`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.mcpserver.resources import FunctionResource
from mcp.shared.uri_template import UriTemplate

from toolselect.analytics import registry
from toolselect.analytics.surfaces import refuse_learning_since
from toolselect.errors import InvalidInput, NotFound, ToolselectError
from toolselect.keys import DEFAULT_TENANT
from toolselect.mcp_auth import current_caller
from toolselect.service import Service, TenantServices

ANALYTICS_URI = "toolselect://analytics"
CATALOG_URI = "toolselect://catalog"
JSON_MIME = "application/json"


class BadParameter(ResourceError):
    """A parameter of the URI the caller got wrong (`since`): `ToolselectMCP.read_resource`
    answers it -32602 Invalid params, where the SDK answers any other `ResourceError` -32603
    Internal error."""


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


class Running:
    """The service while the server runs. Static resources take no `Context` in the SDK, so
    they reach the lifespan's service through this slot instead."""

    def __init__(self) -> None:
        self.service: Service | None = None
        self.tenants: TenantServices | None = None  # around `service`, while it runs
        # Set once the lifespan has closed the service (stdio's signal handling waits for it).
        self.stopped: anyio.Event | None = None

    def get(self) -> Service:
        if self.service is None:
            raise ResourceError("the toolselect service is not running")
        return self.service

    async def tenant_service(self, *, writes: bool = False) -> Service:
        """The service of the current caller's tenant (`mcp_auth.current_caller`; `default`
        over stdio): the lifespan's for `default`, another tenant's started on first use by a
        call that `writes` its data (a reported turn); `UnknownTenant` for any other call while
        the tenant does not exist yet, which would otherwise make its store."""
        default = self.get()
        tenant = current_caller().tenant
        if tenant == DEFAULT_TENANT or self.tenants is None:
            return default
        if writes:
            return await self.tenants.get(tenant)
        return await self.tenants.existing(tenant)


async def _analysis(running: Running, name: str, since: str | None) -> str:
    try:
        service = await running.tenant_service()
        if name == registry.LEARNING:
            refuse_learning_since(since)
            return _dumps(service.learning.fit())
        return _dumps(await service.learning.analysis(name, since))
    except NotFound as exc:
        raise ResourceNotFoundError(str(exc)) from exc
    except InvalidInput as exc:
        raise BadParameter(" ".join(exc.message.split())) from exc
    except ToolselectError as exc:
        raise ResourceError(" ".join(str(exc).split())) from exc


def add_resources(server: MCPServer[Service], running: Running) -> None:
    """The catalog, the analyses' index, each analysis and the `since` template."""
    names = (*registry.NAMES, registry.LEARNING)

    async def catalog() -> str:
        try:
            tools = await (await running.tenant_service()).catalog.list_tools()
        except ToolselectError as exc:  # the store down, say: the cause, as `_analysis` gives
            raise ResourceError(" ".join(str(exc).split())) from exc
        return _dumps(
            {
                "tools": [
                    {
                        "name": t.name,
                        "description": t.description,
                        "inputSchema": dict(t.input_schema),
                        "packs": list(t.packs),
                    }
                    for t in tools
                ]
            }
        )

    async def index() -> str:
        return _dumps({"analyses": [f"{ANALYTICS_URI}/{name}" for name in names]})

    server.add_resource(
        FunctionResource.from_function(
            catalog,
            CATALOG_URI,
            name="catalog",
            description="Every tool of the catalog: name, description, inputSchema, packs.",
            mime_type=JSON_MIME,
        )
    )
    server.add_resource(
        FunctionResource.from_function(
            index,
            ANALYTICS_URI,
            name="analytics",
            description="The URIs of the analyses of the learning loop.",
            mime_type=JSON_MIME,
        )
    )
    for name in names:
        description = (
            "what the learning loop chose from its labels: fold, calibration curve, teacher depth"
            if name == registry.LEARNING
            else registry.ANALYSES[name].description
        )
        server.add_resource(
            FunctionResource.from_function(
                _analysis_reader(running, name),
                f"{ANALYTICS_URI}/{name}",
                name=name,
                description=f"{description} (JSON: name, columns, rows)",
                mime_type=JSON_MIME,
            )
        )

    # The same analyses with a `since` filter (ISO-8601 date or time), for hosts that fill in
    # resource templates.
    @server.resource(
        ANALYTICS_URI + "/{name}{?since}",
        name="analysis",
        description="One analysis by name, optionally only data at or after `since` (ISO-8601).",
        mime_type=JSON_MIME,
    )
    async def analysis(name: str, since: str | None = None) -> str:
        return await _analysis(running, name, since)


async def serves(server: MCPServer[Service], uri: str) -> bool:
    """Whether `uri` is a listed resource, or one of them through a template (an analysis by
    name with `since`), told without reading it."""
    listed = {str(resource.uri) for resource in await server.list_resources()}
    if uri in listed:
        return True
    for template in await server.list_resource_templates():
        found = UriTemplate.parse(template.uri_template).match(uri)
        if found is not None and f"{ANALYTICS_URI}/{found.get('name')}" in listed:
            return True
    return False


def _analysis_reader(running: Running, name: str) -> Callable[[], Any]:
    async def read() -> str:
        return await _analysis(running, name, None)

    read.__name__ = f"analysis_{name}"
    return read
