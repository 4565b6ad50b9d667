"""Search ids over a real socket, on both stores: a ranking's id links the turn that reports it
to what was shown, and the agent's successful choice becomes a `usage` label."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from toolselect.service import Service
from toolselect.service.searches import decode
from toolselect.store.port import lookup_one

Client = TestClient[Any, Any]


async def _observe(client: Client, service: Service, turn: dict[str, Any]) -> None:
    resp = await client.post("/v1/observe", json=turn)
    assert resp.status == 202, await resp.text()
    assert (await resp.json())["queued"] is True
    assert await service.learner.drain(30.0)


async def test_a_turn_reports_where_its_used_tool_stood(client: Client, service: Service) -> None:
    """Shown at position 2, not shown, unknown id: each stored and counted (a resend once),
    none an error."""
    query = "send an email to Marco about the meeting"
    ranked = await (await client.post("/v1/rank", json={"query": query, "k": 3})).json()
    shown = [r["tool"] for r in ranked["results"]]
    search_id = ranked["search_id"]
    second = shown[1]
    absent = next(t for t in ("translate_text", "stock_quote", "fs_read") if t not in shown)
    turns = [
        {"request": query, "used_tool": second, "search_id": search_id, "turn_id": "a"},
        {"request": query, "used_tool": absent, "search_id": search_id, "turn_id": "b"},
        {"request": query, "used_tool": second, "search_id": "made-up", "turn_id": "c"},
    ]
    for turn in turns:
        await _observe(client, service, turn)
    await _observe(client, service, turns[0])  # a client's retry: counted once, below
    stored = {t: await service.store.get_turn(t) for t in "abc"}
    assert {t: (s.search_id, s.search_status, s.shown_position, s.shown_k)
            for t, s in stored.items() if s is not None} == {
        "a": (search_id, "shown", 2, 3),
        "b": (search_id, "not_shown", None, 3),
        "c": ("made-up", "unknown", None, None),
    }  # fmt: skip
    metrics = await (await client.get("/metrics")).text()
    for status, count in (("shown", 1), ("not_shown", 1), ("unknown", 1)):
        assert (
            f'toolselect_searched_turns_total{{status="{status}",tenant="default"}} {count:.1f}'
            in metrics
        )


async def test_a_resent_turn_leaves_its_session_where_it_was(
    client: Client, service: Service
) -> None:
    """Turn a, then b, in one session; a sent again (a retry) is the same turn: the session's
    last tools stay b's, for the next ranking's prior."""
    first = {"request": "weather in Turin", "used_tool": "get_weather", "session_id": "s",
             "turn_id": "a"}  # fmt: skip
    second = {"request": "mail it to Marco", "used_tool": "send_email", "session_id": "s",
              "turn_id": "b"}  # fmt: skip
    for turn in (first, second, first):
        await _observe(client, service, turn)
    assert service.sessions.previous("s") == ("send_email",)


async def test_a_search_of_another_pack_is_counted_not_refused(
    client: Client, service: Service
) -> None:
    ranked = await (
        await client.post("/v1/rank", json={"query": "weather in Oslo", "pack": "assistant"})
    ).json()
    await _observe(
        client,
        service,
        {"request": "weather in Oslo", "used_tool": "get_weather", "pack": "other",
         "search_id": ranked["search_id"], "turn_id": "p"},
    )  # fmt: skip
    turn = await service.store.get_turn("p")
    assert turn is not None and turn.search_status == "other_pack"


async def test_select_answers_a_search_id_too(client: Client) -> None:
    body = {
        "query": {"Text": "send an email", "K": 1},
        "candidates": [{"ID": "send_email"}, {"ID": "web_search"}],
    }
    answer = await (await client.post("/v1/select", json=body)).json()
    assert answer["selected"] == ["send_email"]
    carried = decode(answer["search_id"])
    assert carried is not None and (carried.count, len(carried.tags)) == (1, 1)


async def test_a_turn_that_worked_becomes_a_usage_label(client: Client, service: Service) -> None:
    """The agent used a catalog tool and it worked: the request is labelled with it (tier
    `usage`), listed with the tool's exemplars; the same query again is counted."""
    query = "what will the sky do over Bergen on Friday"
    ranked = await (await client.post("/v1/rank", json={"query": query, "k": 5})).json()
    turn = {"request": query, "used_tool": "get_weather", "outcome": "ok"}
    await _observe(client, service, turn | {"search_id": ranked["search_id"]})
    await _observe(client, service, turn)
    listed = await (await client.get("/v1/tools/get_weather/exemplars")).json()
    assert [(e["query"], e["tier"], e["count"]) for e in listed["exemplars"]] == [
        (query, "usage", 2)
    ]
    stored = await lookup_one(service.store, query)
    assert stored is not None and stored.count == 2


async def test_several_used_tools_are_kept_in_order(client: Client, service: Service) -> None:
    await _observe(
        client,
        service,
        {"request": "find flights and email them", "used_tools": ["web_search", "send_email"],
         "outcome": "ok", "turn_id": "m"},
    )  # fmt: skip
    turn = await service.store.get_turn("m")
    assert turn is not None
    assert (turn.used_tool, turn.used_tools) == ("web_search", ("web_search", "send_email"))
    label = await lookup_one(service.store, "find flights and email them")
    assert label is not None and (label.tool, label.tier) == ("web_search", "usage")


async def test_used_tool_and_used_tools_are_checked(client: Client) -> None:
    """Neither given, or a used_tool outside used_tools: 422 naming the field; the limit on
    used_tools is enforced at the boundary."""
    cases = [
        ({"request": "x"}, "used_tool"),
        ({"request": "x", "used_tool": "a", "used_tools": ["b"]}, "used_tool"),
        ({"request": "x", "used_tools": ["t"] * 65}, "used_tools"),
    ]
    for body, field in cases:
        resp = await client.post("/v1/observe", json=body)
        assert resp.status == 422, body
        error = (await resp.json())["error"]
        assert (error["code"], error["field"]) == ("invalid_request", field)
    batch = {"turns": [{"request": "x", "used_tool": "a"}, {"request": "y"}]}
    resp = await client.post("/v1/observe/batch", json=batch)
    assert resp.status == 422
    assert (await resp.json())["error"]["field"] == "turns[1].used_tool"
    ok = await client.post("/v1/observe", json={"request": "x", "used_tools": ["t"] * 64})
    assert ok.status == 202
