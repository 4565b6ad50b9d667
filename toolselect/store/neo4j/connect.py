"""Opening a `Neo4jStore`: the driver, its bounds, and the first contact's errors.

Driver errors never leave this module: an unreachable server, refused credentials or a
malformed URI become `StoreUnavailable`, whose message never holds the password.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import unquote, urlsplit

from neo4j import AsyncGraphDatabase
from neo4j.exceptions import DriverError, Neo4jError

from toolselect.clock import Clock, utc_now
from toolselect.errors import StoreError, StoreUnavailable
from toolselect.keys import DEFAULT_TENANT
from toolselect.names import DEFAULT_FALLBACK_TOOLS
from toolselect.records import Retention
from toolselect.store.neo4j.boundary import without_credentials
from toolselect.store.neo4j.store import Neo4jStore

_CONNECT_TIMEOUT_S = 5.0
_RETRY_TIME_S = 5.0  # managed transactions retry transient errors (deadlocks, failover) this long


async def connect_neo4j(
    uri: str,
    username: str,
    password: str,
    database: str,
    *,
    retention: Retention = Retention(),  # noqa: B008 - frozen, so sharing it is safe
    verify: bool = True,
    tenant: str = DEFAULT_TENANT,
    fallback_tools: Collection[str] = DEFAULT_FALLBACK_TOOLS,
    clock: Clock = utc_now,
) -> Neo4jStore:
    """A store on a reachable, authenticated Neo4j; `StoreUnavailable` otherwise.

    Credentials may also come in the URI (`bolt://user:pw@host`); the arguments win. They are
    passed to the driver as auth and never appear in `uri` or in messages. With
    `verify=False` nothing is checked now (a server that starts before its database may wait
    for it); a malformed URI still raises at once.
    """
    parts = urlsplit(uri)
    username = username or unquote(parts.username or "")
    password = password or unquote(parts.password or "")
    shown = without_credentials(uri)

    def unavailable(exc: BaseException) -> StoreUnavailable:
        cause = str(exc).replace(uri, shown)
        if password:
            cause = cause.replace(password, "***")
        return StoreUnavailable(f"cannot reach Neo4j at {shown}: {cause}")

    try:
        driver = AsyncGraphDatabase.driver(
            shown,
            auth=(username, password) if password else None,
            # Fail within seconds when the server is gone: callers degrade on StoreUnavailable,
            # and the driver's default retries a transaction for 30 s.
            connection_timeout=_CONNECT_TIMEOUT_S,
            max_transaction_retry_time=_RETRY_TIME_S,
            # No notices of properties never written (a store without teacher calls, say).
            notifications_min_severity="OFF",
        )
    except (DriverError, Neo4jError, ValueError) as exc:  # a malformed URI or unknown scheme
        raise unavailable(exc) from exc
    store = Neo4jStore(
        driver,
        database,
        uri=shown,
        retention=retention,
        tenant=tenant,
        fallback_tools=fallback_tools,
        clock=clock,
    )
    if not verify:
        return store
    try:
        await driver.verify_connectivity()
        await store.ping()  # also proves the database exists
    except (StoreError, DriverError, Neo4jError, OSError) as exc:
        await driver.close()
        cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ else exc
        raise unavailable(cause) from cause
    return store
