"""Attacks on tenant isolation through the HTTP API's answers, on both stores: a key of tenant A
probing for tenant B's data must learn nothing from an error (B's tool names and label ids
answer exactly as names and ids nobody has), must not delete or label anything of B's by name
or id, must be refused (`403`) on every `/v1/*` route of `keys.ROUTE_ROLES` when it names B in
`X-Toolselect-Tenant`, and its requests must move only A's series of `/metrics` (B's
tenant-labelled series stay as they were); a key of A reading `/metrics` sees none of B's
series, and a scrape without a key none of any tenant's but `default`'s."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

from tests.api.test_keys import ADMIN, bearer, error_of
from tests.api.test_tenant_isolation import CATALOGS, QUERIES, A, B, analyses, rank_all, two_tenants
from tests.services import ClientFactory, ServiceFactory
from toolselect.api.http import TENANTS
from toolselect.keys import ROUTE_ROLES, TENANT_HEADER, allows

B_ONLY = "ledger_lookup"  # a tool name only tenant B has
NOBODY = "nobody_has_this_tool"  # a tool name no tenant has
NO_ID = "0123456789abcdef0123456789abcdef"  # an exemplar id no tenant has

Keys = dict[str, dict[str, str]]


async def b_state(client: TestClient[Any, Any], keys: Keys) -> Any:
    """What B's keys read: its catalog, every tool's labels, its rankings and analyses."""
    editor = bearer(keys[B]["editor"])
    tools = (await (await client.get("/v1/tools", headers=editor)).json())["tools"]
    labels = {}
    for tool in tools:
        resp = await client.get(f"/v1/tools/{tool['name']}/exemplars", headers=editor)
        assert resp.status == 200, await resp.text()
        labels[tool["name"]] = (await resp.json())["exemplars"]
    return (
        tools,
        labels,
        await rank_all(client, keys[B]["agent"]),
        await analyses(client, keys[B]["editor"]),
    )


async def with_b_labels(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> tuple[TestClient[Any, Any], Keys, dict[str, str]]:
    """`two_tenants`, B also holding a tool A lacks and a label on it and on a shared name:
    the client, the keys and B's exemplar ids by tool."""
    client, keys = await two_tenants(services, aiohttp_client)
    editor = bearer(keys[B]["editor"])
    extra = {"tools": [{"name": B_ONLY, "description": "Look up an entry of the ledger."}]}
    assert (await client.put("/v1/tools", json=extra, headers=editor)).status == 200
    ids = {}
    for query, tool in (("the ledger entry for March", B_ONLY), (QUERIES[0], "get_weather")):
        made = await client.post(
            "/v1/exemplars", json={"query": query, "tool": tool}, headers=editor
        )
        assert made.status == 201, await made.text()
        ids[tool] = (await made.json())["exemplar"]["id"]
    return client, keys, ids


def as_nobodys(error: dict[str, Any], name: str) -> dict[str, Any]:
    """An error body with `name` written as `NOBODY`'s or `NO_ID`'s, to compare with theirs."""
    stand_in = NO_ID if re.fullmatch(r"[0-9a-f]{32}", name) else NOBODY
    return {k: v.replace(name, stand_in) if isinstance(v, str) else v for k, v in error.items()}


async def test_another_tenants_names_and_ids_answer_as_nobodys(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A's editor asking for, listing the labels of, deleting or labelling B's tool
    `ledger_lookup` gets the very 404 a name nobody has gets (status, code, field, message
    but for the name); deleting B's exemplars by id (on B's own tool and on a name both have)
    is the 404 of an id nobody has; afterwards B reads exactly what it read before."""
    client, keys, b_ids = await with_b_labels(services, aiohttp_client)
    before = await b_state(client, keys)
    a_editor = bearer(keys[A]["editor"])

    async def probes(name: str) -> list[tuple[int, dict[str, Any]]]:
        answers = []
        for method, path, body in (
            ("GET", f"/v1/tools/{name}", None),
            ("GET", f"/v1/tools/{name}/exemplars", None),
            ("POST", "/v1/exemplars", {"query": "the ledger entry for May", "tool": name}),
            ("DELETE", f"/v1/tools/{name}", None),
        ):
            resp = await client.request(method, path, json=body, headers=a_editor)
            answers.append((resp.status, await error_of(resp, 404)))
        return answers

    b_only, nobodys = await probes(B_ONLY), await probes(NOBODY)
    assert [(s, as_nobodys(e, B_ONLY)) for s, e in b_only] == nobodys
    unknown = await client.delete(f"/v1/exemplars/{NO_ID}", headers=a_editor)
    unknown_error = await error_of(unknown, 404)
    for exemplar_id in b_ids.values():
        resp = await client.delete(f"/v1/exemplars/{exemplar_id}", headers=a_editor)
        assert as_nobodys(await error_of(resp, 404), exemplar_id) == unknown_error

    after = await b_state(client, keys)
    assert after == before
    kept = {e["id"] for labels in after[1].values() for e in labels}
    assert set(b_ids.values()) <= kept


def concrete(route: str) -> str:
    """A path of `route` naming a tool and an exemplar both tenants could hold."""
    return route.replace("{name}", "get_weather").replace("{id}", NO_ID)


# What a request would do to B if let through: a body for every route that takes one.
ATTACK_BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/rank"): {"query": QUERIES[0], "k": 3},
    ("POST", "/v1/select"): {"query": {"Text": QUERIES[0]}, "candidates": [{"ID": "get_weather"}]},
    ("POST", "/v1/observe"): {"request": QUERIES[0], "used_tool": "web_search", "outcome": "ok"},
    ("POST", "/v1/observe/batch"): {
        "turns": [{"request": QUERIES[1], "used_tool": "get_weather", "outcome": "ok"}]
    },
    ("PUT", "/v1/tools"): {
        "tools": [{"name": t.name, "description": t.description} for t in CATALOGS[A]]
    },
    ("POST", "/v1/exemplars"): {"query": QUERIES[2], "tool": "send_email"},
    ("POST", "/v1/keys"): {"tenant": B, "role": "admin"},
}


async def test_a_non_admin_key_naming_another_tenant_is_refused_on_every_route(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """On every route of `ROUTE_ROLES` (the dashboard's calls among them), A's agent and
    editor keys sending `X-Toolselect-Tenant: team-b`, with a body that would change B, are
    `403 forbidden`: for the tenant header where the key's role would pass the route, for the
    role otherwise; B's catalog, labels, rankings and analyses are as before."""
    client, keys, _ = await with_b_labels(services, aiohttp_client)
    before = await b_state(client, keys)
    refused = []
    for (method, route), needed in ROUTE_ROLES.items():
        for role in ("agent", "editor"):
            resp = await client.request(
                method,
                concrete(route),
                json=ATTACK_BODIES.get((method, route)),
                headers=bearer(keys[A][role], B),
            )
            error = await error_of(resp, 403)
            assert error["code"] == "forbidden", (method, route, role, error)
            if allows(role, needed):
                assert error.get("field") == TENANT_HEADER, (method, route, role, error)
                assert f"'{A}' asking for '{B}'" in error["message"]
            refused.append((method, route, role))
    assert len(refused) == 2 * len(ROUTE_ROLES)
    assert await b_state(client, keys) == before
    listed = await client.get("/v1/keys", headers=bearer(ADMIN))
    assert {(k["tenant"], k["role"]) for k in (await listed.json())["keys"]} == {
        (t, r) for t in (A, B) for r in ("agent", "editor")
    }


# The tenant-labelled families a tenant's ranks, turns, labels and catalog changes write.
REQUEST_FAMILIES = (
    "toolselect_rank_seconds",
    "toolselect_observed_turns",
    "toolselect_flagged_turns",
    "toolselect_catalog_tools",
    "toolselect_exemplars",
    "toolselect_ranker_rebuilds",
    "toolselect_query_vectors",
)


def series_of(metrics: str, tenant: str, families: tuple[str, ...] = ("toolselect_",)) -> list[str]:
    """The sample lines of `/metrics` labelled with `tenant`, of `families` (name prefixes)."""
    label = f'tenant="{tenant}"'
    return sorted(
        line for line in metrics.splitlines() if label in line and line.startswith(families)
    )


async def test_one_tenants_requests_move_only_its_own_metrics(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Ranks, turns, a label, a catalog change and a delete with A's keys change A's
    tenant-labelled series of `/metrics` and leave every series labelled `team-b` as it was
    (B's service closed first, so nothing of B's own runs meanwhile: its counters stay, its
    gauges go), and `default`'s series of the families such requests write too."""
    client, keys = await two_tenants(services, aiohttp_client)
    await rank_all(client, keys[B]["agent"])  # B has series of its own to keep
    await client.app[TENANTS].close_tenant(B)
    before = await (await client.get("/metrics", headers=bearer(ADMIN))).text()
    a_agent, a_editor = bearer(keys[A]["agent"]), bearer(keys[A]["editor"])
    await rank_all(client, keys[A]["agent"])
    turn = {"request": QUERIES[0], "used_tool": "web_search", "outcome": "error", "turn_id": "t1"}
    assert (await client.post("/v1/observe", json=turn, headers=a_agent)).status == 202
    label = {"query": QUERIES[2], "tool": "send_email"}
    assert (await client.post("/v1/exemplars", json=label, headers=a_editor)).status == 201
    body = {"tools": [{"name": "get_weather", "description": "Weather, rain and wind."}]}
    assert (await client.put("/v1/tools", json=body, headers=a_editor)).status == 200
    assert (await client.delete("/v1/tools/web_search", headers=a_editor)).status == 200
    a_service = await client.app[TENANTS].get(A)
    assert await a_service.learner.drain(30.0)
    after = await (await client.get("/metrics", headers=bearer(ADMIN))).text()
    assert B not in client.app[TENANTS].live
    assert series_of(before, B) != []
    assert series_of(after, B) == series_of(before, B)
    for tenant, changed in (("default", False), (A, True)):
        moved = series_of(after, tenant, REQUEST_FAMILIES) != series_of(
            before, tenant, REQUEST_FAMILIES
        )
        assert moved == changed, tenant


async def test_a_tenants_key_reads_no_other_tenants_metrics(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """`GET /metrics` with A's editor key (the default `TOOLSELECT_METRICS_AUTH=false`) holds
    no series labelled `team-b`, nor B's tenant id anywhere, once B has ranked; without a key
    it holds neither tenant's; with the admin key both."""
    client, keys = await two_tenants(services, aiohttp_client)
    await rank_all(client, keys[B]["agent"])
    resp = await client.get("/metrics", headers=bearer(keys[A]["editor"]))
    assert resp.status == 200
    seen = await resp.text()
    assert series_of(seen, A) != []
    assert B not in seen
    anonymous = await (await client.get("/metrics")).text()
    assert A not in anonymous and B not in anonymous
    assert "toolselect_http_requests_total" in anonymous
    every = await (await client.get("/metrics", headers=bearer(ADMIN))).text()
    assert series_of(every, A) != [] and series_of(every, B) != []
