"""The write of the turns the teacher tier finished, grouped while a write is in flight.

Turns finished while such a write is in flight wait for it and are then recorded together by
whichever of them runs first: a burst of escalations costs a few transactions instead of one
each. A batch the store refuses is recorded turn by turn, so a bad turn fails alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from toolselect.errors import StoreUnavailable
from toolselect.records import Turn
from toolselect.store.port import LearnerStore

log = structlog.get_logger("toolselect.learn")


class FinishedTurns:
    """Records finished turns, once every turn finished before them is (see the module)."""

    def __init__(self, store: LearnerStore) -> None:
        self._store = store
        self._waiting: list[Turn] = []
        self._lock = asyncio.Lock()

    async def record(self, finished: Sequence[Turn]) -> None:
        self._waiting.extend(finished)
        async with self._lock:
            if not self._waiting:
                return  # recorded by the write of an earlier finisher
            turns, self._waiting = self._waiting, []
            try:
                await self._store.record_turns(turns)
                return
            except (StoreUnavailable, asyncio.CancelledError):
                raise
            except Exception as exc:
                if len(turns) == 1:
                    raise
                log.warning("finished_turns_retried_alone", turns=len(turns), error=repr(exc))
            for alone in turns:
                try:
                    await self._store.record_turns([alone])
                except (StoreUnavailable, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    log.error("finished_turn_not_recorded", turn_id=alone.id, error=repr(exc))
