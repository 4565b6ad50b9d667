"""The Store contract: the async `Store` Protocol both stores (and the buffered wrapper) implement.

The records it speaks in are in `toolselect.graph.records`, the rules every store applies in
`toolselect.graph.rules`; both are re-exported here, so `from toolselect.graph.store import
Tool, Exemplar, plan_saves` keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from toolselect.errors import NotFound
from toolselect.graph.records import (
    TIER_STRENGTH,
    TRUSTED_TIERS,
    AnalyticsResult,
    Exemplar,
    ExemplarDelta,
    OracleCall,
    OracleResult,
    Outcome,
    Retention,
    SaveResult,
    StoreState,
    Tier,
    Tool,
    Turn,
    UpsertResult,
    canonical_json,
    pack_vector,
    unpack_vector,
    utc,
)
from toolselect.graph.rules import (
    RETENTION_EXEMPT,
    RetentionPlan,
    SavePlan,
    StoredLabel,
    check_tier,
    check_tiers,
    evictions,
    last_per_name,
    last_per_query,
    newest_first,
    plan_saves,
    retention_plan,
    supersedes,
)
from toolselect.names import normalise_query

# Everything that used to live here stays importable from here.
__all__ = [
    "RETENTION_EXEMPT",
    "TIER_STRENGTH",
    "TRUSTED_TIERS",
    "AnalyticsResult",
    "Exemplar",
    "ExemplarDelta",
    "OracleCall",
    "OracleResult",
    "Outcome",
    "Retention",
    "RetentionPlan",
    "SavePlan",
    "SaveResult",
    "Store",
    "StoreState",
    "StoredLabel",
    "Tier",
    "Tool",
    "Turn",
    "UpsertResult",
    "canonical_json",
    "check_tier",
    "check_tiers",
    "evictions",
    "last_per_name",
    "last_per_query",
    "lookup_one",
    "newest_first",
    "pack_vector",
    "plan_saves",
    "retention_plan",
    "save_one",
    "supersedes",
    "unpack_vector",
    "utc",
]


class Store(Protocol):
    """Where tools, turns, exemplars and oracle calls live; shared by every replica.

    Every method is a coroutine and never blocks the event loop. Failures to reach the backend
    raise `StoreUnavailable`; other backend failures raise `StoreError`.
    """

    @property
    def uri(self) -> str:
        """Where the store lives, for messages (never includes credentials)."""
        ...

    async def migrate(self) -> None:
        """Create constraints, indexes and the state record; idempotent."""

    async def ping(self) -> None:
        """Raise `StoreUnavailable` unless the backend answers now."""

    async def upsert_tools(self, tools: Sequence[Tool], pack: str | None = None) -> UpsertResult:
        """Insert or update tools by name; unchanged content (by hash) is counted, not written.

        A name given twice in one call is one tool, its last definition winning (`last_per_name`).

        With `pack`, every given tool is also put in that pack (a pack change alone still
        counts as unchanged content but is recorded).
        """
        ...

    async def list_tools(self, pack: str | None = None) -> list[Tool]:
        """All tools (or a pack's), sorted by name, with their packs."""
        ...

    async def get_tool(self, name: str) -> Tool | None:
        """One tool by exact name."""
        ...

    async def delete_tool(self, name: str) -> bool:
        """Remove a tool and its exemplars; True when it existed."""
        ...

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        """Store turns in one batch; a turn id already stored is updated, never duplicated.

        Returns how many turns were new.
        """
        ...

    async def get_turn(self, turn_id: str) -> Turn | None:
        """One turn by id."""
        ...

    async def save_exemplars(self, exemplars: Sequence[Exemplar]) -> SaveResult:
        """Keep each exemplar as the label of its normalised query, unless that would downgrade.

        One transaction per call. A stored exemplar of a stronger tier (feedback > teacher >
        usage > ranker) is never replaced by a weaker one; the same tool and tier again is no
        change, except that a usage label seen again counts on its exemplar (`supersedes`);
        items are applied in order (`plan_saves`). An exemplar whose tool is not in the catalog
        is skipped and reported in `unknown_tool`. When anything changed, `exemplar_version`
        moves once and every change of the call (writes and retention evictions) carries the
        new version. Retention limits apply once, after the writes, in the same transaction.
        """
        ...

    async def save_exemplar(self, exemplar: Exemplar) -> bool:
        """`save_exemplars([exemplar])`: whether it changed the store; `NotFound` for an
        unknown tool."""
        ...

    async def exemplars_for_queries(self, queries: Sequence[str]) -> dict[str, Exemplar]:
        """The stored exemplars of the queries' normalised forms, keyed by normalised query
        (misses are absent); one round trip."""
        ...

    async def exemplar_for_query(self, query: str) -> Exemplar | None:
        """The exemplar of a query's normalised form, if any."""
        ...

    async def exemplars_for_tool(self, tool: str) -> list[Exemplar]:
        """A tool's exemplars, newest first."""
        ...

    async def exemplars_since(self, version: int) -> ExemplarDelta:
        """Exemplars written and normalised queries deleted after `version`."""
        ...

    async def delete_exemplar(self, exemplar_id: str) -> bool:
        """Remove one exemplar (undo a bad label); True when it existed."""
        ...

    async def record_oracle_call(self, call: OracleCall) -> None:
        """Trace one teacher attempt; linked to its turn when `turn_id` is set."""

    async def oracle_calls(self, turn_id: str | None = None) -> list[OracleCall]:
        """Traced calls, oldest first (all, or one turn's)."""
        ...

    async def state(self) -> StoreState:
        """The current catalog and exemplar versions."""
        ...

    async def analytics(self, name: str, since: datetime | None = None) -> AnalyticsResult:
        """Run one named analysis over turns (and exemplars, oracle calls) at or after `since`.

        `since=None` means all time; a naive `since` is taken to be UTC. An unknown name raises
        `NotFound`.
        """
        ...

    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""


async def save_one(store: Store, exemplar: Exemplar) -> bool:
    """`Store.save_exemplar` for every store: one batch of one, `NotFound` for an unknown tool."""
    result = await store.save_exemplars([exemplar])
    if result.unknown_tool:
        raise NotFound(f"unknown tool {exemplar.tool!r}")
    return bool(result.changed)


async def lookup_one(store: Store, query: str) -> Exemplar | None:
    """`Store.exemplar_for_query` for every store: one lookup of one."""
    return (await store.exemplars_for_queries([query])).get(normalise_query(query))
