"""The rules every store applies to the records, written once as pure functions.

The SQLite store, the Neo4j store and the write spool must agree on these; each used to spell
them out itself, and they drifted:

- row mapping: a record as the flat row a store keeps, and back (`tool_row`, `turn_row`,
  `exemplar_row`, `call_row` and their `*_from_row`); a store only says how it writes and reads
  a time;
- labels: one per normalised query, never a downgrade nor a human label over a later human one
  (`supersedes`), a batch applied in order (`plan_saves`);
- retention: three steps over the non-exempt exemplars, newest kept (`retention_plan`, with
  `evictions` as the executable statement of what the stores' queries select);
- tenants: a store is opened for one tenant and applies all of these within it; API keys are
  not a tenant's data and live with the `default` tenant's store only (`check_key_tenant`).

Nothing here does I/O or imports a backend library (`tests/unit/test_purity.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

from toolselect.errors import InvalidInput, StoreError
from toolselect.keys import DEFAULT_TENANT
from toolselect.records import (
    TIER_STRENGTH,
    Exemplar,
    OracleCall,
    Retention,
    SaveResult,
    Tool,
    Turn,
    canonical_json,
    pack_vector,
    unpack_vector,
    utc,
)


def check_key_tenant(tenant: str) -> None:
    """API keys live in the `default` tenant's store (the one the service reads them from);
    another tenant's store refuses every key method with `StoreError`."""
    if tenant != DEFAULT_TENANT:
        raise StoreError(
            f"keys live in the {DEFAULT_TENANT!r} tenant's store, not in tenant {tenant!r}'s"
        )


# Human labels are the loop's ground truth: retention neither evicts nor counts them.
RETENTION_EXEMPT: tuple[str, ...] = ("feedback",)

WriteTime = Callable[[datetime], Any]
"""How a store writes a time (ISO text for SQLite, an aware datetime for Neo4j)."""
ReadTime = Callable[[Any], datetime]
"""How a store reads a time it wrote back into an aware UTC datetime."""


# --- row mapping ------------------------------------------------------------------------------

_TURN_FIELDS = tuple(f.name for f in fields(Turn))
_CALL_FIELDS = tuple(f.name for f in fields(OracleCall))
_EXEMPLAR_FIELDS = tuple(f.name for f in fields(Exemplar))


def tool_row(tool: Tool) -> dict[str, Any]:
    """A tool's stored properties (packs are stored apart): the schema as canonical JSON, and
    the derived names and content hash the stores index and compare."""
    return {
        "name": tool.name,
        "namespace": tool.namespace,
        "bare_name": tool.bare_name,
        "description": tool.description,
        "input_schema": canonical_json(tool.input_schema),
        "content_hash": tool.content_hash,
    }


def tool_from_row(row: Mapping[str, Any], packs: Iterable[str]) -> Tool:
    """The tool of a stored row, its packs sorted."""
    schema = json.loads(row.get("input_schema") or "{}")
    return Tool(row["name"], row.get("description") or "", schema, tuple(sorted(packs)))


def turn_row(turn: Turn, write_time: WriteTime) -> dict[str, Any]:
    """A turn's stored properties, one per field (the used tools as a JSON list, or None)."""
    row = {name: getattr(turn, name) for name in _TURN_FIELDS}
    row["at"] = write_time(turn.at)
    row["used_tools"] = canonical_json(list(turn.used_tools)) if turn.used_tools else None
    return row


def turn_from_row(row: Mapping[str, Any], read_time: ReadTime) -> Turn:
    values: dict[str, Any] = {name: row.get(name) for name in _TURN_FIELDS}
    values["at"] = read_time(values["at"])
    values["flagged"] = bool(values["flagged"])
    values["used_tools"] = tuple(json.loads(values["used_tools"] or "[]"))
    return Turn(**values)


def exemplar_row(exemplar: Exemplar, write_time: WriteTime, version: int) -> dict[str, Any]:
    """An exemplar's stored properties at `version`: its fields (a flat copy: the embedding is
    thousands of floats), the normalised query it is unique by, the embedding packed."""
    row = {name: getattr(exemplar, name) for name in _EXEMPLAR_FIELDS}
    return row | {
        "query_norm": exemplar.query_norm,
        "embedding": pack_vector(exemplar.embedding),
        "created_at": write_time(exemplar.created_at),
        "version": version,
    }


def recount_row(exemplar: Exemplar, write_time: WriteTime, version: int) -> dict[str, Any]:
    """What a recount writes over a stored exemplar (`SavePlan.recounts`)."""
    return {
        "query_norm": exemplar.query_norm,
        "count": exemplar.count,
        "created_at": write_time(exemplar.created_at),
        "version": version,
        "turn_id": exemplar.turn_id,
    }


def exemplar_from_row(row: Mapping[str, Any], read_time: ReadTime) -> Exemplar:
    """The exemplar of a stored row; extra properties (the normalised query, keys) are ignored."""
    return Exemplar(
        id=row["id"],
        query=row["query"],
        tool=row["tool"],
        tier=row["tier"],
        embedder=row["embedder"],
        embedding=_embedding(row.get("embedding")),
        created_at=read_time(row["created_at"]),
        confidence=float(row["confidence"]),
        turn_id=row.get("turn_id"),
        version=int(row["version"]),
        count=1 if row.get("count") is None else int(row["count"]),
    )


def _embedding(value: Any) -> tuple[float, ...]:
    """Float32 bytes as written now, or the list of floats older Neo4j stores wrote."""
    if isinstance(value, bytes | bytearray):
        return unpack_vector(value)
    return tuple(float(x) for x in value or ())


def call_row(call: OracleCall, write_time: WriteTime) -> dict[str, Any]:
    """An oracle call's stored properties, one per field."""
    row = {name: getattr(call, name) for name in _CALL_FIELDS}
    row["at"] = write_time(call.at)
    return row


def call_from_row(row: Mapping[str, Any], read_time: ReadTime) -> OracleCall:
    values: dict[str, Any] = {name: row.get(name) for name in _CALL_FIELDS}
    values["at"] = read_time(values["at"])
    return OracleCall(**values)


# --- the label rules --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredLabel:
    """The part of a stored exemplar the save rules look at."""

    tool: str
    tier: str
    count: int = 1
    id: str | None = None
    turn_id: str | None = None
    """The turn that last counted it: that turn sent again (a retry, a spool replayed twice)
    is the same sighting, not another."""
    created_at: datetime | None = None
    """Its time, which a sighting against it keeps (`counted`) and a human label older than a
    human one does not replace (`supersedes`); None: not read. Every store reads it (and `id`)
    with the label, inside its save transaction."""


def stored_label_of(exemplar: Exemplar) -> StoredLabel:
    """What the save rules see of `exemplar` once it is stored (or pending in the spool)."""
    e = exemplar
    return StoredLabel(e.tool, e.tier, e.count, e.id, e.turn_id, e.created_at)


def last_per_name(tools: Sequence[Tool]) -> list[Tool]:
    """The tools an upsert writes: a name sent twice in one call counts once, its last
    definition winning (at the place of its first)."""
    return list({tool.name: tool for tool in tools}.values())


def check_tier(exemplar: Exemplar) -> None:
    """Refuse a tier outside `TIER_STRENGTH` before anything is written."""
    if exemplar.tier not in TIER_STRENGTH:
        tiers = ", ".join(TIER_STRENGTH)
        raise InvalidInput(f"expected tier in {tiers}, got {exemplar.tier!r}", "tier")


def check_tiers(exemplars: Iterable[Exemplar]) -> None:
    """`check_tier` for a batch: one bad tier refuses the whole batch before any I/O."""
    for exemplar in exemplars:
        check_tier(exemplar)


def supersedes(new: Exemplar, stored: StoredLabel | None, *, replayed: bool = False) -> bool:
    """Whether `new` changes the stored label of its query: never a downgrade (feedback >
    teacher > usage > ranker), never a `replayed` human label over a later human one
    (`_overtaken`), and the same tool and tier again is no change, except for usage labels,
    where every other turn's sighting counts, for the stored tool or against it (`counted`)."""
    if stored is None:
        return True
    if TIER_STRENGTH.get(stored.tier, 0) > TIER_STRENGTH[new.tier]:
        return False
    if replayed and _overtaken(new, stored):
        return False
    if new.tier == "usage" and stored.tier == "usage":
        return not _same_turn(new, stored)
    return not (stored.tool == new.tool and stored.tier == new.tier)


def _same_turn(new: Exemplar, stored: StoredLabel) -> bool:
    return new.turn_id is not None and new.turn_id == stored.turn_id


def _overtaken(new: Exemplar, stored: StoredLabel | None) -> bool:
    """Whether the stored label is a later human label than the human label `new`: another
    replica's, saved while this one spooled `new`. A human's latest word stands; the store
    checks it under its save lock, so no save slips between read and write. Asked only of a
    replayed label: a live one is the latest word by the time it is saved, and comparing its
    time with another replica's would let a clock running behind refuse a human's correction."""
    return (
        stored is not None
        and new.tier == stored.tier == "feedback"
        and stored.id != new.id
        and stored.created_at is not None
        and utc(stored.created_at) > utc(new.created_at)  # a naive time is UTC, as stored
    )


def counted(new: Exemplar, stored: StoredLabel | None) -> Exemplar:
    """`new` as written over `stored`, once `supersedes` allowed it. Usage labels of a query
    keep a running majority (Boyer-Moore's), so a tool most agents used wins however a wrong one
    came first: a sighting of the stored tool adds to its count, one of another tool takes from
    it (down to 0, the label staying), and a sighting against a count of 0 takes its place with
    its own count. A label that stays keeps the stored label's id; its `created_at` moves to a
    sighting of its tool, never to one against it."""
    if stored is None or not new.tier == "usage" == stored.tier:
        return new
    if new.tool == stored.tool:
        return replace(new, id=stored.id or new.id, count=stored.count + new.count)
    if new.count <= stored.count:
        # A vote against: the label keeps the time of the latest sighting that confirmed it,
        # which retention expires it by and the analyses date it by (a label losing votes must
        # not look new); no other "last seen" time is kept. Its turn moves (that turn sent again
        # is this sighting), and the write its version (replicas read the new count).
        kept = new.created_at if stored.created_at is None else stored.created_at
        return replace(
            new,
            id=stored.id or new.id,
            tool=stored.tool,
            count=stored.count - new.count,
            created_at=kept,
        )
    return replace(new, count=new.count - stored.count)


def recounts(written: Exemplar, stored: StoredLabel | None) -> bool:
    """Whether `written` (as `counted` made it) only changes the count of the stored usage
    label: the same row, its tool unchanged."""
    return (
        stored is not None
        and written.tier == "usage" == stored.tier
        and written.tool == stored.tool
        and stored.id in (None, written.id)
    )


def last_per_query(exemplars: Sequence[Exemplar]) -> list[Exemplar]:
    """The last exemplar of each normalised query (what a batch leaves stored), in input order."""
    last = {e.query_norm: i for i, e in enumerate(exemplars)}
    return [e for i, e in enumerate(exemplars) if last[e.query_norm] == i]


@dataclass(frozen=True, slots=True)
class SavePlan:
    """What one `save_exemplars` batch does, decided before anything is written."""

    changing: tuple[Exemplar, ...]
    """The items that change the store, in input order (a query may appear more than once)."""
    unknown_tool: tuple[Exemplar, ...]
    overtaken: tuple[Exemplar, ...] = ()
    """Human labels left for a later human label of their query (`_overtaken`)."""
    recounted: frozenset[str] = frozenset()
    """Normalised queries whose stored row only changes its count (`recounts` against what was
    stored before the batch): its count, time (as `counted` kept or moved it), version and
    turn change, nothing else."""

    @property
    def written(self) -> list[Exemplar]:
        """The rows to write whole: the last changing item of each query not `recounted`."""
        return [e for e in last_per_query(self.changing) if e.query_norm not in self.recounted]

    @property
    def recounts(self) -> list[Exemplar]:
        """The rows whose count (and time, version, turn) alone is written."""
        return [e for e in last_per_query(self.changing) if e.query_norm in self.recounted]

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools of the rows written whole, sorted: the ones whose retention cap is checked
        (a recount adds no row)."""
        return tuple(sorted({e.tool for e in self.written}))

    def result(self, version: int = 0, evicted: int = 0) -> SaveResult:
        """The call's answer once the writes carry `version`."""
        changed = tuple(replace(e, version=version) for e in self.changing)
        return SaveResult(changed, self.unknown_tool, evicted, self.overtaken)


def plan_saves(
    exemplars: Sequence[Exemplar],
    stored: Mapping[str, StoredLabel],
    known_tools: Collection[str],
    *,
    replayed: bool = False,
) -> SavePlan:
    """Apply the save rules to a batch in order.

    `stored` maps a normalised query to its current label, as read under the save's lock. Two
    items of one batch with the same normalised query are applied in order, so the later one
    wins unless it would downgrade or, `replayed`, is a human label older than a human one
    before it. The human labels left for a later one are named apart (`SavePlan.overtaken`): the
    spool's replay reports them and the live ranker lets them go.
    """
    labels = dict(stored)
    changing: list[Exemplar] = []
    unknown: list[Exemplar] = []
    overtaken: list[Exemplar] = []
    for exemplar in exemplars:
        check_tier(exemplar)
        if exemplar.tool not in known_tools:
            unknown.append(exemplar)
            continue
        key = exemplar.query_norm
        stored_label = labels.get(key)
        if supersedes(exemplar, stored_label, replayed=replayed):
            exemplar = counted(exemplar, stored_label)
            labels[key] = stored_label_of(exemplar)
            changing.append(exemplar)
        elif replayed and _overtaken(exemplar, stored_label):
            overtaken.append(exemplar)
    # A query whose last write of the batch only counts more sightings of what was stored.
    recounted = frozenset(
        e.query_norm for e in last_per_query(changing) if recounts(e, stored.get(e.query_norm))
    )
    return SavePlan(tuple(changing), tuple(unknown), tuple(overtaken), recounted)


# --- retention --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """One retention pass, as the parameters both stores' queries take.

    Over the exemplars whose tier is not in `exempt`, in order, each step seeing what the
    earlier ones removed: (1) those created before `cutoff`; (2) for each of `tools`, all but
    its newest `per_tool`; (3) all but the newest `total`. Newest means latest `created_at`,
    then highest `version`, then greatest `id` (`newest_first`).
    """

    cutoff: datetime
    tools: tuple[str, ...]
    per_tool: int
    total: int
    exempt: tuple[str, ...] = RETENTION_EXEMPT


def retention_plan(limits: Retention, now: datetime, tools: Iterable[str]) -> RetentionPlan:
    """The pass a batch that wrote to `tools` runs at `now`; negative caps keep nothing."""
    return RetentionPlan(
        cutoff=utc(now) - timedelta(days=limits.max_age_days),
        tools=tuple(sorted(set(tools))),
        per_tool=max(limits.per_tool, 0),
        total=max(limits.total, 0),
    )


def newest_first(exemplar: Exemplar) -> tuple[datetime, int, str]:
    """Sort key, used with `reverse=True`, for the order retention keeps exemplars in."""
    return utc(exemplar.created_at), exemplar.version, exemplar.id


def evictions(plan: RetentionPlan, held: Iterable[Exemplar]) -> list[Exemplar]:
    """What `plan` evicts from the stored exemplars `held`, step by step: the rule the stores'
    queries implement, stated in Python so tests can hold both stores to it."""
    alive = sorted((e for e in held if e.tier not in plan.exempt), key=newest_first, reverse=True)
    gone = [e for e in alive if utc(e.created_at) < plan.cutoff]
    alive = [e for e in alive if utc(e.created_at) >= plan.cutoff]
    for tool in plan.tools:
        beyond = {id(e) for e in [e for e in alive if e.tool == tool][plan.per_tool :]}
        gone += [e for e in alive if id(e) in beyond]
        alive = [e for e in alive if id(e) not in beyond]
    return gone + alive[plan.total :]
