"""Tools used together and one after the other, as a ranking reads them: companions and the
session prior. Pure: built from counts (the store's `tool_pairs` and `tool_transitions`, or a
fit's sample of sessions, both counted by `store/session_rules.plan_sessions`).

Shares, not counts, so a tool seen in many turns does not outweigh a rare one: a partner's
share is the part of the tool's pair counts it takes, a successor's share the part of the
tool's next-turn steps it takes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

Counts = Mapping[tuple[str, str], int]


@dataclass(frozen=True, slots=True)
class Companion:
    """A tool offered beside a ranking because it is often used with `with_`, a ranked tool
    (`score`: its share of `with_`'s pairs), or often follows `with_`, a tool of the session's
    previous turn (`score`: its share of `with_`'s next-turn steps)."""

    tool: str
    score: float
    with_: str


def _shares(counts: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, float]]:
    totals: dict[str, int] = {}
    grouped: dict[str, dict[str, int]] = {}
    for a, b, n in counts:
        if n <= 0:
            continue
        totals[a] = totals.get(a, 0) + n
        grouped.setdefault(a, {})[b] = grouped.setdefault(a, {}).get(b, 0) + n
    return {a: {b: n / totals[a] for b, n in row.items()} for a, row in grouped.items()}


class Relations:
    """Partner and successor shares per tool (immutable once built), equal to another built
    from the same counts."""

    __slots__ = (
        "_partners",
        "_successors",
        "pair_counts",
        "pairs",
        "transition_counts",
        "transitions",
    )

    def __init__(self, pairs: Counts, transitions: Counts) -> None:
        self.pairs = len(pairs)
        self.transitions = len(transitions)
        # The counts it was built from, as the catalog snapshot keeps them (service/snapshot.py).
        self.pair_counts: Counts = dict(pairs)
        self.transition_counts: Counts = dict(transitions)
        both = [(a, b, n) for (a, b), n in pairs.items() if a != b]
        both += [(b, a, n) for (a, b), n in pairs.items() if a != b]
        partners = _shares(both)
        # Best partners first, ties by name: the order companions are offered in.
        self._partners = {
            a: tuple(sorted(row.items(), key=lambda item: (-item[1], item[0])))
            for a, row in partners.items()
        }
        self._successors = _shares((s, d, n) for (s, d), n in transitions.items())

    def __bool__(self) -> bool:
        return bool(self._partners or self._successors)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Relations):
            return NotImplemented
        return (self.pair_counts, self.transition_counts) == (
            other.pair_counts,
            other.transition_counts,
        )

    __hash__ = None  # type: ignore[assignment]  # equal by its counts, which a dict holds

    def prior(self, previous: Iterable[str]) -> dict[str, float]:
        """Per tool, the mean share of the next-turn steps of the `previous` tools that went to
        it (tools without recorded steps are left out of the mean)."""
        known = [self._successors[p] for p in dict.fromkeys(previous) if p in self._successors]
        if not known:
            return {}
        out: dict[str, float] = {}
        for row in known:
            for tool, share in row.items():
                out[tool] = out.get(tool, 0.0) + share
        return {tool: total / len(known) for tool, total in out.items()}

    def companions(
        self,
        ranked: Sequence[str],
        n: int,
        min_share: float,
        allowed: Callable[[str], bool] | None = None,
        previous: Sequence[str] = (),
    ) -> list[Companion]:
        """Up to `n` tools not in `ranked`, each a partner of a ranked tool with at least
        `min_share` of its pairs or, when the session's `previous` tools are given, a successor
        of one of them with at least `min_share` of its next-turn steps; the largest shares
        first, ties to the better-ranked (then the more recent previous) tool, then by name.
        `allowed` keeps a companion within the ranking's restriction."""
        if n <= 0:
            return []
        taken = set(ranked)
        best: dict[str, tuple[float, int, str]] = {}

        def offer(other: str, share: float, place: int, tool: str) -> None:
            if other in taken or (allowed is not None and not allowed(other)):
                return
            current = best.get(other)
            if current is None or (-share, place) < (-current[0], current[1]):
                best[other] = (share, place, tool)

        for place, tool in enumerate(ranked):
            for other, share in self._partners.get(tool, ()):
                if share < min_share:
                    break
                offer(other, share, place, tool)
        for back, tool in enumerate(reversed(previous)):
            for other, share in self._successors.get(tool, {}).items():
                # A tool used again in the next turn weighs in the prior, but is no companion
                # of itself.
                if share >= min_share and other != tool:
                    offer(other, share, len(ranked) + back, tool)
        chosen = sorted(best.items(), key=lambda item: (-item[1][0], item[1][1], item[0]))[:n]
        return [Companion(other, share, tool) for other, (share, _, tool) in chosen]


EMPTY_RELATIONS = Relations({}, {})
