"""The configured store, opened from settings (the Neo4j driver is imported only for Neo4j)."""

from __future__ import annotations

from toolselect.clock import Clock, utc_now
from toolselect.config import Settings
from toolselect.keys import DEFAULT_TENANT
from toolselect.records import Retention
from toolselect.store.port import Store


async def open_store(
    settings: Settings,
    *,
    verify: bool = True,
    tenant: str = DEFAULT_TENANT,
    beside: Store | None = None,
    read_only_fallback: bool = False,
    clock: Clock = utc_now,
) -> Store:
    """The configured store of `tenant` (not yet migrated); `StoreUnavailable` names the URI and
    cause. A deployment without tenants uses `default`, whose data is where it always was (the
    SQLite file itself; the Neo4j nodes `migrate()` gives tenant `default`).

    With `verify=False` a Neo4j store is returned without contacting the server, so a service
    can start before its database and connect when it comes up. `beside` is another tenant's
    open store: a Neo4j store of `tenant` then shares its driver (`Neo4jStore.for_tenant`).
    With `read_only_fallback` a SQLite file this process cannot write is opened read-only (a
    reader's case: a data folder mounted read-only, another user's files); a Neo4j store's
    rights are the server's to grant. `clock` is the service's: what the store's own times (a
    tool's update, a label's age at a save) are read by, as the labels and turns it writes are.
    """
    retention = Retention(
        per_tool=settings.exemplars_per_tool,
        total=settings.exemplars_total,
        max_age_days=settings.exemplar_max_age_days,
        session_idle_s=settings.session_idle_s,
    )
    if settings.store_kind == "neo4j":
        from toolselect.store.neo4j.connect import connect_neo4j
        from toolselect.store.neo4j.store import Neo4jStore

        if isinstance(beside, Neo4jStore):
            return beside.for_tenant(tenant)
        return await connect_neo4j(
            settings.neo4j_uri,
            settings.neo4j_username,
            settings.neo4j_password,
            settings.neo4j_database,
            retention=retention,
            verify=verify,
            tenant=tenant,
            fallback_tools=settings.fallback_tools,
            clock=clock,
        )
    from toolselect.store.sqlite.store import SqliteStore

    return SqliteStore(
        settings.sqlite_path,
        retention=retention,
        tenant=tenant,
        read_only_fallback=read_only_fallback,
        fallback_tools=settings.fallback_tools,
        clock=clock,
    )
