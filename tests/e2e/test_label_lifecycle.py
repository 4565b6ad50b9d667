"""A label's life over HTTP on both stores: what deleting a tool does to the labels naming it,
on the replica that deleted it and on one that polls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from tests.e2e.test_learning import CATALOG, eventually, top1
from tests.services import ClientFactory, ServiceFactory
from toolselect.testing import FakeClock

# Words no tool's description holds: only a label can send this request to a tool.
ODD = "qwerty zxcvb plonk"
T0 = datetime(2026, 3, 1, tzinfo=UTC)


async def labels_of(client: TestClient[Any, Any], tool: str) -> list[dict[str, Any]]:
    resp = await client.get(f"/v1/tools/{tool}/exemplars")
    assert resp.status == 200
    return list((await resp.json())["exemplars"])


async def test_a_deleted_tools_labels_stop_counting_at_once(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """DELETE /v1/tools/{name} deletes the tool's labels with it (a human's too): added back, the
    tool starts with none, here at once as on a replica that reloads. The replica that deleted
    it used to keep the labels in its ranker until its next poll, so a tool put back within the
    poll interval ranked by the labels the store no longer held."""
    # A long poll: what this replica does itself, not what a poll mends later.
    client, service = await services.serve(aiohttp_client, poll_interval_s=60.0)
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    resp = await client.post("/v1/exemplars", json={"query": ODD, "tool": "send_email"})
    assert resp.status == 201
    assert await top1(client, ODD) == "send_email"

    assert (await client.delete("/v1/tools/send_email")).status == 200
    assert service.index.ranker.exemplar_total == 0
    email = next(t for t in CATALOG["tools"] if t["name"] == "send_email")
    assert (await client.put("/v1/tools", json={"tools": [email]})).status == 200

    assert await labels_of(client, "send_email") == []
    assert service.index.ranker.exemplar_count("send_email") == 0
    assert await top1(client, ODD) != "send_email"
    # A service started on the store now holds the same: no label for the tool.
    other = await services.start(wait_for_store=True)
    assert other.index.ranker.exemplar_count("send_email") == 0


async def test_a_correction_on_a_replica_whose_clock_is_behind_replaces_the_label(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A human labels a request on replica B, whose clock runs two minutes ahead, then corrects
    it on replica A: the correction is the latest word and replaces B's label, on the store and
    in both rankers. It was answered `saved: false` with B's label, because its time read older."""
    behind = FakeClock(T0)
    ahead = FakeClock(T0 + timedelta(minutes=2))
    client_a, _ = await services.serve(aiohttp_client, clock=behind, poll_interval_s=0.1)
    client_b, _ = await services.serve(aiohttp_client, clock=ahead, poll_interval_s=0.1)
    assert (await client_a.put("/v1/tools", json=CATALOG)).status == 200
    resp = await client_b.post("/v1/exemplars", json={"query": ODD, "tool": "send_email"})
    assert resp.status == 201 and (await resp.json())["saved"]
    resp = await client_a.post("/v1/exemplars", json={"query": ODD, "tool": "web_search"})
    body = await resp.json()
    assert resp.status == 201 and body["saved"], body
    assert body["exemplar"]["tool"] == "web_search"
    assert [e["query"] for e in await labels_of(client_a, "web_search")] == [ODD]
    assert await labels_of(client_a, "send_email") == []
    assert await top1(client_a, ODD) == "web_search"

    async def b_follows() -> bool:
        return await top1(client_b, ODD) == "web_search"

    await eventually(b_follows)
