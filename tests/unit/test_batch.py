"""A batch is ranked and checked on one snapshot: the used tool is read as the catalog tool it
stands for before the detector compares it with the ranker's top-1 (pure: the hashing embedder
and the centroid ranker, no store)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from toolselect.catalog import tool_text
from toolselect.embed import HashingEmbedder
from toolselect.learn.batch import Prepared, prepare
from toolselect.learn.detect import Flag
from toolselect.learn.records import Observation
from toolselect.names import DEFAULT_FALLBACK_TOOLS
from toolselect.ranker import CentroidRanker
from toolselect.records import Tool

ISSUE = "create a new issue in the tracker with a title and a body"


def prepared(tools: list[Tool], turns: list[tuple[str, str]]) -> Prepared:
    embedder = HashingEmbedder()
    ranker = CentroidRanker()
    ranker.set_catalog(tools, asyncio.run(embedder.embed([tool_text(t) for t in tools])))
    batch = [
        Observation(request=request, used_tool=used, turn_id=str(i), at=datetime.now(UTC))
        for i, (request, used) in enumerate(turns)
    ]
    vectors = asyncio.run(embedder.embed([obs.request for obs in batch]))
    return prepare(
        batch, vectors, ranker.snapshot, floor=0.0, fallback_tools=DEFAULT_FALLBACK_TOOLS
    )


def test_a_confident_top1_of_another_server_is_a_disagreement() -> None:
    """The ranker chose github's create_issue, the agent used jira's (as an MCP host reports
    it): two tools, so a disagreement. They were one tool by bare name, and went unflagged."""
    tools = [
        Tool("github__create_issue", ISSUE + " on GitHub"),
        Tool("jira__create_issue", "file a Jira ticket for a project"),
    ]
    found = prepared(tools, [(ISSUE + " on GitHub", "mcp__jira__create_issue")])
    signal = found.signals[0]
    assert signal is not None and signal.top1 == "github__create_issue"
    assert found.used == ["jira__create_issue"]
    assert found.flags == [Flag("disagreement")]


def test_a_name_standing_for_the_top1_agrees() -> None:
    """An agent reporting the catalog's only create_issue under its own alias used the tool the
    ranker chose: no flag."""
    tools = [Tool("github__create_issue", ISSUE), Tool("get_weather", "weather forecast")]
    found = prepared(tools, [(ISSUE, "mcp__gh__create_issue"), (ISSUE, "create_issue")])
    assert found.used == ["github__create_issue", "github__create_issue"]
    assert found.flags == [None, None]


def test_a_blank_request_ranks_nothing() -> None:
    """All its scores are zero: the first tool by name is no top-1 to record (it would stop
    counting as a tool nothing pointed at)."""
    tools = [Tool("aa_cold_tool", "never used"), Tool("get_weather", "weather forecast")]
    found = prepared(tools, [("\u200b", "get_weather"), ("weather forecast", "get_weather")])
    assert found.signals[0] is None
    assert found.signals[1] is not None and found.signals[1].top1 == "get_weather"
