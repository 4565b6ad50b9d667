"""The learning curve: the learn half replayed as mis-routed turns through the real learner.

Each arm is a real `Service` (embedded SQLite store in a temporary folder, the catalog upserted
through `Service.upsert_tools`, the learner's intake worker, the oracle tiers, the tuner, the
Anthropic teacher through the official SDK). The teacher is a local aiohttp stub of
`POST /v1/messages` (tests/stubs.py) answering the ground-truth label of the request it is asked
about; the service still checks that the answer is one of the candidates it offered. Every
learn-half query is observed as a turn whose used tool is `shell_exec` (a fallback, so every turn
is flagged), in steps; after each step the learner is drained, a refit in progress is awaited,
and the held-out half is ranked against the service's own ranker.

Two generations of the loop side by side:
- **v1** pins what the first loop had as constants: margin floor 0.05, description weight 16
  (8 for `hashing`), exemplars added as a sum, the teacher shown the ranker's top 10;
- **v2** is the default: the fold, the free tier's floor and the teacher's candidates are fitted
  at run time from the teacher's labels (`toolselect.learn.fit`).
Arms: teacher on (tiers ratchet > ranker > teacher), teacher off (`TOOLSELECT_ORACLE=off`: only
the free tiers label), teacher only (tiers ratchet > teacher: every label from the teacher).
Then the sensitivity of v2's two targets (free-tier precision, teacher recall), and the
description-weight grid re-scored on the exemplars each arm saved.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.accuracy import build_ranker, rank_all, score
from bench.cache import Encoders
from bench.data import Dataset
from bench.data import load as load_split
from toolselect.catalog import tool_text
from toolselect.config import Settings
from toolselect.embed import Embedder
from toolselect.learn.tuning import fit_payload
from toolselect.names import normalise_query
from toolselect.ranker import LearnedVector
from toolselect.records import Exemplar, Tool
from toolselect.service import Service, build_teacher, compose
from toolselect.store.factory import open_store

STEPS = (0, 50, 100, 200, 400)  # then all of the learn half
DESCRIPTION_WEIGHTS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
USED_TOOL = "shell_exec"
PRECISIONS = (0.9, 0.95, 0.98)
RECALLS = (0.9, 0.95, 0.99)
SHARES = (0.25, 0.5, 1.0)
SPLIT_SEEDS = (1, 2, 3)  # the curves above use split 0


def v1_settings(kind: str) -> dict[str, Any]:
    """The first loop's constants, pinned."""
    return {
        "margin_floor": 0.05,
        "description_weight": 8.0 if kind == "hashing" else 16.0,
        "self_label_weight": 1.0,
        "teacher_candidates": 10,
        "teacher_full_catalog": 0,
        "teacher_share": 1.0,
    }


@dataclass(frozen=True)
class Arm:
    """One run's settings; `variant` marks the sensitivity runs (not drawn as curves)."""

    name: str
    oracle: str
    tiers: tuple[str, ...]
    loop: str = "v2"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    variant: bool = False


ON = ("ratchet", "ranker", "teacher")
TEACHER_ON = Arm("teacher on", "on", ON)
TEACHER_OFF = Arm("teacher off", "off", ON)
# Every flagged turn to the teacher: the ceiling of what its labels can do.
TEACHER_ONLY = Arm("teacher only", "on", ("ratchet", "teacher"), overrides={"teacher_share": 1.0})


def arms_for(kind: str) -> list[Arm]:
    v1 = v1_settings(kind)
    return [
        Arm("teacher on", "on", ON, "v1", v1),
        Arm("teacher off", "off", ON, "v1", v1),
        TEACHER_ON,
        TEACHER_OFF,
        TEACHER_ONLY,
    ]


# -- the teacher stub ---------------------------------------------------------------------------


def _request_of(body: Any) -> str:
    """The request text inside the teacher's user prompt (between <request> tags)."""
    try:
        content = body["messages"][0]["content"]
    except (KeyError, IndexError, TypeError):
        return ""
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    start = content.find("<request>\n")
    end = content.rfind("\n</request>")
    return content[start + len("<request>\n") : end] if start >= 0 and end > start else ""


async def teacher_stub(truth: dict[str, str]) -> AsyncGenerator[Any, None]:
    """A Messages API stub answering, for each request, its ground-truth tool."""
    from tests.stubs import Reply, anthropic_message, start_stub

    def answer(body: Any) -> Reply:
        return Reply(body=anthropic_message(truth.get(_request_of(body), "none")))

    async for stub in start_stub("/v1/messages"):
        stub.responder = answer
        yield stub


@asynccontextmanager
async def bench_service(
    tools: Sequence[Tool],
    embedder: Embedder,
    kind: str,
    weight: float,
    stub_url: str,
    **overrides: Any,
) -> AsyncIterator[Service]:
    """A fresh real service for one arm (here and in bench.agent): the embedded SQLite store in
    a temporary folder, the Anthropic teacher against the stub at `stub_url` with no hourly
    budget limit, the catalog upserted; `overrides` are the arm's own settings. What
    `Service.start` does, minus the replica poll loop, with the bench's (cached) embedder."""
    with tempfile.TemporaryDirectory(prefix="toolselect-bench-") as tmp:
        settings = Settings().override(
            store=f"sqlite:{tmp}/bench.db",
            data_dir=tmp,
            embedder=kind,
            hybrid_weight=weight,
            teacher="anthropic",
            anthropic_api_key="bench",
            anthropic_base_url=stub_url,
            teacher_budget_per_hour=1_000_000,
            queue_size=4096,
            shutdown_timeout_s=60.0,
            **overrides,
        )
        store = await open_store(settings)
        service = Service(compose(settings, store, embedder, teacher=build_teacher(settings)))
        try:
            await service.connect()
            await service.catalog.upsert_tools(tools)
            yield service
        finally:
            await service.close()


# -- one arm ------------------------------------------------------------------------------------


async def run_arm(
    data: Dataset,
    embedder: Embedder,
    kind: str,
    weight: float,
    arm: Arm,
    stub: Any,
    steps: Sequence[int] = (),
) -> dict[str, Any]:
    """Observe the learn half in `steps` through a fresh service; score held-out at each."""
    steps = steps or (*STEPS, len(data.learn))
    started = time.perf_counter()
    truth = {q.id: q.label for q in data.learn}
    held_vectors = await embedder.embed([q.text for q in data.held])
    overrides = {"oracle": arm.oracle, "oracle_tiers": arm.tiers, **arm.overrides}
    async with bench_service(data.tools, embedder, kind, weight, stub.url, **overrides) as service:
        received = len(stub.received)
        points = []
        observed = 0
        for step in steps:
            target = min(step, len(data.learn))
            for q in data.learn[observed:target]:
                if not service.learning.observe(q.text, USED_TOOL, turn_id=q.id):
                    raise RuntimeError("the observe queue overflowed; raise queue_size")
            observed = target
            if not await service.learner.drain(600.0):
                raise RuntimeError(f"the learner did not drain at step {step}")
            await service.tuner.settle()
            point = score(rank_all(service.ranker, held_vectors), data.held)
            point.pop("by_category")
            dw, _, shrink, self_weight = service.ranker.weights
            point.update(
                observed=observed,
                exemplars=service.ranker.exemplar_total,
                teacher_calls=len(stub.received) - received,
                description_weight=dw,
                shrink=shrink,
                self_weight=self_weight,
                free_floor=service.tuner.free_floor,
            )
            points.append(point)
        audit = await _audit(service, data, truth)
        exemplars = list((await service.store.exemplars_since(0)).upserted)
        fitted = fit_payload(service.tuner.current)
    final = points[-1]
    return {
        "embedder": embedder.id,
        "method": kind if kind != "hybrid" else f"hybrid w={weight:g}",
        "arm": arm.name,
        "loop": arm.loop,
        "overrides": dict(arm.overrides),
        "variant": arm.variant,
        "points": points,
        "final": {k: final[k] for k in ("top1", "recall5", "mrr10")},
        "gain_top1": final["top1"] - points[0]["top1"],
        "audit": audit,
        "fit": fitted,
        "took_s": time.perf_counter() - started,
        "_exemplars": exemplars,
    }


async def _audit(service: Service, data: Dataset, truth: dict[str, str]) -> dict[str, Any]:
    """Per tier: decisions, labels, and how many labels equal the ground truth; the teacher's
    share of the flagged turns and how often it had to decline (true tool not shown)."""
    tiers: dict[str, dict[str, int]] = {}
    flagged = 0
    for q in data.learn:
        turn = await service.store.get_turn(q.id)
        if turn is None:
            tiers.setdefault("missing", {"turns": 0})["turns"] += 1
            continue
        flagged += int(turn.flagged)
        row = tiers.setdefault(turn.tier or "none", {"turns": 0, "labeled": 0, "correct": 0})
        row["turns"] += 1
        if turn.result == "labeled" and turn.label:
            row["labeled"] += 1
            row["correct"] += int(turn.label == truth[q.id])
        else:
            key = f"result_{turn.result or 'none'}"
            row[key] = row.get(key, 0) + 1
    calls = await service.store.oracle_calls()
    answered = [c for c in calls if c.result in ("labeled", "declined")]
    declined = sum(c.result == "declined" for c in answered)
    ranker = tiers.get("ranker", {})
    escalated = tiers.get("teacher", {}).get("turns", 0)
    return {
        "tiers": tiers,
        "flagged": flagged,
        "free_labels": ranker.get("labeled", 0),
        "free_precision": ranker["correct"] / ranker["labeled"] if ranker.get("labeled") else None,
        "escalated": escalated,
        "escalated_share": escalated / flagged if flagged else 0.0,
        "teacher_calls": len(calls),
        "teacher_declines": declined,
        "decline_rate": declined / len(answered) if answered else None,
    }


# -- knobs re-scored on the exemplars an arm saved ----------------------------------------------


def _exemplar_vectors(exemplars: Sequence[Exemplar]) -> list[LearnedVector]:
    return [
        LearnedVector(e.query_norm, e.tool, np.asarray(e.embedding, dtype=np.float32))
        for e in exemplars
    ]


def truth_exemplars(data: Dataset, vectors: np.ndarray) -> list[LearnedVector]:
    return [
        LearnedVector(normalise_query(q.text), q.label, v)
        for q, v in zip(data.learn, vectors, strict=True)
    ]


def knob_sweep(
    data: Dataset,
    catalog: np.ndarray,
    held: np.ndarray,
    learned: dict[str, list[LearnedVector]],
) -> list[dict[str, Any]]:
    """Held-out top-1 per description weight (exemplar weight 1, exemplars summed) with the
    exemplars of each source folded in: how much a fixed weight would have mattered."""
    rows: list[dict[str, Any]] = []
    for source, vectors in learned.items():
        for dw in DESCRIPTION_WEIGHTS:
            ranker = build_ranker(data.tools, catalog, dw=dw, ew=1.0)
            ranker.fold(vectors)
            row = score(rank_all(ranker, held), data.held)
            row.pop("by_category")
            rows.append({"exemplars": source, "description_weight": dw, **row})
    return rows


def _label(kind: str, weight: float) -> str:
    return kind if kind != "hybrid" else f"hybrid w={weight:g}"


def _print(label: str, result: dict[str, Any]) -> None:
    audit = result["audit"]
    precision = audit["free_precision"]
    print(
        f"  {label} {result['loop']} {result['arm']} {result['overrides'] or ''}: top-1 "
        f"{result['points'][0]['top1']:.3f} -> {result['final']['top1']:.3f}, free labels "
        f"{audit['free_labels']} at {precision if precision is None else round(precision, 3)}, "
        f"teacher share {audit['escalated_share']:.2f}, declines {audit['teacher_declines']} "
        f"({result['took_s']:.0f} s)",
        flush=True,
    )


async def _run(
    data: Dataset, encoders: Encoders, specs: Sequence[tuple[str, float]], sweep: Sequence[str]
) -> dict[str, Any]:
    """Per embedder: both loops' arms over the whole curve, the ceiling (every learn-half label
    true), the description-weight grid on the saved exemplars; for the embedders in `sweep`, the
    sensitivity of v2's targets (whole learn half at once)."""
    truth_by_text: dict[str, str] = {}
    for q in data.learn:
        truth_by_text.setdefault(q.text, q.label)
    runs: list[dict[str, Any]] = []
    knobs: dict[str, Any] = {}
    truth_points: dict[str, dict[str, Any]] = {}
    agen = teacher_stub(truth_by_text)
    stub = await agen.__anext__()
    try:
        for kind, weight in specs:
            embedder = encoders.get(kind, weight)
            label = _label(kind, weight)
            catalog = await embedder.embed([tool_text(t) for t in data.tools])
            held = await embedder.embed([q.text for q in data.held])
            learn = await embedder.embed([q.text for q in data.learn])
            truth = truth_exemplars(data, learn)
            ranker = build_ranker(data.tools, catalog, dw=v1_settings(kind)["description_weight"])
            ranker.fold(truth)
            bound = score(rank_all(ranker, held), data.held)
            bound.pop("by_category")
            truth_points[label] = bound
            saved: dict[str, list[LearnedVector]] = {"ground truth": truth}
            for arm in arms_for(kind):
                result = await run_arm(data, embedder, kind, weight, arm, stub)
                exemplars = result.pop("_exemplars")
                if arm.loop == "v2" and arm.name == "teacher on":
                    saved["v2 teacher on"] = _exemplar_vectors(exemplars)
                runs.append(result)
                _print(label, result)
            knobs[label] = knob_sweep(data, catalog, held, saved)
            if label not in sweep:
                continue
            variants = (
                [
                    Arm(arm.name, arm.oracle, arm.tiers, "v2", {"free_tier_precision": p}, True)
                    for p in PRECISIONS
                    if p != 0.95
                    for arm in (TEACHER_ON, TEACHER_OFF)
                ]
                + [
                    Arm("teacher on", "on", ON, "v2", {"teacher_recall": r}, True)
                    for r in RECALLS
                    if r != 0.95
                ]
                + [
                    Arm("teacher on", "on", ON, "v2", {"teacher_share": share}, True)
                    for share in SHARES
                    if share != 0.25
                ]
            )
            for arm in variants:
                result = await run_arm(
                    data, embedder, kind, weight, arm, stub, steps=(0, len(data.learn))
                )
                result.pop("_exemplars")
                runs.append(result)
                _print(label, result)
    finally:
        await agen.aclose()
    splits = await _other_splits(encoders, specs, sweep)
    return {"runs": runs, "knobs": knobs, "truth_bound": truth_points, "splits": splits}


async def _other_splits(
    encoders: Encoders, specs: Sequence[tuple[str, float]], sweep: Sequence[str]
) -> list[dict[str, Any]]:
    """v1 against v2 (teacher on) on other seeded learn/held splits of the same data: one
    split is one sample, and the fitted loop must not win on it alone."""
    rows: list[dict[str, Any]] = []
    for kind, weight in specs:
        if _label(kind, weight) not in sweep:
            continue
        embedder = encoders.get(kind, weight)
        for seed in SPLIT_SEEDS:
            data = load_split(seed)
            truth: dict[str, str] = {}
            for q in data.learn:
                truth.setdefault(q.text, q.label)
            agen = teacher_stub(truth)
            stub = await agen.__anext__()
            try:
                for arm in (arms_for(kind)[0], TEACHER_ON):
                    result = await run_arm(
                        data, embedder, kind, weight, arm, stub, steps=(0, len(data.learn))
                    )
                    result.pop("_exemplars")
                    result["seed"] = seed
                    rows.append(result)
                    _print(f"{_label(kind, weight)} split {seed}", result)
            finally:
                await agen.aclose()
    return rows


def run(
    data: Dataset,
    encoders: Encoders,
    specs: Sequence[tuple[str, float]],
    sweep: Sequence[str],
) -> dict[str, Any]:
    """Curves for every (kind, weight) in `specs`; the sensitivity sweep for those in `sweep`."""
    from toolselect.logs import configure_logging

    configure_logging("warning", "console")
    started = time.perf_counter()
    result = asyncio.run(_run(data, encoders, specs, sweep))
    encoders.save()
    result.update(
        steps=[*STEPS, len(data.learn)],
        used_tool=USED_TOOL,
        took_s=time.perf_counter() - started,
    )
    return result


def plot(result: dict[str, Any], path: Any, baselines: dict[str, float] | None = None) -> None:
    """Held-out top-1 against observed turns: one panel per embedder, a line per arm (colour),
    v1 dashed and faded, v2 solid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [r for r in result["runs"] if not r["variant"]]
    methods = list(dict.fromkeys(r["method"] for r in curves))
    fig, axes = plt.subplots(
        1, len(methods), figsize=(5.2 * len(methods), 4.4), sharey=True, squeeze=False
    )
    colours = {"teacher on": "tab:blue", "teacher off": "tab:orange", "teacher only": "tab:green"}
    for ax, method in zip(axes[0], methods, strict=True):
        for r in (r for r in curves if r["method"] == method):
            old = r["loop"] == "v1"
            xs = [p["observed"] for p in r["points"]]
            ys = [100 * p["top1"] for p in r["points"]]
            ax.plot(
                xs,
                ys,
                "--" if old else "-",
                marker="o",
                markersize=3,
                color=colours.get(r["arm"], "black"),
                alpha=0.5 if old else 1.0,
                label=f"{r['loop']} {r['arm']}",
            )
        bound = result.get("truth_bound", {}).get(method)
        if bound:
            ax.axhline(
                100 * bound["top1"], color="grey", linestyle=":", label="all labels true (v1 fold)"
            )
        for name, value in (baselines or {}).items():
            ax.axhline(100 * value, color="tab:red", linestyle="-.", linewidth=1, label=name)
        ax.set_title(method)
        ax.set_xlabel("observed mis-routed turns (learn half)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    axes[0][0].set_ylabel("held-out top-1 (%)")
    fig.suptitle("Learning curve: v1 (constants, dashed) against v2 (fitted, solid)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
