"""`/openapi.json`, generated from the same pydantic models that validate requests.

Every `/v1/*` operation names the `bearer` security scheme (an API key: `toolselect.keys`), the
optional `X-Toolselect-Tenant` header (its rule: `keys.TENANT_PATTERN`) and the refusals of the
middleware's keys and limits (401, 403, 429); health and readiness are open.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from toolselect import __version__
from toolselect.api import key_models as km
from toolselect.api import models as m
from toolselect.catalog import PACK_SCHEMA
from toolselect.config import DEFAULT_K, Settings
from toolselect.keys import TENANT_HEADER, TENANT_MAX, TENANT_PATTERN

_REF = "#/components/schemas/{model}"

# (method, path, summary, request model, success status, response model, path params, query params)
_OPERATIONS: tuple[
    tuple[str, str, str, type[BaseModel] | None, int, type[BaseModel] | None, tuple[str, ...], tuple[str, ...]],
    ...,
] = (
    ("post", "/v1/rank", "Rank the catalog for a query", m.RankRequest, 200, m.RankResponse, (), ()),
    ("post", "/v1/select", "PromptKit exec-selector payload", m.SelectRequest, 200, m.SelectResponse, (), ()),
    ("post", "/v1/observe", "Report one turn", m.ObserveRequest, 202, m.ObserveResponse, (), ()),
    ("post", "/v1/observe/batch", "Report many turns", m.ObserveBatchRequest, 202, m.ObserveBatchResponse, (), ()),
    ("put", "/v1/tools", "Upsert tools (MCP, OpenAI or native body)", m.UpsertRequest, 200, m.UpsertResponse, (), ("pack",)),
    ("get", "/v1/tools", "List tools", None, 200, m.ToolList, (), ("pack",)),
    ("get", "/v1/tools/{name}", "One tool", None, 200, m.ToolOut, ("name",), ()),
    ("delete", "/v1/tools/{name}", "Delete a tool", None, 200, m.DeletedResponse, ("name",), ()),
    ("get", "/v1/tools/{name}/exemplars", "A tool's exemplars", None, 200, m.ExemplarList, ("name",), ()),
    ("post", "/v1/exemplars", "Record a human-confirmed label", m.FeedbackRequest, 201, m.FeedbackResponse, (), ()),
    ("delete", "/v1/exemplars/{id}", "Delete an exemplar", None, 200, m.DeletedResponse, ("id",), ()),
    ("get", "/v1/analytics", "Named analyses", None, 200, m.AnalyticsList, (), ()),
    ("get", "/v1/analytics/learning", "What the learning loop chose from its labels", None, 200, m.LearningFit, (), ()),
    ("get", "/v1/analytics/{name}", "Run one analysis", None, 200, m.AnalyticsResult, ("name",), ("since",)),
    ("post", "/v1/keys", "Create an API key (the answer is the one time it is shown)", km.KeyCreateRequest, 201, km.KeyCreated, (), ()),
    ("get", "/v1/keys", "List API keys, of every tenant or one (never a key itself)", None, 200, km.KeyList, (), ("tenant",)),
    ("delete", "/v1/keys/{id}", "Revoke an API key", None, 200, km.KeyRevoked, ("id",), ()),
    ("get", "/v1/whoami", "The caller: its tenant, role and key id (any role)", None, 200, km.Whoami, (), ()),
    ("get", "/healthz", "Process alive", None, 200, m.Health, (), ()),
    ("get", "/readyz", "Store reachable and catalog loaded", None, 200, m.Health, (), ()),
)  # fmt: skip

_STRING: dict[str, Any] = {"type": "string"}
# A tenant wherever one is named (`keys.check_tenant`): the header, `GET /v1/keys?tenant=`.
_TENANT_SCHEMA: dict[str, Any] = {
    **_STRING,
    "pattern": TENANT_PATTERN,
    "minLength": 1,
    "maxLength": TENANT_MAX,
}
_QUERY_SCHEMAS = {"pack": {**_STRING, **PACK_SCHEMA}, "tenant": _TENANT_SCHEMA}

_ERRORS = {
    "400": "invalid_json / invalid_body / invalid_path / bad_request (a header sent twice)",
    "404": "not_found / unknown_tenant",
    "408": "body_timeout",
    "413": "too_large",
    "415": "unsupported_media_type",
    "417": "expectation_failed",
    "422": "invalid_request",
    "503": "overloaded / not_ready / timeout / store_unavailable",
}
_RETRY_AFTER = {
    "Retry-After": {"description": "Whole seconds to wait", "schema": {"type": "integer"}}
}
# (description, headers) of the refusals of `/v1/*`, whose routes need a key while any exists.
_KEY_ERRORS: dict[str, tuple[str, dict[str, Any]]] = {
    "401": (
        "unauthorized: no Authorization: Bearer <key>, or an unknown or revoked key",
        {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
    ),
    "403": ("forbidden: the key's role is below the route's, or it names another tenant", {}),
    "429": ("rate_limited: the tenant's or the process's request rate is spent", _RETRY_AFTER),
}
# Read by the middleware on every `/v1/*` request, before the route: it picks the tenant the
# request acts on (and whose rate it spends), so every `/v1/*` operation may be sent it.
_TENANT_PARAMETER: dict[str, Any] = {
    "name": TENANT_HEADER,
    "in": "header",
    "required": False,
    "description": "The tenant the request acts on (absent: the key's own; `default` while no "
    "key exists). An admin key, or any request while no key exists, may name any tenant; "
    "another key only its own (else 403). A name breaking the rule is 422.",
    "schema": _TENANT_SCHEMA,
}
_SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key (`toolselect keys create`, `POST /v1/keys` or "
        "TOOLSELECT_API_KEYS), needed on /v1/* as soon as any key exists; with none, the API "
        "is open.",
    }
}


@cache
def openapi_document(routes: frozenset[str] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document; `routes` keeps only the given paths (all when None)."""
    models = sorted(
        {model for op in _OPERATIONS for model in (op[3], op[5]) if model is not None}
        | {m.ErrorResponse},
        key=lambda model: model.__name__,
    )
    error = {"application/json": {"schema": _ref(m.ErrorResponse)}}
    _, schema = models_json_schema([(model, "validation") for model in models], ref_template=_REF)
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, request, status, response, path_params, query_params in _OPERATIONS:
        if routes is not None and path not in routes:
            continue
        op: dict[str, Any] = {
            "summary": summary,
            "operationId": f"{method}_{path.strip('/').replace('/', '_').replace('{', '').replace('}', '')}",
            "responses": {
                str(status): {
                    "description": "success",
                    "content": {"application/json": {"schema": _ref(response)}},
                },
                **{
                    code: {"description": meaning, "content": error}
                    for code, meaning in _ERRORS.items()
                },
            },
        }
        if path.startswith("/v1/"):
            op["security"] = [{"bearer": []}]
            for code, (meaning, headers) in _KEY_ERRORS.items():
                op["responses"][code] = {"description": meaning, "content": error}
                if headers:
                    op["responses"][code]["headers"] = headers
        params = [
            {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
            for p in path_params
        ] + [
            {"name": p, "in": "query", "required": False, "schema": _QUERY_SCHEMAS.get(p, _STRING)}
            for p in query_params
        ]
        if path.startswith("/v1/"):
            params.append(_TENANT_PARAMETER)
        if params:
            op["parameters"] = params
        if request is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": _ref(request)}},
            }
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "toolselect", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schema.get("$defs", {}),
            "securitySchemes": _SECURITY_SCHEMES,
        },
    }


def served_document(routes: frozenset[str], settings: Settings) -> dict[str, Any]:
    """`openapi_document(routes)` stating the limits the server is configured with
    (`TOOLSELECT_MAX_K`, `TOOLSELECT_MAX_QUERY_BYTES`, `TOOLSELECT_MAX_BATCH`) where the models
    state the defaults."""
    document = openapi_document(routes)
    schemas = copy.deepcopy(document["components"]["schemas"])
    schemas["RankRequest"]["properties"]["k"]["maximum"] = settings.max_k
    schemas["RankRequest"]["properties"]["k"]["default"] = min(DEFAULT_K, settings.max_k)
    schemas["ObserveBatchRequest"]["properties"]["turns"]["maxItems"] = settings.max_batch
    kib, odd = divmod(settings.max_query_bytes, 1024)
    size = f"{settings.max_query_bytes} bytes" if odd else f"{kib} KiB"
    for default, configured in (
        ("1 byte .. 8 KiB UTF-8", f"1 byte .. {size} UTF-8"),
        ("max_k, 100 by default", f"max_k, {settings.max_k} here"),
        ("max_batch, 1000 by default", f"max_batch, {settings.max_batch} here"),
    ):
        _replace_text(schemas, default, configured)
    return {**document, "components": {**document["components"], "schemas": schemas}}


def _replace_text(node: Any, old: str, new: str) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = value.replace(old, new)
            else:
                _replace_text(value, old, new)
    elif isinstance(node, list):
        for item in node:
            _replace_text(item, old, new)


def _ref(model: type[BaseModel] | None) -> dict[str, Any]:
    return {"$ref": _REF.format(model=model.__name__)} if model is not None else {}
