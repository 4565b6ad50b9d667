"""What a request is answered does not depend on the replica or `serve --workers` worker it
lands on: one whose ranker has not polled another's change yet answers as the one that made it."""

from __future__ import annotations

import pytest

from tests.learn.test_learner import TOOLS
from tests.services import ServiceFactory
from toolselect.errors import NotFound


async def test_a_label_for_a_tool_another_replica_deleted_is_refused_in_the_same_words(
    services: ServiceFactory,
) -> None:
    """A human label naming a tool deleted through replica A: A refuses it `no tool named`,
    and so does B, whose ranker still held the tool (it polls once a minute here) and learned
    of the delete only from the store's refusal, which it used to word `unknown tool`."""
    a = await services.start(poll_interval_s=60.0)
    await a.catalog.upsert_tools(TOOLS)
    b = await services.start(poll_interval_s=60.0)
    await a.catalog.delete_tool("crypto_price")
    assert b.ranker.has("crypto_price")
    answers = []
    for service in (a, b):
        with pytest.raises(NotFound) as refused:
            await service.learning.feedback("price of bitcoin now", "crypto_price")
        answers.append((str(refused.value), refused.value.field))
    assert answers == [("no tool named 'crypto_price'", "tool")] * 2
