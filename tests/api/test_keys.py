"""API keys with tenants and roles, against the real app on a real socket and real stores:
roles per route, create -> use -> revoke -> refused, a second service seeing a revocation
within its poll interval, `TOOLSELECT_API_KEYS` as default-tenant admins, and the caller each
request acts as."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.api.conftest import HAND_CATALOG, ClientFactory
from tests.services import ServiceFactory
from toolselect.api.app import create_app
from toolselect.api.http import CALLER
from toolselect.keys import Caller, KeyRegistry
from toolselect.service import Service

ADMIN = "k-admin-env-7f3e"  # a TOOLSELECT_API_KEYS key
TOOLS = {"tools": [{"name": "get_weather", "description": "Weather for a city"}]}
RANK = {"query": "weather in Turin"}


def bearer(key: str, tenant: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"}
    if tenant is not None:
        headers["X-Toolselect-Tenant"] = tenant
    return headers


async def create(client: TestClient[Any, Any], tenant: str, role: str, **extra: Any) -> Any:
    resp = await client.post(
        "/v1/keys", json={"tenant": tenant, "role": role, **extra}, headers=bearer(ADMIN)
    )
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def error_of(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    error: dict[str, Any] = (await resp.json())["error"]
    return error


class Spied:
    """A client of the app over a started service, recording the caller of every request."""

    def __init__(self, client: TestClient[Any, Any], service: Service, seen: list[Any]) -> None:
        self.client, self.service, self.seen = client, service, seen


async def spied(factory: ServiceFactory, aiohttp_client: ClientFactory, **settings: Any) -> Spied:
    """The real app with an inner middleware noting `request[CALLER]` (the auth has run)."""
    service = await factory.start(wait_for_store=True, **settings)
    await service.catalog.upsert_tools(HAND_CATALOG, pack="assistant")
    app = create_app(service)
    seen: list[Caller | None] = []

    @web.middleware
    async def spy(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(request.get(CALLER))
        response: web.StreamResponse = await handler(request)
        return response

    app.middlewares.append(spy)
    return Spied(await aiohttp_client(app), service, seen)


@pytest_asyncio.fixture(loop_scope="function")
async def sqlite(tmp_path: Path) -> Any:
    factory = ServiceFactory("sqlite", tmp_path, None)
    yield factory
    await factory.aclose()


async def test_roles_per_route(services: ServiceFactory, aiohttp_client: ClientFactory) -> None:
    """An agent key ranks and observes but gets 403 on PUT /v1/tools and /v1/keys; an editor
    keeps the catalog but not the keys; an admin key made at run time manages keys."""
    client, _ = await services.serve(aiohttp_client, api_keys=(ADMIN,))
    agent = (await create(client, "default", "agent"))["key"]
    editor = (await create(client, "default", "editor"))["key"]
    admin = (await create(client, "team-b", "admin", name="ops"))["key"]

    assert (await client.put("/v1/tools", json=TOOLS, headers=bearer(editor))).status == 200
    assert (await client.post("/v1/rank", json=RANK, headers=bearer(agent))).status == 200
    turn = {"request": "weather in Turin", "used_tool": "get_weather"}
    assert (await client.post("/v1/observe", json=turn, headers=bearer(agent))).status == 202
    refused = await client.put("/v1/tools", json=TOOLS, headers=bearer(agent))
    error = await error_of(refused, 403)
    assert error["code"] == "forbidden"
    assert error["message"] == (
        "expected a key of role editor or above for PUT /v1/tools, got role agent"
    )
    for key in (agent, editor):
        body = {"tenant": "team-a", "role": "agent"}
        assert (await client.post("/v1/keys", json=body, headers=bearer(key))).status == 403
        assert (await client.get("/v1/keys", headers=bearer(key))).status == 403
    assert (await client.get("/v1/tools", headers=bearer(agent))).status == 403
    assert (await client.get("/v1/tools", headers=bearer(editor))).status == 200
    assert (await client.get("/v1/analytics", headers=bearer(editor))).status == 200
    listed = await client.get("/v1/keys", headers=bearer(admin))
    assert listed.status == 200 and len((await listed.json())["keys"]) == 3
    made = await client.post(
        "/v1/keys", json={"tenant": "team-c", "role": "agent"}, headers=bearer(admin)
    )
    assert made.status == 201


async def test_create_use_revoke_refused(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A key is answered once at creation, listed without itself or its hash, works at once,
    and once revoked is refused 401 on the same service; an unknown id is 404."""
    client, service = await services.serve(aiohttp_client, api_keys=(ADMIN,))
    await service.catalog.upsert_tools(HAND_CATALOG)
    made = await create(client, "default", "agent", name="ci")
    key = made["key"]
    assert set(made) == {"key", "id", "prefix", "tenant", "role", "name", "created_at"}
    assert (made["tenant"], made["role"], made["name"]) == ("default", "agent", "ci")
    assert key.startswith("tsk_") and made["prefix"] == key[:12]
    assert (await client.post("/v1/rank", json=RANK, headers=bearer(key))).status == 200

    listed = await client.get("/v1/keys?tenant=default", headers=bearer(ADMIN))
    text = await listed.text()
    assert listed.status == 200 and key not in text and key[12:] not in text
    [out] = (await listed.json())["keys"]
    assert out == {k: v for k, v in made.items() if k != "key"}
    assert (await (await client.get("/v1/keys?tenant=other", headers=bearer(ADMIN))).json()) == {
        "keys": []
    }

    gone = await client.delete(f"/v1/keys/{made['id']}", headers=bearer(ADMIN))
    assert gone.status == 200 and await gone.json() == {"id": made["id"], "revoked": True}
    refused = await client.post("/v1/rank", json=RANK, headers=bearer(key))
    error = await error_of(refused, 401)
    assert error == {
        "code": "unauthorized",
        "message": "unknown or revoked API key (Authorization: Bearer <API key>)",
        "field": "Authorization",
    }
    assert refused.headers["WWW-Authenticate"] == "Bearer"
    [revoked] = (await (await client.get("/v1/keys", headers=bearer(ADMIN))).json())["keys"]
    assert "revoked_at" in revoked
    unknown = await client.delete("/v1/keys/000000000000", headers=bearer(ADMIN))
    assert (await error_of(unknown, 404))["code"] == "not_found"


async def test_a_key_pasted_for_an_id_or_tenant_is_never_echoed(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A key sent where its id belongs (`DELETE /v1/keys/{key}`) is a 404 that does not repeat
    it; nor does the 403 of a key naming a key-shaped tenant in X-Toolselect-Tenant."""
    client, _ = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,))
    key = (await create(client, "default", "agent"))["key"]
    resp = await client.delete(f"/v1/keys/{key}", headers=bearer(ADMIN))
    error = await error_of(resp, 404)
    assert error == {
        "code": "not_found",
        "message": "no API key with id what looks like an API key (not shown)",
        "field": "id",
    }
    # A tenant id may start `tsk_`: a key made of its characters passes the tenant rule.
    lower = "tsk_" + "a0-_" * 10 + "abc"
    resp = await client.get("/v1/whoami", headers=bearer(key, lower))
    error = await error_of(resp, 403)
    assert lower not in error["message"] and "(not shown)" in error["message"]


async def test_key_requests_are_validated(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A bad tenant, role, name or field is `422 invalid_request` naming the field."""
    client, _ = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,))
    bodies = (
        ({"tenant": "Team A", "role": "agent"}, "tenant"),
        ({"tenant": "a", "role": "root"}, "role"),
        ({"tenant": "a", "role": "agent", "name": " "}, "name"),
        ({"tenant": "a", "role": "agent", "key": "mine"}, "key"),
        ({"role": "agent"}, "tenant"),
    )
    for body, field in bodies:
        resp = await client.post("/v1/keys", json=body, headers=bearer(ADMIN))
        error = await error_of(resp, 422)
        assert (error["code"], error["field"]) == ("invalid_request", field)
    resp = await client.get("/v1/keys?tenant=BAD", headers=bearer(ADMIN))
    assert (await error_of(resp, 422))["field"] == "query.tenant"


async def test_a_revocation_reaches_a_second_service_within_the_poll_interval(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """Two services on one SQLite file (poll 0.2 s): a key made through one works on the
    other, and a key revoked through one is refused by the other, within about a poll."""
    one, _ = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,), poll_interval_s=0.2)
    two, service = await sqlite.serve(
        aiohttp_client, api_keys=(ADMIN,), poll_interval_s=0.2, data_dir=str(tmp_path / "two")
    )
    await service.catalog.upsert_tools(HAND_CATALOG)
    made = await create(one, "default", "agent")

    async def status_on_two() -> int:
        return (await two.post("/v1/rank", json=RANK, headers=bearer(made["key"]))).status

    async def waited_for(status: int) -> float:
        started = time.monotonic()
        while await status_on_two() != status:
            assert time.monotonic() - started < 5.0, f"no {status} within 5 s"
            await asyncio.sleep(0.02)
        return time.monotonic() - started

    assert await waited_for(200) < 2.0
    assert (await one.delete(f"/v1/keys/{made['id']}", headers=bearer(ADMIN))).status == 200
    assert await waited_for(401) < 2.0


async def test_configured_keys_are_admins_of_the_default_tenant(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A TOOLSELECT_API_KEYS key acts as admin of `default` (`config:N`), manages keys, and
    may act on any tenant with X-Toolselect-Tenant."""
    spy = await spied(sqlite, aiohttp_client, api_keys=("k-other", ADMIN))
    client = spy.client
    assert (await client.put("/v1/tools", json=TOOLS, headers=bearer(ADMIN))).status == 200
    assert spy.seen[-1] == Caller("default", "admin", "config:2")
    assert (await client.get("/v1/keys", headers=bearer(ADMIN, "team-z"))).status == 200
    assert spy.seen[-1] == Caller("team-z", "admin", "config:2")
    assert (await client.get("/v1/tools", headers=bearer("k-other"))).status == 200
    assert spy.seen[-1] == Caller("default", "admin", "config:1")
    assert not await spy.service.store.list_keys()  # configured keys are never stored


async def test_the_caller_and_the_tenant_header(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A stored key acts as its own tenant and role; naming its own tenant is fine, another
    is 403 unless the key is an admin; a malformed tenant header is 422."""
    spy = await spied(sqlite, aiohttp_client, api_keys=(ADMIN,))
    made = await create(spy.client, "default", "agent")
    headers = bearer(made["key"])
    assert (await spy.client.post("/v1/rank", json=RANK, headers=headers)).status == 200
    assert spy.seen[-1] == Caller("default", "agent", made["id"])
    own = bearer(made["key"], "default")
    assert (await spy.client.post("/v1/rank", json=RANK, headers=own)).status == 200
    other = await spy.client.post("/v1/rank", json=RANK, headers=bearer(made["key"], "team-b"))
    error = await error_of(other, 403)
    assert (error["code"], error["field"]) == ("forbidden", "X-Toolselect-Tenant")
    assert "'default'" in error["message"] and "'team-b'" in error["message"]
    bad = await spy.client.post("/v1/rank", json=RANK, headers=bearer(ADMIN, "Team B"))
    assert (await error_of(bad, 422))["field"] == "X-Toolselect-Tenant"


async def test_whoami_answers_any_key_its_tenant_role_and_id(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """`GET /v1/whoami`: an agent key of team-a learns its tenant, role and id (and nothing of
    any key's secret); a configured key is `config:1`, an admin of `default`, acting on the
    tenant it names; without a key it is 401."""
    client, _ = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,))
    made = await create(client, "team-a", "agent")
    resp = await client.get("/v1/whoami", headers=bearer(made["key"]))
    assert resp.status == 200
    assert await resp.json() == {"tenant": "team-a", "role": "agent", "key_id": made["id"]}
    resp = await client.get("/v1/whoami", headers=bearer(ADMIN, "team-b"))
    assert await resp.json() == {"tenant": "team-b", "role": "admin", "key_id": "config:1"}
    await error_of(await client.get("/v1/whoami"), 401)
    await error_of(await client.get("/v1/whoami", headers=bearer(made["key"], "team-b")), 403)


async def test_without_keys_everything_stays_open(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """With no key configured or stored, every request acts as admin of `default`, and the
    tenant header still picks a tenant; creating the first key turns authentication on."""
    spy = await spied(sqlite, aiohttp_client)
    client = spy.client
    assert (await client.post("/v1/rank", json=RANK)).status == 200
    assert spy.seen[-1] == Caller("default", "admin", None)
    whoami = await (await client.get("/v1/whoami")).json()
    assert whoami == {"tenant": "default", "role": "admin"}  # no key id: there is no key
    assert (await client.post("/v1/rank", json=RANK, headers=bearer("anything"))).status == 200
    assert (await client.get("/v1/keys", headers={"X-Toolselect-Tenant": "t"})).status == 200
    assert spy.seen[-1] == Caller("t", "admin", None)
    resp = await client.post("/v1/keys", json={"tenant": "default", "role": "admin"})
    assert resp.status == 201
    key = (await resp.json())["key"]
    assert (await client.post("/v1/rank", json=RANK)).status == 401
    assert (await client.post("/v1/rank", json=RANK, headers=bearer(key))).status == 200
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/openapi.json")).status == 200
    assert (await client.get("/ui/app.js")).status == 200


async def test_a_key_cannot_be_checked_before_the_stored_keys_are_read(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Until the store has been read once, a key that is not configured is answered `503
    not_ready` (its tenant is unknown), while a configured key works."""
    client, service = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,), poll_interval_s=3600.0)
    await service.catalog.upsert_tools(HAND_CATALOG)
    made = await create(client, "default", "agent")
    service.keys = KeyRegistry((ADMIN,))  # as after a start with the store down: never read
    resp = await client.post("/v1/rank", json=RANK, headers=bearer(made["key"]))
    error = await error_of(resp, 503)
    assert error["code"] == "not_ready" and resp.headers["Retry-After"] == "1"
    assert (await client.post("/v1/rank", json=RANK, headers=bearer(ADMIN))).status == 200
    assert (await client.post("/v1/rank", json=RANK)).status == 401
    await service.reload_keys()
    assert (await client.post("/v1/rank", json=RANK, headers=bearer(made["key"]))).status == 200


async def test_metrics_need_an_editor_key_when_guarded(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """With TOOLSELECT_METRICS_AUTH, /metrics takes an editor key or above, not an agent's."""
    client, _ = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,), metrics_auth=True)
    made = {role: (await create(client, "team-a", role))["key"] for role in ("agent", "editor")}
    assert (await client.get("/metrics")).status == 401
    assert (await client.get("/metrics", headers=bearer(made["agent"]))).status == 403
    assert (await client.get("/metrics", headers=bearer(made["editor"]))).status == 200
    assert (await client.get("/metrics", headers=bearer(ADMIN))).status == 200


async def test_another_tenants_keys_reach_only_its_own_data(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A key of another tenant (any role), or an admin naming another tenant, acts on that
    tenant's own data: nothing of `default` shows in its answers, what it stores stays its own,
    and keys of any tenant can still be managed."""
    client, service = await sqlite.serve(aiohttp_client, api_keys=(ADMIN,))
    await service.catalog.upsert_tools(HAND_CATALOG)
    keys = {role: (await create(client, "team-a", role))["key"] for role in ("agent", "admin")}
    for headers in (bearer(keys["admin"]), bearer(ADMIN, "team-a")):
        listed = await client.get("/v1/tools", headers=headers)
        assert listed.status == 200 and (await listed.json())["tools"] == []
    ranked = await client.post("/v1/rank", json=RANK, headers=bearer(keys["agent"]))
    assert ranked.status == 200 and (await ranked.json())["results"] == []
    put = await client.put("/v1/tools", json=TOOLS, headers=bearer(keys["admin"]))
    assert put.status == 200
    ranked = await client.post("/v1/rank", json=RANK, headers=bearer(keys["agent"]))
    assert [r["tool"] for r in (await ranked.json())["results"]] == ["get_weather"]
    turn = {"request": "weather in Turin", "used_tool": "get_weather"}
    assert (
        await client.post("/v1/observe", json=turn, headers=bearer(keys["agent"]))
    ).status == 202
    analysis = await client.get("/v1/analytics/misroute_rate", headers=bearer(keys["admin"]))
    assert analysis.status == 200
    default_tools = await (await client.get("/v1/tools", headers=bearer(ADMIN))).json()
    assert len(default_tools["tools"]) == len(HAND_CATALOG)
    listed = await client.get("/v1/keys?tenant=team-a", headers=bearer(keys["admin"]))
    assert listed.status == 200 and len((await listed.json())["keys"]) == 2
    assert (await client.post("/v1/rank", json=RANK, headers=bearer(ADMIN))).status == 200
