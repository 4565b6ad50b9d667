"""Authentication, overload and stalled clients, against the real app on a real socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from tests.services import ServiceFactory
from toolselect.records import Tool

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
KEYS = ("k-alpha-5f1c", "k-beta-93ad")


@pytest_asyncio.fixture(loop_scope="function")
async def factory(tmp_path: Path) -> AsyncIterator[ServiceFactory]:
    services = ServiceFactory("sqlite", tmp_path, None)
    yield services
    await services.aclose()


async def make_client(
    factory: ServiceFactory, aiohttp_client: ClientFactory, **settings: Any
) -> TestClient[Any, Any]:
    client, service = await factory.serve(aiohttp_client, **settings)
    await service.catalog.upsert_tools(
        [Tool("get_weather", "Weather for a city"), Tool("send_email", "Mail")]
    )
    return client


async def test_api_keys_guard_v1_routes(
    factory: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """With keys set, /v1/* needs a valid bearer key (any of them); health stays open."""
    client = await make_client(factory, aiohttp_client, api_keys=KEYS)
    body = {"query": "weather"}
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {KEYS[0]}"}):
        resp = await client.post("/v1/rank", json=body, headers=headers)
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"] == "Bearer"
        error = (await resp.json())["error"]
        assert (error["code"], error["field"]) == ("unauthorized", "Authorization")
    for key in KEYS:
        resp = await client.post("/v1/rank", json=body, headers={"Authorization": f"Bearer {key}"})
        assert resp.status == 200
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    assert (await client.get("/metrics")).status == 200
    assert (await client.get("/v1/tools")).status == 401


async def test_metrics_can_be_guarded(
    factory: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """TOOLSELECT_METRICS_AUTH puts /metrics behind the keys too."""
    client = await make_client(factory, aiohttp_client, api_keys=KEYS, metrics_auth=True)
    assert (await client.get("/metrics")).status == 401
    ok = await client.get("/metrics", headers={"Authorization": f"Bearer {KEYS[1]}"})
    assert ok.status == 200


async def test_a_bad_key_on_the_open_metrics_is_refused_and_counted(
    factory: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """With keys but an open /metrics, a scraper without a key reads it; one whose key is
    unknown gets 401, counted as every other refused key is."""
    client = await make_client(factory, aiohttp_client, api_keys=KEYS)
    assert (await client.get("/metrics")).status == 200
    refused = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert refused.status == 401
    assert (await refused.json())["error"]["code"] == "unauthorized"
    text = await (await client.get("/metrics")).text()
    assert 'toolselect_http_rejected_total{reason="unauthorized"} 1.0' in text


async def test_keys_never_reach_the_logs(
    factory: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Neither a configured key nor a presented one appears in any log event."""
    client = await make_client(factory, aiohttp_client, api_keys=KEYS)
    with capture_logs() as logs:
        await client.post(
            "/v1/rank", json={"query": "w"}, headers={"Authorization": "Bearer x-secret"}
        )
        await client.post(
            "/v1/rank", json={"k": "bad"}, headers={"Authorization": f"Bearer {KEYS[0]}"}
        )
        await client.get("/v1/nope", headers={"Authorization": f"Bearer {KEYS[0]}"})
    text = repr(logs)
    for secret in (*KEYS, "x-secret"):
        assert secret not in text


async def _stall(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a request whose body never finishes arriving: a stalled client."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"query": '
    )
    await writer.drain()
    return reader, writer


@pytest.mark.slow  # waits seconds: kept out of `make test-fast`
async def test_stalled_clients_hold_no_slot_and_get_408(
    factory: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Stalled clients as many as the concurrency limit leave everyone else served: a body is
    read before the request takes a slot. Each is answered `408 body_timeout` once the
    request timeout passes, counted, and its connection closed."""
    client = await make_client(factory, aiohttp_client, max_concurrency=2, request_timeout_s=1.0)
    port = client.port
    assert port is not None
    stalled = [await _stall(port), await _stall(port)]
    await asyncio.sleep(0.2)  # both are waiting for their bodies by now
    resp = await client.post("/v1/rank", json={"query": "weather"})
    assert resp.status == 200
    assert (await client.get("/healthz")).status == 200
    for reader, writer in stalled:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        assert head.startswith(b"HTTP/1.1 408 ") and b"Connection: close" in head, head
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        answer = await reader.readexactly(length)
        assert b'"code":"body_timeout"' in answer and b'"field":"body"' in answer
        writer.close()
    metrics = await (await client.get("/metrics")).text()
    assert 'toolselect_http_rejected_total{reason="body_timeout"} 2.0' in metrics
    assert 'toolselect_http_requests_total{route="/v1/rank",status="408"} 2.0' in metrics
