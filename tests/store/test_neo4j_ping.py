"""The store's ping, what `/readyz` and the upkeep ask, against a Neo4j that is stopped: a
port that refuses the connection, as a stopped Neo4j's does."""

from __future__ import annotations

import time

import pytest

from tests.services import free_port
from toolselect.errors import StoreUnavailable
from toolselect.store.neo4j.connect import connect_neo4j


async def test_a_ping_of_a_stopped_neo4j_fails_at_once() -> None:
    """A refused connection is the answer: the ping is not retried (the driver retried it
    for its 5 s transaction retry time, with a warning each attempt, so `/readyz` took its
    whole 2 s bound and the log had a line a second while the store was down)."""
    uri = f"bolt://127.0.0.1:{free_port()}"
    store = await connect_neo4j(uri, "neo4j", "", "neo4j", verify=False)
    try:
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="cannot reach Neo4j"):
                await store.ping()
            assert time.monotonic() - started < 0.5
    finally:
        await store.close()
