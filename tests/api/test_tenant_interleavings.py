"""Random interleavings of two tenants' HTTP operations against the real app, on both stores:
whatever tenant A does between tenant B's requests (put tools of the same names, delete them,
label the same queries, observe turns with the same turn ids and with B's search ids, rank the
same queries), B's answers along the way and B's state afterwards are exactly those of a fresh
tenant C that ran only B's operations in the same order. One app per test (a fresh app per
example is too slow on Neo4j); each example uses fresh tenant ids."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Literal

import pytest_asyncio
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.test_keys import ADMIN, bearer, create
from tests.api.test_tenant_isolation import CATALOGS, QUERIES, A, B, analyses, rank_all
from tests.services import ClientFactory, ServiceFactory
from toolselect.api.http import TENANTS

NAMES = [t.name for t in CATALOGS[A]]  # the same tool names in every tenant
# Each name's descriptions: A's, B's and one more, so a put may change a tool's meaning.
DESCRIPTIONS = {
    t.name: [t.description, CATALOGS[B][i].description, f"{t.name} does its job, quickly."]
    for i, t in enumerate(CATALOGS[A])
}
TURN_IDS = ["t1", "t2"]  # the same turn ids in both tenants

Kind = Literal["put", "delete", "label", "observe", "rank"]


@dataclass(frozen=True)
class Op:
    """One request of tenant `who` (0: A, the attacker; 1: B)."""

    who: int
    kind: Kind
    name: str = ""
    text: str = ""
    variant: int = 0
    outcome: str | None = None
    turn_id: str | None = None
    search: Literal["none", "own", "other"] = "none"


def _ops(who: int) -> st.SearchStrategy[Op]:
    names, queries = st.sampled_from(NAMES), st.sampled_from(QUERIES)
    return st.one_of(
        st.builds(Op, st.just(who), st.just("put"), names, variant=st.integers(0, 2)),
        st.builds(Op, st.just(who), st.just("delete"), names),
        st.builds(Op, st.just(who), st.just("label"), names, queries),
        st.builds(
            Op,
            st.just(who),
            st.just("observe"),
            names,
            queries,
            outcome=st.sampled_from([None, "ok", "error"]),
            turn_id=st.sampled_from([None, *TURN_IDS]),
            search=st.sampled_from(["none", "own", "other"]),
        ),
        st.builds(Op, st.just(who), st.just("rank"), text=queries),
    )


OPS = st.lists(st.one_of(_ops(0), _ops(1)), min_size=1, max_size=10)


@dataclass
class Tenant:
    """One tenant of an example: its id, keys and the search id of its last ranking."""

    id: str
    agent: str
    editor: str
    last_search: str | None = None


class Fleet:
    """The app (one per test) and a counter making fresh tenant ids for every example."""

    def __init__(self, client: TestClient[Any, Any]) -> None:
        self.client = client
        self._n = itertools.count()

    async def tenant(self, prefix: str, catalog: str) -> Tenant:
        """A fresh tenant with an agent and an editor key, holding `CATALOGS[catalog]`."""
        tenant_id = f"{prefix}{next(self._n)}"
        keys = {
            role: (await create(self.client, tenant_id, role))["key"]
            for role in ("agent", "editor")
        }
        made = Tenant(tenant_id, keys["agent"], keys["editor"])
        body = {
            "tools": [{"name": t.name, "description": t.description} for t in CATALOGS[catalog]]
        }
        put = await self.client.put("/v1/tools", json=body, headers=bearer(made.editor))
        assert put.status == 200, await put.text()
        return made

    async def settle(self, tenant: Tenant) -> None:
        """Wait until the tenant's learner has worked through its turns and any refit ended."""
        service = await self.client.app[TENANTS].get(tenant.id)
        assert await service.learner.drain(30.0)
        await service.learning.settle()

    async def close(self, *tenants: Tenant) -> None:
        """Close the tenants' services (their data stays): examples must not pile them up."""
        for tenant in tenants:
            await self.client.app[TENANTS].close_tenant(tenant.id)


@pytest_asyncio.fixture(loop_scope="function")
async def fleet(services: ServiceFactory, aiohttp_client: ClientFactory) -> Fleet:
    client, _ = await services.serve(aiohttp_client, api_keys=(ADMIN,))
    return Fleet(client)


def _answer(kind: Kind, status: int, body: Any) -> Any:
    """What a tenant learns from an answer, without what differs between any two requests
    (search ids, timings, fresh exemplar ids and times)."""
    if status >= 400 or not isinstance(body, dict):
        return status, body
    if kind == "rank":
        return status, body["results"], body["margin"], body["embedder"]
    if kind == "label":
        exemplar = {k: v for k, v in body["exemplar"].items() if k not in ("id", "created_at")}
        return status, body["saved"], exemplar
    return status, body


async def run(fleet: Fleet, tenant: Tenant, op: Op, other_search: str | None) -> Any:
    """Send `op` as `tenant` (`other_search`: the search id an `other` turn names) and return
    what it answered; an observed turn is waited for."""
    client = fleet.client
    agent, editor = bearer(tenant.agent), bearer(tenant.editor)
    if op.kind == "put":
        body = {"tools": [{"name": op.name, "description": DESCRIPTIONS[op.name][op.variant]}]}
        resp = await client.put("/v1/tools", json=body, headers=editor)
    elif op.kind == "delete":
        resp = await client.delete(f"/v1/tools/{op.name}", headers=editor)
    elif op.kind == "label":
        label = {"query": op.text, "tool": op.name}
        resp = await client.post("/v1/exemplars", json=label, headers=editor)
    elif op.kind == "observe":
        turn: dict[str, Any] = {"request": op.text, "used_tool": op.name}
        search = {"none": None, "own": tenant.last_search, "other": other_search}[op.search]
        for field, value in (
            ("outcome", op.outcome),
            ("turn_id", op.turn_id),
            ("search_id", search),
        ):
            if value is not None:
                turn[field] = value
        resp = await client.post("/v1/observe", json=turn, headers=agent)
    else:
        resp = await client.post("/v1/rank", json={"query": op.text, "k": 3}, headers=agent)
    body = await resp.json()
    if op.kind == "rank" and resp.status == 200:
        tenant.last_search = body["search_id"]
    if op.kind == "observe":
        await fleet.settle(tenant)
    return _answer(op.kind, resp.status, body)


async def state(fleet: Fleet, tenant: Tenant) -> Any:
    """What `tenant` reads: its tools, each name's labels, fixed rankings (scores included) and
    every analysis (turn counts among them), once its learner is idle."""
    await fleet.settle(tenant)
    client, editor = fleet.client, bearer(tenant.editor)
    tools = await (await client.get("/v1/tools", headers=editor)).json()
    labels = {}
    for name in NAMES:
        resp = await client.get(f"/v1/tools/{name}/exemplars", headers=editor)
        body = await resp.json()
        if resp.status == 200:
            body = [{k: v for k, v in e.items() if k not in ("id", "created_at")}
                    for e in body["exemplars"]]  # fmt: skip
        labels[name] = (resp.status, body)
    return (
        tools,
        labels,
        await rank_all(client, tenant.agent),
        await analyses(client, tenant.editor),
    )


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
async def test_another_tenants_operations_never_change_what_a_tenant_sees(
    fleet: Fleet, ops: list[Op]
) -> None:
    """Any interleaving of A's and B's operations (the same tool names, queries and turn ids;
    A's turns sometimes naming B's search id, B's A's) gives B every answer, and leaves B
    reading tools, labels, rankings with their scores and analyses, exactly as a fresh tenant C
    that ran only B's operations in the same order: A never influences B."""
    a = await fleet.tenant("a", A)
    b = await fleet.tenant("b", B)
    c = await fleet.tenant("c", B)
    b_answers, b_others = [], []
    for op in ops:
        me, them = (a, b) if op.who == 0 else (b, a)
        other_search = them.last_search
        answer = await run(fleet, me, op, other_search)
        if op.who == 1:
            b_answers.append(answer)
            b_others.append(other_search)
    b_state = await state(fleet, b)
    await fleet.close(a, b)

    alone = []
    for op, other_search in zip([op for op in ops if op.who == 1], b_others, strict=True):
        alone.append(await run(fleet, c, op, other_search))
    assert b_answers == alone
    assert b_state == await state(fleet, c)
    await fleet.close(c)
