"""The session rules both stores apply as turns are recorded: which tools a turn used, how a
new turn links to its session's last one, and the pair and transition counts each keeps
(`tool_pairs`, `tool_transitions`), a reported name counted as the catalog tool it stands for.

Nothing here does I/O or imports a backend library (`tests/unit/test_purity.py`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from toolselect.names import CatalogNames, bare_name
from toolselect.records import Turn, utc


def turn_tools(turn: Turn) -> tuple[str, ...]:
    """The tools a turn used: `used_tools` when set, else its one `used_tool`."""
    return turn.used_tools or (turn.used_tool,)


def touches_sessions(turns: Iterable[Turn]) -> bool:
    """Whether any of `turns` links to a session or counts a pair: a turn without a session that
    used one tool does neither, and most turns are such, so the stores skip the session work
    (its reads of session tails and catalog names) for a batch of them."""
    return any(t.session_id is not None or len(turn_tools(t)) > 1 for t in turns)


def session_expired(last_at: datetime | None, at: datetime, idle_s: float) -> bool:
    """Whether a session whose last turn was at `last_at` has been idle more than `idle_s`
    seconds at `at` (`TOOLSELECT_SESSION_IDLE`): its next turn then starts it afresh, neither
    following that turn nor counting a step from it, and a ranking gets no previous tools from
    it. Never without a limit (0). A last turn without a time is one retention deleted (the
    stores read the time from the turn), days past any idle limit: expired."""
    if idle_s <= 0:
        return False
    return last_at is None or (utc(at) - utc(last_at)).total_seconds() > idle_s


@dataclass(frozen=True, slots=True)
class SessionTail:
    """A session's last recorded turn: its id, the catalog tools it used and when it was
    observed (None when retention deleted that turn)."""

    turn_id: str
    tools: tuple[str, ...]
    at: datetime | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """What recording new turns adds to sessions and to the tool counts, decided before any
    write: `links` are (session, previous turn id or None, turn id) in order, `tails` each
    session's last turn afterwards; `pairs` (a < b) and `transitions` (src, dst) are the counts
    to add."""

    links: tuple[tuple[str, str | None, str], ...] = ()
    tails: Mapping[str, SessionTail] = field(default_factory=dict)
    pairs: Mapping[tuple[str, str], int] = field(default_factory=dict)
    transitions: Mapping[tuple[str, str], int] = field(default_factory=dict)


def catalog_lookup(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """The names and the bare names a store reads the catalog tools of, to resolve `names`
    (`CatalogNames`): every tool of those names or of their bare names."""
    unique = sorted(set(names))
    return unique, sorted({bare_name(name) for name in unique})


def plan_sessions(
    new_turns: Sequence[Turn],
    tails: Mapping[str, SessionTail],
    catalog: CatalogNames,
    *,
    idle_s: float,
) -> SessionPlan:
    """Link and count turns recorded for the first time (a resent turn is never passed, so it
    counts once). Only catalog tools count, each once per turn, a reported name as the tool it
    stands for (`catalog.resolve`: `mcp__srv__read` is `srv__read`). Every new turn counts its
    pairs of tools used together; a turn with a session also follows the session's last turn
    (`tails`, then the batch's turns of that session by `at`, then id) and counts a transition
    from each tool of that turn to each of its own (a tail's tool deleted since counts nothing:
    `catalog` must cover the tails' tools too). A turn older than its session's recorded last
    turn (replayed late) joins the session without following it or counting a step, and so
    does a turn more than `idle_s` seconds after it (`session_expired`): a step across an idle
    gap is no step, and the turn is the session's last from then on."""
    current = dict(tails)
    links: list[tuple[str, str | None, str]] = []
    pairs: dict[tuple[str, str], int] = {}
    transitions: dict[tuple[str, str], int] = {}
    for turn in sorted(new_turns, key=lambda t: (utc(t.at), t.id)):
        resolved = (catalog.resolve(name) for name in turn_tools(turn))
        tools = tuple(sorted({name for name in resolved if name is not None}))
        for a, b in ((a, b) for i, a in enumerate(tools) for b in tools[i + 1 :]):
            pairs[(a, b)] = pairs.get((a, b), 0) + 1
        if turn.session_id is None:
            continue
        previous = current.get(turn.session_id)
        if previous is not None and previous.at is not None and utc(turn.at) < utc(previous.at):
            # Older than the session's recorded last turn (it waited in a spool through an
            # outage, say): in the session, but neither followed nor counted as a step, so
            # the chain and the transitions keep time order.
            links.append((turn.session_id, None, turn.id))
            continue
        if previous is not None and session_expired(previous.at, turn.at, idle_s):
            previous = None  # idle past the limit: the session starts afresh here
        links.append((turn.session_id, previous.turn_id if previous else None, turn.id))
        for src in (name for name in previous.tools if name in catalog) if previous else ():
            for dst in tools:
                transitions[(src, dst)] = transitions.get((src, dst), 0) + 1
        current[turn.session_id] = SessionTail(turn.id, tools, turn.at)
    changed = {session for session, _, _ in links}
    return SessionPlan(
        tuple(links), {s: t for s, t in current.items() if s in changed}, pairs, transitions
    )


def kept_relations(
    counts: Mapping[tuple[str, str], int],
    keep: int,
    *,
    pairs: bool,
    seen: Mapping[tuple[str, str], datetime] | None = None,
) -> set[tuple[str, str]]:
    """The tool counts retention keeps: each tool's top `keep` by count, then the most recently
    counted (`seen`: the time of the latest turn of the write that last counted it; none is
    oldest), then the other tool's name. By name alone, a tool whose top was full of equal
    counts never let in a follower whose name sorts after theirs: dropped at every write, its
    count never grew. Transitions (`pairs=False`) belong to their src; a pair (a < b) stays
    while it is among the top of a or of b. The rule the stores' pruning queries implement."""
    ends: dict[str, list[tuple[int, float, str, tuple[str, str]]]] = {}
    for (x, y), count in counts.items():
        when = (seen or {}).get((x, y))
        recency = -utc(when).timestamp() if when is not None else math.inf
        ends.setdefault(x, []).append((-count, recency, y, (x, y)))
        if pairs:
            ends.setdefault(y, []).append((-count, recency, x, (x, y)))
    return {key for mine in ends.values() for *_, key in sorted(mine)[: max(keep, 0)]}
