"""The client against a real server with keys and a tiny rate limit: a `429 rate_limited` waited
out and retried like a 503, and `create_key` / `list_keys` / `revoke_key`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.conftest import API_KEY
from tests.live import LiveServer, live_server
from toolselect.client import ApiError, AsyncClient, Client
from toolselect.errors import InvalidInput

WEATHER = "weather in Turin tomorrow?"


class Waits:
    """An injected `sleep` that records each wait and really waits it (the server's bucket
    has to refill)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(seconds)


@pytest.fixture
def limited_server(tmp_path: Path) -> Iterator[LiveServer]:
    """A server requiring `API_KEY` whose tenant may send one request, then one every 2 s."""
    yield from live_server(tmp_path, api_keys=(API_KEY,), tenant_rps=0.5, tenant_burst=1)


@pytest.mark.slow  # waits seconds: kept out of `make test-fast`
async def test_a_429_is_waited_out_and_retried(limited_server: LiveServer) -> None:
    """The second rank in a row is refused `429 rate_limited` with `Retry-After: 2`; the client
    waits those 2 s and the retry is answered."""
    waits = Waits()
    async with AsyncClient(limited_server.url, api_key=API_KEY, sleep=waits) as ts:
        first = await ts.rank(WEATHER, k=1)
        second = await ts.rank(WEATHER, k=1)
    assert first.results[0].tool == second.results[0].tool == "get_weather"
    assert waits.delays == [2.0]


def test_a_429_past_the_retries_is_raised(limited_server: LiveServer) -> None:
    """Without retries the 429 surfaces as `ApiError` with its code and the wait it asked for."""
    with Client(limited_server.url, api_key=API_KEY, retries=0) as ts:
        ts.rank(WEATHER, k=1)
        with pytest.raises(ApiError) as caught:
            ts.rank(WEATHER, k=1)
    error = caught.value
    assert (error.status, error.code, error.retry_after) == (429, "rate_limited", 2.0)
    assert "requests per second" in error.message


@pytest.fixture
def keyed_server(tmp_path: Path) -> Iterator[LiveServer]:
    """A server whose only configured key is the admin `API_KEY`."""
    yield from live_server(tmp_path, api_keys=(API_KEY,))


def test_create_list_and_revoke_a_key(keyed_server: LiveServer) -> None:
    """An admin creates a key (shown once), lists it by tenant without the key, the key ranks,
    and once revoked it is refused 401 and listed as revoked; an unknown id is a 404."""
    with Client(keyed_server.url, api_key=API_KEY) as admin:
        made = admin.create_key("default", "agent", name="ci")
        other = admin.create_key("team-a", "editor")
        assert made.key.startswith("tsk_") and made.prefix == made.key[:12]
        assert (made.tenant, made.role, made.name, made.revoked_at) == (
            "default",
            "agent",
            "ci",
            None,
        )
        listed = admin.list_keys(tenant="default")
        assert [k.id for k in listed] == [made.id]
        assert {k.id for k in admin.list_keys()} == {made.id, other.id}
        assert made.key not in repr(listed)
        with Client(keyed_server.url, api_key=made.key, retries=0) as agent:
            assert agent.rank(WEATHER, k=1).results[0].tool == "get_weather"
            me = agent.whoami()
            assert (me.tenant, me.role, me.key_id) == ("default", "agent", made.id)
            assert admin.revoke_key(made.id) is True
            with pytest.raises(ApiError) as refused:
                agent.rank(WEATHER, k=1)
        assert (refused.value.status, refused.value.code) == (401, "unauthorized")
        [revoked] = admin.list_keys(tenant="default")
        assert revoked.revoked_at is not None
        with pytest.raises(ApiError) as unknown:
            admin.revoke_key("no-such-key")
        assert (unknown.value.status, unknown.value.code) == (404, "not_found")


async def test_key_methods_of_the_async_client(keyed_server: LiveServer) -> None:
    """The async client's key methods; a bad role is refused before sending, and an agent key
    may not manage keys (403)."""
    async with AsyncClient(keyed_server.url, api_key=API_KEY) as admin:
        made = await admin.create_key("team-b", "agent")
        assert [k.id for k in await admin.list_keys(tenant="team-b")] == [made.id]
        with pytest.raises(InvalidInput) as bad:
            await admin.create_key("team-b", "owner")
        assert bad.value.field == "role"
        async with AsyncClient(keyed_server.url, api_key=made.key, retries=0) as agent:
            assert (await agent.whoami()).tenant == "team-b"
            with pytest.raises(ApiError) as forbidden:
                await agent.list_keys()
        assert (forbidden.value.status, forbidden.value.code) == (403, "forbidden")
        assert await admin.revoke_key(made.id) is True


def test_a_client_naming_a_tenant_sees_that_tenants_catalog(keyed_server: LiveServer) -> None:
    """`tenant="team-a"` sends X-Toolselect-Tenant on every request: the admin key then acts on
    team-a's catalog, not on default's, and the other client still sees default's alone; a
    tenant with no key and no data is unknown until its first upload."""
    team_tool = {"name": "team_a_deploy", "description": "Deploy team A's service to production."}
    with (
        Client(keyed_server.url, api_key=API_KEY, tenant="team-a") as team,
        Client(keyed_server.url, api_key=API_KEY) as default,
    ):
        assert team.tenant == "team-a" and default.tenant is None
        assert team.whoami().tenant == "team-a"
        with pytest.raises(ApiError) as unknown:
            team.tools.list()  # default's hand-made catalog is not team-a's
        assert (unknown.value.status, unknown.value.code) == (404, "unknown_tenant")
        team.tools.put([team_tool])
        assert [t.name for t in team.tools.list()] == ["team_a_deploy"]
        assert team.rank("deploy to production", k=1).results[0].tool == "team_a_deploy"
        default_tools = {t.name for t in default.tools.list()}
        assert "team_a_deploy" not in default_tools and "get_weather" in default_tools
        assert default.rank(WEATHER, k=1).results[0].tool == "get_weather"


async def test_the_async_client_names_its_tenant_and_checks_it_first(
    keyed_server: LiveServer,
) -> None:
    """The async client sends its tenant too; a name breaking the server's tenant rule is
    `InvalidInput` at construction, before any request; one admin key naming two tenants
    counts as two credentials (two catalogs to upload)."""
    async with AsyncClient(keyed_server.url, api_key=API_KEY, tenant="team-b") as team:
        assert (await team.whoami()).tenant == "team-b"
        await team.tools.put([{"name": "team_b_tool", "description": "Team B's own tool."}])
        assert [t.name for t in await team.tools.list()] == ["team_b_tool"]
    for bad in ("Team B", "", "t" * 64, "-team"):
        with pytest.raises(InvalidInput) as refused:
            AsyncClient(keyed_server.url, api_key=API_KEY, tenant=bad)
        assert refused.value.field == "tenant"
    with pytest.raises(InvalidInput):
        Client(keyed_server.url, tenant="Team B")
    credentials = {
        AsyncClient(keyed_server.url, api_key=API_KEY, tenant=tenant).credential
        for tenant in (None, "team-a", "team-b")
    }
    assert len(credentials) == 3
