"""The turns the spent teacher budget refused, kept to be asked about once it has room.

The newest `size` are kept, the oldest forgotten first; `Labeller.ask_again` takes them newest
first, so a burst that spent the hour is not left to the turns that came first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolselect.records import Turn


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

    def take(self, count: int) -> list[RefusedTurn]:
        """Remove and return the newest `count` turns, newest first."""
        return [self._turns.popitem()[1] for _ in range(min(count, len(self._turns)))]

    def __len__(self) -> int:
        return len(self._turns)
