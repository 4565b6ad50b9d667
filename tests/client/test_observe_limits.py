"""A batch the server refuses for one turn or for its size loses no other turn: the client sends
it again without the turn, or in halves (the server's limits are its settings, which the client
cannot know), and refuses alone, when it is observed, a turn any server would refuse. Against a
real server, some configured with small limits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest

from tests.live import LiveServer, live_server, wait_for_turn
from toolselect.client import AsyncClient, TurnFields
from toolselect.errors import InvalidInput

LONG = "please look up the weather forecast for the next ten days in Lisbon, " * 2  # 138 bytes


@pytest.fixture
def strict_server(tmp_path: Path) -> Iterator[LiveServer]:
    """Requests of at most 64 bytes, bodies of at most 1 KiB, batches of at most 3 turns."""
    yield from live_server(tmp_path, max_query_bytes=64, max_body_bytes=1024, max_batch=3)


def stored(server: LiveServer, turn_id: str) -> bool:
    return server.run(server.service.store.get_turn(turn_id)) is not None


async def send(server: LiveServer, requests: list[str], batch: int) -> AsyncClient:
    """Report one turn per request (ids `t0`, `t1`, ...) in batches of `batch`, then close."""
    ts = AsyncClient(server.url, retries=0, observe_batch=batch, observe_interval_s=3600)
    async with ts:
        for i, request in enumerate(requests):
            ts.observe(request, "web_search", turn_id=f"t{i}", outcome="ok")
    return ts


async def test_turns_over_the_servers_text_limit_lose_no_other_turn(
    strict_server: LiveServer,
) -> None:
    """Two of six turns are longer than the server takes; the four others are stored."""
    requests = [f"weather in city {i}" for i in range(6)]
    requests[1] = requests[4] = LONG
    ts = await send(strict_server, requests, batch=3)
    stats = ts.observe_stats
    assert (stats.sent, stats.invalid, stats.failed) == (4, 2, 0)
    for i in (0, 2, 3, 5):
        assert wait_for_turn(strict_server, f"t{i}").request == requests[i]
    assert not stored(strict_server, "t1") and not stored(strict_server, "t4")


async def test_a_batch_over_the_servers_turn_and_body_limits_goes_in_halves(
    strict_server: LiveServer,
) -> None:
    """Ten turns in one batch break the server's 3-turn limit, and their body its 1 KiB: every
    turn arrives, in the order reported."""
    requests = [f"weather in city number {i}" for i in range(10)]
    ts = await send(strict_server, requests, batch=10)
    assert (ts.observe_stats.sent, ts.observe_stats.failed) == (10, 0)
    turns = [wait_for_turn(strict_server, f"t{i}") for i in range(10)]
    assert [t.request for t in turns] == requests


@pytest.fixture
def small_body_server(tmp_path: Path) -> Iterator[LiveServer]:
    """Bodies of at most 1 KiB; the text limit is the default (8 KiB)."""
    yield from live_server(tmp_path, max_body_bytes=1024)


async def test_a_turn_larger_than_any_body_the_server_takes_fails_alone(
    small_body_server: LiveServer,
) -> None:
    """A single turn over the body limit cannot be sent at all: it alone is counted `failed`."""
    requests = ["weather in Lisbon", "x" * 2000, "weather in Porto"]
    ts = await send(small_body_server, requests, batch=3)
    stats = ts.observe_stats
    assert (stats.sent, stats.failed, stats.invalid) == (2, 1, 0)
    assert wait_for_turn(small_body_server, "t2").request == "weather in Porto"
    assert not stored(small_body_server, "t1")


# Every text of a turn, and a value for it holding half of a UTF-16 pair (an emoji cut short).
LONE_SURROGATE = {
    "request": "weather in Turin \ud83d",
    "used_tool": "get_weather\ud83d",
    "used_tools": ["get_weather", "\udc00"],
    "turn_id": "t-\ud83d",
    "agent_id": "a-\ud83d",
    "pack": "assistant\ud83d",
    "search_id": "s-\udfff",
    "session_id": "session-\ud800",
}


async def test_a_turn_with_a_lone_surrogate_is_refused_alone_as_the_server_would(
    server: LiveServer,
) -> None:
    """The server refuses a batch holding a lone surrogate in any text of one turn (400, every
    turn of it); the client refuses such a turn alone when it is observed, counted `invalid`,
    and the turns reported around it are all stored."""
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        for field, value in LONE_SURROGATE.items():
            turn = {"request": "weather in Turin", "used_tool": "get_weather", field: value}
            body = json.dumps({"turns": [turn]})  # ASCII: the surrogate as a `\ud83d` escape
            async with session.post(
                f"{server.url}/v1/observe/batch", data=body, headers=headers
            ) as r:
                assert r.status == 400, (field, await r.text())
    ts = AsyncClient(server.url, retries=0, observe_batch=100, observe_interval_s=3600)
    async with ts:
        for i, (field, value) in enumerate(LONE_SURROGATE.items()):
            ts.observe(f"weather in city {i}", "get_weather", turn_id=f"good-{i}", outcome="ok")
            bad: dict[str, Any] = {"request": "weather in Turin", "used_tool": "get_weather"}
            bad[field] = value
            ts.observe(bad.pop("request"), bad.pop("used_tool"), **cast(TurnFields, bad))
        assert ts.observe_stats.invalid == len(LONE_SURROGATE)
    stats = ts.observe_stats
    assert (stats.sent, stats.invalid, stats.failed) == (len(LONE_SURROGATE), 8, 0)
    for i in range(len(LONE_SURROGATE)):
        assert wait_for_turn(server, f"good-{i}").request == f"weather in city {i}"


async def test_a_request_holding_a_lone_surrogate_is_refused_before_it_is_sent(
    server: LiveServer,
) -> None:
    """A query that JSON cannot carry as text is the caller's `InvalidInput`, not the
    serialiser's error, and nothing goes to the server."""
    async with AsyncClient(server.url, retries=0) as ts:
        with pytest.raises(InvalidInput, match="JSON"):
            await ts.rank("weather in Turin \ud83d")
        with pytest.raises(InvalidInput, match="JSON"):
            await ts.tools.put([{"name": "lone", "description": "half an emoji \ud83d"}])
        assert "lone" not in {t.name for t in await ts.tools.list()}
