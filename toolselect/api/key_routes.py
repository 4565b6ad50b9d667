"""The admin routes that manage API keys at run time: create (the key is shown once), list and
revoke; and `whoami`, which any key may ask about itself. Keys are written to the store, which
every replica's upkeep reads within its poll interval (`Service.reload_keys`); this process's
registry takes the change at once."""

from __future__ import annotations

import structlog
from aiohttp import web

from toolselect.api import key_models as km
from toolselect.api.http import CALLER, SERVICE, TENANTS, json_response, read_model
from toolselect.api.params import checked_query, path_param
from toolselect.clock import utc_now
from toolselect.errors import NotFound
from toolselect.keys import check_tenant, new_key, shown

log = structlog.get_logger("toolselect.api")


async def create_key(request: web.Request) -> web.Response:
    """`POST /v1/keys`: a new key of any tenant, answered once with the key itself."""
    service = request.app[SERVICE]
    body = await read_model(request, km.KeyCreateRequest)
    secret, key = new_key(check_tenant(body.tenant), body.role, utc_now(), name=body.name)
    await service.store.save_key(key)
    service.keys.add(key)
    request.app[TENANTS].made(key.tenant)  # its reads are served here at once
    log.info(
        "api_key_created",
        key_id=key.id,
        tenant=key.tenant,
        role=key.role,
        by=request[CALLER].key_id,
    )
    out = km.KeyOut.of(key)
    return json_response(km.KeyCreated(key=secret, **out.model_dump()), status=201)


async def list_keys(request: web.Request) -> web.Response:
    """`GET /v1/keys[?tenant=]`: every tenant's keys, or one tenant's; never a key or hash."""
    tenant = checked_query(request, "tenant", _tenant_or_none)
    keys = await request.app[SERVICE].store.list_keys(tenant)
    return json_response(km.KeyList(keys=[km.KeyOut.of(k) for k in keys]))


async def revoke_key(request: web.Request) -> web.Response:
    """`DELETE /v1/keys/{id}`: the key is refused from now on (here at once, elsewhere within
    the poll interval); 404 for an unknown id."""
    service = request.app[SERVICE]
    key_id = path_param(request, "id")
    if not await service.store.revoke_key(key_id):
        raise NotFound(f"no API key with id {shown(key_id)}", "id")
    service.keys.drop(key_id)
    log.info("api_key_revoked", key_id=key_id, by=request[CALLER].key_id)
    return json_response(km.KeyRevoked(id=key_id, revoked=True))


async def whoami(request: web.Request) -> web.Response:
    """`GET /v1/whoami`: the caller's tenant, role and key id, for any role (a dashboard shows
    whose data it reads, and offers a tenant picker only to an admin)."""
    caller = request[CALLER]
    return json_response(km.Whoami(tenant=caller.tenant, role=caller.role, key_id=caller.key_id))


def _tenant_or_none(tenant: str | None) -> str | None:
    return None if tenant is None else check_tenant(tenant)


def add_key_routes(app: web.Application) -> None:
    app.router.add_get("/v1/whoami", whoami)
    app.router.add_post("/v1/keys", create_key)
    app.router.add_get("/v1/keys", list_keys)
    app.router.add_delete("/v1/keys/{id}", revoke_key)
