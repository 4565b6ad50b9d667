"""The fault tests' way to lose the store without stopping a server: a relay in front of the
session's Neo4j that a test cuts and heals."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from tests.neo4j_server import Neo4jServer
from tests.partition import Partition
from tests.services import wipe


@pytest_asyncio.fixture(loop_scope="function")
async def relay(neo4j_server: Neo4jServer) -> AsyncIterator[Partition]:
    """A relay, listening, to the session Neo4j wiped first (so no other test's data counts);
    a service given its `uri` loses the store on `cut` and finds it again on `heal`."""
    await wipe(neo4j_server)
    partition = Partition.before(neo4j_server)
    await partition.heal()
    try:
        yield partition
    finally:
        await partition.cut()
