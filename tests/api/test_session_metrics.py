"""`toolselect_session_fits_total{result}` counts each fit of the conversation signals by what it
came to, in a word: `fitted`, `no_sessions` or `too_few_follow_ups`. It took the first word of
the fit's reason, so a store with a few sessions counted `result="2"` (its follow-up count):
a label per number, none of them saying what happened."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from toolselect.service import Service

Client = TestClient[Any, Any]


async def fit_results(client: Client) -> dict[str, float]:
    """`toolselect_session_fits_total` of `/metrics` by its `result` label."""
    text = await (await client.get("/metrics")).text()
    return {
        sample.labels["result"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "toolselect_session_fits_total"
    }


async def test_session_fits_are_counted_by_what_they_came_to(
    client: Client, service: Service
) -> None:
    """A store without sessions counts `no_sessions`; one whose session has two follow-ups
    (under the fit's minimum) counts `too_few_follow_ups`, never its follow-up count."""
    await service.sessions.refresh()
    assert set(await fit_results(client)) <= {"no_sessions"}
    turns = [
        {"request": f"step {n} of the trip", "used_tool": tool, "session_id": "trip",
         "turn_id": f"trip-{n}", "outcome": "ok"}
        for n, tool in enumerate(["web_search", "get_weather", "send_email"])
    ]  # fmt: skip
    resp = await client.post("/v1/observe/batch", json={"turns": turns})
    assert resp.status == 202, await resp.text()
    assert await service.learner.drain(30.0)
    fit = await service.sessions.refresh()
    assert fit.follow_ups == 2 and fit.reason.startswith("2 follow-up turns")
    assert set(await fit_results(client)) == {"no_sessions", "too_few_follow_ups"}
