"""The Neo4j store's transaction steps: each runs named Cypher files inside a managed transaction
the store opens, so several operations share them and a step never commits on its own.

Every step runs on a `Scoped` transaction: one bound to the store's tenant, which adds `$tenant`
to every query it runs, so no step can read or write another tenant's nodes by forgetting it.

Times go to the server as aware UTC datetimes (`to_db`) and come back through `from_db`; the
rows themselves are `toolselect.store.rules`'s, shared with the SQLite store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, LiteralString, cast

from neo4j import AsyncManagedTransaction, Record
from neo4j.time import DateTime

from toolselect.names import CatalogNames
from toolselect.records import Exemplar, Retention, SaveResult, StoreState, Turn, utc
from toolselect.store.neo4j import cypher
from toolselect.store.rules import (
    RetentionPlan,
    StoredLabel,
    exemplar_row,
    plan_saves,
    recount_row,
    retention_plan,
)
from toolselect.store.session_rules import (
    SessionTail,
    catalog_lookup,
    plan_sessions,
    touches_sessions,
    turn_tools,
)


def q(name: str) -> LiteralString:
    """The text of `cypher/queries/<name>.cypher`."""
    # Query text only ever comes from the Cypher files shipped in the package (mypy reads
    # LiteralString as str, so no cast is needed for the driver's signature).
    return cypher.query(f"queries/{name}")


def query_key(query_norm: str) -> str:
    """The fixed-size key a normalised query is unique by: Neo4j range indexes refuse string
    keys over about 8 KiB, and NFKC can grow an 8 KiB query eighteenfold."""
    return hashlib.sha256(query_norm.encode()).hexdigest()


def to_db(value: datetime) -> datetime:
    """Aware UTC, so Neo4j stores a DateTime (a naive value is taken to be UTC)."""
    return utc(value)


def to_db_text(value: datetime) -> str:
    """A time of a batch row as ISO 8601 text, which the query turns into a DateTime: the
    driver's own DateTime encoding took more client time than the rest of a batch (~0.3 ms a
    value, against microseconds for the text)."""
    return to_db(value).isoformat()


def from_db(value: Any) -> datetime:
    native = value.to_native() if isinstance(value, DateTime) else value
    return cast(datetime, native).astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Scoped:
    """A managed transaction bound to one tenant: every query run through `rows` and `one`
    gets `$tenant` (over any `tenant` in the parameters)."""

    tx: AsyncManagedTransaction
    tenant: str


async def rows(tx: Scoped, name: str, params: dict[str, Any]) -> list[Record]:
    result = await tx.tx.run(q(name), {**params, "tenant": tx.tenant})
    return [record async for record in result]


async def one(tx: Scoped, name: str, params: dict[str, Any]) -> Record:
    return (await rows(tx, name, params))[0]


async def lock_meta(tx: Scoped) -> StoreState:
    """Take the write lock every version-moving write starts with; the versions under it."""
    row = await one(tx, "lock_meta", {})
    return StoreState(int(row["catalog_version"]), int(row["exemplar_version"]))


async def bump(tx: Scoped, *, catalog: int = 0, exemplar: int = 0) -> None:
    await rows(tx, "bump_versions", {"catalog": catalog, "exemplar": exemplar})


async def tombstone(tx: Scoped, ids: Sequence[str], version: int) -> int:
    """Delete exemplars by id, leaving tombstones at `version`; how many existed."""
    row = await one(tx, "tombstone_exemplars", {"ids": list(ids), "version": version})
    return int(row["deleted"])


async def record_turns(
    tx: Scoped, rows: list[dict[str, Any]], turns: Sequence[Turn], limits: Retention
) -> int:
    """MERGE turns (`rows`, of `turns`), then link and count those that were new."""
    tails = await lock_sessions(tx, turns)
    found = await one(tx, "record_turns", {"turns": rows})
    new_ids = set(found["new_ids"])
    await record_sessions(tx, [t for t in turns if t.id in new_ids], tails, limits)
    return int(found["created"])


async def create_turns(
    tx: Scoped, rows: list[dict[str, Any]], turns: Sequence[Turn], limits: Retention
) -> int:
    """CREATE turns none of which is stored (`rows`, of `turns`), then link and count them."""
    tails = await lock_sessions(tx, turns)
    created = int((await one(tx, "create_turns", {"turns": rows}))["created"])
    await record_sessions(tx, turns, tails, limits)
    return created


async def lock_sessions(tx: Scoped, turns: Sequence[Turn]) -> dict[str, SessionTail]:
    """Lock the sessions of `turns` until the transaction ends and read their last turns. Two
    replicas recording turns of one session at once would otherwise both link to the same last
    turn (a branch in NEXT) and count the same transitions. First in the transaction, before it
    locks turns and tools, and in id order, so two such writers wait rather than deadlock."""
    sessions = sorted({t.session_id for t in turns if t.session_id is not None})
    if not sessions:
        return {}
    found = await rows(tx, "session_tails", {"sessions": sessions})
    return {row["session"]: tail(row) for row in found}


def tail(row: Record) -> SessionTail:
    """A session's last turn as `session_tails` and `read_session_tails` return it."""
    at = None if row["at"] is None else from_db(row["at"])
    return SessionTail(row["turn"], tuple(row["tools"] or ()), at)


async def record_sessions(
    tx: Scoped, new_turns: Sequence[Turn], tails: Mapping[str, SessionTail], limits: Retention
) -> None:
    """Link turns recorded for the first time to their sessions (`tails`: their last turns, as
    `lock_sessions` read them; a session idle past `limits.session_idle_s` starts afresh) and
    count their tools, by the rules of `plan_sessions`, then keep `limits.relations_per_tool`
    counts per tool (`kept_relations`); the SQLite store applies the same rules to its tables."""
    if not touches_sessions(new_turns):
        return
    names = {name for t in new_turns for name in turn_tools(t)}
    names |= {name for tail in tails.values() for name in tail.tools}
    wanted, bares = catalog_lookup(names)
    known = (await one(tx, "known_tools", {"names": wanted, "bares": bares}))["names"]
    plan = plan_sessions(new_turns, tails, CatalogNames(known), idle_s=limits.session_idle_s)
    params = {
        "links": [{"session": s, "prev": p, "turn": t} for s, p, t in plan.links],
        "tails": [
            {"session": s, "turn": t.turn_id, "tools": list(t.tools)}
            for s, t in sorted(plan.tails.items())
        ],
        "pairs": [{"a": a, "b": b, "count": n} for (a, b), n in sorted(plan.pairs.items())],
        "transitions": [
            {"src": s, "dst": d, "count": n} for (s, d), n in sorted(plan.transitions.items())
        ],
        "seen": to_db_text(max(t.at for t in new_turns)),
    }
    await rows(tx, "link_sessions", params)
    if plan.pairs or plan.transitions:
        await rows(tx, "prune_relations", {"keep": max(limits.relations_per_tool, 0)})


async def save_exemplars(
    tx: Scoped, exemplars: Sequence[Exemplar], limits: Retention, now: datetime, replayed: bool
) -> SaveResult:
    """`Store.save_exemplars` in three queries whatever the batch size: lock and read the
    current labels, write (`UNWIND`), then retention and the version move."""
    keys = {e.query_norm: query_key(e.query_norm) for e in exemplars}
    guard = {"tools": sorted({e.tool for e in exemplars}), "keys": sorted(keys.values())}
    found = await one(tx, "exemplars_guard", guard)
    stored = {
        s["query_norm"]: StoredLabel(
            s["tool"],
            s["tier"],
            1 if s["count"] is None else s["count"],
            s["id"],
            s["turn_id"],
            from_db(s["created_at"]),
        )
        for s in found["stored"]
    }
    plan = plan_saves(exemplars, stored, set(found["known"]), replayed=replayed)
    if not plan.changing:
        return plan.result()
    version = int(found["exemplar_version"]) + 1
    written = []
    for exemplar in plan.written:
        # The tool is the SELECTS edge, not a property; the hashed key is what MERGE matches.
        row = exemplar_row(exemplar, to_db_text, version)
        tool = row.pop("tool")
        written.append({"tool": tool, "exemplar": row | {"query_key": keys[exemplar.query_norm]}})
    if written:
        await rows(tx, "save_exemplars", {"rows": written})
    recounts = [
        recount_row(e, to_db_text, version) | {"query_key": keys[e.query_norm]}
        for e in plan.recounts
    ]
    if recounts:
        await rows(tx, "recount_exemplars", {"rows": recounts})
    if not written:
        # Only counts moved: no exemplar was added, so no cap can be exceeded (expiry waits for
        # the next batch that adds one), and the retention pass, which counts every exemplar,
        # is not worth its cost on every repeat.
        await bump(tx, exemplar=1)
        return plan.result(version)
    retention = _retention_params(retention_plan(limits, now, plan.tools))
    evicted = int((await one(tx, "evict_exemplars", retention | {"version": version}))["evicted"])
    return plan.result(version, evicted)


async def expire_exemplars(tx: Scoped, limits: Retention, now: datetime) -> int:
    """`Store.expire_exemplars`: the retention pass without a save, under the state lock; the
    exemplar version moves (`evict_exemplars`) only when `retention_due` finds something."""
    state = await lock_meta(tx)
    params = _retention_params(retention_plan(limits, now, ()))
    if not (await one(tx, "retention_due", params))["due"]:
        return 0
    version = state.exemplar_version + 1
    return int((await one(tx, "evict_exemplars", params | {"version": version}))["evicted"])


def _retention_params(plan: RetentionPlan) -> dict[str, Any]:
    """A `RetentionPlan` as `evict_exemplars` (and `retention_due`) take it."""
    return {
        "cutoff": plan.cutoff,
        "tools": list(plan.tools),
        "per_tool": plan.per_tool,
        "total": plan.total,
        "exempt": list(plan.exempt),
    }
