"""The oracle policy: which tier labels a flagged turn (pure; no I/O, no clock).

The default policy, row by row (ARCHITECTURE.md at the repository's top, section "Oracle policy",
holds the same table and says where each rule lives):

| why flagged             | outcome          | margin >= floor      | margin < floor |
|-------------------------|------------------|----------------------|----------------|
| fallback tool used      | any / none       | ranker top-1         | teacher        |
| used != confident top-1 | none (unknown)   | ranker top-1         | teacher        |
| used != confident top-1 | error/corrected  | ranker top-1         | teacher        |
| used != confident top-1 | ok               | teacher              | teacher        |
| used tool failed        | error/corrected  | ranker top-1         | teacher        |

The fourth row escalates even when the ranker is confident: the agent's choice worked, so the
ranker's disagreement is not evidence the agent was wrong. The ranker never confirms the very
tool whose use flagged the turn (a turn flagged for `text_response`, or for a tool that failed,
is not labelled with it for free): that would teach the ranker the mis-route it was meant to
catch. Nor does it confirm a tool the agent was shown for this request and did not use
(`shown`): the agent looked at it and chose otherwise; unless the tool it chose failed, on a
turn it did not fall back on (then its choice is no evidence against the top-1). The floor is the calibrated one
(`toolselect.learn.fit`) unless a setting pins it. With `teacher_worth` False (a disagreement
not among the most uncertain share the teacher budget is spent on) the teacher row declines;
fallback and failed turns, where the agent could not find its tool, are always worth a call.
The `ratchet` tier (a label that already exists for the normalised query) is free and runs
wherever it sits in the tier order; by default first. It does not settle a turn with a `usage`
label for the very tool the turn used: that label is the agents' own earlier claim, which the
flag questions, and letting it answer would confirm (and count again) a mis-route for good. Nor
does it answer with a tool the agent was shown and passed over (`passed_over`): a stored label the
agent has just looked at and refused is what the teacher must see again, or a wrong label would
answer every fallback its own pull on the ranking causes. Tiers are tried in the configured order
and the first that applies wins; when none applies the turn is `declined` with the reason.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from toolselect.learn.detect import Flag, FlagReason, RankSignal
from toolselect.names import same_tool

TierName = Literal["ratchet", "ranker", "teacher"]
PlanTier = Literal["ratchet", "ranker", "teacher", "declined"]
KNOWN_TIERS: tuple[TierName, ...] = ("ratchet", "ranker", "teacher")
DEFAULT_TIERS: tuple[TierName, ...] = KNOWN_TIERS

OutcomeClass = Literal["unknown", "failed", "ok"]

NOT_WORTH = "not worth a teacher call: the ranker is more likely right than on the turns sent"

# (why flagged, outcome class) -> may a confident ranker label it? Below the floor the ranker
# never labels. The fallback rule ignores the outcome, so it has a row per outcome class.
_RANKER_MAY_LABEL: dict[tuple[FlagReason, OutcomeClass], bool] = {
    ("fallback", "unknown"): True,
    ("fallback", "failed"): True,
    ("fallback", "ok"): True,
    ("disagreement", "unknown"): True,
    ("disagreement", "failed"): True,
    ("disagreement", "ok"): False,
    ("failed", "unknown"): True,
    ("failed", "failed"): True,
    ("failed", "ok"): True,
}


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do with a flagged turn.

    `tier` is the tier that decided; `label` is set for `ratchet` and `ranker`; `escalate` is
    True only for `teacher` (the caller then asks the LLM teacher); `reason` says why a turn was
    `declined` (and, for the other tiers, why the ranker could not label it, when relevant).
    """

    tier: PlanTier
    label: str | None = None
    escalate: bool = False
    reason: str | None = None


def outcome_class(outcome: str | None) -> OutcomeClass:
    """`None` is unknown, `ok` worked, anything else (`error`, `corrected`) failed."""
    if outcome is None or not outcome.strip():
        return "unknown"
    return "ok" if outcome.strip().lower() == "ok" else "failed"


def passed_over(tool: str, used_tool: str, shown: Collection[str]) -> bool:
    """Whether the agent was shown `tool` for this request and used another: it looked at it
    and chose otherwise, so neither the ranker nor a stored label may answer with it."""
    return not same_tool(tool, used_tool) and any(same_tool(tool, s) for s in shown)


def settles(label: str, tier: str | None, used_tool: str, shown: Collection[str]) -> bool:
    """Whether a stored label of a flagged turn's request settles it (the ratchet; a refused
    turn asked about again): not a `usage` label for the very tool the turn used (the agents'
    own claim, which the flag questions), nor a tool the agent was shown and passed over."""
    if tier == "usage" and used_tool and same_tool(label, used_tool):
        return False
    return not passed_over(label, used_tool, shown)


def _choice_failed(flag: Flag, outcome: str | None) -> bool:
    """Whether the tool the agent chose over the shown top-1 failed: then its passing over is
    no evidence against the top-1. In the agent simulation (BENCHMARKS.md, "10% wrong tool,
    reported error") those top-1s were right 23 of 23 times (hybrid) and 11 of 12 (hashing);
    refused, the turns went unlabelled, not being among the share the teacher is paid for. A
    fallback is the agent saying none of what it saw fits, whatever then happened to it."""
    return flag.reason != "fallback" and outcome_class(outcome) == "failed"


def ranker_refusal(
    flag: Flag,
    outcome: str | None,
    signal: RankSignal | None,
    *,
    margin_floor: float,
    used_tool: str = "",
    shown: Collection[str] = (),
) -> str | None:
    """Why the ranker's top-1 is not an acceptable label here, or None when it is."""
    if signal is None or not signal.top1.strip():
        return "no ranker signal"
    if flag.reason != "disagreement" and used_tool and same_tool(signal.top1, used_tool):
        if flag.reason == "fallback":
            return "ranker top-1 is the fallback tool that flagged the turn"
        return "ranker top-1 is the tool that failed"
    if passed_over(signal.top1, used_tool, shown) and not _choice_failed(flag, outcome):
        return "ranker top-1 was shown to the agent, which did not use it"
    if not signal.margin >= margin_floor:  # written so that a NaN margin is refused too
        return f"ranker margin {signal.margin:.4f} below floor {margin_floor:.4f}"
    if not _RANKER_MAY_LABEL[(flag.reason, outcome_class(outcome))]:
        return "agent and ranker disagree on a turn that worked"
    return None


def plan(
    flag: Flag,
    outcome: str | None,
    signal: RankSignal | None,
    *,
    margin_floor: float,
    ratchet_label: str | None,
    ratchet_tier: str | None = None,
    tiers: Sequence[str] = DEFAULT_TIERS,
    used_tool: str = "",
    teacher_worth: bool = True,
    shown: Collection[str] = (),
) -> Plan:
    """Decide which tier labels a flagged turn; see the module docstring for the table."""
    unknown = [t for t in tiers if t not in KNOWN_TIERS]
    if unknown:
        raise ValueError(f"expected tiers among {', '.join(KNOWN_TIERS)}, got {unknown[0]!r}")
    refusal = ranker_refusal(
        flag, outcome, signal, margin_floor=margin_floor, used_tool=used_tool, shown=shown
    )
    teacher_worth = teacher_worth or flag.reason != "disagreement"
    if ratchet_label and not settles(ratchet_label, ratchet_tier, used_tool, shown):
        ratchet_label = None
    for tier in tiers:
        if tier == "ratchet" and ratchet_label:
            return Plan("ratchet", label=ratchet_label)
        if tier == "ranker" and refusal is None and signal is not None:
            return Plan("ranker", label=signal.top1)
        if tier == "teacher" and teacher_worth:
            return Plan("teacher", escalate=True, reason=refusal)
        if tier == "teacher":
            return Plan("declined", reason=f"{refusal}; {NOT_WORTH}")
    return Plan("declined", reason=_declined_reason(tiers, refusal))


def _declined_reason(tiers: Sequence[str], refusal: str | None) -> str:
    enabled = ", ".join(tiers) if tiers else "none"
    if refusal is not None and "ranker" in tiers:
        return f"{refusal}; teacher tier not enabled (tiers: {enabled})"
    return f"no enabled tier applies (tiers: {enabled})"
