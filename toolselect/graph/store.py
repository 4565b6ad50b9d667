"""The Store contract: plain record types and the async `Store` Protocol both stores implement.

Records are frozen dataclasses with no behaviour beyond derived fields, so the pure core (ranker,
detector, oracle policy) can use them without importing any adapter.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from toolselect.errors import InvalidInput, NotFound
from toolselect.names import bare_name, namespace, normalise_query

Tier = Literal["ranker", "teacher", "feedback"]
TIER_STRENGTH: Mapping[str, int] = {"ranker": 1, "teacher": 2, "feedback": 3}
# Labels whose truth does not come from the ranker: they calibrate and validate the loop.
TRUSTED_TIERS = frozenset({"teacher", "feedback"})
Outcome = Literal["ok", "error", "corrected"]
OracleResult = Literal["labeled", "declined", "limit_reached", "error"]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text (and hashes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def pack_vector(values: Sequence[float]) -> bytes:
    """An embedding as stored: float32, little-endian (a quarter of a list of floats on the wire,
    and one copy to encode or decode instead of one object per value)."""
    return struct.pack(f"<{len(values)}f", *values)


def unpack_vector(blob: bytes | bytearray) -> tuple[float, ...]:
    return struct.unpack(f"<{len(blob) // 4}f", blob)


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
class SaveResult:
    """What one `save_exemplars` call did, in input order.

    `changed` holds the exemplars that changed the store, as stored (with their version);
    `unknown_tool` the ones skipped because their tool is not in the catalog; `evicted` how
    many exemplars retention removed in the same transaction (their tombstones carry the
    version of `changed`).
    """

    changed: tuple[Exemplar, ...] = ()
    unknown_tool: tuple[Exemplar, ...] = ()
    evicted: int = 0


@dataclass(frozen=True, slots=True)
class StoredLabel:
    """The part of a stored exemplar the save rules look at."""

    tool: str
    tier: str


def last_per_name(tools: Sequence[Tool]) -> list[Tool]:
    """The tools an upsert writes: a name sent twice in one call counts once, its last
    definition winning (at the place of its first)."""
    return list({tool.name: tool for tool in tools}.values())


def check_tier(exemplar: Exemplar) -> None:
    """Refuse a tier outside `TIER_STRENGTH` before anything is written."""
    if exemplar.tier not in TIER_STRENGTH:
        tiers = ", ".join(TIER_STRENGTH)
        raise InvalidInput(f"expected tier in {tiers}, got {exemplar.tier!r}", "tier")


def replaces(stored: StoredLabel | None, new: Exemplar) -> bool:
    """Whether `new` may replace the stored label of its query: never a downgrade
    (feedback > teacher > ranker), and the same tool and tier again is no change."""
    if stored is None:
        return True
    if TIER_STRENGTH.get(stored.tier, 0) > TIER_STRENGTH[new.tier]:
        return False
    return not (stored.tool == new.tool and stored.tier == new.tier)


def plan_saves(
    exemplars: Sequence[Exemplar],
    stored: Mapping[str, StoredLabel],
    known_tools: Collection[str],
) -> tuple[list[Exemplar], list[Exemplar]]:
    """Apply the save rules to a batch in order: (changing, unknown_tool), both in input order.

    `stored` maps a normalised query to its current label. Two items of one batch with the same
    normalised query are applied in order, so the later one wins unless it would downgrade.
    """
    labels = dict(stored)
    changing: list[Exemplar] = []
    unknown: list[Exemplar] = []
    for exemplar in exemplars:
        check_tier(exemplar)
        if exemplar.tool not in known_tools:
            unknown.append(exemplar)
            continue
        key = exemplar.query_norm
        if replaces(labels.get(key), exemplar):
            labels[key] = StoredLabel(exemplar.tool, exemplar.tier)
            changing.append(exemplar)
    return changing, unknown


def last_per_query(exemplars: Sequence[Exemplar]) -> list[Exemplar]:
    """The last exemplar of each normalised query (what a batch leaves stored), in input order."""
    last = {e.query_norm: i for i, e in enumerate(exemplars)}
    return [e for i, e in enumerate(exemplars) if last[e.query_norm] == i]


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
        ranker) is never replaced by a weaker one; the same tool and tier again is no change;
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
