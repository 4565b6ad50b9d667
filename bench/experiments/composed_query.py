"""The narrowing's query with the earlier conversation glued on, against the message alone and
the server's fitted context: `python -m bench.experiments.composed_query`.

`ToolNarrower` used to rank the latest user message followed by up to `context_chars` (1,000)
characters of earlier messages, as one query text, besides sending them as `context`, which the
server weighs as its session fit decides (`learn/session_fit.py`: 0 until it helps). Here the
held-out turns of `bench.conversations` (BFCL multi-turn `base`, no `VehicleControlAPI`) and its
parameter-supplying turns (`miss_param`) are ranked four ways on one real service per embedder,
before and after the traffic half is observed and the session signals fitted: the message
alone, + `context`, the composed query (`integrations.narrowing.compose_query`, 1,000
characters), and both. Prints share@5, all@5 and top-1 per phase and way, as JSON lines.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from bench import conversations as cv
from bench.cache import Encoders
from bench.learning import bench_service
from bench.multiturn_data import Conversation, Dataset, Turn, load
from toolselect.config import Settings
from toolselect.embed import Embedder
from toolselect.integrations.narrowing import compose_query
from toolselect.service import Service
from toolselect.service.ranking import Conversation as Asked

COMPOSED_CHARS = 1000  # the narrowing's former default
WAYS = ("message alone", "+ context", "composed", "composed + context")


async def _rank(service: Service, items: Sequence[tuple[Conversation, Turn]], way: str) -> Any:
    shown = []
    for _, turn in items:
        text = turn.text
        if way.startswith("composed"):
            text = compose_query(turn.text, turn.earlier, COMPOSED_CHARS)
        asked = Asked(context=turn.earlier) if way.endswith("+ context") else Asked()
        search = await service.ranking.search(text, cv.K, conversation=asked)
        shown.append(list(search.ranking.tools))
    return cv._score(shown, items)["all"]


async def _run(data: Dataset, embedder: Embedder, kind: str, weight: float) -> list[Any]:
    held = [(c, t) for c in data.held if c.category == cv.CATEGORY for t in c.scored]
    traffic = [c for c in data.traffic if c.category in (cv.CATEGORY, cv.SUPPLYING)]
    supplying = [
        (c, t)
        for c in data.held
        if c.category == cv.SUPPLYING
        for t in c.scored
        if t.answers_unanswered
    ]
    rows = []
    async with bench_service(
        data.tools, embedder, kind, weight, cv._NO_TEACHER, oracle="off"
    ) as service:
        for phase in ("before", "after"):
            if phase == "after":
                await cv.play_traffic(service, traffic)
            for turns, items in (("base", held), ("supplying", supplying)):
                for way in WAYS:
                    found = await _rank(service, items, way)
                    rows.append(
                        {
                            "embedder": kind, "phase": phase, "turns": turns, "way": way,
                            "n": found["n"], "share5": round(found["share5"], 3),
                            "all5": round(found["all_shown"], 3), "top1": round(found["top1"], 3),
                        }
                    )  # fmt: skip
    return rows


def main() -> None:
    data = load()
    encoders = Encoders()
    for kind, weight in (("hashing", 0.5), ("hybrid", Settings().hybrid_weight)):
        for row in asyncio.run(_run(data, encoders.get(kind, weight), kind, weight)):
            print(json.dumps(row), flush=True)
        encoders.save()


if __name__ == "__main__":
    main()
