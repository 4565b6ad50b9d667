"""Shared fixtures: the real Neo4j server for the session and per-test clean stores."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.neo4j_server import Neo4jServer, resolve


@pytest.fixture(scope="session")
def neo4j_server() -> Iterator[Neo4jServer]:
    """A real Neo4j reachable over Bolt; skipped (or failed under TOOLSELECT_REQUIRE_NEO4J=1)."""
    server, reason = resolve()
    if server is None:
        if os.environ.get("TOOLSELECT_REQUIRE_NEO4J") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield server
    finally:
        server.stop()
