"""The stores the benchmark runs on: settings for each, what they recorded, a clean Neo4j.

What a run recorded is read through the `Store` contract (the named analyses every store
answers alike), so the counts mean the same on SQLite and Neo4j and the benchmark does not
depend on either schema. Only `wipe_neo4j` goes around it, for the reason it gives.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from toolselect.config import Settings
from toolselect.store.factory import open_store
from toolselect.store.port import Store


def store_settings(
    store: str, workdir: Path, *, db_name: str = "store.db", query_cache: int = 0
) -> Settings:
    """Settings of `store` (`sqlite` in `workdir/db_name`, or the `NEO4J_*` database).

    The targets are stated for `hashing` without a teacher, whatever the environment says.
    """
    if store == "neo4j":
        settings = Settings(
            store="neo4j",
            neo4j_uri=os.environ["NEO4J_URI"],
            neo4j_username=os.environ.get("NEO4J_USERNAME", "neo4j"),
            neo4j_password=os.environ.get("NEO4J_PASSWORD", ""),
            neo4j_database=os.environ.get("NEO4J_DATABASE", "neo4j"),
            data_dir=str(workdir),
            teacher="none",
            embedder="hashing",
            query_cache=query_cache,
        )
    else:
        settings = Settings(
            store=f"sqlite:{workdir / db_name}",
            data_dir=str(workdir),
            teacher="none",
            embedder="hashing",
            query_cache=query_cache,
        )
    settings.validate()
    return settings


async def turn_outcomes(store: Store, since: datetime | None = None) -> dict[str, int]:
    """Turns stamped at or after `since` (all with None), by `tier/result`, `-` for none.

    `drift` counts every turn and `oracle_usage` the flagged ones by tier and result; the
    rest were never flagged, so no tier decided them: `-/-`. Call it once nothing is being
    written (the two reads are not one snapshot).
    """
    drift = await store.analytics("drift", since)
    column = drift.columns.index("turns")
    total = sum(int(row[column]) for row in drift.rows)
    usage = await store.analytics("oracle_usage", since)
    counts: dict[str, int] = {}
    for tier, result, decisions, *_ in usage.rows:
        key = f"{tier or '-'}/{result or '-'}"
        counts[key] = counts.get(key, 0) + int(decisions)
    undecided = total - sum(counts.values())
    if undecided:
        counts["-/-"] = counts.get("-/-", 0) + undecided
    return counts


async def recorded_turns(settings: Settings, since: datetime | None = None) -> dict[str, int]:
    """`turn_outcomes` of the store `settings` name, opened for the read and closed after it
    (for a store a server process wrote and has let go of)."""
    store = await open_store(settings)
    try:
        return await turn_outcomes(store, since)
    finally:
        await store.close()


def wipe_neo4j() -> None:
    """Delete everything in the benchmark's Neo4j database (the schema is kept).

    Bypasses the `Store` on purpose: the contract has no "delete everything" (a service never
    wants one, and turns and oracle calls cannot be deleted through it at all), but each
    intake and load run must start on an empty database for its figures to compare.
    """
    from neo4j import GraphDatabase

    password = os.environ.get("NEO4J_PASSWORD", "")
    auth = (os.environ.get("NEO4J_USERNAME", "neo4j"), password) if password else None
    database = os.environ.get("NEO4J_DATABASE", "neo4j")
    with GraphDatabase.driver(os.environ["NEO4J_URI"], auth=auth) as driver:
        # In slices, so one transaction never holds a whole run's turns in the heap (20,000
        # nodes a slice went over the test server's 256 MiB of transaction memory). The edges
        # go first: a tool used by a hundred thousand turns would take all its edges with it
        # in the one slice that deletes it.
        for query in (
            "MATCH ()-[r]->() WITH r LIMIT 20000 DELETE r RETURN count(*) AS c",
            "MATCH (n) WITH n LIMIT 5000 DETACH DELETE n RETURN count(*) AS c",
        ):
            while True:
                records, _, _ = driver.execute_query(query, database_=database)
                if records[0]["c"] == 0:
                    break
