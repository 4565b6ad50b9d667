"""The learning loop end to end over HTTP, on both stores, with the real Anthropic SDK
talking to a local Messages stub."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from tests.services import ServiceFactory
from tests.stubs import Reply, Stub, anthropic_message
from toolselect.records import Tool
from toolselect.service import Service
from toolselect.store.port import lookup_one

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]

CATALOG = {
    "tools": [
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "send_email", "description": "Send an email message to a recipient."},
        {"name": "web_search", "description": "Search the web for pages matching a query."},
        {"name": "crypto_price", "description": "Current price of a cryptocurrency like bitcoin."},
        {"name": "shell_exec", "description": "Run a shell command on the host."},
    ]
}
# Ground truth the teacher stub answers with, by request.
TRUTH = {
    "il prezzo di BTC ora": "crypto_price",
    "che tempo fa a Torino domani": "get_weather",
    "scrivi a Marco che arrivo tardi": "send_email",
}


def truthful_teacher(body: Any) -> Reply:
    """Answer the ground-truth label of the request found in the prompt."""
    prompt = json.dumps(body.get("messages", []), ensure_ascii=False)
    for request, tool in TRUTH.items():
        if request in prompt:
            return Reply(body=anthropic_message(tool))
    return Reply(body=anthropic_message("none"))


async def top1(client: TestClient[Any, Any], query: str) -> str:
    resp = await client.post("/v1/rank", json={"query": query, "k": 3})
    assert resp.status == 200
    return str((await resp.json())["results"][0]["tool"])


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> float:
    """Poll `check` until it holds; return the seconds it took (fail after `within`)."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < within, "condition not reached in time"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_observed_misroutes_are_learned_over_http(
    services: ServiceFactory, anthropic_stub: Stub, aiohttp_client: ClientFactory
) -> None:
    """Mis-routed turns observed over HTTP end as turns, oracle calls and exemplars in the
    store, and change the ranking."""
    anthropic_stub.responder = truthful_teacher
    client, service = await services.serve(
        aiohttp_client,
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
        teacher_share=1.0,  # every flagged turn to the teacher: this test follows all three
    )
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    before = {q: await top1(client, q) for q in TRUTH}
    assert before["il prezzo di BTC ora"] != "crypto_price"

    turns = [
        {"request": q, "used_tool": "shell_exec", "turn_id": f"t{i}", "agent_id": "a1"}
        for i, q in enumerate(TRUTH)
    ] + [{"request": "weather in Paris", "used_tool": "get_weather", "turn_id": "ok1"}]
    resp = await client.post("/v1/observe/batch", json={"turns": turns})
    assert resp.status == 202
    assert await resp.json() == {"queued": 4, "dropped": 0}
    assert await service.learner.drain(60.0)

    for i, query in enumerate(TRUTH):
        turn = await service.store.get_turn(f"t{i}")
        assert turn is not None and turn.flagged and turn.flag_reason == "fallback"
        assert turn.result == "labeled" and turn.label == TRUTH[query]
        exemplar = await lookup_one(service.store, query)
        assert exemplar is not None and exemplar.tool == TRUTH[query]
    unflagged = await service.store.get_turn("ok1")
    assert unflagged is not None and not unflagged.flagged
    calls = await service.store.oracle_calls()
    assert calls and {c.result for c in calls} == {"labeled"}
    assert all(c.provider == "anthropic" and c.input_tokens == 120 for c in calls)
    assert len(anthropic_stub.received) == len(calls)

    after = {q: await top1(client, q) for q in TRUTH}
    assert after == TRUTH
    exemplars = await (await client.get("/v1/tools/crypto_price/exemplars")).json()
    assert [e["query"] for e in exemplars["exemplars"]] == ["il prezzo di BTC ora"]
    metrics = await (await client.get("/metrics")).text()
    assert 'toolselect_flagged_turns_total{reason="fallback",tenant="default"} 3.0' in metrics


async def test_kill_switch_sends_nothing(
    services: ServiceFactory, anthropic_stub: Stub, aiohttp_client: ClientFactory
) -> None:
    """With TOOLSELECT_ORACLE=off the teacher stub receives zero requests; turns are declined."""
    anthropic_stub.responder = truthful_teacher
    client, service = await services.serve(
        aiohttp_client,
        oracle="off",
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
    )
    await client.put("/v1/tools", json=CATALOG)
    resp = await client.post(
        "/v1/observe",
        json={
            "request": "il prezzo di BTC ora",
            "used_tool": "shell_exec",
            "turn_id": "k1",
        },
    )
    assert resp.status == 202 and await resp.json() == {"queued": True}
    assert await service.learner.drain(30.0)
    turn = await service.store.get_turn("k1")
    assert turn is not None and turn.tier == "teacher" and turn.result == "declined"
    assert anthropic_stub.received == []
    assert await service.store.oracle_calls() == []


async def test_feedback_is_never_overridden(
    services: ServiceFactory, anthropic_stub: Stub, aiohttp_client: ClientFactory
) -> None:
    """A human label (POST /v1/exemplars) wins over a later ranker or teacher label."""
    anthropic_stub.responder = truthful_teacher
    client, service = await services.serve(
        aiohttp_client,
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
    )
    await client.put("/v1/tools", json=CATALOG)
    resp = await client.post(
        "/v1/exemplars", json={"query": "il prezzo di BTC ora", "tool": "web_search"}
    )
    assert resp.status == 201
    body = await resp.json()
    assert body["saved"] is True and body["exemplar"]["tier"] == "feedback"
    service.learning.observe("il prezzo di BTC ora", "shell_exec", turn_id="f1")
    assert await service.learner.drain(30.0)
    turn = await service.store.get_turn("f1")
    assert turn is not None and (turn.tier, turn.label) == ("ratchet", "web_search")
    assert anthropic_stub.received == []
    stored = await lookup_one(service.store, "il prezzo di BTC ora")
    assert stored is not None and stored.tier == "feedback" and stored.tool == "web_search"
    resp = await client.post("/v1/exemplars", json={"query": "x", "tool": "nope"})
    assert resp.status == 404
    # Undo the label: the exemplar goes, and the ranking forgets it.
    resp = await client.delete(f"/v1/exemplars/{body['exemplar']['id']}")
    assert resp.status == 200
    assert await lookup_one(service.store, "il prezzo di BTC ora") is None


async def test_observe_batch_limit(services: ServiceFactory, aiohttp_client: ClientFactory) -> None:
    """At most 1000 turns per batch: 1000 are accepted, 1001 answer 422 naming `turns`."""
    client, _service = await services.serve(aiohttp_client, queue_size=5000)
    turn = {"request": "hello", "used_tool": "text_response"}
    resp = await client.post("/v1/observe/batch", json={"turns": [turn] * 1001})
    assert resp.status == 422
    assert (await resp.json())["error"]["field"] == "turns"
    resp = await client.post("/v1/observe/batch", json={"turns": [turn] * 1000})
    assert resp.status == 202 and (await resp.json())["queued"] == 1000
    bad = await client.post(
        "/v1/observe", json={"request": "x", "used_tool": "y", "outcome": "meh"}
    )
    assert bad.status == 422 and (await bad.json())["error"]["field"] == "outcome"


async def test_service_close_leaves_no_threads_or_tasks(services: ServiceFactory) -> None:
    """Closing a service joins the learner, the store's threads and every task it started."""
    threads_before = set(threading.enumerate())
    service = await services.start()
    await service.catalog.upsert_tools([Tool("t", "a tool")])
    service.learning.observe("hello there", "shell_exec")
    await service.close()
    services.started.remove(service)
    await asyncio.sleep(0)
    pending = [t for t in asyncio.all_tasks() if not t.done() and t is not asyncio.current_task()]
    assert pending == []
    assert set(threading.enumerate()) - threads_before == set()


async def test_two_replicas_converge_through_the_store(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A label and a tool written through replica A change replica B within the poll interval."""
    client_a, _a = await services.serve(aiohttp_client)
    client_b, _b = await services.serve(aiohttp_client)
    await client_a.put("/v1/tools", json=CATALOG)
    await eventually(lambda: _has_tool(client_b, "crypto_price"))
    assert await top1(client_b, "il prezzo di BTC ora") != "crypto_price"
    resp = await client_a.post(
        "/v1/exemplars", json={"query": "il prezzo di BTC ora", "tool": "crypto_price"}
    )
    assert resp.status == 201
    took = await eventually(
        lambda: _top1_is(client_b, "il prezzo di BTC ora", "crypto_price"), within=5.0
    )
    assert took < 1.0  # poll interval 0.2 s
    resp = await client_a.put(
        "/v1/tools", json={"tools": [{"name": "bitcoin_wallet", "description": "Bitcoin wallet"}]}
    )
    await eventually(lambda: _has_tool(client_b, "bitcoin_wallet"), within=5.0)


async def _has_tool(client: TestClient[Any, Any], name: str) -> bool:
    resp = await client.post("/v1/rank", json={"query": name, "k": 100})
    return name in [r["tool"] for r in (await resp.json())["results"]]


async def _top1_is(client: TestClient[Any, Any], query: str, tool: str) -> bool:
    return await top1(client, query) == tool


Replica = tuple[TestClient[Any, Any], Service]


async def two_replicas(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> tuple[Replica, Replica]:
    """Two servers on one store that poll it only when a test says (`index.refresh`), both
    holding CATALOG."""
    client_a, a = await services.serve(aiohttp_client, poll_interval_s=3600.0)
    client_b, b = await services.serve(aiohttp_client, poll_interval_s=3600.0)
    await client_a.put("/v1/tools", json=CATALOG)
    for service in (a, b):
        await service.index.refresh()
    return (client_a, a), (client_b, b)


async def test_catalog_writes_through_two_replicas_between_polls_reach_both(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Replica A adds a tool, then replica B adds or deletes another before it polled: at its
    next poll B holds A's tool too (its own write must not pass for the whole change), and A
    holds B's change."""
    (client_a, a), (client_b, b) = await two_replicas(services, aiohttp_client)
    tool = {"name": "pdf_summarize", "description": "Summarize a PDF document"}
    assert (await client_a.put("/v1/tools", json={"tools": [tool]})).status == 200
    resp = await client_b.put("/v1/tools", json={"tools": [{"name": "ledger", "description": "x"}]})
    assert resp.status == 200
    for service in (a, b):
        await service.index.refresh()
    for client in (client_a, client_b):
        assert await _has_tool(client, "pdf_summarize") and await _has_tool(client, "ledger")

    tool = {"name": "ocr_scan", "description": "Read the text of a scanned page"}
    assert (await client_a.put("/v1/tools", json={"tools": [tool]})).status == 200
    assert (await client_b.delete("/v1/tools/ledger")).status == 200
    for service in (a, b):
        await service.index.refresh()
    for client in (client_a, client_b):
        assert await _has_tool(client, "ocr_scan") and not await _has_tool(client, "ledger")


async def test_a_replica_resending_a_tool_it_held_stale_still_takes_the_others_change(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Replica B writes two tools; A, before its poll, sends one of them as B wrote it: the
    store changes nothing, so A's write must not pass for B's change. Taking the store's
    version as its own, A never reloaded: B's other tool was missing from its ranking for
    good, and a human label for it answered 404."""
    (client_a, a), (client_b, _) = await two_replicas(services, aiohttp_client)
    event = {"name": "calendar_create", "description": "Create a calendar event"}
    cancel = {"name": "calendar_cancel", "description": "Cancel a calendar event, tell attendees"}
    assert (await client_b.put("/v1/tools", json={"tools": [event, cancel]})).status == 200
    resent = await client_a.put("/v1/tools", json={"tools": [event]})
    assert (await resent.json())["unchanged"] == 1
    await a.index.refresh()
    assert await _has_tool(client_a, "calendar_cancel")
    label = {"query": "call off tomorrow's standup", "tool": "calendar_cancel"}
    assert (await client_a.post("/v1/exemplars", json=label)).status == 201


async def test_labels_for_a_tool_another_replica_just_added_are_kept(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Replica B adds a tool; before A polls, a human labels a request with it and an agent
    reports using it (worked) through A: both labels are saved. A judged the name by its
    ranker alone: the human's label answered 404 and the usage label was silently lost."""
    (client_a, a), (client_b, _) = await two_replicas(services, aiohttp_client)
    pdf = {"name": "pdf_summarize", "description": "Summarize a PDF document"}
    assert (await client_b.put("/v1/tools", json={"tools": [pdf]})).status == 200
    label = {"query": "give me the gist of this report.pdf", "tool": "pdf_summarize"}
    assert (await client_a.post("/v1/exemplars", json=label)).status == 201

    ocr = {"name": "ocr_scan", "description": "Read the text of a scanned page"}
    assert (await client_b.put("/v1/tools", json={"tools": [ocr]})).status == 200
    turn = {"request": "what does this scanned invoice say", "used_tool": "ocr_scan",
            "outcome": "ok"}  # fmt: skip
    assert (await client_a.post("/v1/observe", json=turn)).status == 202
    assert await a.learner.drain(30.0)
    stored = await lookup_one(a.store, "what does this scanned invoice say")
    assert stored is not None and (stored.tool, stored.tier) == ("ocr_scan", "usage")
