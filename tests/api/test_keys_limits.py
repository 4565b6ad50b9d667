"""Per-tenant and global request limits (`429 rate_limited` with `Retry-After`), and keys
never reaching a log line, a metric or an error message; the real app on a real socket."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from structlog.testing import capture_logs

from tests.api.conftest import HAND_CATALOG, ClientFactory
from tests.api.test_keys import bearer
from tests.services import ServiceFactory
from toolselect.clock import utc_now
from toolselect.keys import key_hash, new_key
from toolselect.service import Service

ADMIN = "k-admin-env-51c9"
RANK = {"query": "weather in Turin"}


@pytest_asyncio.fixture(loop_scope="function")
async def sqlite(tmp_path: Path) -> AsyncIterator[ServiceFactory]:
    factory = ServiceFactory("sqlite", tmp_path, None)
    yield factory
    await factory.aclose()


async def stored_key(service: Service, tenant: str, role: str = "agent") -> str:
    """A key written to the store and read into the registry (no request spent on it)."""
    secret, key = new_key(tenant, role, utc_now())
    await service.store.save_key(key)
    await service.reload_keys()
    return secret


async def test_a_tenant_over_its_rate_gets_429_and_another_does_not(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Past its burst a tenant is refused `429 rate_limited` with an integer `Retry-After`
    of at least 1, counted per tenant and scope; another tenant keeps being served."""
    client, service = await sqlite.serve(
        aiohttp_client, api_keys=(ADMIN,), tenant_rps=0.1, tenant_burst=2
    )
    await service.catalog.upsert_tools(HAND_CATALOG)
    # Only `default` has data here yet: the other tenant spends its rate on its keys.
    busy, calm = await stored_key(service, "default"), await stored_key(service, "calm", "admin")
    for _ in range(2):
        assert (await client.post("/v1/rank", json=RANK, headers=bearer(busy))).status == 200
    refused = await client.post("/v1/rank", json=RANK, headers=bearer(busy))
    assert refused.status == 429
    error = (await refused.json())["error"]
    assert error == {
        "code": "rate_limited",
        "message": "tenant 'default' sent more than 0.1 requests per second",
        "field": "Retry-After",
    }
    assert int(refused.headers["Retry-After"]) >= 1
    for _ in range(2):
        assert (await client.get("/v1/keys", headers=bearer(calm))).status == 200
    assert (await client.get("/healthz")).status == 200  # health is never limited
    metrics = await (await client.get("/metrics")).text()
    assert 'toolselect_rate_limited_total{scope="tenant",tenant="default"} 1.0' in metrics
    assert 'tenant="calm"' not in metrics
    assert 'toolselect_http_rejected_total{reason="rate_limited"} 1.0' in metrics


async def test_the_global_rate_counts_every_tenant(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """TOOLSELECT_GLOBAL_RPS caps the process: once spent, any tenant gets `429` of scope
    `global`."""
    client, service = await sqlite.serve(aiohttp_client, global_rps=0.5)
    await service.catalog.upsert_tools(HAND_CATALOG)
    assert (await client.post("/v1/rank", json=RANK)).status == 200
    refused = await client.post("/v1/rank", json=RANK, headers={"X-Toolselect-Tenant": "other"})
    assert refused.status == 429 and int(refused.headers["Retry-After"]) >= 1
    assert (await refused.json())["error"]["message"] == (
        "more than 0.5 requests per second in all"
    )
    metrics = await (await client.get("/metrics")).text()
    assert 'toolselect_rate_limited_total{scope="global",tenant="other"} 1.0' in metrics


async def test_keys_never_reach_logs_metrics_or_errors(
    sqlite: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """No key (configured, created, revoked, unknown, or pasted as a tenant), nor its hash,
    appears in any log event, in /metrics or in any error body: 401, 403, 404, 422 and 429."""
    client, service = await sqlite.serve(
        aiohttp_client, api_keys=(ADMIN,), tenant_rps=0.01, tenant_burst=4
    )
    await service.catalog.upsert_tools(HAND_CATALOG)
    errors: list[str] = []

    async def call(status: int, method: str, path: str, key: str, **kwargs: Any) -> Any:
        # The admin acts as another tenant, so its calls spend none of `default`'s rate.
        headers = bearer(key, "ops") if key == ADMIN else bearer(key)
        resp = await client.request(method, path, headers=headers, **kwargs)
        assert resp.status == status, await resp.text()
        if resp.status >= 400:
            errors.append(await resp.text())
        return resp

    with capture_logs() as logs:
        body = {"tenant": "default", "role": "agent"}
        made = await (await call(201, "POST", "/v1/keys", ADMIN, json=body)).json()
        key = made["key"]
        await call(404, "GET", "/v1/nope", key)
        for _ in range(3):
            await call(200, "POST", "/v1/rank", key, json=RANK)
        await call(429, "POST", "/v1/rank", key, json=RANK)
        await call(403, "PUT", "/v1/tools", key, json={"tools": []})
        await call(422, "POST", "/v1/keys", ADMIN, json={"tenant": key, "role": "agent"})
        await call(200, "DELETE", f"/v1/keys/{made['id']}", ADMIN)
        await call(401, "POST", "/v1/rank", key, json=RANK)
        await call(401, "POST", "/v1/rank", "tsk_not-a-key-at-all", json=RANK)
    metrics = await (await client.get("/metrics")).text()
    assert any(event["event"] == "api_key_created" for event in logs)
    assert any(event["event"] == "api_key_revoked" for event in logs)
    for secret in (ADMIN, key, key_hash(key), key_hash(ADMIN), "tsk_not-a-key-at-all"):
        for text in (repr(logs), metrics, *errors):
            assert secret not in text
