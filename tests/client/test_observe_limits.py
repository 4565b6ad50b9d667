"""A batch the server refuses for one turn or for its size loses no other turn: the client sends
it again without the turn, or in halves (the server's limits are its settings, which the client
cannot know). Against a real server configured with small limits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live import LiveServer, live_server, wait_for_turn
from toolselect.client import AsyncClient

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
