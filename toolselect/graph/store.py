"""The Store contract: plain record types and the async `Store` Protocol both stores implement.

Records are frozen dataclasses with no behaviour beyond derived fields, so the pure core (ranker,
detector, oracle policy) can use them without importing any adapter.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from toolselect.names import bare_name, namespace, normalise_query

Tier = Literal["ranker", "teacher", "feedback"]
TIER_STRENGTH: Mapping[str, int] = {"ranker": 1, "teacher": 2, "feedback": 3}
Outcome = Literal["ok", "error", "corrected"]
OracleResult = Literal["labeled", "declined", "limit_reached", "error"]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text (and hashes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool of the catalog. `packs` lists the packs (kits) the tool belongs to."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    packs: tuple[str, ...] = ()

    @property
    def bare_name(self) -> str:
        return bare_name(self.name)

    @property
    def namespace(self) -> str:
        return namespace(self.name)

    @property
    def content_hash(self) -> str:
        """Hash of what the ranker sees (name, description, schema); packs are not content."""
        text = canonical_json(
            {"name": self.name, "description": self.description, "schema": self.input_schema}
        )
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Turn:
    """One observed agent turn, with what the detector and the oracle decided about it."""

    id: str
    request: str
    used_tool: str
    at: datetime
    agent_id: str | None = None
    pack: str | None = None
    outcome: str | None = None
    top1: str | None = None
    margin: float | None = None
    flagged: bool = False
    flag_reason: str | None = None
    tier: str | None = None
    label: str | None = None
    result: str | None = None


@dataclass(frozen=True, slots=True)
class Exemplar:
    """A confirmed (query -> tool) label; the store keeps one per normalised query."""

    id: str
    query: str
    tool: str
    tier: Tier
    embedder: str
    embedding: tuple[float, ...]
    created_at: datetime
    confidence: float = 1.0
    turn_id: str | None = None
    version: int = 0  # assigned by the store on every write

    @property
    def query_norm(self) -> str:
        return normalise_query(self.query)


@dataclass(frozen=True, slots=True)
class OracleCall:
    """One attempt at a paid (or remote) labelling call; every attempt is traced."""

    id: str
    provider: str
    model: str
    result: str
    latency_ms: float
    at: datetime
    turn_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StoreState:
    """Monotonic counters replicas poll to learn that another replica wrote something."""

    catalog_version: int
    exemplar_version: int


@dataclass(frozen=True, slots=True)
class UpsertResult:
    upserted: int
    unchanged: int


@dataclass(frozen=True, slots=True)
class ExemplarDelta:
    """What changed after a version: exemplars written, and normalised queries removed."""

    version: int
    upserted: tuple[Exemplar, ...]
    deleted: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AnalyticsResult:
    """The rows of one named analysis (`toolselect.analytics.ANALYSES` lists them).

    Values are plain JSON-ready Python: ints, floats already rounded, strings, None, and tuples
    (sorted) for list values; both stores give equal results for equal data.
    """

    name: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True, slots=True)
class Retention:
    """Exemplar limits the store enforces; `feedback` exemplars are exempt from all three."""

    per_tool: int = 512
    total: int = 10_000
    max_age_days: float = 90.0


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

    async def save_exemplar(self, exemplar: Exemplar) -> bool:
        """Keep `exemplar` as the label of its normalised query, unless that would downgrade.

        A stored exemplar of a stronger tier (feedback > teacher > ranker) is never replaced by
        a weaker one; the same tool and tier again is no change. Returns whether anything
        changed (and so whether `exemplar_version` moved). Retention limits apply.
        """
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
