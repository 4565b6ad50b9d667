"""The analytics contract: one fixed data set, every analysis, the same exact rows from both stores.

The expected tables below are computed by hand from the data set; SQLite and Neo4j must both
equal them, so they equal each other.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import neo4j
import pytest

from tests.neo4j_server import Neo4jServer
from tests.store.conftest import StoreFactory
from toolselect.analytics import registry, surfaces
from toolselect.errors import InvalidInput, NotFound
from toolselect.records import AnalyticsResult, Exemplar, OracleCall, Retention, Tool, Turn
from toolselect.store.neo4j import cypher
from toolselect.store.port import Store, save_one

DAY1, DAY2, DAY3, DAY4 = (datetime(2025, 3, d, tzinfo=UTC) for d in (1, 2, 3, 4))
# The data set is from 2025: keep exemplars from expiring on save; its sessions span days, and
# stay whole (no idle limit).
KEEP_ALL = Retention(max_age_days=100_000, session_idle_s=0)

TOOLS = (
    "calendar__add_event",
    "fs_read",
    "github__create_issue",
    "maps__route",
    "notes__archive",
    "pdf__extract",
    "search_web",
    "send_email",
    "zz_unused",
)


def at(day: datetime, hour: int, minute: int = 0) -> datetime:
    return day + timedelta(hours=hour, minutes=minute)


def flagged_turn(
    turn_id: str,
    when: datetime,
    request: str,
    used: str,
    top1: str | None,
    reason: str,
    tier: str | None,
    label: str | None,
    result: str | None,
) -> Turn:
    return Turn(
        id=turn_id,
        request=request,
        used_tool=used,
        at=when,
        top1=top1,
        margin=0.1,
        flagged=True,
        flag_reason=reason,
        tier=tier,
        label=label,
        result=result,
    )


def plain_turn(turn_id: str, when: datetime, request: str, used: str, top1: str | None) -> Turn:
    return Turn(id=turn_id, request=request, used_tool=used, at=when, top1=top1, margin=0.4)


def searched(turn: Turn, status: str, pack: str | None, position: int | None = None) -> Turn:
    """`turn` as observed with a search id: where its used tool stood among the 5 shown."""
    known = status in ("shown", "not_shown")
    return replace(
        turn,
        pack=pack,
        search_id=f"s-{turn.id}",
        search_status=status,
        shown_position=position,
        shown_k=5 if known else None,
    )


# 2025-03-02T01:00+03:00 is 2025-03-01T22:00Z: a UTC day-1 turn, day 2 in local time.
EAST = timezone(timedelta(hours=3))
_TURNS = (
    flagged_turn("t01", at(DAY1, 9), "Find the weather in Paris", "fs_read", "search_web",
                 "fallback", "ranker", "search_web", "labeled"),
    flagged_turn("t02", at(DAY1, 10), "email bob the report", "fs_read", "send_email",
                 "fallback", "teacher", "send_email", "labeled"),
    plain_turn("t03", at(DAY1, 11), "search for cats", "search_web", "search_web"),
    flagged_turn("t04", datetime(2025, 3, 2, 1, tzinfo=EAST), "  find THE weather   in paris",
                 "send_email", "search_web", "disagrees_with_ranker", "teacher", "send_email",
                 "labeled"),
    flagged_turn("t05", at(DAY2, 9), "Find the weather in Paris", "fs_read", "search_web",
                 "fallback", "ratchet", "search_web", "labeled"),
    flagged_turn("t06", at(DAY2, 10), "Ｆｉｌｅ an issue", "fs_read", "github__create_issue",
                 "fallback", "teacher", "github__create_issue", "labeled"),
    flagged_turn("t07", at(DAY2, 11), "file an issue", "github__create_issue",
                 "calendar__add_event", "disagrees_with_ranker", "teacher",
                 "calendar__add_event", "labeled"),
    flagged_turn("t08", at(DAY2, 12), "book a meeting", "fs_read", "calendar__add_event",
                 "fallback", "teacher", None, "limit_reached"),
    plain_turn("t09", at(DAY2, 13), "send it", "send_email", "send_email"),
    flagged_turn("t10", at(DAY3, 9), "what's up", "fs_read", "search_web", "fallback",
                 "teacher", None, "error"),
    plain_turn("t11", at(DAY3, 10), "send the memo", "send_email", "send_email"),
    plain_turn("t12", at(DAY3, 11), "hello", "text_response", None),
    flagged_turn("t13", at(DAY3, 12), "ignored", "fs_read", "search_web", "fallback",
                 None, None, "declined"),
    flagged_turn("t14", at(DAY3, 13), "look up stock price", "search_web", "send_email",
                 "disagrees_with_ranker", "ranker", "send_email", "labeled"),
    flagged_turn("t15", at(DAY3, 14), "redo search", "search_web", "search_web",
                 "agent_corrected", None, None, "declined"),
    plain_turn("t16", at(DAY4, 9), "plain", "search_web", "search_web"),
)  # fmt: skip
# Where each turn's used tool stood in the search it reported (t08 and t12 reported none):
# (status, pack, 1-based position among the shown tools).
SEARCHES: dict[str, tuple[str, str | None, int | None]] = {
    "t01": ("not_shown", "web", None),  # a fallback tool, not shown
    "t02": ("unknown", "web", None),
    "t03": ("shown", "web", 1),
    "t04": ("not_shown", None, None),  # another tool, not shown; UTC day 1
    "t05": ("shown", "web", 3),  # a fallback tool, but shown: counts as shown
    "t06": ("not_shown", "web", None),
    "t07": ("not_shown", "dev", None),
    "t09": ("shown", None, 2),
    "t10": ("other_pack", "web", None),
    "t11": ("shown", None, 1),
    "t13": ("unknown", "web", None),
    "t14": ("not_shown", "web", None),
    "t15": ("shown", "web", 4),
    "t16": ("shown", "web", 1),
}
# The sessions and the several tools some turns used (for tool_pairs and tool_transitions):
# (session, used tools). text_response is no catalog tool: it counts nowhere.
SESSIONS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "t01": ("s1", ("fs_read", "search_web")),
    "t03": ("s1", ()),
    "t05": ("s1", ("fs_read", "search_web", "send_email")),
    "t09": ("s2", ()),
    "t11": ("s2", ("send_email", "text_response")),
    "t16": (None, ("search_web", "maps__route")),
}
TURNS = tuple(
    replace(t, session_id=SESSIONS[t.id][0], used_tools=SESSIONS[t.id][1])
    if t.id in SESSIONS
    else t
    for t in (searched(t, *SEARCHES[t.id]) if t.id in SEARCHES else t for t in _TURNS)
)


def oracle_call(
    call_id: str,
    turn_id: str | None,
    when: datetime,
    ms: float,
    tokens: tuple[int, int],
    usd: float,
) -> OracleCall:
    return OracleCall(
        id=call_id,
        provider="anthropic",
        model="claude-haiku",
        result="labeled" if usd else "error",
        latency_ms=ms,
        at=when,
        turn_id=turn_id,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cost_usd=usd,
    )


CALLS = (
    oracle_call("c1", "t02", at(DAY1, 10, 1), 800.0, (400, 5), 0.0001),
    oracle_call("c2", "t04", at(DAY1, 22, 1), 1200.0, (420, 6), 0.00012),
    oracle_call("c3", "t06", at(DAY2, 10, 1), 600.0, (380, 4), 0.000098),
    oracle_call("c4", "t07", at(DAY2, 11, 1), 2000.0, (500, 7), 0.00015),
    oracle_call("c5", "t07", at(DAY2, 11, 2), 950.0, (500, 7), 0.00015),  # a retry
    oracle_call("c6", "t10", at(DAY3, 9, 1), 20000.0, (0, 0), 0.0),
    oracle_call("c7", "t10", at(DAY3, 9, 2), 150.5, (0, 0), 0.0),
    oracle_call("c8", None, at(DAY3, 9, 3), 300.0, (100, 1), 0.5),  # no turn: not counted
    oracle_call("c9", "t03", at(DAY1, 11, 1), 300.0, (100, 1), 0.5),  # unflagged turn
)


def exemplar(exemplar_id: str, query: str, tool: str, tier: Any, when: datetime) -> Exemplar:
    return Exemplar(
        id=exemplar_id,
        query=query,
        tool=tool,
        tier=tier,
        embedder="hashing-v1",
        embedding=(0.5, -0.25),
        created_at=when,
    )


EXEMPLARS = (
    exemplar("e01", "Find the weather in Paris", "search_web", "ranker", at(DAY1, 9, 1)),
    exemplar("e02", "email bob the report", "send_email", "teacher", at(DAY1, 10, 2)),
    exemplar("e03", "file an issue", "calendar__add_event", "teacher", at(DAY2, 11, 3)),
    exemplar("e04", "look up stock price", "send_email", "ranker", at(DAY3, 13, 1)),
    exemplar("e05", "send a note", "send_email", "feedback", at(DAY3, 15)),
    exemplar("e06", "quick search", "search_web", "ranker", at(DAY3, 16)),
    exemplar("e07", "search the docs", "search_web", "ranker", at(DAY3, 17)),
    # 23:30 at UTC-2 is 01:30Z the next day.
    exemplar("e08", "late note", "send_email", "ranker",
             datetime(2025, 3, 3, 23, 30, tzinfo=timezone(timedelta(hours=-2)))),
    exemplar("e09", "route me home", "maps__route", "ranker", at(DAY1, 8)),
    exemplar("e10", "undone label", "search_web", "ranker", at(DAY2, 8)),  # deleted below
    exemplar("e11", "send it", "send_email", "usage", at(DAY2, 13, 1)),  # the agent's choice
)  # fmt: skip

EXPECTED: dict[str, list[tuple[Any, ...]]] = {
    "misroute_rate": [
        ("fs_read", 7, 7, 1.0, "fallback"),
        ("search_web", 4, 2, 0.5, "agent_corrected"),  # a 1-1 tie of reasons: by name
        ("github__create_issue", 1, 1, 1.0, "disagrees_with_ranker"),
        ("send_email", 3, 1, 0.3333, "disagrees_with_ranker"),
        ("text_response", 1, 0, 0.0, None),
    ],
    "confusions": [
        ("fs_read", "search_web", 2),
        ("fs_read", "github__create_issue", 1),
        ("fs_read", "send_email", 1),
        ("github__create_issue", "calendar__add_event", 1),
        ("search_web", "send_email", 1),
    ],
    "oracle_usage": [
        ("ranker", "labeled", 2, 0, 0, 0, 0.0, None, None),
        ("ratchet", "labeled", 1, 0, 0, 0, 0.0, None, None),
        ("teacher", "error", 1, 2, 0, 0, 0.0, 150.5, 20000.0),
        ("teacher", "labeled", 4, 5, 2200, 29, 0.000618, 950.0, 2000.0),
        ("teacher", "limit_reached", 1, 0, 0, 0, 0.0, None, None),
        (None, "declined", 2, 0, 0, 0, 0.0, None, None),
    ],
    "exemplar_growth": [
        ("maps__route", "2025-03-01", "ranker", 1),
        ("search_web", "2025-03-01", "ranker", 1),
        ("send_email", "2025-03-01", "teacher", 1),
        ("calendar__add_event", "2025-03-02", "teacher", 1),
        ("send_email", "2025-03-02", "usage", 1),
        ("search_web", "2025-03-03", "ranker", 2),
        ("send_email", "2025-03-03", "feedback", 1),
        ("send_email", "2025-03-03", "ranker", 1),
        ("send_email", "2025-03-04", "ranker", 1),
    ],
    "cold_tools": [("notes__archive",), ("pdf__extract",), ("zz_unused",)],
    "label_conflicts": [
        ("find the weather in paris", ("search_web", "send_email"), ("ranker", "ratchet", "teacher"), 3),
        ("file an issue", ("calendar__add_event", "github__create_issue"), ("teacher",), 2),
    ],
    "drift": [
        ("2025-03-01", 4, 0.75, 0.6667),
        ("2025-03-02", 5, 0.8, 0.75),
        ("2025-03-03", 6, 0.6667, 0.25),
        ("2025-03-04", 1, 0.0, 0.0),
    ],
    # day, pack, used_tool, turns, shown, recall, fallbacks, ignored, unknown_ids, other_pack
    "online_recall": [
        ("2025-03-01", "web", "fs_read", 1, 0, 0.0, 1, 0, 1, 0),
        ("2025-03-01", "web", "search_web", 1, 1, 1.0, 0, 0, 0, 0),
        ("2025-03-01", None, "send_email", 1, 0, 0.0, 0, 1, 0, 0),  # t04, 22:00Z
        ("2025-03-02", "dev", "github__create_issue", 1, 0, 0.0, 0, 1, 0, 0),
        ("2025-03-02", "web", "fs_read", 2, 1, 0.5, 1, 0, 0, 0),
        ("2025-03-02", None, "send_email", 1, 1, 1.0, 0, 0, 0, 0),
        ("2025-03-03", "web", "fs_read", 0, 0, None, 0, 0, 1, 1),  # no known search: no recall
        ("2025-03-03", "web", "search_web", 2, 1, 0.5, 0, 1, 0, 0),
        ("2025-03-03", None, "send_email", 1, 1, 1.0, 0, 0, 0, 0),
        ("2025-03-04", "web", "search_web", 1, 1, 1.0, 0, 0, 0, 0),
    ],
    # t01, t05 (three pairs) and t16 (no session: its pair counts all the same).
    "tool_pairs": [
        ("fs_read", "search_web", 2),
        ("fs_read", "send_email", 1),
        ("maps__route", "search_web", 1),
        ("search_web", "send_email", 1),
    ],
    # s1: t01 -> t03 -> t05; s2: t09 -> t11 (text_response counts nowhere).
    "tool_transitions": [
        ("fs_read", "search_web", 1, 1.0),
        ("search_web", "search_web", 2, 0.5),
        ("search_web", "fs_read", 1, 0.25),
        ("search_web", "send_email", 1, 0.25),
        ("send_email", "send_email", 1, 1.0),
    ],
}  # fmt: skip

# The same data seen from 2025-03-02T00:00Z on (t04 is 22:00Z on day 1: out).
EXPECTED_SINCE_DAY2: dict[str, list[tuple[Any, ...]]] = {
    "misroute_rate": [
        ("fs_read", 5, 5, 1.0, "fallback"),
        ("search_web", 3, 2, 0.6667, "agent_corrected"),
        ("github__create_issue", 1, 1, 1.0, "disagrees_with_ranker"),
        ("send_email", 2, 0, 0.0, None),
        ("text_response", 1, 0, 0.0, None),
    ],
    "oracle_usage": [
        ("ranker", "labeled", 1, 0, 0, 0, 0.0, None, None),
        ("ratchet", "labeled", 1, 0, 0, 0, 0.0, None, None),
        ("teacher", "error", 1, 2, 0, 0, 0.0, 150.5, 20000.0),
        ("teacher", "labeled", 2, 3, 1380, 18, 0.000398, 950.0, 2000.0),
        ("teacher", "limit_reached", 1, 0, 0, 0, 0.0, None, None),
        (None, "declined", 2, 0, 0, 0, 0.0, None, None),
    ],
    "exemplar_growth": EXPECTED["exemplar_growth"][3:],
    # maps__route's day-1 exemplar is out of the window, but t16 used it beside search_web.
    "cold_tools": [("notes__archive",), ("pdf__extract",), ("zz_unused",)],
    "label_conflicts": [
        ("file an issue", ("calendar__add_event", "github__create_issue"), ("teacher",), 2),
    ],
    "drift": EXPECTED["drift"][1:],
    "online_recall": EXPECTED["online_recall"][3:],
}  # fmt: skip


async def seeded(store_factory: StoreFactory) -> Store:
    """A store holding the fixed data set (one exemplar saved and then deleted)."""
    store = await store_factory.make(retention=KEEP_ALL)
    await store.upsert_tools([Tool(name, f"does {name}") for name in TOOLS])
    await store.record_turns(TURNS)
    for call in CALLS:
        await store.record_oracle_call(call)
    for ex in EXEMPLARS:
        assert await save_one(store, ex)
    assert await store.delete_exemplar("e10")
    return store


def rows(result: AnalyticsResult) -> list[tuple[Any, ...]]:
    return list(result.rows)


async def test_every_analysis_gives_the_expected_rows(store_factory: StoreFactory) -> None:
    """Each analysis over the fixed data set equals its hand-computed table on both stores."""
    store = await seeded(store_factory)
    assert set(EXPECTED) == set(registry.NAMES)
    for name in registry.NAMES:
        result = await store.analytics(name)
        assert result.name == name
        assert result.columns == registry.ANALYSES[name].columns
        assert rows(result) == EXPECTED[name], name


async def test_value_types_are_identical_across_stores(store_factory: StoreFactory) -> None:
    """Ints stay ints and ratios and costs are floats (1.0, 0.0), not ints, on both stores."""
    store = await seeded(store_factory)
    for name in registry.NAMES:
        for row, want in zip((await store.analytics(name)).rows, EXPECTED[name], strict=True):
            assert [type(v) for v in row] == [type(v) for v in want], (name, row)


async def test_since_limits_turns_exemplars_and_calls(store_factory: StoreFactory) -> None:
    """With `since`, only turns, exemplars and oracle calls at or after it count."""
    store = await seeded(store_factory)
    for name, want in EXPECTED_SINCE_DAY2.items():
        assert rows(await store.analytics(name, since=DAY2)) == want, name


async def test_since_in_another_zone_and_naive_mean_the_same_instant(
    store_factory: StoreFactory,
) -> None:
    """`since` given at another UTC offset, or naive (UTC), selects the same instant."""
    store = await seeded(store_factory)
    east = DAY2.astimezone(EAST)
    naive = DAY2.replace(tzinfo=None)
    for since in (east, naive):
        assert rows(await store.analytics("drift", since=since)) == EXPECTED["drift"][1:]


async def test_since_after_everything_gives_no_activity(store_factory: StoreFactory) -> None:
    """A `since` after all data leaves every analysis empty except cold_tools (all tools) and
    the tool counts, which are kept over all turns recorded (`since` does not apply)."""
    store = await seeded(store_factory)
    later = datetime(2030, 1, 1, tzinfo=UTC)
    for name in registry.NAMES:
        want = [(t,) for t in TOOLS] if name == "cold_tools" else []
        want = EXPECTED[name] if name in ("tool_pairs", "tool_transitions") else want
        assert rows(await store.analytics(name, since=later)) == want, name


async def test_empty_store_gives_empty_rows(store_factory: StoreFactory) -> None:
    """On an empty store every analysis runs and returns no rows."""
    store = await store_factory.make()
    for name in registry.NAMES:
        result = await store.analytics(name)
        assert result.rows == (), name
        assert result.columns == registry.ANALYSES[name].columns


async def test_catalog_without_activity_is_all_cold(store_factory: StoreFactory) -> None:
    """With tools but no turns or exemplars, cold_tools lists every tool by name."""
    store = await store_factory.make()
    await store.upsert_tools([Tool(name) for name in reversed(TOOLS)])
    assert rows(await store.analytics("cold_tools")) == [(t,) for t in TOOLS]
    assert rows(await store.analytics("misroute_rate")) == []


async def test_a_tool_used_beside_another_is_not_cold(store_factory: StoreFactory) -> None:
    """A turn that used several tools warms every one of them, not only its first; one before
    `since` warms none."""
    store = await store_factory.make()
    await store.upsert_tools([Tool(name) for name in ("alpha", "beta", "delta", "omega")])
    now = datetime(2026, 3, 2, 12, tzinfo=UTC)
    await store.record_turns(
        [
            Turn(
                id="p1", request="plan it", used_tool="alpha", at=now, used_tools=("alpha", "delta")
            ),
            Turn(
                id="p0",
                request="earlier",
                used_tool="beta",
                at=now - timedelta(days=2),
                used_tools=("beta", "omega"),
            ),
        ]
    )
    assert rows(await store.analytics("cold_tools")) == []
    since = now - timedelta(days=1)
    assert rows(await store.analytics("cold_tools", since)) == [("beta",), ("omega",)]


async def test_unknown_analysis_is_not_found(store_factory: StoreFactory) -> None:
    """An unknown name raises NotFound listing the known analyses."""
    store = await store_factory.make()
    with pytest.raises(NotFound, match=r"no analysis named 'nope'; known: misroute_rate, "):
        await store.analytics("nope")


async def test_label_conflicts_merge_by_normalised_query(store_factory: StoreFactory) -> None:
    """Requests differing only in case, width or spacing are one query; one label is no conflict."""
    store = await store_factory.make()
    await store.record_turns(
        [
            flagged_turn("a", DAY1, "Straße  nach X", "fs_read", None, "r", "ranker", "maps", "x"),
            flagged_turn("b", DAY1, "STRASSE nach x", "fs_read", None, "r", None, "web", "x"),
            flagged_turn(
                "c", DAY1, "Ｓｔｒａｓｓｅ nach x ", "fs_read", None, "r", None, "maps", "x"
            ),
            flagged_turn("d", DAY1, "same label", "fs_read", None, "r", "ranker", "maps", "x"),
            flagged_turn("e", DAY1, "Same Label", "fs_read", None, "r", "teacher", "maps", "x"),
            flagged_turn("f", DAY1, "no label", "fs_read", None, "r", "teacher", None, "x"),
        ]
    )
    assert rows(await store.analytics("label_conflicts")) == [
        ("strasse nach x", ("maps", "web"), ("ranker",), 3)
    ]


async def test_online_recall_splits_the_misses(store_factory: StoreFactory) -> None:
    """Not-shown turns split by the stored flag reason: `fallback` is a fallback, any other
    reason or none is a tool passed over; a recall of 1/3 rounds to 4 places; turns without a
    search id or with a status of no known kind are not counted."""
    store = await store_factory.make()
    when = at(DAY2, 23, 59)
    used = "mail__send"

    def turn(turn_id: str, status: str | None, reason: str | None = None) -> Turn:
        base = Turn(
            id=turn_id,
            request=f"q {turn_id}",
            used_tool=used,
            at=when,
            pack="mail",
            flagged=reason is not None,
            flag_reason=reason,
        )
        return base if status is None else searched(base, status, "mail", None)

    await store.record_turns(
        [
            replace(turn("a", "shown"), shown_position=2),
            turn("b", "not_shown", "fallback"),
            turn("c", "not_shown", "failed"),
            turn("d", "not_shown", "disagreement"),
            turn("e", "not_shown"),
            turn("f", "shown", "fallback"),  # a fallback tool among those shown
            turn("g", None),  # no search id
            turn("h", "someday"),  # no status toolselect writes
            replace(turn("i", "unknown"), pack=None),  # another group
        ]
    )
    assert rows(await store.analytics("online_recall")) == [
        ("2025-03-02", "mail", used, 6, 2, 0.3333, 1, 3, 0, 0),
        ("2025-03-02", None, used, 0, 0, None, 0, 0, 1, 0),
    ]


async def test_usage_label_seen_again_counts_once_on_its_latest_day(
    store_factory: StoreFactory,
) -> None:
    """A usage exemplar confirmed again is one stored label: exemplar_growth counts it once, on
    the day of its latest sighting, under tier `usage`."""
    store = await store_factory.make(retention=KEEP_ALL)
    await store.upsert_tools([Tool("send_email"), Tool("search_web")])
    assert await save_one(store, exemplar("u1", "send it", "send_email", "usage", DAY1))
    assert await save_one(store, exemplar("u2", "Send  it", "send_email", "usage", DAY3))
    assert await save_one(store, exemplar("r1", "look", "search_web", "ranker", DAY1))
    assert rows(await store.analytics("exemplar_growth")) == [
        ("search_web", "2025-03-01", "ranker", 1),
        ("send_email", "2025-03-03", "usage", 1),
    ]


async def test_cost_sum_and_percentiles_match_exactly(store_factory: StoreFactory) -> None:
    """Many small costs and latencies give the same cost (to 6 places) and nearest-rank values."""
    store = await store_factory.make()
    turns = [
        flagged_turn(f"t{i}", DAY1, f"q{i}", "fs_read", None, "r", "teacher", "x", "labeled")
        for i in range(7)
    ]
    await store.record_turns(turns)
    costs = [0.1, 0.2, 0.3, 1e-7, 0.0000015, 0.0000035, 0.00012345] * 3
    latencies = [float(v) for v in (37, 5, 99, 12.25, 61, 8, 70)] * 3
    for i, (usd, ms) in enumerate(zip(costs, latencies, strict=True)):
        await store.record_oracle_call(oracle_call(f"c{i}", f"t{i % 7}", DAY1, ms, (i, 1), usd))
    (row,) = (await store.analytics("oracle_usage")).rows
    assert row[:6] == ("teacher", "labeled", 7, 21, sum(range(21)), 21)
    assert row[6] == round(registry.ordered_sum(costs), 6)
    assert row[7:] == (
        registry.nearest_rank(latencies, 0.5),
        registry.nearest_rank(latencies, 0.95),
    )
    assert row[7:] == (37.0, 99.0)


# --- surfaces over a real store -------------------------------------------------------------


async def test_analysis_payload_is_the_http_body(store_factory: StoreFactory) -> None:
    """The HTTP body carries name, columns and rows with lists as JSON arrays; since is parsed."""
    store = await seeded(store_factory)
    body = await surfaces.analysis_payload(store, "label_conflicts", "2025-03-02T00:00:00Z")
    assert json.loads(json.dumps(body)) == {
        "name": "label_conflicts",
        "columns": ["query", "labels", "tiers", "turns"],
        "rows": [
            ["file an issue", ["calendar__add_event", "github__create_issue"], ["teacher"], 2]
        ],
    }
    assert surfaces.analyses_payload() == {"analyses": list(registry.NAMES)}


async def test_analysis_payload_refuses_bad_name_and_since(store_factory: StoreFactory) -> None:
    """An unknown name is NotFound (404) and an unreadable since is InvalidInput on `since` (422)."""
    store = await store_factory.make()
    with pytest.raises(NotFound):
        await surfaces.analysis_payload(store, "nope", None)
    with pytest.raises(InvalidInput) as caught:
        await surfaces.analysis_payload(store, "drift", "yesterday")
    assert caught.value.field == "since"


async def test_cli_runs_all_analyses_with_titles(store_factory: StoreFactory) -> None:
    """Without a name the CLI shows every analysis under a title line, in the listed order."""
    store = await seeded(store_factory)
    out = await surfaces.cli_analytics(store, None, None, "table", None)
    titles = [line for line in out.splitlines() if line.startswith("== ")]
    assert titles == [f"== {name} ==" for name in registry.NAMES]
    lines = await surfaces.cli_analytics(store, None, DAY2, "json", None)
    parsed = [json.loads(line) for line in lines.splitlines()]
    assert [p["name"] for p in parsed] == list(registry.NAMES)
    drift = parsed[registry.NAMES.index("drift")]
    assert drift["rows"] == [list(r) for r in EXPECTED["drift"][1:]]


async def test_cli_one_analysis_as_csv_and_plot(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    """One named analysis renders alone; --plot writes its PNG (or one per analysis in a folder)."""
    store = await seeded(store_factory)
    png = tmp_path / "confusions.png"
    out = await surfaces.cli_analytics(store, "confusions", None, "csv", png)
    assert out.splitlines()[:2] == ["used_tool,label,turns", "fs_read,search_web,2"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    folder = tmp_path / "all"
    await surfaces.cli_analytics(store, None, None, "table", folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.png" for n in registry.NAMES)


async def test_cli_refuses_an_unknown_format(store_factory: StoreFactory) -> None:
    """A format other than table, csv or json is InvalidInput on `format`."""
    store = await store_factory.make()
    with pytest.raises(InvalidInput) as caught:
        await surfaces.cli_analytics(store, "drift", None, "xml", None)
    assert caught.value.field == "format"


# --- the Cypher files themselves ------------------------------------------------------------


def test_every_analysis_has_a_documented_cypher_file() -> None:
    """Each analysis has a Cypher file whose header names $since and every column it returns."""
    assert cypher.names("analytics") == sorted(f"analytics/{n}" for n in registry.NAMES)
    for name, analysis in registry.ANALYSES.items():
        text = cypher.query(f"analytics/{name}")
        header = "\n".join(line for line in text.splitlines() if line.startswith("//"))
        assert text.startswith(f"// {name}:"), name
        assert "$since" in header and ":param since => null" in header, name
        if "$fallbacks" in text:
            assert ":param fallbacks => [" in header, name
        for column in analysis.columns:
            assert column in header, (name, column)
            assert f"AS {column}" in text or f".{column}" in text, (name, column)


async def test_percentile_disc_is_nearest_rank(neo4j_server: Neo4jServer) -> None:
    """Neo4j's percentileDisc picks index ceil(p*n)-1, as nearest_rank does, for n up to 60."""
    driver = neo4j.AsyncGraphDatabase.driver(neo4j_server.uri, auth=neo4j_server.auth)
    try:
        result = await driver.execute_query(
            "UNWIND range(1, 60) AS n UNWIND range(1, n) AS x WITH n, x * 1.5 AS v "
            "RETURN n, percentileDisc(v, 0.5) AS p50, percentileDisc(v, 0.95) AS p95, "
            "collect(v) AS vs",
            database_=neo4j_server.database,
        )
    finally:
        await driver.close()
    assert len(result.records) == 60
    for record in result.records:
        values = record["vs"]
        assert record["p50"] == registry.nearest_rank(values, 0.5)
        assert record["p95"] == registry.nearest_rank(values, 0.95)
        assert record["p95"] == sorted(values)[math.ceil(0.95 * record["n"]) - 1]


async def test_costs_are_added_smallest_first(store_factory: StoreFactory) -> None:
    """Costs add smallest first on both stores: 1 + 1 + 1e16 keeps the 2 that 1e16 + 1 + 1 loses."""
    store = await store_factory.make()
    await store.record_turns(
        [flagged_turn("t", DAY1, "q", "fs_read", None, "r", "teacher", "x", "labeled")]
    )
    for i, usd in enumerate((1e16, 1.0, 1.0)):
        await store.record_oracle_call(
            oracle_call(f"c{i}", "t", DAY1 + timedelta(seconds=i), 1.0, (0, 0), usd)
        )
    (row,) = (await store.analytics("oracle_usage")).rows
    assert row[6] == 1e16 + 2.0 != (1e16 + 1.0) + 1.0


async def test_a_tool_reported_under_another_prefix_is_that_tool(
    store_factory: StoreFactory,
) -> None:
    """Agents may report `mcp__srv__read` (or the bare `read`) for the catalog's `srv__read`:
    the analyses count it as that tool, as the learner labels it. It is not cold, a teacher
    label for it is no confusion, and it pairs and follows as itself; a bare name two tools
    share stands for neither, unless the name ends with one of them (`mcp__d__find`), and two
    servers' tools of one bare name are two tools. Each analysis counts a tool once, under its
    catalog name."""
    store = await store_factory.make()
    names = ("srv__read", "srv__write", "a__search", "b__search", "c__find", "d__find", "zz_idle")
    await store.upsert_tools([Tool(name) for name in names])
    now = datetime(2026, 3, 2, 12, tzinfo=UTC)
    await store.record_turns(
        [
            Turn("u1", "open it", "mcp__srv__read", now, session_id="s", used_tools=(),
                 search_status="shown"),
            Turn("u2", "save it", "write", now + timedelta(minutes=1), session_id="s"),
            Turn("u3", "both", "read", now + timedelta(minutes=2), used_tools=("read", "write"),
                 search_status="not_shown"),
            Turn("u4", "find it", "x__search", now + timedelta(minutes=3)),
            Turn("u7", "find it", "mcp__d__find", now + timedelta(minutes=4)),
            replace(
                flagged_turn(
                    "u5", now, "open it", "mcp__srv__read", "srv__read", "fallback", "teacher",
                    "srv__read", "labeled",
                ),
                session_id=None,
            ),
            flagged_turn(
                "u6", now, "write it", "mcp__srv__read", "srv__write", "disagreement", "teacher",
                "srv__write", "labeled",
            ),
            flagged_turn(
                "u8", now, "look it up", "mcp__a__search", "b__search", "disagreement", "teacher",
                "b__search", "labeled",
            ),
        ]
    )  # fmt: skip
    cold = rows(await store.analytics("cold_tools"))
    assert cold == [("c__find",), ("zz_idle",)]
    # Two servers' `search` are two tools: using a's where b's was right is a confusion. The
    # rows count catalog tools, however agents named them (one row for srv__read).
    assert rows(await store.analytics("confusions")) == [
        ("a__search", "b__search", 1),
        ("srv__read", "srv__write", 1),
    ]
    assert [row[:3] + row[4:] for row in rows(await store.analytics("misroute_rate"))] == [
        ("srv__read", 4, 2, "disagreement"),  # 1 each: ties go by name
        ("a__search", 1, 1, "disagreement"),
        ("d__find", 1, 0, None),
        ("srv__write", 1, 0, None),
        ("x__search", 1, 0, None),  # a bare name two tools share, and neither's namespace
    ]
    (recall,) = rows(await store.analytics("online_recall"))
    assert recall[2:6] == ("srv__read", 2, 1, 0.5)
    assert rows(await store.analytics("tool_pairs")) == [("srv__read", "srv__write", 1)]
    transitions = rows(await store.analytics("tool_transitions"))
    assert [row[:3] for row in transitions] == [("srv__read", "srv__write", 1)]


async def test_a_fallback_tool_is_one_row_under_its_configured_name(
    store_factory: StoreFactory,
) -> None:
    """A used tool the catalog lacks counts as the configured fallback tool it is by
    `names.same_tool` (`names.fallback_name`), as the detector flags it: `mcp__shell_exec` is
    `shell_exec` and `mcp__bash__run` is `bash__run`, `lint` the one fallback `tools__lint`
    (listed twice), while `my_shell_exec` is another tool and `run`, which two fallbacks end
    with, stays itself. A catalog tool comes first (`skill` is the catalog's `srv__skill`)."""
    fallbacks = ("shell_exec", "bash__run", "x__run", "fs_grep", "skill", "tools__lint") * 2
    store = await store_factory.make(fallback_tools=fallbacks)
    await store.upsert_tools([Tool("send_email"), Tool("srv__skill")])
    reported = ("my_shell_exec", "run", "mcp__bash__run", "bash__run", "fs_grep", "z__fs_grep",
                "x__run", "lint", "skill")  # fmt: skip
    await store.record_turns(
        [
            searched(
                flagged_turn("f1", DAY1, "mail it", "shell_exec", None, "fallback", "teacher",
                             "send_email", "labeled"),
                "shown", None, 2,
            ),
            searched(
                flagged_turn("f2", DAY1, "mail Bo", "mcp__shell_exec", None, "fallback",
                             "teacher", "send_email", "labeled"),
                "not_shown", None,
            ),
            *(plain_turn(f"p{i}", DAY1, f"q{i}", name, None) for i, name in enumerate(reported)),
        ]
    )  # fmt: skip
    assert rows(await store.analytics("misroute_rate")) == [
        ("shell_exec", 2, 2, 1.0, "fallback"),
        ("bash__run", 2, 0, 0.0, None),
        ("fs_grep", 2, 0, 0.0, None),
        ("my_shell_exec", 1, 0, 0.0, None),
        ("run", 1, 0, 0.0, None),
        ("srv__skill", 1, 0, 0.0, None),
        ("tools__lint", 1, 0, 0.0, None),
        ("x__run", 1, 0, 0.0, None),
    ]
    assert rows(await store.analytics("confusions")) == [("shell_exec", "send_email", 2)]
    assert rows(await store.analytics("online_recall")) == [
        ("2025-03-01", None, "shell_exec", 2, 1, 0.5, 1, 0, 0, 0)
    ]
