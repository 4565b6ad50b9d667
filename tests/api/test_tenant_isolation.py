"""Tenants kept apart, against the real app on a real socket and real stores: two tenants with
their own editor and agent keys, each with its own catalog, labels, turns, analyses and search
ids; an admin acting on a tenant sees that tenant's data; MCP `search_tools` answers from the
caller's tenant's catalog; an idle tenant is closed and starts again with its data."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.api.test_keys import ADMIN, bearer, create, error_of
from tests.mcp.test_keys import connected, in_process
from tests.mcp.test_server import text
from tests.services import ClientFactory, ServiceFactory
from toolselect.analytics.registry import LEARNING, NAMES
from toolselect.api.http import SERVICE, TENANTS
from toolselect.clock import utc_now
from toolselect.keys import new_key, tenant_file
from toolselect.records import Tool
from toolselect.service import Service, TenantServices
from toolselect.store.factory import open_store

A, B = "team-a", "team-b"
CATALOGS = {
    A: [
        Tool("get_weather", "Current weather and forecast for a city: temperature, rain, wind."),
        Tool("send_email", "Send an email message to a recipient with a subject and body."),
        Tool("web_search", "Search the web for pages matching a query and return links."),
    ],
    B: [
        Tool("get_weather", "Look up invoices by customer and amount in the billing system."),
        Tool("send_email", "Translate text from one language into another language."),
        Tool("web_search", "Read a file from the local filesystem by its path."),
    ],
}
QUERIES = ["weather in Turin tomorrow", "email the report to Ada", "find pages about owls"]

Keys = dict[str, dict[str, str]]


def _tools_body(tenant: str) -> dict[str, Any]:
    return {"tools": [{"name": t.name, "description": t.description} for t in CATALOGS[tenant]]}


async def two_tenants(
    services: ServiceFactory, aiohttp_client: ClientFactory, **settings: Any
) -> tuple[TestClient[Any, Any], Keys]:
    """The app with an admin key, tenants A and B each with an editor and an agent key and
    its own catalog (the same tool names, other descriptions)."""
    client, _ = await services.serve(aiohttp_client, api_keys=(ADMIN,), **settings)
    keys: Keys = {}
    for tenant in (A, B):
        keys[tenant] = {
            role: (await create(client, tenant, role))["key"] for role in ("agent", "editor")
        }
        put = await client.put(
            "/v1/tools", json=_tools_body(tenant), headers=bearer(keys[tenant]["editor"])
        )
        assert put.status == 200, await put.text()
    return client, keys


async def rank_all(client: TestClient[Any, Any], key: str) -> list[Any]:
    """Every query of QUERIES ranked with `key`: results, scores and margin."""
    answers = []
    for query in QUERIES:
        resp = await client.post("/v1/rank", json={"query": query, "k": 3}, headers=bearer(key))
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        answers.append((body["results"], body["margin"]))
    return answers


async def analyses(client: TestClient[Any, Any], key: str) -> dict[str, Any]:
    """Every analysis (and the learning fit) as `key`'s tenant sees it."""
    seen = {}
    for name in (*NAMES, LEARNING):
        resp = await client.get(f"/v1/analytics/{name}", headers=bearer(key))
        assert resp.status == 200, (name, await resp.text())
        seen[name] = await resp.json()
    return seen


async def test_the_same_tool_names_stay_separate(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Tenants A and B each list their own descriptions under the same names; `default`
    lists neither; an admin naming B sees B's; deleting a tool in A leaves B's."""
    client, keys = await two_tenants(services, aiohttp_client)
    for tenant in (A, B):
        resp = await client.get("/v1/tools", headers=bearer(keys[tenant]["editor"]))
        listed = {t["name"]: t["description"] for t in (await resp.json())["tools"]}
        assert listed == {t.name: t.description for t in CATALOGS[tenant]}
    assert (await (await client.get("/v1/tools", headers=bearer(ADMIN))).json())["tools"] == []
    as_b = await client.get("/v1/tools/get_weather", headers=bearer(ADMIN, B))
    assert (await as_b.json())["description"] == CATALOGS[B][0].description

    gone = await client.delete("/v1/tools/send_email", headers=bearer(keys[A]["editor"]))
    assert gone.status == 200
    missing = await client.get("/v1/tools/send_email", headers=bearer(keys[A]["editor"]))
    await error_of(missing, 404)
    kept = await client.get("/v1/tools/send_email", headers=bearer(keys[B]["editor"]))
    assert (await kept.json())["description"] == CATALOGS[B][1].description


async def test_labels_and_turns_in_one_tenant_leave_the_other_unchanged(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A label and reported turns in A leave B's rankings bit for bit (results, scores,
    margin), every analysis of B and B's stored turns unchanged, while A has them."""
    client, keys = await two_tenants(services, aiohttp_client)
    b_ranked = await rank_all(client, keys[B]["agent"])
    b_analyses = await analyses(client, keys[B]["editor"])

    label = {"query": "find pages about owls", "tool": "send_email"}
    made = await client.post("/v1/exemplars", json=label, headers=bearer(keys[A]["editor"]))
    assert made.status == 201, await made.text()
    turns = [
        {"request": q, "used_tool": tool, "turn_id": f"a-{i}", "outcome": outcome,
         "session_id": "a-session"}
        for i, (q, tool, outcome) in enumerate(
            [(QUERIES[0], "web_search", "error"), (QUERIES[1], "send_email", "ok"),
             (QUERIES[2], "get_weather", "ok")]
        )
    ]  # fmt: skip
    batch = await client.post(
        "/v1/observe/batch", json={"turns": turns}, headers=bearer(keys[A]["agent"])
    )
    assert batch.status == 202 and (await batch.json())["queued"] == 3
    tenants = client.app[TENANTS]
    a_service, b_service = await tenants.get(A), await tenants.get(B)
    assert await a_service.learning.turn_when_done("a-2", 15.0) is not None
    assert await b_service.learning.turn_when_done("a-2", 1.0) is None

    assert await rank_all(client, keys[B]["agent"]) == b_ranked
    assert await analyses(client, keys[B]["editor"]) == b_analyses
    a_ranked = await rank_all(client, keys[A]["agent"])
    assert a_ranked[2][0][0]["tool"] == "send_email"  # A's own label took


async def test_a_search_id_of_one_tenant_is_unknown_in_another(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A search id issued in A places A's turn as shown and B's turn as unknown."""
    client, keys = await two_tenants(services, aiohttp_client)
    ranked = await client.post(
        "/v1/rank", json={"query": QUERIES[0], "k": 2}, headers=bearer(keys[A]["agent"])
    )
    search_id = (await ranked.json())["search_id"]
    top = (await ranked.json())["results"][0]["tool"]
    tenants = client.app[TENANTS]
    for tenant, turn_id in ((A, "in-a"), (B, "in-b")):
        turn = {"request": QUERIES[0], "used_tool": top, "search_id": search_id,
                "turn_id": turn_id}  # fmt: skip
        sent = await client.post("/v1/observe", json=turn, headers=bearer(keys[tenant]["agent"]))
        assert sent.status == 202
    stored_a = await (await tenants.get(A)).learning.turn_when_done("in-a", 15.0)
    stored_b = await (await tenants.get(B)).learning.turn_when_done("in-b", 15.0)
    assert stored_a is not None and stored_a.search_status == "shown"
    assert stored_b is not None and stored_b.search_status == "unknown"


async def test_mcp_search_tools_answers_from_each_tenants_catalog(
    services: ServiceFactory,
) -> None:
    """Over MCP with keys, `search_tools` with A's key answers from A's catalog and with B's
    from B's (the same name, each tenant's description)."""
    async with in_process(services, api_keys=(ADMIN,)) as url:
        service = services.started[0]
        secrets = {}
        for tenant in (A, B):
            store = await open_store(service.settings, tenant=tenant)
            try:
                await store.migrate()
                await store.upsert_tools(CATALOGS[tenant])
            finally:
                await store.close()
            secret, record = new_key(tenant, "agent", utc_now())
            await service.store.save_key(record)
            service.keys.add(record)
            secrets[tenant] = secret
        found = {}
        for tenant in (A, B):
            async with connected(url, bearer(secrets[tenant])) as mcp:
                result = await mcp.call_tool("search_tools", {"query": "weather in Turin", "k": 3})
            assert not result.is_error, text(result)
            assert result.structured_content is not None
            found[tenant] = {
                t["name"]: t["description"] for t in result.structured_content["tools"]
            }
    for tenant in (A, B):
        assert found[tenant] == {t.name: t.description for t in CATALOGS[tenant]}


async def test_an_idle_tenant_is_closed_and_starts_again_with_its_data(
    services: ServiceFactory,
) -> None:
    """A tenant unused for `TOOLSELECT_TENANT_IDLE` is closed by the sweep, the least
    recently used beyond `TOOLSELECT_TENANTS_LIVE` too; its next use starts it with its data."""
    service = await services.start(tenants_live=1, tenant_idle_s=60.0)
    now = [0.0]
    tenants = TenantServices(service, now=lambda: now[0])
    try:
        a = await tenants.get(A)
        await a.catalog.upsert_tools(CATALOGS[A])
        assert tenants.live == [A]
        now[0] = 30.0
        assert await tenants.sweep() == []
        now[0] = 61.0
        assert await tenants.sweep() == [A]
        assert tenants.live == []
        again = await tenants.get(A)
        assert again is not a
        assert [t.description for t in await again.catalog.list_tools()] == [
            t.description for t in CATALOGS[A]
        ]
        await tenants.get(B)  # beyond one live tenant: A, the least recently used, goes
        assert tenants.live == [B]
        assert tenant_file(service.settings.spool_path, B).name.endswith(
            f".tenant-{B}{service.settings.spool_path.suffix}"
        )
    finally:
        await tenants.close_others()


@pytest.mark.slow  # waits seconds: kept out of `make test-fast`
async def test_the_background_sweep_closes_an_idle_tenant(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Over HTTP, a tenant unused for `TOOLSELECT_TENANT_IDLE` seconds is closed in the
    background, and its next request is answered from its data."""
    client, keys = await two_tenants(services, aiohttp_client, tenant_idle_s=1.0)
    tenants = client.app[TENANTS]
    assert set(tenants.live) == {A, B}
    for _ in range(100):
        if not tenants.live:
            break
        await asyncio.sleep(0.05)
    assert tenants.live == []
    resp = await client.get("/v1/tools", headers=bearer(keys[B]["editor"]))
    assert len((await resp.json())["tools"]) == len(CATALOGS[B])
    assert tenants.live == [B]


def _series(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition text by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_show_a_key_its_own_tenants_series(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """With `TOOLSELECT_METRICS_AUTH`, an editor of B reads B's series alone (its catalog size,
    none of A's turns, no process-wide family), A's editor A's; an agent key is refused; an
    admin reads every tenant's, or one tenant's by naming it. Each tenant's gauges are its own
    (not the last writer's); a closed tenant's gauges go and its counters stay."""
    client, keys = await two_tenants(services, aiohttp_client, metrics_auth=True)
    turns = [{"request": q, "used_tool": "web_search", "turn_id": f"a-{i}"}
             for i, q in enumerate(QUERIES)]  # fmt: skip
    batch = await client.post(
        "/v1/observe/batch", json={"turns": turns}, headers=bearer(keys[A]["agent"])
    )
    assert batch.status == 202
    await rank_all(client, keys[A]["agent"])
    tenants = client.app[TENANTS]
    assert await (await tenants.get(A)).learning.turn_when_done("a-2", 15.0) is not None

    async def scrape(headers: dict[str, str]) -> str:
        resp = await client.get("/metrics", headers=headers)
        assert resp.status == 200, await resp.text()
        return await resp.text()

    await error_of(await client.get("/metrics", headers=bearer(keys[B]["agent"])), 403)
    for tenant, other in ((A, B), (B, A)):
        for scraped in (
            await scrape(bearer(keys[tenant]["editor"])),
            await scrape(bearer(ADMIN, tenant)),
        ):
            seen = _series(scraped)
            assert {dict(labels)["tenant"] for _, labels in seen} == {tenant}
            assert other not in scraped and "toolselect_http_requests" not in scraped
            assert seen[("toolselect_catalog_tools", frozenset({("tenant", tenant)}))] == 3.0
    a_turns = ("toolselect_observed_turns_total", frozenset({("tenant", A)}))
    assert _series(await scrape(bearer(keys[A]["editor"])))[a_turns] == 3.0
    assert a_turns not in _series(await scrape(bearer(keys[B]["editor"])))

    every = _series(await scrape(bearer(ADMIN)))
    assert {dict(labels).get("tenant") for _, labels in every} >= {A, B, "default", None}
    await tenants.close_tenant(A)
    every = _series(await scrape(bearer(ADMIN)))
    assert ("toolselect_catalog_tools", frozenset({("tenant", A)})) not in every
    assert every[("toolselect_catalog_tools", frozenset({("tenant", B)}))] == 3.0
    assert every[a_turns] == 3.0


async def test_a_tenant_is_not_closed_under_a_request_in_flight(
    services: ServiceFactory, aiohttp_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request of tenant A held in its ranker holds A open: the background sweep closes idle
    B meanwhile but not A, the request is answered from A's catalog, and A is closed once idle
    after it. (A body still arriving starts no tenant: it is read before the handler runs.)"""
    client, keys = await two_tenants(services, aiohttp_client, tenant_idle_s=0.2)
    tenants = client.app[TENANTS]
    entered, release = asyncio.Event(), asyncio.Event()
    ranking = type(client.app[SERVICE].ranking)  # every tenant's: A's may start again
    search = ranking.search

    async def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        return await search(self, *args, **kwargs)

    monkeypatch.setattr(ranking, "search", held)
    sent = asyncio.ensure_future(
        client.post(
            "/v1/rank",
            json={"query": "weather in Turin tomorrow", "k": 1},
            headers=bearer(keys[A]["agent"]),
        )
    )
    await entered.wait()
    for _ in range(100):
        if tenants.live == [A]:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # more than twice the idle time, A's request still in flight
    assert tenants.live == [A]
    release.set()
    resp = await sent
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["results"][0]["tool"] == "get_weather"
    for _ in range(100):
        if not tenants.live:
            break
        await asyncio.sleep(0.05)
    assert tenants.live == []


def held_close(
    tenant: str,
) -> tuple[asyncio.Event, asyncio.Event, list[str], Callable[..., Awaitable[None]]]:
    """A `Service.close` to patch in that, for `tenant`'s service, sets `closing` and waits
    for `release` before closing; every tenant whose close ended is appended to `closed`."""
    closing, release = asyncio.Event(), asyncio.Event()
    closed: list[str] = []
    close = Service.close

    async def held(self: Service, *args: Any, **kwargs: Any) -> None:
        if self.store.tenant == tenant:
            closing.set()
            await release.wait()
        await close(self, *args, **kwargs)
        closed.append(self.store.tenant)

    return closing, release, closed, held


async def test_a_shutdown_lets_a_sweep_finish_the_close_under_way(
    services: ServiceFactory, aiohttp_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep closing idle A when the service shuts down: the shutdown waits for that close
    to end rather than cutting it short. (Cancelled inside A's close, the sweep once left A
    half closed, and the test's teardown waited on it until pytest's timeout.)"""
    closing, release, closed, held = held_close(A)
    monkeypatch.setattr(Service, "close", held)  # before A starts: it may idle out at once
    client, _ = await two_tenants(services, aiohttp_client, tenant_idle_s=0.2)
    tenants = client.app[TENANTS]
    await asyncio.wait_for(closing.wait(), 10)  # the sweep is inside idle A's close
    shutdown = asyncio.ensure_future(tenants.close_others())
    await asyncio.sleep(0.2)
    assert not shutdown.done()
    release.set()
    await asyncio.wait_for(shutdown, 10)
    assert A in closed and tenants.live == []


async def test_an_eviction_a_request_timeout_cuts_short_still_closes_the_tenant(
    services: ServiceFactory, aiohttp_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one tenant live, B's first request evicts A. A's close outlasting that request's
    timeout ends whole all the same: the request is answered `503 timeout`, and A is closed
    behind it (cancelled with the request, its close once stopped half way)."""
    closing, release, closed, held = held_close(A)
    # A timeout the starts of A and B stay well within on a busy machine; B's request waits it out.
    client, _ = await services.serve(
        aiohttp_client, api_keys=(ADMIN,), tenants_live=1, request_timeout_s=3.0
    )
    editors = {tenant: (await create(client, tenant, "editor"))["key"] for tenant in (A, B)}
    put = await client.put("/v1/tools", json=_tools_body(A), headers=bearer(editors[A]))
    assert put.status == 200, await put.text()
    monkeypatch.setattr(Service, "close", held)
    put = await client.put("/v1/tools", json=_tools_body(B), headers=bearer(editors[B]))
    assert closing.is_set()
    assert (await error_of(put, 503))["code"] == "timeout"
    release.set()
    for _ in range(100):
        if A in closed:
            break
        await asyncio.sleep(0.05)
    assert closed == [A] and client.app[TENANTS].live == [B]


async def test_every_tenant_shares_the_global_teacher_budget(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """`TOOLSELECT_TEACHER_GLOBAL_BUDGET_PER_HOUR` is one budget over every tenant's own."""
    client, _ = await two_tenants(
        services, aiohttp_client, teacher_budget_per_hour=3, teacher_global_budget_per_hour=5
    )
    tenants = client.app[TENANTS]
    cap = tenants.default.oracle.budget.cap
    assert cap is not None and cap.per_hour == 5
    for tenant in (A, B):
        budget = (await tenants.get(tenant)).oracle.budget
        assert (budget.per_hour, budget.cap) == (3, cap)


async def test_a_tenants_teacher_budget_outlives_its_service(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A tenant whose service is closed (idle, evicted) and started again keeps the paid calls
    of its hour: a restart is no way around `TOOLSELECT_TEACHER_BUDGET_PER_HOUR`."""
    client, _ = await two_tenants(services, aiohttp_client, teacher_budget_per_hour=2)
    tenants = client.app[TENANTS]
    budget = (await tenants.get(A)).oracle.budget
    for _ in range(2):
        slot = budget.reserve()
        assert slot is not None
        budget.settle(slot)
    await tenants.close_tenant(A)
    again = (await tenants.get(A)).oracle.budget
    assert again is budget and again.remaining() == 0
    assert (await tenants.get(B)).oracle.budget.remaining() == 2  # each tenant its own


async def test_each_tenant_keeps_its_own_bounded_search_log(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A tenant other than `default` remembers `TOOLSELECT_TENANT_SEARCHES_KEPT` search ids (its
    oldest forgotten first), whatever `default` keeps: with one kept, A's first search is
    `unknown` to a turn reporting it after a second search, the second is `shown`."""
    client, keys = await two_tenants(services, aiohttp_client, tenant_searches_kept=1)
    agent = bearer(keys[A]["agent"])
    ids = []
    for query in QUERIES[:2]:
        resp = await client.post("/v1/rank", json={"query": query, "k": 1}, headers=agent)
        ids.append((await resp.json())["search_id"])
    turns = [{"request": QUERIES[0], "used_tool": "get_weather", "search_id": ids[0],
              "turn_id": "first"},
             {"request": QUERIES[1], "used_tool": "send_email", "search_id": ids[1],
              "turn_id": "second"}]  # fmt: skip
    batch = await client.post("/v1/observe/batch", json={"turns": turns}, headers=agent)
    assert batch.status == 202
    a = await client.app[TENANTS].get(A)
    statuses = {}
    for turn_id in ("first", "second"):
        turn = await a.learning.turn_when_done(turn_id, 15.0)
        assert turn is not None
        statuses[turn_id] = turn.search_status
    assert statuses == {"first": "unknown", "second": "shown"}
    assert client.app[TENANTS].default.settings.searches_kept == 100_000


async def test_a_session_id_used_in_two_tenants_is_two_sessions(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """With the prior pinned, A's sessions (send_email after web_search) give A's rankings
    send_email after web_search; B's sessions (get_weather after send_email) give B its own.
    B ranking with A's session id, or with web_search as its previous tool, reads neither A's
    remembered sessions nor A's relations: it gets its message alone."""
    client, keys = await two_tenants(services, aiohttp_client, session_prior_weight=1.0)
    for tenant, order in ((A, ("web_search", "send_email")), (B, ("send_email", "get_weather"))):
        turns = [
            {"request": f"step {tool}", "used_tool": tool, "session_id": f"{tenant}-chat-{n}",
             "turn_id": f"{tenant}-{n}-{tool}"}
            for n in range(4)
            for tool in order
        ]  # fmt: skip
        resp = await client.post(
            "/v1/observe/batch", json={"turns": turns}, headers=bearer(keys[tenant]["agent"])
        )
        assert resp.status == 202, await resp.text()
    tenants = client.app[TENANTS]
    for tenant in (A, B):
        service = await tenants.get(tenant)
        assert await service.learner.drain(30.0)
        await service.sessions.refresh()

    async def first(tenant: str, **conversation: Any) -> Any:
        body = {"query": "and then?", "k": 1, **conversation}
        resp = await client.post("/v1/rank", json=body, headers=bearer(keys[tenant]["agent"]))
        assert resp.status == 200, await resp.text()
        return (await resp.json())["results"][0]

    b_alone = await first(B)
    assert (await first(A, previous_tools=["web_search"]))["tool"] == "send_email"
    assert (await first(B, previous_tools=["send_email"])) != b_alone  # B's own prior
    assert await first(B, previous_tools=["web_search"]) == b_alone
    # A's session's last tool, send_email, would lend B's get_weather the prior: twice, as a
    # session this process never noted is read from the store for the next ranking.
    for _ in range(2):
        assert await first(B, session_id=f"{A}-chat-0") == b_alone
        await asyncio.sleep(0.3)
