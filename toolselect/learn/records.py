"""The learner's plain values: the turns it is handed, its configuration and its counters.

Kept apart from the modules that use them (intake, labelling, the learner itself) so each of
those can take them without importing the others.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from toolselect.records import Turn

if TYPE_CHECKING:
    from toolselect.turns import TurnFields


@dataclass(frozen=True, slots=True)
class Observation:
    """One reported turn, as handed to `observe()`, with where its used tool stood in the search
    it reports (`search_status`, the tools `shown` and the used one's `shown_position`)."""

    request: str
    used_tool: str
    turn_id: str
    at: datetime
    agent_id: str | None = None
    pack: str | None = None
    outcome: str | None = None
    session_id: str | None = None
    used_tools: tuple[str, ...] = ()
    search_id: str | None = None
    search_status: str | None = None
    shown: tuple[str, ...] = ()
    shown_position: int | None = None
    shown_k: int | None = None  # how many tools the search showed, when more than `shown`

    @classmethod
    def of(
        cls,
        request: str,
        used_tool: str | None,
        turn: TurnFields,
        *,
        at: datetime,
        search_status: str | None = None,
        shown: tuple[str, ...] = (),
        shown_position: int | None = None,
        shown_k: int | None = None,
    ) -> Observation:
        """A reported turn (`toolselect.turns`: `observe`'s arguments) stamped at `at`: the
        tool that labels it resolved (`labelled_tool`), an id made when it has none, and
        `used_tools` kept only when the turn used several."""
        tools = tuple(turn.get("used_tools") or ())
        return cls(
            request=request,
            used_tool=labelled_tool(used_tool, tools),
            turn_id=turn.get("turn_id") or uuid.uuid4().hex,
            at=at,
            agent_id=turn.get("agent_id"),
            pack=turn.get("pack") or None,  # "" is no pack, as everywhere (`check_pack`)
            outcome=turn.get("outcome"),
            # "" is no session (a Go or JS client's zero value), as "" is no turn id above.
            session_id=turn.get("session_id") or None,
            used_tools=tools if len(tools) > 1 else (),
            search_id=turn.get("search_id"),
            search_status=search_status,
            shown=shown,
            shown_position=shown_position,
            shown_k=shown_k,
        )


def plain_turn(obs: Observation) -> Turn:
    """The turn an observation records before the learner ranked or labelled it: what a
    labelled turn starts from, and what a shutdown keeps of one it never processed."""
    return Turn(
        id=obs.turn_id,
        request=obs.request,
        used_tool=obs.used_tool,
        at=obs.at,
        agent_id=obs.agent_id,
        pack=obs.pack,
        outcome=obs.outcome,
        session_id=obs.session_id,
        used_tools=obs.used_tools,
        search_id=obs.search_id,
        search_status=obs.search_status,
        shown_position=obs.shown_position,
        shown_k=obs.shown_k or len(obs.shown) or None,
    )


def labelled_tool(used_tool: str | None, used_tools: Sequence[str] | None) -> str:
    """The tool a turn's request is labelled with: `used_tool`, else the first of
    `used_tools`, else none (''); `Observation.of` keeps it as `used_tool`."""
    return used_tool or (used_tools[0] if used_tools else "")


@dataclass(frozen=True, slots=True)
class LearnerConfig:
    """`margin_floor` and `teacher_candidates` apply when no `Tuner` is given (a tuner's fit
    decides them otherwise); the teacher sees the whole catalog (or pack) up to
    `teacher_full_catalog` tools, and never more candidates than `teacher_max_input_tokens` buy."""

    fallback_tools: Collection[str]
    margin_floor: float = 0.05
    # Whether a turn reported without an outcome labels its used tool: `shown` (only when its
    # search showed the tool), `never` or `always`.
    usage_without_outcome: str = "shown"
    tiers: Sequence[str] = ("ratchet", "ranker", "teacher")
    queue_size: int = 1024
    # A burst is recorded in few store transactions: the worker takes what is queued, up to this.
    batch_size: int = 512
    teacher_candidates: int = 30
    teacher_full_catalog: int = 50
    teacher_max_input_tokens: int = 6000
    teacher_concurrency: int = 4
    # Embed and rank the next batch while this one is written: a gain when the store's work
    # runs in another process (Neo4j); with SQLite in this process the two threads only contend
    # for the GIL, which measured ~13% slower unflagged intake.
    overlap_writes: bool = False


@dataclass
class LearnerStats:
    """What the learner has done so far; `in_progress` counts batches taken and not written."""

    batches: int = 0
    processed: int = 0
    saved: int = 0
    errors: int = 0
    failed_turns: int = 0
    in_progress: int = 0
