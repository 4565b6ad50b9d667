"""What a service remembers of each recent session (`TOOLSELECT_SESSIONS_KEPT` of them, per
tenant): the catalog tools of its last turn, as the store's session tail keeps them, never the
names an agent reported. A turn may report 64 names of 256 characters each; remembering those
held about 20 KB a session, 250 MB for one tenant's 10,000 sessions (measured over HTTP), and
each live tenant may hold as many."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from toolselect.clock import utc_now
from toolselect.service import Service
from toolselect.turns import MAX_NAME_CHARS, MAX_USED_TOOLS

Client = TestClient[Any, Any]


def foreign_names(seed: int) -> list[str]:
    """`MAX_USED_TOOLS - 1` names no catalog tool has, of the longest length, fresh objects."""
    return [f"{seed}-{i}-".ljust(MAX_NAME_CHARS, "x") for i in range(MAX_USED_TOOLS - 1)]


async def test_a_session_is_remembered_by_its_catalog_tools(
    client: Client, service: Service
) -> None:
    """A turn observed over HTTP with many reported names leaves its session the catalog tools
    they stand for (`mcp__srv__get_weather` is `get_weather`), in the order used."""
    used = ["send_email", *foreign_names(0)[:-2], "mcp__srv__get_weather", "send_email"]
    turn = {"request": "weather, then mail it", "used_tools": used, "session_id": "chat-1"}
    resp = await client.post("/v1/observe/batch", json={"turns": [turn]})
    assert resp.status == 202, await resp.text()
    assert service.sessions.previous("chat-1") == ("send_email", "get_weather")


@pytest.mark.slow  # waits seconds: kept out of `make test-fast`
async def test_remembered_sessions_hold_little_whatever_the_turns_report(
    service: Service,
) -> None:
    """Noting 1,000 sessions whose turns each reported 63 names of 256 characters outside the
    catalog (and one catalog tool) keeps under 1 KB a session: the session id, its tools as the
    catalog's own names, and a time."""
    sessions = 1_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for n in range(sessions):
            tools = [*foreign_names(n), "get_weather"]
            service.sessions.note(f"session-{n}".ljust(64, "-"), tools, utc_now())
            del tools
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    kept = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert kept / sessions < 1_024, f"{kept / sessions:.0f} bytes a session"
    assert service.sessions.previous(f"session-{sessions - 1}".ljust(64, "-")) == ("get_weather",)
