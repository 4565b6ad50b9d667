"""`POST /v1/select` with `/v1/rank`'s conversation fields, over a real socket on both stores:
companions among the candidates answered apart and remembered as shown, the session prior and
the context ranking the candidates, the same validation as the rank route, and nothing changed
while no signal is fitted."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.api.conftest import HAND_CATALOG
from tests.api.conversation import WEATHER, WEATHER_COMPANION, pin
from tests.services import ClientFactory, ServiceFactory
from toolselect.learn.session_fit import SessionWeights
from toolselect.ranker.relations import Relations
from toolselect.service import Service

Client = TestClient[Any, Any]

CANDIDATES = [
    {"ID": "get_weather", "Name": "get_weather", "Description": "Weather"},
    {"ID": "send_email", "Name": "send_email", "Description": "Send an email"},
    {"ID": "web_search", "Name": "web_search", "Description": "Search the web"},
    {"ID": "create_calendar_event", "Description": "Calendar"},
    {"ID": "translate_text", "Description": "Translate"},
    {"ID": "fax_document", "Description": "Send a document by fax to a phone number."},
]
VAGUE = "set it up for tomorrow at ten"  # no tool stands out for it alone


def payload(
    text: str, k: int, candidates: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {"query": {"Text": text, "Kind": "tool", "K": k}, "candidates": candidates or CANDIDATES, **extra}  # fmt: skip


async def select(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post("/v1/select", json=body)
    assert resp.status == 200, await resp.text()
    answer: dict[str, Any] = await resp.json()
    return answer


async def test_select_answers_companions_among_the_candidates(
    client: Client, service: Service
) -> None:
    """Asked for, a candidate often used with the selected one comes apart in `companions`
    (`tool`, `score`, `with`) and counts as shown for the search id; one that is not a candidate
    is never offered, and without asking there is no `companions` key."""
    await pin(service)
    answer = await select(client, payload(WEATHER, 1, companions=True))
    assert answer["selected"] == ["get_weather"]
    assert answer["companions"] == [WEATHER_COMPANION]
    assert "companions" not in await select(client, payload(WEATHER, 1))
    others = [c for c in CANDIDATES if c["ID"] != "web_search"]
    assert (await select(client, payload(WEATHER, 1, others, companions=2)))["companions"] == []

    observed = {"request": WEATHER, "used_tool": "web_search", "turn_id": "after-select",
                "search_id": answer["search_id"], "outcome": "ok"}  # fmt: skip
    assert (await client.post("/v1/observe", json=observed)).status == 202
    turn = await service.learning.turn_when_done("after-select", 15.0)
    assert turn is not None
    assert (turn.search_status, turn.shown_position) == ("shown", 2)


async def test_the_session_prior_ranks_the_candidates(client: Client, service: Service) -> None:
    """With a pinned prior, the candidate that followed the session's previous tools comes
    first, given as `previous_tools` or through the `session_id` of an observed turn; a
    candidate outside the catalog gets the prior on its description's score too."""
    alone = await select(client, payload(VAGUE, 2))
    assert alone["selected"][0] != "create_calendar_event"
    await pin(service, SessionWeights(prior=1.0))
    given = await select(client, payload(VAGUE, 2, previous_tools=["send_email"]))
    assert given["selected"][0] == "create_calendar_event"

    earlier = {"request": "mail Marco the agenda", "used_tool": "send_email", "session_id": "s-1"}
    assert (await client.post("/v1/observe", json=earlier)).status == 202
    by_session = await select(client, payload(VAGUE, 2, session_id="s-1"))
    assert by_session["selected"] == given["selected"]

    # "" is no session (the zero value of a Go or JS client): a stranger's turn sent with it
    # gives nobody else's request a prior, and no two such turns are chained.
    stray = {"request": "mail Bob the plan", "used_tool": "send_email", "session_id": "",
             "turn_id": "stray"}  # fmt: skip
    assert (await client.post("/v1/observe", json=stray)).status == 202
    assert await service.learning.turn_when_done("stray", 15.0) is not None
    assert (await service.store.get_turn("stray")).session_id is None  # type: ignore[union-attr]
    no_session = await select(client, payload(VAGUE, 2, session_id=""))
    assert no_session["selected"] == alone["selected"]

    await pin(
        service, SessionWeights(prior=1.0), Relations({}, {("send_email", "fax_document"): 3})
    )
    unknown = await select(client, payload(VAGUE, 2, previous_tools=["send_email"]))
    assert unknown["selected"][0] == "fax_document"


async def test_the_context_ranks_the_candidates(client: Client, service: Service) -> None:
    """With a pinned context weight, the last earlier message steers an uncertain request."""
    context = ["what's the plan", "book a meeting in my calendar"]
    await pin(service, SessionWeights(context=1.0))
    answer = await select(client, payload(VAGUE, 2, context=context))
    assert answer["selected"][0] == "create_calendar_event"


TOO_LONG = "x" * (8 << 10) + "y"
BAD_FIELDS = [
    ({"companions": 11}, "companions", "expected companions in 0..10, got 11"),
    ({"companions": -1}, "companions", "expected companions in 0..10, got -1"),
    ({"companions": "two"}, "companions", None),
    ({"context": ["hello"] * 51}, "context", "expected at most 50 context messages, got 51"),
    ({"context": ["fine", TOO_LONG]}, "context[1]", "expected context[1] of at most 8192 bytes"),
    ({"context": ["  "]}, "context[0]", "expected a non-empty context[0]"),
    (
        {"previous_tools": ["t"] * 65},
        "previous_tools",
        "expected at most 64 previous_tools, got 65",
    ),
    ({"session_id": "s" * 257}, "session_id", None),
]


@pytest.mark.parametrize(("fields", "field", "message"), BAD_FIELDS)
@pytest.mark.parametrize("route", ["/v1/select", "/v1/rank"])
async def test_conversation_fields_are_validated_like_the_rank_route(
    client: Client, route: str, fields: dict[str, Any], field: str, message: str | None
) -> None:
    """`/v1/select` refuses a bad conversation field as `/v1/rank` does: 422 naming it."""
    body = payload(WEATHER, 2, **fields) if route == "/v1/select" else {"query": WEATHER, **fields}
    resp = await client.post(route, json=body)
    assert resp.status == 422, await resp.text()
    error = (await resp.json())["error"]
    assert (error["code"], error["field"]) == ("invalid_request", field)
    if message is not None:
        assert error["message"].startswith(message)


async def test_without_fitted_weights_the_fields_change_nothing(
    client: Client, service: Service
) -> None:
    """On a store without sessions every weight is zero: a selection with a session, previous
    tools and context selects exactly as the message alone, with the same margin, and offers no
    companion."""
    await service.sessions.refresh()
    assert service.sessions.fit.reason == "no sessions"
    conversation: dict[str, Any] = {"session_id": "s-2", "previous_tools": ["send_email"],
                    "context": ["book a meeting in my calendar"], "companions": True}  # fmt: skip
    for text in (VAGUE, WEATHER, "send the quarterly figures to Marco"):
        for k in (1, 3):
            alone = await select(client, payload(text, k))
            asked = await select(client, payload(text, k, **conversation))
            assert asked["companions"] == []
            assert (asked["selected"], asked["reason"]) == (alone["selected"], alone["reason"])
            assert asked["search_id"] != alone["search_id"]
    ranked = await (await client.post("/v1/rank", json={"query": VAGUE, "k": 3})).json()
    asked = await (
        await client.post("/v1/rank", json={"query": VAGUE, "k": 3, **conversation})
    ).json()
    assert (asked["results"], asked["margin"]) == (ranked["results"], ranked["margin"])


async def test_a_turn_the_full_queue_dropped_gives_its_session_nothing(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A turn answered `dropped` is no part of its conversation: it moves no later ranking of
    its session (the queue holds one turn; a batch of fifty fills it at the first)."""
    client, service = await services.serve(aiohttp_client, queue_size=1)
    await service.catalog.upsert_tools(HAND_CATALOG, pack="assistant")
    await pin(service, SessionWeights(prior=1.0))
    alone = await select(client, payload(VAGUE, 2, session_id="dropped"))
    fillers = [{"request": f"filler {i}", "used_tool": "web_search"} for i in range(49)]
    last = {"request": "mail Marco the agenda", "used_tool": "send_email", "session_id": "dropped"}
    resp = await client.post("/v1/observe/batch", json={"turns": [*fillers, last]})
    assert (await resp.json()) == {"queued": 1, "dropped": 49}
    after = await select(client, payload(VAGUE, 2, session_id="dropped"))
    assert after["selected"] == alone["selected"]
