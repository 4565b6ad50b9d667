"""The background reads of session tails a ranking starts are bounded: a ranking with a session id
this process never noted (or any, where other processes write the store) reads the session's last
recorded turn for the next ranking. Unbounded, a burst of rankings with fresh session ids queued
one read each: on a replica over Neo4j 5,000 such rankings over HTTP left reads waiting past the
store's 10 s deadline, the service counted the store as down (`store_down_spooling`,
`/readyz` 503 `not_ready`) and spooled its writes, with Neo4j healthy."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from tests.api.conftest import HAND_CATALOG
from tests.services import ServiceFactory
from toolselect.service.ranking import Conversation
from toolselect.service.sessions import TAIL_BATCH, TAIL_WAITING
from toolselect.store.session_rules import SessionTail


async def test_a_burst_of_new_sessions_reads_a_bounded_number_of_tails(
    services: ServiceFactory,
) -> None:
    """2,000 rankings with fresh session ids, 64 at a time, never have more than one tail read
    in flight, of at most `TAIL_BATCH` sessions, nor more than `TAIL_WAITING` sessions waiting;
    the store stays up and the service ready, and a session read once there is room still gets
    its recorded last tools on the next ranking."""
    service = await services.start(wait_for_store=True, workers=2)  # a store other processes write
    await service.catalog.upsert_tools(HAND_CATALOG)
    reads: list[int] = []
    inner = service.store.inner
    read_tails = inner.session_tails

    async def counted(session_ids: Sequence[str]) -> dict[str, SessionTail]:
        reads.append(len(session_ids))
        try:
            return await read_tails(session_ids)
        finally:
            reads.append(-len(session_ids))

    inner.session_tails = counted  # type: ignore[method-assign]
    most_waiting = 0

    async def rank_fresh(n: int) -> None:
        nonlocal most_waiting
        for _ in range(n):
            session = Conversation(session_id=uuid.uuid4().hex)
            await service.ranking.search("and then?", 3, conversation=session)
            most_waiting = max(most_waiting, len(service.sessions._wanted))
            await asyncio.sleep(0)

    await asyncio.gather(*(rank_fresh(2_000 // 64) for _ in range(64)))
    in_flight = [sum(reads[: i + 1]) for i in range(len(reads))]
    assert reads and max(in_flight) <= TAIL_BATCH and max(reads) <= TAIL_BATCH
    assert len(reads) // 2 < 2_000 // 8  # sessions share reads
    assert most_waiting <= TAIL_WAITING
    assert not service.store.down
    service.index.check_ready()

    assert service.learning.observe("look it up", "web_search", session_id="known")
    assert await service.learner.drain(10.0)
    service.sessions._recent.clear()  # as in a process that never noted it
    for _ in range(50):
        if service.sessions.previous("known") == ("web_search",):
            break
        await asyncio.sleep(0.05)
    assert service.sessions.previous("known") == ("web_search",)
