"""Sessions of `toolselect mcp --transport http` under keys: each key holds a bounded number
(`MAX_SESSIONS_PER_KEY`) so one key cannot spend the SDK's bound for the whole process, a slot
frees when its session ends (DELETE, idling out), and a session's owner is kept for as long as
the SDK holds the session. The in-process server behind uvicorn, reached over plain HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.mcp.test_keys import ADMIN, bearer, initialize, serving
from tests.services import ServiceFactory
from toolselect.clock import utc_now
from toolselect.keys import new_key
from toolselect.mcp_auth import MAX_SESSIONS_PER_KEY, SESSIONS_RETRY_AFTER_S, SessionOwners

VERSION = "2025-06-18"
LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


@pytest.fixture
def sqlite_services(tmp_path: Path) -> Iterator[ServiceFactory]:
    """Services on a SQLite file, closed at the end of the test."""
    yield ServiceFactory("sqlite", tmp_path, None)


@asynccontextmanager
async def keyed_server(
    services: ServiceFactory, **app_options: Any
) -> AsyncIterator[tuple[str, dict[str, str]]]:
    """The in-process MCP server with the key ADMIN configured, behind uvicorn on a free port
    (`http_config` as `run` serves it, given `app_options`): its URL and two agent keys of their
    own, `team-a`'s and `team-b`'s."""
    service = await services.start(wait_for_store=True, api_keys=(ADMIN,))
    keys = {}
    for tenant in ("team-a", "team-b"):
        secret, record = new_key(tenant, "agent", utc_now())
        await service.store.save_key(record)
        service.keys.add(record)
        keys[tenant] = secret
    try:
        async with serving(service, **app_options) as url:
            yield url, keys
    finally:
        await services.aclose()


async def on_session(
    url: str, method: str, session: str, key: str, version: str = VERSION
) -> tuple[int, bytes]:
    """A `tools/list` (or a DELETE) on `session` with `key`: status and body."""
    headers = {"Accept": "application/json, text/event-stream", "mcp-session-id": session,
               "mcp-protocol-version": version, **bearer(key)}  # fmt: skip
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, json=LISTING, headers=headers) as r,
    ):
        return r.status, await r.read()


async def opened(url: str, key: str) -> str:
    """A new session of `key`: its id."""
    status, headers, body = await initialize(url, bearer(key))
    assert status == 200, body
    session: str = headers["mcp-session-id"]
    return session


def test_the_readme_states_the_bound() -> None:
    """The README's MCP section gives the bound and the wait a refused key is told."""
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert f"each key holds at most {MAX_SESSIONS_PER_KEY:,} open sessions" in readme
    assert f"`429 too_many_sessions` with `Retry-After: {SESSIONS_RETRY_AFTER_S}`" in readme


def test_owners_follow_the_sdks_sessions() -> None:
    """As sessions open and the SDK drops them unseen (idling out), their owners are forgotten,
    so the record stays near the live sessions' number; a live session's owner never is."""
    live: set[str] = set()
    owners = SessionOwners(lambda: live, per_key=1)
    for n in range(5_000):
        with owners.opening(f"key-{n}") as opened:
            live.add(f"s-{n}")
            opened(f"s-{n}")
        if n % 100:  # every hundredth stays open
            live.discard(f"s-{n}")
    assert [owners.owner(f"s-{n}") for n in range(0, 5_000, 100)] == [
        f"key-{n}" for n in range(0, 5_000, 100)
    ]
    assert len(owners) <= 2 * len(live) + 65


async def test_one_key_holds_a_bounded_number_of_sessions(
    sqlite_services: ServiceFactory,
) -> None:
    """A key at its bound is refused `429 too_many_sessions` with `Retry-After`, in the API's
    JSON error model, while another tenant's key still opens sessions; a request that opened
    nothing (a body that is not JSON) takes no slot, and a DELETE gives its slot back."""
    async with keyed_server(sqlite_services, sessions_per_key=2) as (url, keys):
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, data=b"{nope", headers=bearer(keys["team-a"])) as r,
        ):
            assert r.status == 400, await r.read()
        first = await opened(url, keys["team-a"])
        await opened(url, keys["team-a"])
        status, headers, body = await initialize(url, bearer(keys["team-a"]))
        other = await initialize(url, bearer(keys["team-b"]))
        deleted = await on_session(url, "DELETE", first, keys["team-a"])
        again = await initialize(url, bearer(keys["team-a"]))
    assert status == 429, body
    assert headers["Retry-After"] == str(SESSIONS_RETRY_AFTER_S)
    assert body["error"]["code"] == "too_many_sessions"
    assert body["error"]["message"] == (
        "this key holds 2 open MCP sessions, the most one key may; end one (DELETE with its "
        "mcp-session-id) or wait for one to idle out"
    )
    assert other[0] == 200, other
    assert deleted[0] == 200, deleted
    assert again[0] == 200, again


async def test_a_session_that_idles_out_frees_its_slot(sqlite_services: ServiceFactory) -> None:
    """Once the SDK has closed a key's idle session, the key opens another; the idle one is
    gone (404) for its own key too."""
    async with keyed_server(sqlite_services, sessions_per_key=1, session_idle_timeout_s=0.5) as (
        url,
        keys,
    ):
        idle = await opened(url, keys["team-a"])
        refused = (await initialize(url, bearer(keys["team-a"])))[0]
        await asyncio.sleep(1.5)
        reopened = await initialize(url, bearer(keys["team-a"]))
        gone = await on_session(url, "POST", idle, keys["team-a"])
    assert refused == 429
    assert reopened[0] == 200, reopened
    assert gone[0] == 404, gone


async def test_a_failed_delete_keeps_the_session_its_owners(
    sqlite_services: ServiceFactory,
) -> None:
    """A DELETE the SDK refuses (an unknown `mcp-protocol-version`) leaves the session open,
    and so still its owner's alone: another tenant's key is answered 404 on it, while the key
    that opened it goes on using it."""
    async with keyed_server(sqlite_services) as (url, keys):
        session = await opened(url, keys["team-a"])
        failed = await on_session(url, "DELETE", session, keys["team-a"], version="1999-01-01")
        stranger = await on_session(url, "POST", session, keys["team-b"])
        owner = await on_session(url, "POST", session, keys["team-a"])
    assert failed[0] >= 400, failed
    assert stranger[0] == 404, stranger
    assert json.loads(stranger[1])["error"]["field"] == "mcp-session-id"
    assert owner[0] == 200 and b"search_tools" in owner[1], owner
