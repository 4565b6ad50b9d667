"""A reported turn has one definition (`toolselect.turns`): the API, MCP and the client take it,
and the learner's `Observation` is made from it in one place."""

from __future__ import annotations

import inspect
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.unit.test_purity import imported_modules
from toolselect import mcp_server
from toolselect.api import models as m
from toolselect.learn.records import Observation, labelled_tool
from toolselect.turns import TURN_FIELDS, ReportedTurn, TurnProblem, turn_problem

ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 1, 2, tzinfo=UTC)


def test_the_keywords_are_the_models_fields() -> None:
    """`TurnFields` (what `observe` takes by keyword) and `ReportedTurn` name the same fields,
    and MCP `report_turn` takes exactly those (and its context)."""
    assert set(ReportedTurn.model_fields) == {"request", "used_tool"} | TURN_FIELDS
    report = set(inspect.signature(mcp_server.report_turn).parameters) - {"ctx"}
    assert report == set(ReportedTurn.model_fields)
    assert issubclass(m.ObserveRequest, ReportedTurn)


def test_fields_round_trip_through_observe_keywords() -> None:
    turn = ReportedTurn(request="r", used_tools=["a", "b"], search_id="s", outcome="ok")
    fields = turn.fields()
    assert set(fields) == TURN_FIELDS
    assert ReportedTurn(request="r", **fields) == turn  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("turn", "limit", "problem"),
    [
        (ReportedTurn(request="x"), None, TurnProblem("used_tool", "used_tool or a non-empty used_tools")),
        (ReportedTurn(request="x", used_tools=[]), None, TurnProblem("used_tool", "used_tool or a non-empty used_tools")),
        (ReportedTurn(request="x", used_tool="a", used_tools=["b"]), None, TurnProblem("used_tool", "used_tool to be one of used_tools", "'a'")),
        (ReportedTurn(request="é" * 10, used_tool="a"), 16, TurnProblem("request", "request of at most 16 bytes", "20", oversized=True)),
        (ReportedTurn(request="x", used_tool="é" * 10), 16, TurnProblem("used_tool", "used_tool of at most 16 bytes", "20", oversized=True)),
        (ReportedTurn(request="é" * 10, used_tool="a"), None, None),
        (ReportedTurn(request="", used_tool=""), 16, None),
        (ReportedTurn(request="x", used_tools=["a", "b"]), 16, None),
    ],
)  # fmt: skip
def test_turn_problem(turn: ReportedTurn, limit: int | None, problem: TurnProblem | None) -> None:
    """The used-tool rule, then the sizes when a limit is given; empty texts are allowed."""
    assert turn_problem(turn, limit) == problem


def test_problem_message() -> None:
    problem = TurnProblem("used_tool", "used_tool to be one of used_tools", "'a'")
    assert problem.message == "expected used_tool to be one of used_tools, got 'a'"
    assert TurnProblem("used_tool", "used_tool or x").message == "expected used_tool or x"


def test_observation_of_a_reported_turn() -> None:
    """The labelling tool is `used_tool`, else the first used tool; `used_tools` is kept only
    for several; a turn id is made when none was given."""
    several = Observation.of("r", None, {"used_tools": ["a", "b"], "pack": "p"}, at=AT)
    assert (several.used_tool, several.used_tools, several.pack, several.at) == (
        "a",
        ("a", "b"),
        "p",
        AT,
    )
    assert several.turn_id
    one = Observation.of("r", "b", {"used_tools": ["b"], "turn_id": "t"}, at=AT)
    assert (one.used_tool, one.used_tools, one.turn_id) == ("b", (), "t")
    assert labelled_tool(None, None) == "" == Observation.of("r", None, {}, at=AT).used_tool


def test_the_turn_module_imports_no_api_layer() -> None:
    """`toolselect.turns` sits below the API, the MCP server and the client: it imports none."""
    source = (ROOT / "toolselect" / "turns.py").read_text(encoding="utf-8")
    imported = imported_modules(source, "toolselect.turns")
    assert not {
        name
        for name in imported
        if name.split(".")[0] in {"aiohttp", "mcp"}
        or name.startswith(("toolselect.api", "toolselect.client", "toolselect.mcp_server"))
    }


def test_the_service_loads_no_pydantic() -> None:
    """The service and the learner name the turn's types for annotations only."""
    code = "import sys, toolselect.service; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
