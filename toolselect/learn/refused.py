"""The turns the spent teacher budget refused, kept to be asked about once it has room.

The newest `size` are kept, the oldest forgotten first; `Labeller.ask_again` takes them newest
first, so a burst that spent the hour is not left to the turns that came first. A restarted
service takes back from the store the turns its predecessor's budget refused (`restore`), which
the list held in memory only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from toolselect.names import normalise_query
from toolselect.oracle.tiers import settles
from toolselect.records import Turn, utc
from toolselect.store.port import LabelStore


@dataclass(frozen=True, slots=True)
class RefusedTurn:
    """A refused turn with what its escalation needs again: its request's vector and the tools
    its search showed that the agent passed over."""

    turn: Turn
    vector: np.ndarray
    passed: tuple[str, ...]


class Refused:
    """Refused turns by id, newest last, at most `size`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._turns: dict[str, RefusedTurn] = {}

    def add(self, refused: RefusedTurn) -> None:
        """Keep `refused` as the newest (a turn refused again moves to the end)."""
        self._turns.pop(refused.turn.id, None)
        self._turns[refused.turn.id] = refused
        while len(self._turns) > self.size:
            del self._turns[next(iter(self._turns))]

    def restore(self, earlier: Sequence[RefusedTurn]) -> int:
        """Keep `earlier` (oldest first), turns refused before those kept, as the oldest: asked
        about after them, and forgotten first beyond `size`. A turn already kept stays as it
        is. How many of `earlier` are kept."""
        older = {r.turn.id: r for r in earlier if r.turn.id not in self._turns}
        self._turns = older | self._turns
        while len(self._turns) > self.size:
            del self._turns[next(iter(self._turns))]
        return sum(1 for turn_id in older if turn_id in self._turns)

    def take(self, count: int) -> list[RefusedTurn]:
        """Remove and return the newest `count` turns, newest first."""
        return [self._turns.popitem()[1] for _ in range(min(count, len(self._turns)))]

    def forget_before(self, when: datetime) -> int:
        """Forget the turns observed before `when`: the retention pass deletes them from the
        store, and one asked about again would be recorded anew (its tools counted again, a
        paid call spent on a turn nobody keeps). How many were forgotten."""
        old = [turn_id for turn_id, r in self._turns.items() if utc(r.turn.at) < utc(when)]
        for turn_id in old:
            del self._turns[turn_id]
        return len(old)

    def __contains__(self, turn_id: object) -> bool:
        return turn_id in self._turns

    def __len__(self) -> int:
        return len(self._turns)


async def labelled_meanwhile(
    store: LabelStore, turns: Sequence[tuple[Turn, tuple[str, ...]]]
) -> set[str]:
    """The ids of the refused turns (each with the tools it passed over) that a label stored
    for their query since settles, as the ratchet would (`tiers.settles`: a human's, the
    teacher's for another turn, another agent's usage; not the turn's own usage label): no
    longer worth a teacher call. One lookup."""
    requests = [turn.request for turn, _ in turns]
    labels = await store.exemplars_for_queries(requests) if requests else {}
    return {
        turn.id
        for turn, passed in turns
        if (label := labels.get(normalise_query(turn.request))) is not None
        and settles(label.tool, label.tier, turn.used_tool, passed)
    }
