"""Pinned conversation signals for the surfaces' tests: weights and relations set on a started
service, so a test knows which companion, prior and context a request gets without fitting."""

from __future__ import annotations

import asyncio

from toolselect.learn.session_fit import SessionFit, SessionWeights
from toolselect.ranker.relations import Relations
from toolselect.service import Service

# get_weather is used with web_search in 8 of its 10 pairs (share 0.8) and with send_email in 2
# (0.2, under the pinned least share); create_calendar_event followed send_email in every step.
RELATIONS = Relations(
    {("get_weather", "web_search"): 8, ("get_weather", "send_email"): 2},
    {("send_email", "create_calendar_event"): 5},
)
COMPANIONS = SessionWeights(companion_share=0.5)
WEATHER = "what's the weather in Turin tomorrow, rain or wind?"
WEATHER_COMPANION = {"tool": "web_search", "score": 0.8, "with": "get_weather"}


async def pin(
    service: Service, weights: SessionWeights = COMPANIONS, relations: Relations = RELATIONS
) -> None:
    """Set `weights` and `relations` on `service` for the rest of a test.

    A refresh first, so the upkeep's own first refresh (due at start) is over; then the upkeep
    is told no other is due. Otherwise the turns a test reports, or a poll that reloads the
    catalog (a new snapshot of the same names), make one due and replace the pinned values."""
    await service.sessions.refresh()
    running = service.sessions._task  # a refresh the upkeep may have started just before
    if running is not None:
        await asyncio.gather(running, return_exceptions=True)
    service.sessions.due = lambda: False  # type: ignore[method-assign]
    service.sessions.relations = relations
    service.sessions.fit = SessionFit(weights=weights, reason="pinned by the test")
