"""A hung or failing teacher: turns end as `error`, nothing is saved, the budget is kept,
and ranking keeps answering while teacher calls hang."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.services import ServiceFactory
from tests.stubs import Reply, Stub
from toolselect.store.port import lookup_one

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
CATALOG = {
    "tools": [
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "web_search", "description": "Search the web for pages matching a query."},
        {"name": "crypto_price", "description": "Current price of a cryptocurrency like bitcoin."},
        {"name": "shell_exec", "description": "Run a shell command on the host."},
    ]
}
LOW_MARGIN = ["il prezzo di BTC ora", "quanto costa adesso?", "dimmi qualcosa di utile"]


@pytest.mark.slow  # waits seconds: kept out of `make test-fast`
async def test_hung_teacher_does_not_touch_ranking_or_budget(
    services: ServiceFactory, anthropic_stub: Stub, aiohttp_client: ClientFactory
) -> None:
    """While every teacher call hangs, /v1/rank answers; then the calls time out as `error`,
    no exemplar is saved, and the hourly budget is as it was."""
    anthropic_stub.reply(Reply(hang=True))
    client, service = await services.serve(
        aiohttp_client,
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
        teacher_timeout_s=1.5,
        teacher_retries=1,
        teacher_budget_per_hour=10,
        teacher_share=1.0,  # every flagged turn goes to the (hung) teacher
    )
    await client.put("/v1/tools", json=CATALOG)
    budget_before = service.oracle.budget.remaining()
    turns = [
        {"request": q, "used_tool": "shell_exec", "turn_id": f"h{i}"}
        for i, q in enumerate(LOW_MARGIN)
    ]
    assert (await client.post("/v1/observe/batch", json={"turns": turns})).status == 202
    await asyncio.wait_for(anthropic_stub.arrived.wait(), 5.0)
    slowest = 0.0
    for _ in range(30):  # while the teacher hangs
        started = time.perf_counter()
        resp = await client.post("/v1/rank", json={"query": "weather in Turin", "k": 2})
        slowest = max(slowest, time.perf_counter() - started)
        assert resp.status == 200
    assert slowest < 1.0, slowest  # not waiting on the teacher (a hang lasts 1.5 s per try)
    assert await service.learner.drain(15.0)
    for i, query in enumerate(LOW_MARGIN):
        turn = await service.store.get_turn(f"h{i}")
        assert turn is not None and (turn.tier, turn.result, turn.label) == (
            "teacher",
            "error",
            None,
        )
        assert await lookup_one(service.store, query) is None
    calls = await service.store.oracle_calls()
    assert len(calls) == 2 * len(LOW_MARGIN)  # 1 + 1 retry each
    assert {c.result for c in calls} == {"error"}
    assert service.oracle.budget.remaining() == budget_before
