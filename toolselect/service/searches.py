"""Search ids: what a ranking showed, remembered for a while so a reported turn can say where
its used tool stood.

Every `/v1/rank`, `/v1/select`, MCP `search_tools` and tool-search answer carries a `search_id`;
a turn observed with it is linked to the tools that were shown (`SearchLog.place`). The log is
in memory, bounded in count (oldest forgotten first) and in age, and costs one dict operation
on each side: the ranking path never waits on the store. A search id this process does not know
(never issued here, expired, forgotten, or issued by another replica) is accepted and counted as
`unknown`; one issued for another pack is counted as `other_pack`. Neither is ever an error for
the agent.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from toolselect.names import same_tool
from toolselect.records import SearchStatus

# What one search showed: the tools in rank order, within which pack, and when. A plain tuple
# of strings and a float, which the garbage collector stops tracking: a log of 100,000 objects
# it did track made every full collection (and the ranking it interrupts) several times longer.
Shown = tuple[tuple[str, ...], str | None, float]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a turn's used tool stood in the search it reports."""

    status: SearchStatus
    shown: tuple[str, ...] = ()
    position: int | None = None  # 1-based, when shown


class SearchLog:
    """The searches issued recently, by id (thread-safe: servers observe from any thread)."""

    def __init__(
        self, capacity: int, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._capacity = capacity
        self._ttl_s = ttl_s
        self._clock = clock
        self._searches: OrderedDict[str, Shown] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._searches)

    def record(self, tools: Sequence[str], pack: str | None = None) -> str:
        """Remember what a ranking showed; its new search id."""
        search_id = secrets.token_hex(12)
        if self._capacity <= 0:
            return search_id
        shown: Shown = (tuple(tools), pack or None, self._clock())
        with self._lock:
            self._searches[search_id] = shown
            while len(self._searches) > self._capacity:
                self._searches.popitem(last=False)
        return search_id

    def place(self, search_id: str, used_tool: str, pack: str | None = None) -> Placement:
        """Where `used_tool` (by bare name) stood in search `search_id`, for a turn of `pack`."""
        with self._lock:
            shown = self._searches.get(search_id)
        if shown is None:
            return Placement("unknown")
        tools, shown_pack, at = shown
        if self._clock() - at > self._ttl_s:
            return Placement("unknown")
        if pack and shown_pack and pack != shown_pack:
            return Placement("other_pack")
        for position, tool in enumerate(tools, start=1):
            if same_tool(tool, used_tool):
                return Placement("shown", tools, position)
        return Placement("not_shown", tools)
