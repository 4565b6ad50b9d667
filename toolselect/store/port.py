"""The Store contract: the async `Store` Protocol both stores (and the buffered wrapper) implement.

The records it speaks in are in `toolselect.records`, the rules every store applies in
`toolselect.store.rules`; both are re-exported here, so `from toolselect.store.port import
Tool, Exemplar, plan_saves` keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from toolselect.errors import NotFound
from toolselect.names import normalise_query
from toolselect.records import (
    TIER_STRENGTH,
    TRUSTED_TIERS,
    AnalyticsResult,
    ApiKey,
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
    TurnsDeleted,
    UpsertResult,
    canonical_json,
    pack_vector,
    unpack_vector,
    utc,
)
from toolselect.store.rules import (
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
from toolselect.store.session_rules import SessionTail

# Everything that used to live here stays importable from here.
__all__ = [
    "RETENTION_EXEMPT",
    "TIER_STRENGTH",
    "TRUSTED_TIERS",
    "AnalyticsResult",
    "AnalyticsStore",
    "CatalogStore",
    "Exemplar",
    "ExemplarDelta",
    "KeyStore",
    "LabelStore",
    "LearnerStore",
    "OracleCall",
    "OracleResult",
    "Outcome",
    "Retention",
    "RetentionPlan",
    "RetentionStore",
    "SavePlan",
    "SaveResult",
    "Store",
    "StoreState",
    "StoredLabel",
    "Tier",
    "Tool",
    "Turn",
    "TurnStore",
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


class CatalogStore(Protocol):
    """The catalog: tools by name, with their packs (the catalog facade, the live index)."""

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


class LabelStore(Protocol):
    """The labels: exemplars one per normalised query, and the versions replicas poll."""

    async def save_exemplars(
        self, exemplars: Sequence[Exemplar], *, replayed: bool = False
    ) -> SaveResult:
        """Keep each exemplar as the label of its normalised query, unless that would downgrade.

        One transaction per call. A stored exemplar of a stronger tier (feedback > teacher >
        usage > ranker) is never replaced by a weaker one, nor, when the labels are `replayed`
        (made earlier, while the store was down: the spool's replay), a human label by an older
        human one (reported in `overtaken`); the same tool and tier again is no change, except that
        usage labels keep a running majority per query (`counted`); items are applied in order
        (`plan_saves`), against the labels read in the same transaction. An exemplar whose tool
        is not in the catalog is skipped and reported in `unknown_tool`. When anything changed, `exemplar_version`
        moves once and every change of the call (writes and retention evictions) carries the
        new version. Retention limits apply once, after the writes, in the same transaction.
        """
        ...

    async def exemplars_for_queries(self, queries: Sequence[str]) -> dict[str, Exemplar]:
        """The stored exemplars of the queries' normalised forms, keyed by normalised query
        (misses are absent); one round trip."""
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

    async def state(self) -> StoreState:
        """The current catalog and exemplar versions."""
        ...


class TurnStore(Protocol):
    """Observed turns and the teacher calls made about them."""

    async def record_turns(self, turns: Sequence[Turn]) -> int:
        """Store turns in one batch; a turn id already stored is updated, never duplicated.

        Returns how many turns were new.
        """
        ...

    async def get_turn(self, turn_id: str) -> Turn | None:
        """One turn by id."""
        ...

    async def recorded_turn_ids(self, turn_ids: Sequence[str]) -> set[str]:
        """Which of `turn_ids` are stored turns; one round trip (the learner skips a turn sent
        again, whatever came between)."""
        ...

    async def undecided_turns(self, before: datetime, limit: int) -> list[Turn]:
        """At most `limit` turns the teacher tier took up and never finished (`tier` teacher,
        no `result`), observed before `before`, oldest first (by `at`, then id)."""
        ...

    async def refused_turns(self, before: datetime, limit: int) -> list[Turn]:
        """At most `limit` turns the spent teacher budget refused that nothing decided since,
        observed before `before`, newest first (by `at`, then id): `tier` teacher, `result`
        `limit_reached` with a `reason` ending in `BUDGET_SPENT` (not a teacher backlog's), and
        no teacher call traced for them (one asked about again and traced is no longer
        undecided, even if its new result was not recorded). What a restarted service takes
        back to ask about once its budget has room."""
        ...

    async def session_tails(self, session_ids: Sequence[str]) -> dict[str, SessionTail]:
        """Each session's last recorded turn: its id, catalog tools and time, by session id (a
        session with no turn recorded is absent); one round trip."""
        ...

    async def session_turns(self, limit: int) -> list[Turn]:
        """The `limit` most recently recorded turns that have a session, newest first (by
        `at`, then id): what the session fit learns the conversation signals from."""
        ...

    async def record_oracle_call(self, call: OracleCall) -> None:
        """Trace one teacher attempt; linked to its turn when `turn_id` is set."""

    async def oracle_calls(
        self, turn_id: str | None = None, since: datetime | None = None
    ) -> list[OracleCall]:
        """Traced calls, oldest first (all, or one turn's; those at or after `since`)."""
        ...


class AnalyticsStore(Protocol):
    """The named analyses over turns, exemplars and oracle calls."""

    async def analytics(self, name: str, since: datetime | None = None) -> AnalyticsResult:
        """Run one named analysis over turns (and exemplars, oracle calls) at or after `since`.

        `since=None` means all time; a naive `since` is taken to be UTC. An unknown name raises
        `NotFound`.
        """
        ...


class KeyStore(Protocol):
    """API keys (`toolselect.keys`): never a key itself, only its SHA-256 and display prefix.
    What the key registry loads and the key management routes and commands write."""

    async def save_key(self, key: ApiKey) -> None:
        """Store a new key; an id or hash already stored raises `StoreError`."""

    async def revoke_key(self, key_id: str) -> bool:
        """Mark a key revoked now (by the store's clock); True when the key exists. A key
        revoked before keeps its first `revoked_at`."""
        ...

    async def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        """Keys, revoked ones too, of one tenant (all with None), oldest first (by
        `created_at`, then id). All of them is what the registry loads: a revoked key still
        keeps authentication on."""
        ...

    async def active_keys(self) -> list[ApiKey]:
        """Every key not revoked, of every tenant, oldest first (whether `serve` may bind
        beyond loopback)."""
        ...


class RetentionStore(Protocol):
    """What the upkeep's retention pass asks of a store: labels past their age, and turns past
    theirs, gone without waiting for a write. Each call is one bounded transaction."""

    async def expire_exemplars(self, now: datetime) -> int:
        """The retention pass a save ends with (`retention_plan` at `now`, no tool's cap), run
        without a save: a quiet store's labels expire too. When it evicts anything,
        `exemplar_version` moves once and every eviction leaves a tombstone at it (what a poll
        folds); otherwise nothing moves. How many labels went."""
        ...

    async def delete_turns(self, before: datetime, limit: int) -> TurnsDeleted:
        """Delete at most `limit` turns observed before `before` (with their edges: USED,
        PRODUCED, ESCALATED, HAS, NEXT; the SQLite twin's `turn_next` rows), the sessions whose
        last turn was one of them (expired: `session_rules.session_expired`), and at most
        `limit` teacher calls traced before it, in one transaction; how many of each went
        (`TurnsDeleted.full`: whether more may be left). Labels made from a turn stay, the
        tool counts their counts, a session with a kept last turn its tail."""
        ...


class LearnerStore(TurnStore, LabelStore, Protocol):
    """What the learner writes and reads: turns, labels and their ratchet lookup."""


class Store(CatalogStore, LearnerStore, AnalyticsStore, KeyStore, RetentionStore, Protocol):
    """Where tools, turns, exemplars, oracle calls and API keys live; shared by every replica.
    Callers depend on the part they use (`CatalogStore`, `LabelStore`, `TurnStore`,
    `AnalyticsStore`, `KeyStore`, `RetentionStore`); the composition root and the stores
    themselves hold the whole.

    A store is one tenant's view (`tenant`): every read and write is scoped to it by the store
    itself. API keys are the exception: they are not a tenant's data (each names its own) and
    only the `default` tenant's store holds them; another tenant's raises `StoreError`.

    Every method is a coroutine and never blocks the event loop. Failures to reach the backend
    raise `StoreUnavailable`; other backend failures raise `StoreError`.
    """

    @property
    def uri(self) -> str:
        """Where the store lives, for messages (never includes credentials)."""
        ...

    @property
    def tenant(self) -> str:
        """The tenant whose data this store reads and writes (`toolselect.keys.TENANT_PATTERN`;
        `default` unless opened for another): nothing of another tenant is ever read, written
        or counted in its versions, and names and ids are unique per tenant only."""
        ...

    async def migrate(self, *, reader: bool = False) -> None:
        """Create constraints, indexes and the state record; idempotent. A `reader` (the exec
        selector, which only reads) takes no write lock, so a writer holding one never holds
        it up: the SQLite store then writes nothing to a file at the current schema, Neo4j
        creates its schema where missing but not the state record (reads do without it)."""

    async def exists(self) -> bool:
        """Whether anything of this tenant is stored (its SQLite file; on Neo4j any node of it,
        the state record `migrate` writes included), creating nothing: what
        `TenantServices.known` asks before a request that makes no data starts the tenant."""
        ...

    async def ping(self) -> None:
        """Raise `StoreUnavailable` unless the backend answers now."""

    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""


async def save_one(store: LabelStore, exemplar: Exemplar) -> bool:
    """Save one exemplar (`save_exemplars` of one): whether it changed the store; `NotFound`
    for an unknown tool."""
    result = await store.save_exemplars([exemplar])
    if result.unknown_tool:
        raise NotFound(f"unknown tool {exemplar.tool!r}")
    return bool(result.changed)


async def lookup_one(store: LabelStore, query: str) -> Exemplar | None:
    """The exemplar of a query's normalised form, if any (`exemplars_for_queries` of one)."""
    return (await store.exemplars_for_queries([query])).get(normalise_query(query))
