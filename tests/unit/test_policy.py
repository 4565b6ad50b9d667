"""The oracle policy: the table of ARCHITECTURE.md's "Oracle policy" (and of `oracle/tiers.py`) row
by row, the ratchet and the tier order."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest

from toolselect.learn.detect import Flag, FlagReason, RankSignal
from toolselect.oracle.tiers import DEFAULT_TIERS, Plan, outcome_class, plan

FLOOR = 0.05
FALLBACK = Flag("fallback")
DISAGREE = Flag("disagreement")
CONFIDENT = RankSignal("whatsapp__send_message", 0.30)
UNSURE = RankSignal("whatsapp__send_message", 0.01)


def decide(
    flag: Flag,
    outcome: str | None,
    signal: RankSignal | None,
    *,
    ratchet: str | None = None,
    tiers: tuple[str, ...] = DEFAULT_TIERS,
) -> Plan:
    return plan(flag, outcome, signal, margin_floor=FLOOR, ratchet_label=ratchet, tiers=tiers)


RANKER = Plan("ranker", label="whatsapp__send_message")

# (why flagged, outcome, signal, expected tier) - one line per cell of the table.
TABLE = [
    # fallback tool used, any / no outcome
    (FALLBACK, None, CONFIDENT, "ranker"),
    (FALLBACK, "ok", CONFIDENT, "ranker"),
    (FALLBACK, "error", CONFIDENT, "ranker"),
    (FALLBACK, "corrected", CONFIDENT, "ranker"),
    (FALLBACK, None, UNSURE, "teacher"),
    (FALLBACK, "ok", UNSURE, "teacher"),
    (FALLBACK, "error", UNSURE, "teacher"),
    # used != confident top-1, outcome unknown
    (DISAGREE, None, CONFIDENT, "ranker"),
    (DISAGREE, None, UNSURE, "teacher"),
    # used != confident top-1, error / corrected
    (DISAGREE, "error", CONFIDENT, "ranker"),
    (DISAGREE, "corrected", CONFIDENT, "ranker"),
    (DISAGREE, "error", UNSURE, "teacher"),
    (DISAGREE, "corrected", UNSURE, "teacher"),
    # used != confident top-1, ok: escalate even when confident
    (DISAGREE, "ok", CONFIDENT, "teacher"),
    (DISAGREE, "ok", UNSURE, "teacher"),
]


@pytest.mark.parametrize(("flag", "outcome", "signal", "tier"), TABLE)
def test_policy_table(flag: Flag, outcome: str | None, signal: RankSignal, tier: str) -> None:
    """Each cell of the default policy table picks the documented tier."""
    decided = decide(flag, outcome, signal)
    assert decided.tier == tier
    if tier == "ranker":
        assert decided == RANKER
    else:
        assert decided.escalate and decided.label is None


def test_ranker_label_is_the_top1_name_as_ranked() -> None:
    """The ranker tier labels with the ranker's top-1 name, namespace kept."""
    assert decide(FALLBACK, None, RankSignal("github.create_issue", 0.4)).label == (
        "github.create_issue"
    )


def test_margin_at_floor_is_confident() -> None:
    """The floor is inclusive for labelling too."""
    assert decide(FALLBACK, None, RankSignal("web_search", FLOOR)).tier == "ranker"


def test_nan_margin_escalates() -> None:
    """A NaN margin never lets the ranker label."""
    assert decide(FALLBACK, None, RankSignal("web_search", math.nan)).tier == "teacher"


def test_fallback_without_signal_escalates() -> None:
    """A fallback turn the ranker could not score goes to the teacher."""
    decided = decide(FALLBACK, None, None)
    assert decided == Plan("teacher", escalate=True, reason="no ranker signal")


def test_ok_disagreement_reason_is_explained() -> None:
    """Escalating a confident disagreement that worked says why the ranker was not trusted."""
    reason = decide(DISAGREE, "ok", CONFIDENT).reason
    assert reason is not None and "worked" in reason


def test_ratchet_reuses_existing_label_first() -> None:
    """With a label already known for the query, the free ratchet tier wins."""
    decided = decide(DISAGREE, "ok", CONFIDENT, ratchet="slack__send_message")
    assert decided == Plan("ratchet", label="slack__send_message")


def test_an_agents_own_usage_label_never_settles_the_turn_it_flags() -> None:
    """A usage label for the tool the turn used is the agents' earlier claim the flag questions:
    a confident disagreement that worked still goes to the teacher, a failed turn to the
    ranker; a usage label for another tool, or a stronger label for the same, still answers."""
    used = "calculator"

    def with_ratchet(flag: Flag, outcome: str | None, label: str, tier: str) -> Plan:
        return plan(flag, outcome, CONFIDENT, margin_floor=FLOOR, ratchet_label=label,
                    ratchet_tier=tier, used_tool=used)  # fmt: skip

    assert with_ratchet(DISAGREE, "ok", used, "usage").tier == "teacher"
    assert with_ratchet(Flag("failed"), "error", used, "usage") == RANKER
    assert with_ratchet(DISAGREE, "ok", "other_tool", "usage") == Plan("ratchet", "other_tool")
    assert with_ratchet(DISAGREE, "ok", used, "teacher") == Plan("ratchet", used)


def test_a_stored_label_the_agent_was_shown_and_passed_over_does_not_settle_the_turn() -> None:
    """A fallback after a search that showed the stored label's tool (its pull on the ranking
    put it there, say): the agent looked at it and used another, so the label does not answer;
    the next tier does, and the ranker may not answer with that tool either. Shown and used,
    or not shown, the label settles the turn as before."""
    label = "github__create_issue"

    def with_ratchet(shown: tuple[str, ...], signal: RankSignal = UNSURE) -> Plan:
        return plan(FALLBACK, None, signal, margin_floor=FLOOR, ratchet_label=label,
                    ratchet_tier="teacher", used_tool="shell_exec", shown=shown)  # fmt: skip

    assert with_ratchet((label, "github__close_issue")).tier == "teacher"
    assert with_ratchet(("mcp__github__create_issue",)).tier == "teacher"
    passed = with_ratchet((label,), RankSignal(label, 0.9))
    assert passed.tier == "teacher"
    assert passed.reason == "ranker top-1 was shown to the agent, which did not use it"
    assert with_ratchet(("github__close_issue",)) == Plan("ratchet", label=label)
    used = plan(Flag("failed"), "error", UNSURE, margin_floor=FLOOR, ratchet_label=label,
                ratchet_tier="teacher", used_tool=label, shown=(label,))  # fmt: skip
    assert used == Plan("ratchet", label=label)


def test_empty_ratchet_label_falls_through() -> None:
    """An empty ratchet label is no label: the next tier decides."""
    assert decide(FALLBACK, None, CONFIDENT, ratchet="").tier == "ranker"


def test_ratchet_disabled_is_skipped() -> None:
    """A ratchet label is ignored when the ratchet tier is not enabled."""
    decided = decide(FALLBACK, None, CONFIDENT, ratchet="x", tiers=("ranker", "teacher"))
    assert decided == RANKER


def test_tier_order_is_honoured() -> None:
    """Tiers are tried in the configured order: teacher first means always escalate."""
    assert decide(FALLBACK, None, CONFIDENT, tiers=("teacher", "ranker")).tier == "teacher"
    decided = decide(FALLBACK, None, CONFIDENT, ratchet="x", tiers=("ranker", "ratchet"))
    assert decided == RANKER


def test_teacher_disabled_declines_with_reason() -> None:
    """Without the teacher tier, a turn the ranker cannot label is declined, saying why."""
    decided = decide(FALLBACK, None, UNSURE, tiers=("ratchet", "ranker"))
    assert decided.tier == "declined" and not decided.escalate and decided.label is None
    assert decided.reason is not None
    assert "below floor" in decided.reason and "teacher tier not enabled" in decided.reason


def test_ranker_only_still_labels_confident_turns() -> None:
    """A ranker-only policy labels what the table allows and declines the rest."""
    assert decide(FALLBACK, "ok", CONFIDENT, tiers=("ranker",)) == RANKER
    assert decide(DISAGREE, "ok", CONFIDENT, tiers=("ranker",)).tier == "declined"


def test_ratchet_only_without_label_declines() -> None:
    """A ratchet-only policy declines queries that have no label yet."""
    decided = decide(FALLBACK, None, CONFIDENT, tiers=("ratchet",))
    assert decided.tier == "declined"
    assert decided.reason == "no enabled tier applies (tiers: ratchet)"


def test_unknown_tier_is_refused() -> None:
    """An unknown tier name is an error naming it, not a silent skip."""
    with pytest.raises(ValueError, match="'llm'"):
        decide(FALLBACK, None, CONFIDENT, tiers=("ranker", "llm"))


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [(None, "unknown"), ("", "unknown"), ("ok", "ok"), ("OK", "ok"), ("error", "failed")],
)
def test_outcome_classes(outcome: str | None, expected: str) -> None:
    """Outcomes map to unknown / ok / failed as the table's rows need."""
    assert outcome_class(outcome) == expected


def test_policy_and_detector_stay_pure() -> None:
    """Importing the policy and the detector loads no driver, SDK, HTTP or logging library."""
    code = (
        "import sys, toolselect.oracle.tiers, toolselect.learn.detect\n"
        "bad = ('neo4j', 'anthropic', 'aiohttp', 'sqlite3', 'structlog', 'httpx2')\n"
        "print(','.join(m for m in bad if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_ranker_never_confirms_the_fallback_that_flagged_the_turn() -> None:
    """A fallback flag whose confident top-1 is the used fallback escalates instead of labelling."""
    decision = plan(
        Flag("fallback"),
        None,
        RankSignal("mcp__text_response", 0.9),
        margin_floor=0.05,
        ratchet_label=None,
        used_tool="text_response",
    )
    assert decision.tier == "teacher"
    assert decision.reason == "ranker top-1 is the fallback tool that flagged the turn"
    other = plan(
        Flag("fallback"),
        None,
        RankSignal("send_email", 0.9),
        margin_floor=0.05,
        ratchet_label=None,
        used_tool="text_response",
    )
    assert (other.tier, other.label) == ("ranker", "send_email")


def test_a_disagreement_not_worth_a_teacher_call_is_declined() -> None:
    """Below the floor but outside the teacher's share, a disagreement on a turn that worked is
    declined, saying why."""
    decision = plan(
        Flag("disagreement"),
        "ok",
        RankSignal("send_email", 0.01),
        margin_floor=0.05,
        ratchet_label=None,
        teacher_worth=False,
    )
    assert (decision.tier, decision.escalate, decision.label) == ("declined", False, None)
    assert decision.reason is not None and "not worth a teacher call" in decision.reason


@pytest.mark.parametrize(
    ("reason", "outcome"), [("fallback", None), ("fallback", "ok"), ("failed", "error")]
)
def test_turns_where_the_agent_could_not_find_its_tool_are_always_worth_a_call(
    reason: FlagReason, outcome: str | None
) -> None:
    """Fallback and failed turns go to the teacher whatever the share says."""
    decision = plan(
        Flag(reason),
        outcome,
        RankSignal("send_email", 0.01),
        margin_floor=0.05,
        ratchet_label=None,
        teacher_worth=False,
    )
    assert (decision.tier, decision.escalate) == ("teacher", True)


def test_the_ranker_never_labels_a_failed_turn_with_the_tool_that_failed() -> None:
    decision = plan(
        Flag("failed"),
        "error",
        RankSignal("send_email", 0.9),
        margin_floor=0.05,
        ratchet_label=None,
        used_tool="send_email",
    )
    assert (decision.tier, decision.escalate) == ("teacher", True)
    assert decision.reason == "ranker top-1 is the tool that failed"
    other = plan(
        Flag("failed"),
        "error",
        RankSignal("send_slack_message", 0.9),
        margin_floor=0.05,
        ratchet_label=None,
        used_tool="send_email",
    )
    assert (other.tier, other.label) == ("ranker", "send_slack_message")


def test_the_ranker_never_labels_a_fallback_with_a_tool_the_agent_was_shown() -> None:
    """The agent saw the ranker's top-1 and improvised instead: not a free label."""
    kwargs: dict[str, Any] = {
        "margin_floor": 0.05,
        "ratchet_label": None,
        "used_tool": "shell_exec",
    }
    shown = plan(
        Flag("fallback"), "ok", RankSignal("send_email", 0.9), shown=("send_email",), **kwargs
    )
    assert (shown.tier, shown.escalate) == ("teacher", True)
    assert shown.reason == "ranker top-1 was shown to the agent, which did not use it"
    unseen = plan(
        Flag("fallback"), "ok", RankSignal("send_email", 0.9), shown=("crypto_price",), **kwargs
    )
    assert (unseen.tier, unseen.label) == ("ranker", "send_email")


def test_the_ranker_labels_a_top1_the_agent_passed_over_for_a_tool_that_failed() -> None:
    """A confident top-1 the agent saw and chose against: refused while the agent's choice may
    have worked (no outcome), a free label once it failed; a fallback's stays refused."""
    kwargs: dict[str, Any] = {
        "margin_floor": 0.05,
        "ratchet_label": None,
        "used_tool": "web_search",
        "shown": ("send_email", "web_search"),
    }
    signal = RankSignal("send_email", 0.9)
    unknown = plan(Flag("disagreement"), None, signal, **kwargs)
    assert unknown.tier == "teacher"
    assert unknown.reason == "ranker top-1 was shown to the agent, which did not use it"
    failed = plan(Flag("disagreement"), "error", signal, **kwargs)
    assert (failed.tier, failed.label) == ("ranker", "send_email")
    fallback = plan(Flag("fallback"), "error", signal, **kwargs | {"used_tool": "shell_exec"})
    assert fallback.tier == "teacher"
