"""The agent benchmark: the learn half replayed as an agent that searches, uses a tool, reports.

Each variant is a fresh real `Service` (embedded SQLite store in a temporary folder, the catalog
upserted, the learner, the tuner, and with the teacher on the Anthropic teacher through the SDK
against the stub of bench.learning, answering the ground truth). Per traffic request (the learn
half, in order) the agent asks the service for the top 5 (`service.ranking.search`), uses the
true tool when it is among them (outcome `ok`), else the fallback `shell_exec` (outcome `ok`:
the agent improvised), and the turn is observed with the search's id. Traffic runs in windows of
`WINDOW` requests: the window's searches, then its turns, then the learner is drained and a
refit in progress awaited (the agent sees labels up to one window late, and a run is
deterministic). At each step the held-out half is ranked by the service's own ranker.

Variants: the perfect agent with no teacher, with a perfect teacher, 10% of its shown-and-used
turns on a wrong shown tool reported `ok` or `error`, and with no outcome at all. Two reference
lines post labels through `service.learning.feedback` instead of observing turns: the **usage
line** (the true tool of every turn where it was shown: what the agent's successful choices can
teach) and the **gold line** (every request with its true tool).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from bench.accuracy import rank_all, score
from bench.cache import Encoders
from bench.data import Dataset, Query
from bench.learning import bench_service, teacher_stub
from toolselect.embed import Embedder
from toolselect.names import normalise_query
from toolselect.service import Service

STEPS = (0, 100, 200, 400)  # then all of the learn half
SHOWN = 5
WINDOW = 20
FALLBACK = "shell_exec"
WRONG_SHARE = 0.1
SEED = 0

Mode = Literal["observe", "usage", "gold"]


@dataclass(frozen=True)
class Variant:
    """`outcome` is reported on every observed turn but a wrong one: a `wrong` share of the
    turns whose true tool was shown go to another shown tool and report `wrong_outcome`;
    `overrides` are settings."""

    name: str
    oracle: str = "off"
    mode: Mode = "observe"
    outcome: str | None = "ok"
    wrong: float = 0.0
    wrong_outcome: str | None = "ok"
    overrides: Mapping[str, Any] = field(default_factory=dict)


USAGE = "usage line"
GOLD = "gold line"
VARIANTS = (
    Variant("perfect agent, no teacher"),
    Variant("perfect agent, perfect teacher", oracle="on"),
    Variant("10% wrong tool, reported ok", oracle="on", wrong=WRONG_SHARE),
    Variant(
        "10% wrong tool, reported error", oracle="on", wrong=WRONG_SHARE, wrong_outcome="error"
    ),
    Variant("perfect agent, no outcome, no teacher", outcome=None),
    # How a turn without an outcome should count: the alternative to the default (`shown`), and
    # what counting it costs when the agent is sometimes wrong.
    Variant(
        "perfect agent, no outcome, no teacher, usage_without_outcome=never",
        outcome=None,
        overrides={"usage_without_outcome": "never"},
    ),
    Variant(
        "10% wrong tool, no outcome, no teacher",
        outcome=None,
        wrong=WRONG_SHARE,
        wrong_outcome=None,
    ),
    Variant(USAGE, mode="usage"),
    Variant(GOLD, mode="gold"),
)


@dataclass
class Tally:
    """What the simulation counts itself (the store records the rest)."""

    hits: list[int]
    fallback_turns: set[str]
    wrong: dict[str, str]  # normalised query -> the wrong tool a turn used for it
    wrong_turns: int = 0


async def _search(service: Service, query: str) -> tuple[tuple[str, ...], str]:
    found = await service.ranking.search(query, SHOWN)
    return found.ranking.tools, found.search_id


def _choice(variant: Variant, q: Query, shown: Sequence[str]) -> tuple[str, str | None, bool]:
    """(used tool, outcome, wrong) for a turn: wrong turns are drawn per request id, so the
    wrong-tool variants go wrong on the same requests (as far as the same tools are shown)."""
    if q.label not in shown:
        return FALLBACK, variant.outcome, False
    rng = random.Random(f"{SEED}:{q.id}")
    others = [t for t in shown if t != q.label]
    if others and rng.random() < variant.wrong:
        return rng.choice(others), variant.wrong_outcome, True
    return q.label, variant.outcome, False


async def _traffic(
    service: Service, variant: Variant, queries: Sequence[Query], tally: Tally
) -> None:
    """One window: the searches, then the turns (or the reference lines' labels)."""
    shown = [await _search(service, q.text) for q in queries]
    for q, (tools, search_id) in zip(queries, shown, strict=True):
        hit = q.label in tools
        tally.hits.append(int(hit))
        if variant.mode != "observe":
            if hit or variant.mode == "gold":
                await service.learning.feedback(q.text, q.label)
            continue
        used, outcome, wrong = _choice(variant, q, tools)
        if used == FALLBACK:
            tally.fallback_turns.add(q.id)
        if wrong:
            tally.wrong[normalise_query(q.text)] = used
            tally.wrong_turns += 1
        queued = service.learning.observe(
            q.text, used, turn_id=q.id, outcome=outcome, search_id=search_id
        )
        if not queued:
            raise RuntimeError("the observe queue overflowed; raise queue_size")


async def run_variant(
    data: Dataset,
    embedder: Embedder,
    kind: str,
    weight: float,
    variant: Variant,
    stub: Any,
    held: np.ndarray,
) -> dict[str, Any]:
    """The learn half as traffic through a fresh service; held-out scored at every step."""
    started = time.perf_counter()
    steps = (*STEPS, len(data.learn))
    tally = Tally([], set(), {})
    points: list[dict[str, Any]] = []
    overrides = {"oracle": variant.oracle, **variant.overrides}
    async with bench_service(data.tools, embedder, kind, weight, stub.url, **overrides) as service:
        done = 0
        linked = (0, 0)
        for step in steps:
            target = min(step, len(data.learn))
            hits_before = len(tally.hits)
            while done < target:
                window = data.learn[done : min(done + WINDOW, target)]
                await _traffic(service, variant, window, tally)
                done += len(window)
                if not await service.learner.drain(600.0):
                    raise RuntimeError(f"the learner did not drain at turn {done}")
                await service.tuner.settle()
            point = score(rank_all(service.ranker, held), data.held)
            point.pop("by_category")
            simulated = _rate(tally.hits[hits_before:])
            # Observed turns: the store's own count (turns linked to their search); the
            # reference lines observe nothing, so theirs is the simulation's.
            now = await _linked(service)
            turns, shown = now[0] - linked[0], now[1] - linked[1]
            linked = now
            point.update(
                observed=done,
                exemplars=service.ranker.exemplar_total,
                online_recall5=shown / turns if turns else simulated,
                online_recall5_simulated=simulated,
            )
            points.append(point)
        audit = await _audit(service, data, tally)
        fitted = service.tuner.current
        fold = {**asdict(fitted.fold), "source": fitted.fold_source}
    before, after = points[0], points[-1]
    return {
        "variant": variant.name,
        "mode": variant.mode,
        "oracle": variant.oracle,
        "outcome": variant.outcome,
        "wrong_share": variant.wrong,
        "wrong_outcome": variant.wrong_outcome,
        "overrides": dict(variant.overrides),
        "points": points,
        "before": {k: before[k] for k in ("top1", "recall5")},
        "after": {k: after[k] for k in ("top1", "recall5")},
        "gain_top1": after["top1"] - before["top1"],
        "gain_recall5": after["recall5"] - before["recall5"],
        "lowest_top1_vs_before": min(p["top1"] for p in points) - before["top1"],
        "online_recall5": linked[1] / linked[0] if linked[0] else _rate(tally.hits),
        "online_recall5_simulated": _rate(tally.hits),
        "audit": audit,
        "fold": fold,
        "took_s": time.perf_counter() - started,
    }


def _rate(hits: Sequence[int]) -> float | None:
    return sum(hits) / len(hits) if hits else None


async def _linked(service: Service) -> tuple[int, int]:
    """(turns linked to a known search, those whose used tool it showed), from the store."""
    result = await service.store.analytics("online_recall")
    rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
    return sum(int(r["turns"]) for r in rows), sum(int(r["shown"]) for r in rows)


async def _audit(service: Service, data: Dataset, tally: Tally) -> dict[str, Any]:
    """Per tier the exemplars saved and how many are right; the teacher's calls, declines and
    the turns that reached it; exemplars on the wrong tool of a wrong-tool turn."""
    truth: dict[str, set[str]] = {}
    for q in data.learn:
        truth.setdefault(normalise_query(q.text), set()).add(q.label)
    exemplars = (await service.store.exemplars_since(0)).upserted
    tiers: dict[str, dict[str, int]] = {}
    for e in exemplars:
        row = tiers.setdefault(e.tier, {"saved": 0, "correct": 0})
        row["saved"] += 1
        row["correct"] += int(e.tool in truth.get(e.query_norm, ()))
    on_wrong = sum(tally.wrong.get(e.query_norm) == e.tool for e in exemplars)
    usage = await service.store.analytics("oracle_usage")
    decisions = [dict(zip(usage.columns, row, strict=True)) for row in usage.rows]
    flagged = sum(int(d["decisions"]) for d in decisions)
    calls = await service.store.oracle_calls()
    called = {c.turn_id for c in calls}
    declined = sum(c.result == "declined" for c in calls)
    fallback = tally.fallback_turns
    turns = Counter(
        (t.flagged, t.flag_reason, t.tier, t.result)
        for t in [await service.store.get_turn(q.id) for q in data.learn]
        if t is not None
    )
    return {
        "exemplars": tiers,
        "wrong_turns": tally.wrong_turns,
        "exemplars_on_wrong_tool": on_wrong,
        "flagged": flagged,
        "decisions": decisions,
        "turns": [
            {"flagged": f, "reason": r, "tier": t, "result": s, "turns": n}
            for (f, r, t, s), n in sorted(turns.items(), key=lambda kv: -kv[1])
        ],
        "teacher_calls": len(calls),
        "calls_per_flagged": len(calls) / flagged if flagged else None,
        "fallback_turns": len(fallback),
        "fallback_to_teacher": len(fallback & called) / len(fallback) if fallback else None,
        "teacher_declines": declined,
        "decline_rate": declined / len(calls) if calls else None,
    }


def _shares(runs: list[dict[str, Any]]) -> None:
    """Each run's gain as a share of the usage line's and of the gold line's."""
    lines = {r["variant"]: r for r in runs if r["mode"] != "observe"}
    for r in runs:
        for name, key in ((USAGE, "of_usage"), (GOLD, "of_gold")):
            ref = lines[name]["gain_top1"]
            r[f"{key}_top1"] = r["gain_top1"] / ref if ref > 0 else None
            ref5 = lines[name]["gain_recall5"]
            r[f"{key}_recall5"] = r["gain_recall5"] / ref5 if ref5 > 0 else None


async def _run(
    data: Dataset, encoders: Encoders, specs: Sequence[tuple[str, float]]
) -> dict[str, list[dict[str, Any]]]:
    truth_by_text: dict[str, str] = {}
    for q in data.learn:
        truth_by_text.setdefault(q.text, q.label)
    agen = teacher_stub(truth_by_text)
    stub = await agen.__anext__()
    methods: dict[str, list[dict[str, Any]]] = {}
    try:
        for kind, weight in specs:
            label = kind if kind != "hybrid" else f"hybrid w={weight:g}"
            embedder = encoders.get(kind, weight)
            held = await embedder.embed([q.text for q in data.held])
            runs = methods[label] = []
            for variant in VARIANTS:
                result = await run_variant(data, embedder, kind, weight, variant, stub, held)
                runs.append(result)
                _print(label, result)
            _shares(runs)
    finally:
        await agen.aclose()
    return methods


def _print(label: str, r: dict[str, Any]) -> None:
    audit = r["audit"]
    tiers = ", ".join(f"{t} {v['saved']}" for t, v in sorted(audit["exemplars"].items()))
    print(
        f"  {label} {r['variant']}: top-1 {r['before']['top1']:.3f} -> {r['after']['top1']:.3f}, "
        f"online recall@5 {r['online_recall5']:.3f}, teacher calls {audit['teacher_calls']}, "
        f"exemplars [{tiers}] ({r['took_s']:.0f} s)",
        flush=True,
    )


def run(data: Dataset, encoders: Encoders, specs: Sequence[tuple[str, float]]) -> dict[str, Any]:
    """Every variant for every (kind, weight) in `specs`."""
    from toolselect.logs import configure_logging

    configure_logging("warning", "console")
    started = time.perf_counter()
    methods = asyncio.run(_run(data, encoders, specs))
    encoders.save()
    return {
        "methods": methods,
        "steps": [*STEPS, len(data.learn)],
        "shown": SHOWN,
        "window": WINDOW,
        "fallback": FALLBACK,
        "wrong_share": WRONG_SHARE,
        "took_s": time.perf_counter() - started,
    }
