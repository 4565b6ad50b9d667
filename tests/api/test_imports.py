"""Large catalog imports over HTTP: they finish past the request timeout, and a client that
hangs up mid-import leaves the catalog whole (old or new), on both stores."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.api.conftest import ClientFactory
from tests.services import ServiceFactory
from toolselect.catalog import parse_tools
from toolselect.service import Service

LARGE = 1300


def catalog(n: int, version: str) -> dict[str, Any]:
    """`n` tools in the native format whose descriptions all carry `version`."""
    return {
        "tools": [
            {
                "name": f"tool_{i:04d}",
                "description": f"{version} catalog entry {i}: look up record {i} by its key",
                "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}},
            }
            for i in range(n)
        ]
    }


async def versions_stored(service: Service) -> set[str]:
    """The catalog versions the store's descriptions carry (one when the catalog is whole)."""
    return {t.description.split(" ", 1)[0] for t in await service.store.list_tools()}


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until `condition` holds (checked every millisecond or so)."""
    for _ in range(1_000_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


async def test_large_import_outlasts_a_small_request_timeout(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """With a 10 ms request timeout, which every other route keeps, a 1,300-tool PUT answers
    200 once the catalog is stored and ranked, never 503: its limit grows with its size."""
    client, service = await services.serve(aiohttp_client, request_timeout_s=0.01)
    resp = await client.put("/v1/tools", json=catalog(LARGE, "new"))
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {"upserted": LARGE, "unchanged": 0}
    assert service.ranker.size == LARGE
    assert await versions_stored(service) == {"new"}
    ranked = await client.post("/v1/rank", json={"query": "look up record 17 by its key"})
    assert ranked.status == 200


async def test_client_gone_mid_import_leaves_catalog_old_or_new(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A client that disconnects while its import embeds (the server cancelling the handler)
    never sees a half-written catalog: the store holds every old tool or every new one, and
    the shielded import still finishes into the store and the ranker."""
    client, service = await services.serve(
        aiohttp_client, server_kwargs={"handler_cancellation": True}
    )
    old = await client.put("/v1/tools", json=catalog(LARGE, "old"))
    assert old.status == 200

    put = asyncio.create_task(client.put("/v1/tools", json=catalog(LARGE, "new")))
    await until(lambda: service.catalog.imports_running > 0)
    put.cancel()  # hang up: the connection closes before an answer
    await asyncio.gather(put, return_exceptions=True)
    assert await versions_stored(service) in ({"old"}, {"new"})

    await until(lambda: service.catalog.imports_running == 0)
    assert await versions_stored(service) == {"new"}
    assert len(await service.store.list_tools()) == LARGE
    assert service.ranker.size == LARGE
    state = await service.store.state()
    assert service.index.catalog_version == state.catalog_version


async def test_reimport_embeds_only_what_changed(services: ServiceFactory) -> None:
    """Importing the same catalog again embeds nothing and answers every tool unchanged;
    the first import reported each embedded batch."""
    service = await services.start()
    batches: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        batches.append((done, total))

    tools = parse_tools(catalog(200, "old"))[0]
    first = await service.catalog.upsert_tools(tools, progress=progress)
    assert (first.upserted, first.unchanged) == (200, 0)
    assert batches == [(64, 200), (128, 200), (192, 200), (200, 200)]
    batches.clear()
    again = await service.catalog.upsert_tools(tools, progress=progress)
    assert (again.upserted, again.unchanged) == (0, 200)
    assert batches == []
