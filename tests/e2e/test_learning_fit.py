"""The fitted learning loop through the real service on both stores: the fallback rule, the
teacher's candidates, and the fit (fold, calibration) refitted from labels and exposed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from tests.e2e.test_learning import CATALOG, ClientFactory, eventually
from tests.services import ServiceFactory
from tests.stubs import Reply, Stub, anthropic_message

TOPICS = ["invoice", "ticket", "playlist", "calendar", "recipe", "flight", "parcel", "meeting"]


def large_catalog(count: int) -> dict[str, Any]:
    return {
        "tools": [
            {
                "name": f"tool_{i:03d}",
                "description": f"Manage the {TOPICS[i % len(TOPICS)]} number {i} for the user.",
            }
            for i in range(count)
        ]
    }


def offered(stub: Stub) -> list[list[str]]:
    """The tool names each teacher request offered (without `none`)."""
    out = []
    for received in stub.received:
        tool = received.body["tools"][0]
        names = tool["input_schema"]["properties"]["tool"]["enum"]
        out.append([n for n in names if n != "none"])
    return out


def asked(stub: Stub, more_than: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return len(stub.received) > more_than

    return check


async def test_the_fallback_tool_is_never_confirmed_for_free(
    services: ServiceFactory, anthropic_stub: Stub, aiohttp_client: ClientFactory
) -> None:
    """A turn flagged for `shell_exec` whose ranker top-1 is `shell_exec` goes to the teacher,
    even with the free tier trusting every margin."""
    anthropic_stub.responder = lambda body: Reply(body=anthropic_message("none"))
    client, service = await services.serve(
        aiohttp_client,
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
        margin_floor=0.0,
    )
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    query = "run a shell command on the host: ls"
    rank = await (await client.post("/v1/rank", json={"query": query, "k": 2})).json()
    assert rank["results"][0]["tool"] == "shell_exec"

    turn = {"request": query, "used_tool": "shell_exec", "turn_id": "fb1"}
    assert (await client.post("/v1/observe", json=turn)).status == 202

    async def decided() -> bool:
        stored = await service.store.get_turn("fb1")
        return stored is not None and stored.result is not None

    await eventually(decided)
    stored = await service.store.get_turn("fb1")
    assert stored is not None
    assert (stored.tier, stored.result, stored.label) == ("teacher", "declined", None)
    assert len(anthropic_stub.received) == 1
    assert await service.store.exemplars_for_tool("shell_exec") == []


async def test_a_small_catalog_is_shown_whole_to_the_teacher(
    services: ServiceFactory, anthropic_stub: Stub, aiohttp_client: ClientFactory
) -> None:
    """At or under `teacher_full_catalog` tools the teacher sees every tool, not a top-N."""
    anthropic_stub.responder = lambda body: Reply(body=anthropic_message("crypto_price"))
    client, _service = await services.serve(
        aiohttp_client,
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
    )
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    turn = {"request": "il prezzo di BTC ora", "used_tool": "shell_exec", "turn_id": "s1"}
    assert (await client.post("/v1/observe", json=turn)).status == 202
    await eventually(asked(anthropic_stub, 0))
    assert sorted(offered(anthropic_stub)[0]) == sorted(t["name"] for t in CATALOG["tools"])


async def test_a_large_catalog_is_cut_to_the_depth_and_the_token_budget(
    services: ServiceFactory, anthropic_stub: Stub, aiohttp_client: ClientFactory
) -> None:
    """Past the full-catalog size, before its answers size the depth, the teacher sees all the
    ranked tools the token budget buys: a tight budget shortens the descriptions after the
    first ten, and a tighter one also drops candidates, best kept first."""
    anthropic_stub.responder = lambda body: Reply(body=anthropic_message("none"))
    catalog = large_catalog(80)
    descriptions = {t["name"]: t["description"] for t in catalog["tools"]}
    for max_tokens, turn_id in ((6000, "l1"), (1000, "l2"), (300, "l3")):
        client, _service = await services.serve(
            aiohttp_client,
            teacher="anthropic",
            anthropic_api_key="test",
            anthropic_base_url=anthropic_stub.url,
            teacher_max_input_tokens=max_tokens,
        )
        assert (await client.put("/v1/tools", json=catalog)).status == 200
        query = "please sort out my parcel and the meeting"
        turn = {"request": query, "used_tool": "shell_exec", "turn_id": turn_id}
        ranked = await client.post("/v1/rank", json={"query": query, "k": 80})
        top = [r["tool"] for r in (await ranked.json())["results"]]
        seen = len(anthropic_stub.received)
        assert (await client.post("/v1/observe", json=turn)).status == 202
        await eventually(asked(anthropic_stub, seen))
        shown = offered(anthropic_stub)[-1]
        prompt = anthropic_stub.received[-1].body["messages"][0]["content"]
        described = [name for name in shown if f"- {name}: {descriptions[name]}" in prompt]
        if max_tokens == 6000:
            assert shown == top
            assert described == shown
        elif max_tokens == 1000:
            assert shown == top
            assert described == shown[:10]
        else:
            assert 10 <= len(shown) < 80
            assert shown == top[: len(shown)]
            assert described == shown[:10]


async def test_the_fit_follows_the_labels_and_is_exposed(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Human labels trigger a refit (fold validated or kept, calibration curve over them),
    visible in `/v1/analytics/learning` and `/metrics`, and refitted again after a restart."""
    catalog = large_catalog(40)
    client, _service = await services.serve(aiohttp_client)
    assert (await client.put("/v1/tools", json=catalog)).status == 200
    before = await (await client.get("/v1/analytics/learning")).json()
    assert before["labels"] == 0
    assert "fitted_at" not in before
    assert before["fold"]["source"] == "prior"

    for i in range(45):
        topic = TOPICS[i % len(TOPICS)]
        body = {"query": f"help me with my {topic}, case {i}", "tool": f"tool_{i % 40:03d}"}
        assert (await client.post("/v1/exemplars", json=body)).status == 201

    async def refitted(c: TestClient[Any, Any] = client) -> bool:
        fit = await (await c.get("/v1/analytics/learning")).json()
        return bool(fit["labels"] >= 30 and fit.get("fitted_at"))

    await eventually(refitted)
    fit = await (await client.get("/v1/analytics/learning")).json()
    assert fit["fold"]["source"] in ("prior", "validated")
    assert len(fit["fold"]["validation"]) >= 27
    assert fit["free_tier"]["labels"] == fit["labels"]
    curve = [p["probability"] for p in fit["free_tier"]["curve"]]
    assert curve == sorted(curve) and curve
    listed = await (await client.get("/v1/analytics")).json()
    assert "learning" in listed["analyses"]
    metrics = await (await client.get("/metrics")).text()
    refits = [
        line for line in metrics.splitlines() if line.startswith("toolselect_learning_refits_total")
    ]
    assert float(refits[0].split()[1]) >= 1.0

    restarted_client, _restarted = await services.serve(aiohttp_client)
    await eventually(lambda: refitted(restarted_client))


async def test_the_teacher_gets_only_its_share_of_flagged_turns(
    services: ServiceFactory, anthropic_stub: Stub, aiohttp_client: ClientFactory
) -> None:
    """With the default share (0.25), eight disagreements on turns that worked (the agent's
    choice against a confident ranker) yield at most three teacher calls; the rest are recorded
    as declined, not lost. Fallback turns are not rationed (the next test)."""
    anthropic_stub.responder = lambda body: Reply(body=anthropic_message("none"))
    client, service = await services.serve(
        aiohttp_client,
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
    )
    distinct = [
        ("get_weather", "weather forecast rain wind temperature for a city"),
        ("send_email", "send an email message to a recipient with subject"),
        ("stock_quote", "latest stock price quote for a ticker symbol"),
        ("translate_text", "translate text from one language into another"),
    ]
    catalog = large_catalog(80)
    catalog["tools"] += [{"name": n, "description": d} for n, d in distinct]
    assert (await client.put("/v1/tools", json=catalog)).status == 200
    turns = [
        {"request": f"{distinct[i % 4][1]} ({i})", "used_tool": distinct[(i + 1) % 4][0],
         "outcome": "ok", "turn_id": f"q{i}"}
        for i in range(8)
    ]  # fmt: skip
    assert (await client.post("/v1/observe/batch", json={"turns": turns})).status == 202

    async def all_decided() -> bool:
        stored = [await service.store.get_turn(f"q{i}") for i in range(8)]
        return all(t is not None and t.result is not None for t in stored)

    await eventually(all_decided)
    stored = [await service.store.get_turn(f"q{i}") for i in range(8)]
    tiers = sorted(t.tier or "" for t in stored if t is not None)
    assert 1 <= len(anthropic_stub.received) <= 3
    assert tiers.count("teacher") == len(anthropic_stub.received)
    assert tiers.count("declined") == 8 - len(anthropic_stub.received)
    assert {t.flag_reason for t in stored if t is not None} == {"disagreement"}


async def test_every_turn_the_agent_could_not_find_its_tool_for_reaches_the_teacher(
    services: ServiceFactory, anthropic_stub: Stub, aiohttp_client: ClientFactory
) -> None:
    """Fallback and failed turns are what the teacher budget is for: with budget left, none
    is declined as not worth a call, whatever the share."""
    anthropic_stub.responder = lambda body: Reply(body=anthropic_message("none"))
    client, service = await services.serve(
        aiohttp_client,
        teacher="anthropic",
        anthropic_api_key="test",
        anthropic_base_url=anthropic_stub.url,
    )
    assert (await client.put("/v1/tools", json=large_catalog(80))).status == 200
    turns = [
        {"request": f"sort out item {i} please", "used_tool": "shell_exec", "turn_id": f"q{i}"}
        for i in range(6)
    ] + [
        {"request": f"tidy up thing {i}", "used_tool": "tool_001", "outcome": "error",
         "turn_id": f"e{i}"}
        for i in range(2)
    ]  # fmt: skip
    assert (await client.post("/v1/observe/batch", json={"turns": turns})).status == 202
    ids = [t["turn_id"] for t in turns]

    async def all_decided() -> bool:
        stored = [await service.store.get_turn(i) for i in ids]
        return all(t is not None and t.result is not None for t in stored)

    await eventually(all_decided)
    stored = [await service.store.get_turn(i) for i in ids]
    assert [(t.flag_reason, t.tier) for t in stored if t is not None] == [
        ("fallback", "teacher")] * 6 + [("failed", "teacher")] * 2  # fmt: skip
    assert len(anthropic_stub.received) == 8
