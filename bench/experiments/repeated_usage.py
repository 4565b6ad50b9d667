"""`python -m bench.experiments.repeated_usage`: usage labels under repeated traffic with agents
that are sometimes wrong.

The agent stage sends each learn-half request once, so it cannot see what happens when one
request comes back many times and the agents' choices for it disagree (production traffic: a
popular request, some agents wrong about it). This sends each learn-half request of BFCL (dev
split) `--repeats` times through a real in-process `Service` (hashing embedder, SQLite, no
teacher); each time the agent uses the true tool, or with `--wrong` probability the ranker's
best wrong tool, and reports `ok`. With `--wrong-first` the first sighting of every request is
the wrong one (the order that hurts most). Prints JSON: the share of requests whose stored label
is the true tool, and held-out top-1 before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.data import load
from bench.perf.stores import store_settings
from toolselect.service import Service
from toolselect.store.port import lookup_one


async def _top1(service: Service, queries: list[tuple[str, str]]) -> float:
    right = 0
    for text, label in queries:
        ranking = await service.ranking.rank(text, 1)
        right += bool(ranking.results) and ranking.results[0].tool == label
    return right / len(queries)


async def run(
    repeats: int, wrong: float, wrong_first: bool, seed: int, workdir: Path
) -> dict[str, Any]:
    data = load()
    settings = store_settings("sqlite", workdir, db_name="repeated.db")
    learn = [(q.text, q.label) for q in data.learn]
    held = [(q.text, q.label) for q in data.held]
    rng = random.Random(seed)
    service = await Service.start(settings)
    try:
        await service.catalog.upsert_tools(list(data.tools))
        before = await _top1(service, held)
        # The wrong tool an agent would plausibly pick: the ranker's best tool that is not the
        # true one, fixed per request before any learning.
        wrong_tool = {}
        for text, label in learn:
            ranked = (await service.ranking.rank(text, 2)).tools
            wrong_tool[text] = next(t for t in ranked if t != label)
        turns: list[tuple[int, str, str]] = []
        for text, label in learn:
            uses = [wrong_tool[text] if rng.random() < wrong else label for _ in range(repeats)]
            if wrong_first:
                uses[0] = wrong_tool[text]
            turns.extend((i, text, tool) for i, tool in enumerate(uses))
        # Rounds in order (every request's first sighting, then every second, ...), shuffled
        # within a round: requests interleave as they would in traffic.
        turns.sort(key=lambda turn: (turn[0], rng.random()))
        started = time.perf_counter()
        for n, (_, text, tool) in enumerate(turns):
            search = await service.ranking.search(text, 5)
            service.learning.observe(text, tool, outcome="ok", search_id=search.search_id)
            if n % 500 == 499:
                await service.learner.drain(600)
        await service.learner.drain(600)
        await service.tuner.settle()  # the refit the last labels started, before top-1 is read
        took = time.perf_counter() - started
        labels = [await lookup_one(service.store, text) for text, _ in learn]
        right = sum(
            e is not None and e.tool == label for e, (_, label) in zip(labels, learn, strict=True)
        )
        after = await _top1(service, held)
    finally:
        await service.close()
    return {
        "repeats": repeats,
        "wrong": wrong,
        "wrong_first": wrong_first,
        "requests": len(learn),
        "turns": len(turns),
        "right_labels": round(right / len(learn), 4),
        "held_top1_before": round(before, 4),
        "held_top1_after": round(after, 4),
        "took_s": round(took, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--wrong", type=float, default=0.2)
    parser.add_argument("--wrong-first", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        result = asyncio.run(
            run(args.repeats, args.wrong, args.wrong_first, args.seed, Path(folder))
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
