"""The Neo4j driver's boundary: its errors become `toolselect.errors`' (`translated`), and URIs
shown in messages lose their credentials (`without_credentials`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

from neo4j.exceptions import AuthError, DriverError, Neo4jError, ServiceUnavailable, SessionExpired

from toolselect.errors import StoreError, StoreUnavailable

UNAVAILABLE = (ServiceUnavailable, SessionExpired, AuthError, OSError)


def without_credentials(uri: str) -> str:
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


@contextmanager
def translated(uri: str) -> Iterator[None]:
    """Unreachable servers and refused credentials raise `StoreUnavailable`, anything else the
    server or driver refuses `StoreError`; both name `uri` (without credentials)."""
    try:
        yield
    except UNAVAILABLE as exc:
        raise StoreUnavailable(f"cannot reach Neo4j at {uri}: {exc}") from exc
    except (Neo4jError, DriverError) as exc:
        raise StoreError(f"Neo4j at {uri} refused the operation: {exc}") from exc
