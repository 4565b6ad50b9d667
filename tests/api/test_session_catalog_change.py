"""A conversation that spans a catalog change: once a tool is deleted, the store holds no count of
it (`tool_pairs`, `tool_transitions`), and the session signals a ranking reads from memory follow
within the upkeep's tick. They were read again only when new session turns arrived or
`TOOLSELECT_SESSION_REFIT_INTERVAL` (300 s) passed, so for minutes a deleted tool used earlier in
a session still lent its successors the prior, against what the store and a restarted replica
said."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from tests.api.conftest import HAND_CATALOG
from tests.e2e.test_learning import eventually
from tests.services import ClientFactory, ServiceFactory

Client = TestClient[Any, Any]
VAGUE = "go on with the next step"


async def top(client: Client, **conversation: Any) -> dict[str, Any]:
    """The first tool ranked for VAGUE with `conversation`."""
    resp = await client.post("/v1/rank", json={"query": VAGUE, "k": 1, **conversation})
    assert resp.status == 200, await resp.text()
    first: dict[str, Any] = (await resp.json())["results"][0]
    return first


async def test_a_deleted_tool_lends_no_prior_once_the_catalog_changed(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Sessions where stock_quote followed web_search give web_search's successor the pinned
    prior; after `DELETE /v1/tools/web_search` the relations drop it within seconds (the refit
    interval being 300 s), so a conversation naming web_search as its previous tool ranks as the
    message alone."""
    client, service = await services.serve(
        aiohttp_client, session_prior_weight=1.0, session_refit_s=300.0, oracle="off"
    )
    tools = [{"name": t.name, "description": t.description} for t in HAND_CATALOG]
    assert (await client.put("/v1/tools", json={"tools": tools})).status == 200
    turns = [
        {"request": request, "used_tool": tool, "session_id": f"s{n}", "turn_id": f"s{n}-{tool}"}
        for n in range(5)
        for request, tool in (("look it up", "web_search"), ("the price of it", "stock_quote"))
    ]
    assert (await client.post("/v1/observe/batch", json={"turns": turns})).status == 202
    assert await service.learner.drain(30.0)
    await service.sessions.refresh()
    alone = await top(client)
    assert (await top(client, previous_tools=["web_search"]))["tool"] == "stock_quote"

    assert (await client.delete("/v1/tools/web_search")).status == 200

    async def forgotten() -> bool:
        learning = await (await client.get("/v1/analytics/learning")).json()
        return bool(learning["conversation"]["relations"]["transitions"] == 0)

    await eventually(forgotten, within=5.0)
    assert await top(client, previous_tools=["web_search"]) == alone
