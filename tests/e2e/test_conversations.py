"""Conversations end to end over HTTP, on both stores: sessions observed through
`/v1/observe/batch` are fitted into the conversation signals (by the service's own upkeep),
and `/v1/rank` then answers companions and uses the session prior; with no evidence a request
with conversation fields ranks exactly as the message alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from tests.e2e.test_learning import eventually
from tests.services import ServiceFactory
from toolselect.records import Tool
from toolselect.service import Service

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]

CATALOG = {
    "tools": [
        {"name": "search_flights", "description": "Search flights between two airports on a date."},
        {"name": "book_flight", "description": "Book a seat on a chosen flight."},
        {"name": "send_email", "description": "Send an email message to a recipient."},
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "web_search", "description": "Search the web for pages matching a query."},
        {"name": "crypto_price", "description": "Current price of a cryptocurrency."},
        {"name": "shell_exec", "description": "Run a shell command on the host."},
        {"name": "read_file", "description": "Read a file from the local disk."},
        # Enough other tools that the top 5 is a choice (the fit scores the top 5).
        *(
            {"name": f"{verb}_{noun}", "description": f"{verb.capitalize()} a {noun} record."}
            for verb in ("create", "delete", "list", "update")
            for noun in ("ticket", "invoice", "contact", "folder", "calendar_event")
        ),
    ]
}
CITIES = ["Turin", "Paris", "Oslo", "Lima", "Kyoto", "Cairo", "Quito", "Perth", "Porto", "Riga"]


def session_turns(n: int) -> list[dict[str, Any]]:
    """n sessions of three turns in a rotating order: booking a flight and mailing the
    confirmation (two tools in one turn), a weather question, a price check. The booking turn's
    request never names the mail, so only the pair counts can offer `send_email` with it."""
    turns = []
    for i in range(n):
        city = CITIES[i % len(CITIES)]
        session = f"trip-{i}"
        kinds: list[dict[str, Any]] = [
            {"request": f"take the cheapest one, number {i}",
             "used_tools": ["book_flight", "send_email"]},
            {"request": f"will it rain in {city}", "used_tool": "get_weather"},
            {"request": f"price of coin {i}", "used_tool": "crypto_price"},
        ]  # fmt: skip
        shift = i % 3
        for step, kind in enumerate(kinds[shift:] + kinds[:shift]):
            turns.append(
                {**kind, "session_id": session, "outcome": "ok", "turn_id": f"{session}-{step}"}
            )
    return turns


async def rank(client: TestClient[Any, Any], **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/rank", json=body)
    assert resp.status == 200, await resp.text()
    result: dict[str, Any] = await resp.json()
    return result


async def test_sessions_fit_the_signals_and_rank_with_them(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    client, service = await services.serve(
        aiohttp_client, oracle="off", session_refit_s=0.5, poll_interval_s=0.2
    )
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    resp = await client.post("/v1/observe/batch", json={"turns": session_turns(80)})
    assert (await resp.json()) == {"queued": 240, "dropped": 0}
    assert await service.learner.drain(30.0)

    # The service's upkeep refits on its own once the session turns are stored.
    async def fitted() -> bool:
        return service.sessions.fit.weights.companion_share is not None

    await eventually(fitted, within=30.0)
    fit = service.sessions.fit
    assert fit.sessions == 80 and fit.follow_ups == 160
    learning = await (await client.get("/v1/analytics/learning")).json()
    conversation = learning["conversation"]
    assert conversation["sessions"] == 80
    assert conversation["companions"]["least_share"] == fit.weights.companion_share
    assert conversation["relations"]["pairs"] >= 1

    # Companions: asked for, answered apart with the ranked tool they go with.
    query = "take the cheapest one, number 999"
    answer = await rank(client, query=query, k=1, companions=True)
    assert [r["tool"] for r in answer["results"]] == ["book_flight"]
    assert {"tool": "send_email", "with": "book_flight"}.items() <= answer["companions"][0].items()
    assert 0 < answer["companions"][0]["score"] <= 1
    # Not asked for: no companions in the answer.
    assert "companions" not in await rank(client, query=query, k=1)

    # The companion was shown: a turn that used it is placed as shown.
    observed = {"request": query, "used_tool": "send_email", "search_id": answer["search_id"],
                "turn_id": "placed", "outcome": "ok"}  # fmt: skip
    assert (await client.post("/v1/observe", json=observed)).status == 202
    turn = await service.learning.turn_when_done("placed", 10.0)
    assert turn is not None and turn.search_status == "shown" and turn.shown_position == 2

    # A session's previous tools come from its last observed turn (session_id alone).
    prior = {"session_id": "new-trip", "used_tool": "search_flights", "request": "flights to Rome"}
    assert (await client.post("/v1/observe", json=prior)).status == 202
    assert service.sessions.previous("new-trip") == ("search_flights",)

    metrics = await (await client.get("/metrics")).text()
    assert 'toolselect_session_weight{signal="companion_share",tenant="default"}' in metrics
    assert "toolselect_companions_offered_total" in metrics


async def test_without_evidence_conversation_fields_change_nothing(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """A fresh store has no sessions: every weight is zero, so a request with context, previous
    tools and a session ranks bit for bit as the message alone, and no companion is offered."""
    client, service = await services.serve(aiohttp_client, oracle="off")
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    await service.sessions.refresh()
    assert service.sessions.fit.reason == "no sessions"
    for query in ("flights to Oslo", "take the cheapest one", "will it rain in Lima"):
        alone = await rank(client, query=query, k=4)
        asked = await rank(
            client,
            query=query,
            k=4,
            session_id="s",
            previous_tools=["search_flights"],
            context=["I am planning a trip", "flights to Oslo on friday"],
            companions=2,
        )
        assert asked["results"] == alone["results"] and asked["margin"] == alone["margin"]
        assert asked["companions"] == []


async def test_conversation_fields_are_checked_at_the_boundary(
    services: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    client, _ = await services.serve(aiohttp_client, oracle="off")
    assert (await client.put("/v1/tools", json=CATALOG)).status == 200
    cases: list[tuple[dict[str, Any], str]] = [
        ({"companions": 11}, "companions"),
        ({"companions": -1}, "companions"),
        ({"context": ["hi"] * 51}, "context"),
        ({"context": ["ok", "x" * 9000]}, "context[1]"),
        ({"previous_tools": ["t"] * 65}, "previous_tools"),
        ({"session_id": "s" * 257}, "session_id"),
        ({"companions": "yes"}, "companions"),
    ]
    for extra, field in cases:
        resp = await client.post("/v1/rank", json={"query": "flights", **extra})
        body = await resp.json()
        assert resp.status == 422, (extra, body)
        assert body["error"]["code"] == "invalid_request"
        assert body["error"]["field"] == field, (extra, body)
    # At the limits: accepted.
    ok: dict[str, Any] = {"companions": 10, "context": ["hi"] * 50, "previous_tools": ["t"] * 64}
    assert (await client.post("/v1/rank", json={"query": "flights", **ok})).status == 200


async def test_a_session_observed_by_another_process_gives_its_last_tools(
    services: ServiceFactory,
) -> None:
    """With other processes on the store (`serve --workers`, replicas), a ranking given only a
    `session_id` gets the session's last tools though its turns were observed elsewhere: the
    later of the turn noted here and the one the store recorded, read off the ranking path."""
    here = await services.start(workers=2)
    there = await services.start(workers=2)
    await here.catalog.upsert_tools([Tool(t["name"], t["description"]) for t in CATALOG["tools"]])
    await there.index.refresh()
    first = {"request": "flights to Rome", "used_tool": "search_flights", "turn_id": "r1"}
    assert here.learning.observe(session_id="trip", **first)
    assert await here.learning.turn_when_done("r1", 10.0) is not None

    async def previous_is(service: Service, tools: tuple[str, ...]) -> bool:
        return service.sessions.previous("trip") == tools

    # A ranking never waits on the store: the first answers from memory, and the store's
    # recorded turn is read in the background for the next.
    assert there.sessions.previous("trip") == ()
    await eventually(lambda: previous_is(there, ("search_flights",)), within=5.0)

    later = {"request": "book it", "used_tool": "book_flight", "turn_id": "r2"}
    assert there.learning.observe(session_id="trip", **later)
    assert await there.learning.turn_when_done("r2", 10.0) is not None
    # `here` noted r1 itself; the store's r2 is later.
    assert here.sessions.previous("trip") == ("search_flights",)  # noted here, at once
    await eventually(lambda: previous_is(here, ("book_flight",)), within=5.0)
    assert here.sessions.previous("no-such-session") == ()
