"""The multi-turn stage (`python -m bench.conversations`): the conversation signals learned from
observed sessions, scored on held-out conversations (BENCHMARKS.md "Conversations").

Data: BFCL's dev multi-turn conversations (`bench/multiturn_data.py`: no `VehicleControlAPI`
conversation is ever loaded), category `base`, split by scenario into a traffic half and a
held-out half; catalog: the 128 functions of the eight API classes.

Per embedder, one real service (`bench.learning.bench_service`: SQLite, the teacher's kill
switch off, so only the agent's own usage labels are learned):
1. `before`: every held-out turn ranked with the message alone, nothing observed yet;
2. traffic: each traffic conversation played as an agent would: every scored turn searched
   (`/v1/rank`'s path), then observed with its `search_id`, its session (the conversation id),
   its used tools (the ground truth's, in call order) and outcome `ok`;
3. the learner drained, the fold's refit settled, and the conversation signals fitted on the
   stored sessions (`SessionSignals.refresh`, what the service's upkeep runs);
4. every held-out turn ranked again, per arm: the message alone, with `previous_tools` (the
   tools of the conversation's previous turn that used any: what the session's last observed
   turn gives), with `context` (the earlier user messages), with `companions: 2`, and all.
Measures per turn, as `measures` below defines them: share@5, all@5 (every needed tool
among the tools shown: the top 5, plus the companions when asked), top-1; over all held-out
turns and over follow-ups. `shown` is the mean number of tools shown.

`latency`: `RankingFacade.search` on a 1,000-tool synthetic catalog with a session prior and
two companions against the message alone, the same queries interleaved in one run (p50, p90).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import RESULTS, write_json
from bench.cache import Encoders
from bench.learning import bench_service
from bench.markdown import prose
from bench.multiturn_data import Conversation, Dataset, Turn, load
from bench.stats import percentile
from toolselect.config import Settings
from toolselect.embed import Embedder
from toolselect.learn.session_fit import SessionFit, SessionWeights
from toolselect.service import Service
from toolselect.service.ranking import Conversation as Asked

K = 5
DEPTH = 10  # ranked deep enough for share@10
CATEGORY = "base"
# Refits of the fold run while the traffic's labels arrive, so a run's labels (and its scores)
# move by a point or two with timing: every figure is the mean of this many runs.
REPEATS = 3
SUPPLYING = "miss_param"  # its turns that supply a parameter an earlier message left out
PRIOR_GRID = (0.0, 0.1, 0.2, 0.35, 0.5, 1.0)
CONTEXT_GRID = (0.1, 0.2, 0.35, 0.5)
MARGIN_GRID = (float("inf"), 0.05)
COMPANIONS = 2
ARMS: dict[str, tuple[bool, bool, bool]] = {  # previous tools, context, companions
    "message alone": (False, False, False),
    "+ session prior": (True, False, False),
    "+ context": (False, True, False),
    "+ companions": (False, False, True),
    "all signals": (True, True, True),
}
# References, message alone: the top k + 2 (what raising k buys instead of companions), and
# the ceiling of k + 2 tools shown (the top k and the needed tools it missed, up to 2).
REFERENCES = ("top 7", "ceiling")
_NO_TEACHER = "http://127.0.0.1:9"  # never called: the oracle's kill switch is off


def measures(ranked: Sequence[Sequence[str]], needed: Sequence[Sequence[str]]) -> dict[str, Any]:
    """share@5 (mean per turn), all@5, top1, share@5 pooled over needed tools, share@10."""
    n = len(needed)
    share = every = top1 = share10 = 0.0
    hit = total = 0
    for tools, want in zip(ranked, needed, strict=True):
        top = set(tools[:K])
        found = sum(1 for t in want if t in top)
        share += found / len(want)
        every += found == len(want)
        top1 += bool(tools) and tools[0] in want
        share10 += sum(1 for t in want if t in tools[:DEPTH]) / len(want)
        hit += found
        total += len(want)
    d = max(n, 1)
    return {
        "n": n,
        "share5": share / d,
        "all5": every / d,
        "top1": top1 / d,
        "share5_micro": hit / max(total, 1),
        "share10": share10 / d,
    }


def _previous_tools(turn: Turn) -> tuple[str, ...]:
    """The tools of the last earlier turn that used any (dedup, call order)."""
    for calls in reversed(turn.earlier_calls):
        if calls:
            return tuple(dict.fromkeys(calls))
    return ()


def _asked(turn: Turn, arm: str) -> Asked:
    previous, context, companions = ARMS[arm]
    return Asked(
        previous_tools=_previous_tools(turn) if previous else (),
        context=turn.earlier if context else (),
        companions=COMPANIONS if companions else 0,
    )


async def _rank_held(
    service: Service, items: Sequence[tuple[Conversation, Turn]], arms: Sequence[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in arms:
        shown: list[list[str]] = []
        for _, turn in items:
            if arm in REFERENCES:
                search = await service.ranking.search(turn.text, K + COMPANIONS)
                ranked = list(search.ranking.tools)
                if arm == "ceiling":  # the top 5 and up to 2 of the needed tools it missed
                    missed = [t for t in turn.needed if t not in ranked[:K]]
                    ranked = ranked[:K] + missed[:COMPANIONS]
                shown.append(ranked)
                continue
            search = await service.ranking.search(turn.text, K, conversation=_asked(turn, arm))
            shown.append([*search.ranking.tools, *(c.tool for c in search.companions)])
        out[arm] = _score(shown, items)
    return out


def _score(
    shown: Sequence[Sequence[str]], items: Sequence[tuple[Conversation, Turn]]
) -> dict[str, Any]:
    """measures() over the shown lists; all@5 counts the companions, share@5 and top-1 the top 5."""
    out: dict[str, Any] = {}
    for kind, follow_ups_only in (("all", False), ("follow_up", True)):
        idx = [i for i, (_, t) in enumerate(items) if not (follow_ups_only and t.first)]
        needed = [items[i][1].needed for i in idx]
        top = measures([shown[i][:K] for i in idx], needed)
        every = sum(set(n) <= set(shown[i]) for i, n in zip(idx, needed, strict=True))
        top["all_shown"] = every / max(len(idx), 1)
        top["shown"] = float(np.mean([len(shown[i]) for i in idx])) if idx else 0.0
        out[kind] = top
    return out


async def run_embedder(
    data: Dataset, embedder: Embedder, kind: str, weight: float
) -> dict[str, Any]:
    held = [(c, t) for c in data.held if c.category == CATEGORY for t in c.scored]
    # The traffic: both categories, as an agent meets them (miss_param's conversations have a
    # message lacking a parameter, answered without a tool, then the turn that supplies it).
    traffic = [c for c in data.traffic if c.category in (CATEGORY, SUPPLYING)]
    supplying = [
        (c, t)
        for c in data.held
        if c.category == SUPPLYING
        for t in c.scored
        if t.answers_unanswered
    ]
    started = time.perf_counter()
    async with bench_service(
        data.tools, embedder, kind, weight, _NO_TEACHER, oracle="off"
    ) as service:
        before = await _rank_held(service, held, ["message alone"])
        observed, fit = await play_traffic(service, traffic)
        after = await _rank_held(service, held, [*ARMS, *REFERENCES])
        supplied = await _rank_held(service, supplying, ["message alone", "+ context"])
        sensitivity = await _sensitivity(service, held, supplying)
    return {
        "method": f"hybrid w={weight:g}" if kind == "hybrid" else kind,
        "embedder": embedder.id,
        "traffic_conversations": len(traffic),
        "traffic_turns": observed,
        "held_conversations": len({c.id for c, _ in held}),
        "held_turns": len(held),
        "before": before["message alone"],
        "after": after,
        "fit": asdict(fit),
        "supplying": supplied,
        "sensitivity": sensitivity,
        "took_s": time.perf_counter() - started,
    }


async def play_traffic(service: Service, traffic: Sequence[Conversation]) -> tuple[int, SessionFit]:
    """Every scored turn searched, then observed as an agent would (its search id, session, used
    tools in call order, `ok`); the learner drained, the fold settled, the session signals
    fitted. The turns observed and the fit."""
    observed = 0
    for conversation in traffic:
        for turn in conversation.scored:
            search = await service.ranking.search(turn.text, K)
            service.learning.observe(
                turn.text,
                used_tools=list(dict.fromkeys(turn.calls)),
                session_id=conversation.id,
                search_id=search.search_id,
                outcome="ok",
            )
            observed += 1
    await service.learner.drain(600.0)
    await service.learning.settle()
    return observed, await service.sessions.refresh()


async def _sensitivity(
    service: Service,
    held: Sequence[tuple[Conversation, Turn]],
    supplying: Sequence[tuple[Conversation, Turn]],
) -> list[dict[str, Any]]:
    """Held-out scores with each weight pinned around the fitted one (the others as fitted)."""
    signals = service.sessions
    fitted = signals.fit
    rows = []
    try:
        pins: list[dict[str, float]] = [{"prior": v} for v in PRIOR_GRID]
        pins += [{"context": v, "context_margin": g} for g in MARGIN_GRID for v in CONTEXT_GRID]
        for pin in pins:
            signals.fit = replace(fitted, weights=replace(fitted.weights, **pin))
            scores = await _rank_held(service, held, ["all signals"])
            extra = await _rank_held(service, supplying, ["+ context"])
            rows.append({"pinned": pin, "held": scores["all signals"], "supplying": extra["+ context"]})  # fmt: skip
    finally:
        signals.fit = fitted
    return rows


# -- latency -----------------------------------------------------------------------------------


async def latency(rounds: int = 2000, tools: int = 1000, seed: int = 7) -> dict[str, Any]:
    """Rank p50/p90 with a session prior and 2 companions against the message alone, one run."""
    import tempfile

    from toolselect.clock import utc_now
    from toolselect.records import Tool
    from toolselect.records import Turn as StoredTurn

    rng = random.Random(seed)
    catalog = [
        Tool(
            f"tool_{i:04d}",
            f"{rng.choice(_VERBS)} the {rng.choice(_NOUNS)} of a {rng.choice(_NOUNS)}",
        )
        for i in range(tools)
    ]
    names = [t.name for t in catalog]
    with tempfile.TemporaryDirectory(prefix="toolselect-bench-") as tmp:
        settings = Settings().override(
            store=f"sqlite:{tmp}/bench.db", data_dir=tmp, embedder="hashing", oracle="off",
            session_prior_weight=0.35, query_cache=0,
        )  # fmt: skip
        service = await Service.start(settings)
        try:
            await service.catalog.upsert_tools(catalog)
            now = utc_now()
            turns = []
            for s in range(2000):  # sessions of 3 turns, 1-3 tools each: dense relations
                for j in range(3):
                    used = tuple(rng.sample(names, rng.randint(1, 3)))
                    turns.append(StoredTurn(f"s{s}-{j}", "q", used[0], now, session_id=f"s{s}",
                                            used_tools=used))  # fmt: skip
            for start in range(0, len(turns), 500):
                await service.store.record_turns(turns[start : start + 500])
            await service.sessions.refresh()
            # The fit has no signal in random sessions; pin companions on to time them.
            service.sessions.fit = SessionFit(weights=SessionWeights(0.35, 0.0, 0.0))
            queries = [f"{rng.choice(_VERBS)} {rng.choice(_NOUNS)} {i}" for i in range(rounds)]
            asked = Asked(previous_tools=tuple(rng.sample(names, 2)), companions=COMPANIONS)
            plain: list[float] = []
            signals: list[float] = []
            offered = 0
            for i, q in enumerate(queries):
                for arm in (0, 1) if i % 2 else (1, 0):
                    t0 = time.perf_counter()
                    search = await service.ranking.search(
                        q, K, conversation=asked if arm else Asked()
                    )
                    took = time.perf_counter() - t0
                    (signals if arm else plain).append(took)
                    offered += len(search.companions) if arm else 0
        finally:
            await service.close()
    p = {
        name: {"p50_ms": percentile(v, 0.5) * 1e3, "p90_ms": percentile(v, 0.9) * 1e3}
        for name, v in (("message alone", plain), ("prior + companions", signals))
    }
    return {
        "tools": tools,
        "rounds": rounds,
        "relations": {"pairs": service.sessions.relations.pairs,
                      "transitions": service.sessions.relations.transitions},
        "companions_per_rank": offered / rounds,
        "timings": p,
        "p50_delta_ms": p["prior + companions"]["p50_ms"] - p["message alone"]["p50_ms"],
    }  # fmt: skip


_VERBS = ("list", "create", "delete", "update", "search", "send", "read", "move", "copy", "sort")
_NOUNS = ("file", "ticket", "message", "folder", "stock", "order", "flight", "invoice", "user",
          "post", "note", "record")  # fmt: skip


# -- report ------------------------------------------------------------------------------------


def section(result: dict[str, Any]) -> str:
    """The "Conversations" section of BENCHMARKS.md (bench/templates/conversations.md)."""
    return prose("conversations", "conversations", **result, **_tables(result))


def _tables(result: dict[str, Any]) -> dict[str, str]:
    """The section's two tables, `stages` and `sensitivity`, each rendered from its own block."""
    return {
        block: prose("conversations", block, **result, inf=math.inf)
        for block in ("stages", "sensitivity")
    }


def _average(values: Sequence[Any]) -> Any:
    """The mean of numeric leaves over runs of one structure (other leaves: the first run's)."""
    first = values[0]
    if isinstance(first, dict):
        return {key: _average([v[key] for v in values]) for key in first}
    if isinstance(first, list):
        return [_average([v[i] for v in values]) for i in range(len(first))]
    if isinstance(first, int | float) and not isinstance(first, bool):
        present = [v for v in values if v is not None]
        return float(np.mean(present)) if present else None
    return first


def run(
    data: Dataset, encoders: Encoders, with_latency: bool = True, repeats: int = REPEATS
) -> dict[str, Any]:
    started = time.perf_counter()
    methods = []
    for kind, weight in (("hybrid", Settings().hybrid_weight), ("hashing", 0.5)):
        embedder = encoders.get(kind, weight)
        runs = [asyncio.run(run_embedder(data, embedder, kind, weight)) for _ in range(repeats)]
        encoders.save()
        method = _average(runs)
        method["runs"] = [
            {
                "fit": r["fit"]["weights"],
                "alone_all_shown": r["after"]["message alone"]["all"]["all_shown"],
                "signals_all_shown": r["after"]["all signals"]["all"]["all_shown"],
            }
            for r in runs
        ]
        methods.append(method)
        print(f"  {method['method']}: {repeats} runs, {method['took_s']:.0f} s each", flush=True)
    result: dict[str, Any] = {
        "k": K, "companions": COMPANIONS, "repeats": repeats, "methods": methods
    }  # fmt: skip
    if with_latency:
        result["latency"] = asyncio.run(latency())
    result["took_s"] = time.perf_counter() - started
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", default=str(RESULTS / "conversations.json"))
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args(argv)
    from bench.perf.machine import recorded

    data = load()
    print(f"conversations: {len(data.traffic)} traffic / {len(data.held)} held", flush=True)
    result = recorded(
        lambda: run(data, Encoders(), with_latency=not args.no_latency, repeats=args.repeats)
    )
    print(*_tables(result).values(), sep="\n")
    for m in result["methods"]:
        print(m["method"], json.dumps(m["runs"]))
    if "latency" in result:
        print(json.dumps(result["latency"], indent=1))
    write_json(Path(args.out), result)
    print(f"conversations: wrote {args.out} in {result['took_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
