"""The clients' conversation keywords against a real server: `rank` and `select` send
`session_id`, `previous_tools`, `context` and `companions` and answer the companions; the
server's refusals come back as `ApiError` naming the field; with no fitted signal the answer is
the message alone's; `recent_context` keeps any conversation within the server's limits."""

from __future__ import annotations

import pytest

from tests.api.conversation import WEATHER, WEATHER_COMPANION, pin
from tests.client.conftest import Served
from tests.live import LiveServer, wait_for_turn
from toolselect.api import models as m
from toolselect.client import ApiError, AsyncClient, Client, recent_context
from toolselect.learn.session_fit import SessionWeights

COMPANION = m.CompanionTool.model_validate(WEATHER_COMPANION)
VAGUE = "set it up for tomorrow at ten"
CANDIDATES = [
    m.PromptKitCandidate(ID="get_weather", Description="Weather"),
    m.PromptKitCandidate(ID="web_search", Description="Search the web"),
    m.PromptKitCandidate(ID="create_calendar_event", Description="Calendar"),
    m.PromptKitCandidate(ID="send_email", Description="Send an email"),
]


async def test_async_rank_and_select_answer_companions(served: Served) -> None:
    """Asked for, the companion comes back in `companions` with `tool`, `score` and `with_`,
    from `rank` and (among the candidates) from `select`; not asked, `companions` is None."""
    await pin(served.service)
    async with AsyncClient(served.url) as ts:
        ranking = await ts.rank(WEATHER, k=1, companions=True)
        plain = await ts.rank(WEATHER, k=1)
        chosen = await ts.select(m.PromptKitQuery(Text=WEATHER, K=1), CANDIDATES, companions=3)
    assert [r.tool for r in ranking.results] == ["get_weather"]
    assert ranking.companions == [COMPANION]
    assert ranking.companions[0].with_ == "get_weather"
    assert plain.companions is None
    assert (chosen.selected, chosen.companions) == (["get_weather"], [COMPANION])


def test_sync_client_sends_the_session_and_context(server: LiveServer) -> None:
    """The blocking client's `rank` and `select` carry `previous_tools`, `session_id` and
    `context` to the server: with a pinned prior and context weight they rank what followed
    the session's tools, and what the last earlier message asks for."""
    server.run(pin(server.service, SessionWeights(prior=1.0)))
    with Client(server.url) as ts:  # leaving the block sends the turn
        ts.observe(VAGUE, "send_email", session_id="sync-1")  # the session's previous tool
    with Client(server.url) as ts:
        alone = ts.rank(VAGUE, k=2)
        given = ts.rank(VAGUE, k=2, previous_tools=["send_email"])
        by_session = ts.rank(VAGUE, k=2, session_id="sync-1")
        query = m.PromptKitQuery(Text=VAGUE, K=1)
        chosen = ts.select(query, CANDIDATES, previous_tools=("send_email",))
        server.run(pin(server.service, SessionWeights(context=1.0)))
        steered = ts.rank(VAGUE, k=1, context=["hi", "book a meeting in my calendar"])
    assert alone.results[0].tool != "create_calendar_event"
    assert given.results[0].tool == by_session.results[0].tool == "create_calendar_event"
    assert chosen.selected == ["create_calendar_event"]
    assert steered.results[0].tool == "create_calendar_event"


@pytest.mark.parametrize(
    ("keywords", "field"),
    [
        ({"companions": 11}, "companions"),
        ({"context": ["hello"] * 51}, "context"),
        ({"context": ["fine", "x" * (8 << 10) + "y"]}, "context[1]"),
        ({"previous_tools": ["t"] * 65}, "previous_tools"),
        ({"session_id": " "}, "session_id"),
    ],
)
async def test_refused_conversation_fields_name_the_field(
    server: LiveServer, keywords: dict[str, object], field: str
) -> None:
    """The server's 422 for a bad conversation field surfaces as `ApiError` naming it."""
    async with AsyncClient(server.url, retries=0) as ts:
        with pytest.raises(ApiError) as caught:
            await ts.rank(WEATHER, **keywords)  # type: ignore[arg-type]
        with pytest.raises(ApiError) as selected:
            await ts.select(m.PromptKitQuery(Text=WEATHER), CANDIDATES, **keywords)  # type: ignore[arg-type]
    for error in (caught.value, selected.value):
        assert (error.status, error.code, error.field) == (422, "invalid_request", field)


async def test_a_turn_with_a_blank_session_is_refused_alone(server: LiveServer) -> None:
    """`observe` with a blank `session_id` (`" "`) refuses that turn when it is observed, as
    the server would (counted `invalid`, never raised); the turn beside it is stored, and `""`
    is a turn without a session."""
    ts = AsyncClient(server.url, retries=0, observe_batch=100, observe_interval_s=3600)
    async with ts:
        ts.observe(VAGUE, "send_email", turn_id="blank", session_id=" ")
        assert ts.observe_stats.invalid == 1
        ts.observe(VAGUE, "send_email", turn_id="none", session_id="")
    assert (ts.observe_stats.sent, ts.observe_stats.invalid) == (1, 1)
    assert wait_for_turn(server, "none").session_id is None
    assert server.run(server.service.store.get_turn("blank")) is None


async def test_without_fitted_weights_rank_is_the_message_alone(served: Served) -> None:
    """On a store without sessions, `rank` with a session, previous tools, context and
    companions answers the same tools with the same scores and margin as the message alone,
    and no companion; `select` selects the same."""
    await served.service.sessions.refresh()
    conversation = {"session_id": "fresh-1", "previous_tools": ["send_email"],
                    "context": ["book a meeting in my calendar"], "companions": 2}  # fmt: skip
    async with AsyncClient(served.url) as ts:
        for text in (VAGUE, WEATHER):
            alone = await ts.rank(text, k=4)
            asked = await ts.rank(text, k=4, **conversation)  # type: ignore[arg-type]
            assert (asked.results, asked.margin) == (alone.results, alone.margin)
            assert asked.companions == []
            query = m.PromptKitQuery(Text=text, K=2)
            one = await ts.select(query, CANDIDATES)
            other = await ts.select(query, CANDIDATES, **conversation)  # type: ignore[arg-type]
            assert (other.selected, other.reason) == (one.selected, one.reason)


def test_recent_context_keeps_a_conversation_within_the_limits() -> None:
    """The most recent non-blank messages, oldest first, at most `most`, each cut to 8 KiB of
    UTF-8 on a character boundary."""
    messages = ["first", "  ", *(f"m{i}" for i in range(12)), "é" * 5000]
    kept = recent_context(messages)
    assert len(kept) == 10
    assert kept[:-1] == [f"m{i}" for i in range(3, 12)]
    assert kept[-1] == "é" * 4096 and len(kept[-1].encode()) == 8 << 10
    assert recent_context(["a", "b", "c"], most=2) == ["b", "c"]
    assert recent_context(None) == [] == recent_context(["a"], most=0)
