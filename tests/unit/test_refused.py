"""The refused turns kept in memory: what a restarted service takes back joins them as the
oldest, within the same bound."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from toolselect.learn.refused import Refused, RefusedTurn
from toolselect.records import Turn


def refused(turn_id: str) -> RefusedTurn:
    turn = Turn(turn_id, f"request {turn_id}", "shell_exec", datetime(2026, 1, 1, tzinfo=UTC))
    return RefusedTurn(turn, np.zeros(4, dtype=np.float32), ())


def test_turns_taken_back_are_asked_about_after_those_kept_and_forgotten_first() -> None:
    """Restored turns (oldest first) go before those kept; one already kept stays where it
    is; beyond `size` the oldest restored are forgotten, and only the kept ones count."""
    kept = Refused(4)
    kept.add(refused("new-1"))
    kept.add(refused("new-2"))
    assert (
        kept.restore([refused("old-1"), refused("old-2"), refused("new-1"), refused("old-3")]) == 2
    )
    assert "old-1" not in kept and "old-2" in kept and "new-1" in kept
    assert [r.turn.id for r in kept.take(4)] == ["new-2", "new-1", "old-3", "old-2"]
