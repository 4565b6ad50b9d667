"""The store's records: plain frozen dataclasses, and the encodings every store shares.

Records have no behaviour beyond derived fields, so the pure core (ranker, detector, oracle
policy) can use them without importing any adapter; the rules the stores apply to them are in
`toolselect.store.rules`. `toolselect.store.port` re-exports both for existing imports.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from toolselect.names import bare_name, namespace, normalise_query

Tier = Literal["ranker", "usage", "teacher", "feedback"]
# `usage` is an agent's own successful choice: stronger than the ranker's confident top-1 (the
# agent saw the result), weaker than a teacher's or a human's label (agents make mistakes).
TIER_STRENGTH: Mapping[str, int] = {"ranker": 1, "usage": 2, "teacher": 3, "feedback": 4}
# Labels whose truth does not come from the ranker: they calibrate and validate the loop.
TRUSTED_TIERS = frozenset({"teacher", "feedback"})
# Where a label's truth comes from, as the fold weighs it: a teacher or a human (`trusted`), the
# agent's own successful choice (`usage`), or the ranker's own confident top-1 (`own`).
LabelGroup = Literal["trusted", "usage", "own"]


def label_group(tier: str) -> LabelGroup:
    """The label group of an exemplar tier."""
    return "trusted" if tier in TRUSTED_TIERS else "usage" if tier == "usage" else "own"


Outcome = Literal["ok", "error", "corrected"]
# Where a turn's used tool stood in the search it reports (`search_id`): among the tools shown,
# not among them, or the search is not known here (unknown, expired, forgotten, or from another
# replica or pack).
SearchStatus = Literal["shown", "not_shown", "unknown", "other_pack"]
OracleResult = Literal["labeled", "declined", "limit_reached", "error"]
# How the reason of a turn the spent teacher budget refused ends (`Oracle._spent`: "hourly
# budget of 60 calls spent"): a restarted service finds those turns by it in the store
# (`TurnStore.refused_turns`), apart from the turns a teacher backlog refused.
BUDGET_SPENT = " calls spent"
# What an API key may do, weakest first (`toolselect.keys` holds the route table).
Role = Literal["agent", "editor", "admin"]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text (and hashes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def pack_vector(values: Sequence[float]) -> bytes:
    """An embedding as stored: float32, little-endian (a quarter of a list of floats on the wire,
    and one copy to encode or decode instead of one object per value)."""
    return struct.pack(f"<{len(values)}f", *values)


def unpack_vector(blob: bytes | bytearray) -> tuple[float, ...]:
    return struct.unpack(f"<{len(blob) // 4}f", blob)


def utc(value: datetime) -> datetime:
    """Aware and in UTC; every store takes a naive time to be UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# --- records ----------------------------------------------------------------------------------


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
    session_id: str | None = None
    # Every tool the turn used, in order, when it used more than one (`used_tool` is the first).
    used_tools: tuple[str, ...] = ()
    search_id: str | None = None
    search_status: str | None = None
    shown_position: int | None = None  # 1-based, among the tools the search showed
    shown_k: int | None = None  # how many tools the search showed
    # Why the oracle decided as it did, as the `turn_labelled` log says: the budget that refused
    # a `limit_reached` turn, the teacher's pick a `declined` one names, an `error`'s failure.
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Exemplar:
    """A confirmed (query -> tool) label; the store keeps one per normalised query.

    `count` is how many times the label was seen: a usage label confirmed again (the same
    query used with the same tool) is counted on the one exemplar, whose `created_at` then
    moves to the latest sighting (retention keeps what is seen recently); a sighting of another
    tool takes one from it and leaves `created_at` as it was (`store.rules.counted`: a running
    majority)."""

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
    count: int = 1

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

    @property
    def billed(self) -> bool:
        """Whether the provider charged for it: it answered, or reported tokens it counted."""
        return self.result in ("labeled", "declined") or self.input_tokens > 0


@dataclass(frozen=True, slots=True)
class StoreState:
    """Monotonic counters replicas poll to learn that another replica wrote something."""

    catalog_version: int
    exemplar_version: int


@dataclass(frozen=True, slots=True)
class UpsertResult:
    """Tools written and tools already stored as given; `moved`: whether the write moved the
    catalog version (a tool written, or one added to the pack), which a replica's ranker must
    know to tell its own write from another replica's."""

    upserted: int
    unchanged: int
    moved: bool


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
    version of `changed`); `overtaken` the human labels left because the store holds a later
    human label of their query (`store.rules.supersedes`).
    """

    changed: tuple[Exemplar, ...] = ()
    unknown_tool: tuple[Exemplar, ...] = ()
    evicted: int = 0
    overtaken: tuple[Exemplar, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnsDeleted:
    """What one `delete_turns` batch deleted: turns, teacher calls, and the sessions whose last
    turn went with them (each expired for good: a session's last turn is its newest)."""

    turns: int = 0
    calls: int = 0
    sessions: int = 0

    def full(self, limit: int) -> bool:
        """Whether the batch took `limit` turns or `limit` calls: more of them may be left
        (fewer of both means none is; sessions go with their turns and count for nothing)."""
        return limit > 0 and (self.turns >= limit or self.calls >= limit)


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
class ApiKey:
    """An API key as stored: never the key itself, only its SHA-256 (`hash`, hex) and the first
    characters to recognise it by (`prefix`). It belongs to one tenant and has one role; a
    revoked key (`revoked_at` set) is kept, and refused (`toolselect.keys`)."""

    id: str
    hash: str
    prefix: str
    tenant: str
    role: Role
    created_at: datetime
    name: str | None = None
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True, slots=True)
class Retention:
    """Limits the store enforces as it writes: exemplars (`feedback` exemplars are exempt from
    the first three), tool counts and sessions."""

    per_tool: int = 512
    total: int = 10_000
    max_age_days: float = 90.0
    relations_per_tool: int = 100
    """Tool counts kept per tool (`session_rules.kept_relations`): a tool's transitions, and its pairs
    (a pair stays while either of its tools keeps it)."""
    session_idle_s: float = 3600.0
    """Seconds after its last turn a session's next turn starts it afresh, with no step from
    that turn (`session_rules.session_expired`); 0: sessions never expire."""
