"""The learning curve: the learn half replayed as mis-routed turns through the real learner.

Each arm is a real `Service` (embedded SQLite store in a temporary folder, the catalog upserted
through `Service.upsert_tools`, the learner's intake worker, the oracle tiers, the Anthropic
teacher through the official SDK). The teacher is a local aiohttp stub of `POST /v1/messages`
(tests/stubs.py) answering the ground-truth label of the request it is asked about; the service
still checks that the answer is one of the candidates it offered. Every learn-half query is
observed as a turn whose used tool is `shell_exec` (a fallback, so every turn is flagged), in
steps; after each step the learner is drained and the held-out half is ranked against the
service's own ranker.

Arms: `teacher on` (default tiers ratchet > ranker > teacher: a confident ranker labels its own
top-1 for free, the teacher gets the rest), `teacher off` (`TOOLSELECT_ORACLE=off`: only the
free tiers label), `teacher only` (tiers ratchet > teacher: every label from the teacher).
Then a margin-floor sweep of both main arms, and the centroid knobs (description weight,
nearest-exemplar blend) re-scored on the exemplars each arm actually saved.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.accuracy import K, build_ranker, rank_all, score
from bench.cache import Encoders
from bench.data import Dataset
from toolselect.catalog import tool_text
from toolselect.config import Settings
from toolselect.embed import Embedder
from toolselect.graph.store import Exemplar
from toolselect.names import normalise_query
from toolselect.ranker import CentroidRanker, LearnedVector
from toolselect.service import Service, build_teacher, open_store

STEPS = (0, 50, 100, 200, 400)  # then all of the learn half
FLOORS = (0.0, 0.02, 0.05, 0.1, 0.2)
DEFAULT_FLOOR = 0.05
DESCRIPTION_WEIGHTS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
BLENDS = (0.0, 0.1, 0.25, 0.5)
USED_TOOL = "shell_exec"


@dataclass(frozen=True)
class Arm:
    name: str
    oracle: str
    tiers: tuple[str, ...]


TEACHER_ON = Arm("teacher on", "on", ("ratchet", "ranker", "teacher"))
TEACHER_OFF = Arm("teacher off", "off", ("ratchet", "ranker", "teacher"))
TEACHER_ONLY = Arm("teacher only", "on", ("ratchet", "teacher"))


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


# -- one arm ------------------------------------------------------------------------------------


async def run_arm(
    data: Dataset,
    embedder: Embedder,
    kind: str,
    weight: float,
    arm: Arm,
    floor: float,
    stub: Any,
    steps: Sequence[int] = (),
    description_weight: float = 1.0,
) -> dict[str, Any]:
    """Observe the learn half in `steps` through a fresh service; score held-out at each."""
    steps = steps or (*STEPS, len(data.learn))
    started = time.perf_counter()
    truth = {q.id: q.label for q in data.learn}
    held_vectors = await embedder.embed([q.text for q in data.held])
    with tempfile.TemporaryDirectory(prefix="toolselect-bench-") as tmp:
        settings = Settings().override(
            store=f"sqlite:{tmp}/bench.db",
            data_dir=tmp,
            embedder=kind,
            hybrid_weight=weight,
            oracle=arm.oracle,
            oracle_tiers=arm.tiers,
            margin_floor=floor,
            description_weight=description_weight,
            exemplar_weight=1.0,
            teacher="anthropic",
            anthropic_api_key="bench",
            anthropic_base_url=stub.url,
            teacher_budget_per_hour=1_000_000,
            queue_size=4096,
            shutdown_timeout_s=60.0,
        )
        store = await open_store(settings)
        service = Service(settings, store, embedder, teacher=build_teacher(settings))
        try:
            # What `Service.start` does, minus the replica poll loop, with our (cached) embedder.
            await service.connect()
            await service.upsert_tools(data.tools)
            received = len(stub.received)
            points = []
            observed = 0
            for step in steps:
                target = min(step, len(data.learn))
                for q in data.learn[observed:target]:
                    if not service.observe(q.text, USED_TOOL, turn_id=q.id):
                        raise RuntimeError("the observe queue overflowed; raise queue_size")
                observed = target
                if not await service.learner.drain(600.0):
                    raise RuntimeError(f"the learner did not drain at step {step}")
                point = score(rank_all(service.ranker, held_vectors), data.held)
                point.pop("by_category")
                point.update(
                    observed=observed,
                    exemplars=service.ranker.exemplar_total,
                    teacher_calls=len(stub.received) - received,
                )
                points.append(point)
            audit = await _audit(service, data, truth)
            exemplars = list((await service.store.exemplars_since(0)).upserted)
        finally:
            await service.close()
    final = points[-1]
    return {
        "embedder": embedder.id,
        "method": kind if kind != "hybrid" else f"hybrid w={weight:g}",
        "arm": arm.name,
        "floor": floor,
        "description_weight": description_weight,
        "points": points,
        "final": {k: final[k] for k in ("top1", "recall5", "mrr10")},
        "gain_top1": final["top1"] - points[0]["top1"],
        "audit": audit,
        "took_s": time.perf_counter() - started,
        "_exemplars": exemplars,
    }


async def _audit(service: Service, data: Dataset, truth: dict[str, str]) -> dict[str, Any]:
    """Per tier: decisions, labels, and how many labels equal the ground truth."""
    tiers: dict[str, dict[str, int]] = {}
    for q in data.learn:
        turn = await service.store.get_turn(q.id)
        if turn is None:
            tiers.setdefault("missing", {"turns": 0})["turns"] += 1
            continue
        row = tiers.setdefault(turn.tier or "none", {"turns": 0, "labeled": 0, "correct": 0})
        row["turns"] += 1
        if turn.result == "labeled" and turn.label:
            row["labeled"] += 1
            row["correct"] += int(turn.label == truth[q.id])
        else:
            key = f"result_{turn.result or 'none'}"
            row[key] = row.get(key, 0) + 1
    calls = await service.store.oracle_calls()
    ranker = tiers.get("ranker", {})
    return {
        "tiers": tiers,
        "free_labels": ranker.get("labeled", 0),
        "free_precision": ranker["correct"] / ranker["labeled"] if ranker.get("labeled") else None,
        "teacher_calls": len(calls),
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
) -> dict[str, Any]:
    """Held-out top-1 per description weight (exemplar weight 1) and per nearest-exemplar blend
    (bench-only: score + beta * best cosine to one of the tool's exemplars)."""
    weights: list[dict[str, Any]] = []
    blends: list[dict[str, Any]] = []
    for source, vectors in learned.items():
        for dw in DESCRIPTION_WEIGHTS:
            ranker = build_ranker(data.tools, catalog, dw=dw, ew=1.0)
            ranker.fold(vectors)
            row = score(rank_all(ranker, held), data.held)
            row.pop("by_category")
            weights.append({"exemplars": source, "description_weight": dw, **row})
        ranker = build_ranker(data.tools, catalog)
        ranker.fold(vectors)
        for beta in BLENDS:
            row = score(_blend_rank(ranker, vectors, held, beta), data.held)
            row.pop("by_category")
            blends.append({"exemplars": source, "beta": beta, **row})
    return {"description_weight": weights, "blend": blends}


def _blend_rank(
    ranker: CentroidRanker, exemplars: Sequence[LearnedVector], held: np.ndarray, beta: float
) -> list[tuple[str, ...]]:
    names = ranker.names
    if not exemplars or beta == 0.0:
        return rank_all(ranker, held)
    row_of = {name: i for i, name in enumerate(names)}
    kept = sorted((e for e in exemplars if e.tool in row_of), key=lambda e: row_of[e.tool])
    owners = np.array([row_of[e.tool] for e in kept], dtype=np.intp)
    ex = np.vstack([np.asarray(e.vector, dtype=np.float32) for e in kept])
    scores = held @ ranker.snapshot.columns  # (queries, tools)
    sims = held @ ex.T  # (queries, exemplars), grouped by tool
    starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])
    best = np.zeros_like(scores)
    best[:, owners[starts]] = np.maximum.reduceat(sims, starts, axis=1)
    total = scores + beta * best
    top = np.argsort(-total, axis=1, kind="stable")[:, :K]
    return [tuple(names[i] for i in row) for row in top]


# -- entry --------------------------------------------------------------------------------------


async def _curves(
    data: Dataset,
    embedder: Embedder,
    kind: str,
    weight: float,
    stub: Any,
    dw: float,
    runs: list[dict[str, Any]],
) -> dict[str, list[LearnedVector]]:
    """The three arms at the default floor; returns the exemplars each arm saved."""
    label = kind if kind != "hybrid" else f"hybrid w={weight:g}"
    saved: dict[str, list[LearnedVector]] = {}
    for arm in (TEACHER_ON, TEACHER_OFF, TEACHER_ONLY):
        result = await run_arm(
            data, embedder, kind, weight, arm, DEFAULT_FLOOR, stub, description_weight=dw
        )
        saved[arm.name] = _exemplar_vectors(result.pop("_exemplars"))
        runs.append(result)
        print(
            f"  {label} dw {dw:g} {arm.name}: top-1 {result['points'][0]['top1']:.3f} -> "
            f"{result['final']['top1']:.3f} ({result['took_s']:.0f} s)",
            flush=True,
        )
    return saved


def best_description_weight(knobs: dict[str, Any], source: str = "teacher on") -> float:
    rows = [r for r in knobs["description_weight"] if r["exemplars"] == source]
    # Ties go to the weight closest to 1 (the smallest change from the current default).
    best = max(rows, key=lambda r: (round(r["top1"], 6), -abs(np.log2(r["description_weight"]))))
    return float(best["description_weight"])


async def _run(
    data: Dataset, encoders: Encoders, specs: Sequence[tuple[str, float]], sweep: Sequence[str]
) -> dict[str, Any]:
    """Phase 1: curves at description weight 1 for every embedder, and the knob sweep on the
    exemplars they saved. Phase 2, for the embedders in `sweep`: curves again at the best
    description weight found, and the margin-floor sweep at that weight."""
    truth_by_text: dict[str, str] = {}
    for q in data.learn:
        truth_by_text.setdefault(q.text, q.label)
    runs: list[dict[str, Any]] = []
    knobs: dict[str, Any] = {}
    chosen: dict[str, float] = {}
    truth_points: dict[str, dict[str, Any]] = {}
    agen = teacher_stub(truth_by_text)
    stub = await agen.__anext__()
    try:
        for kind, weight in specs:
            embedder = encoders.get(kind, weight)
            label = kind if kind != "hybrid" else f"hybrid w={weight:g}"
            catalog = await embedder.embed([tool_text(t) for t in data.tools])
            held = await embedder.embed([q.text for q in data.held])
            learn = await embedder.embed([q.text for q in data.learn])
            truth = truth_exemplars(data, learn)
            ranker = build_ranker(data.tools, catalog)
            ranker.fold(truth)
            bound = score(rank_all(ranker, held), data.held)
            bound.pop("by_category")
            truth_points[label] = bound
            saved = await _curves(data, embedder, kind, weight, stub, 1.0, runs)
            knobs[label] = knob_sweep(data, catalog, held, {"ground truth": truth, **saved})
        for kind, weight in specs:
            label = kind if kind != "hybrid" else f"hybrid w={weight:g}"
            if label not in sweep:
                continue
            embedder = encoders.get(kind, weight)
            dw = chosen[label] = best_description_weight(knobs[label])
            if dw != 1.0:
                await _curves(data, embedder, kind, weight, stub, dw, runs)
            for floor in FLOORS:
                if floor == DEFAULT_FLOOR:
                    continue
                # At floor 0 the ranker labels every turn and the teacher is never asked: the
                # teacher-on arm would repeat the teacher-off run exactly.
                for arm in (TEACHER_OFF,) if floor == 0.0 else (TEACHER_ON, TEACHER_OFF):
                    result = await run_arm(
                        data, embedder, kind, weight, arm, floor, stub,
                        steps=(0, len(data.learn)), description_weight=dw,
                    )  # fmt: skip
                    result.pop("_exemplars")
                    runs.append(result)
                print(f"  {label} dw {dw:g} floor {floor:g} done", flush=True)
    finally:
        await agen.aclose()
    return {
        "runs": runs,
        "knobs": knobs,
        "truth_bound": truth_points,
        "chosen_description_weight": chosen,
    }


def run(
    data: Dataset,
    encoders: Encoders,
    specs: Sequence[tuple[str, float]],
    sweep: Sequence[str],
) -> dict[str, Any]:
    """Curves for every (kind, weight) in `specs`; the margin-floor sweep for those in `sweep`."""
    from toolselect.logs import configure_logging

    configure_logging("warning", "console")
    started = time.perf_counter()
    result = asyncio.run(_run(data, encoders, specs, sweep))
    encoders.save()
    result.update(
        steps=[*STEPS, len(data.learn)],
        floors=list(FLOORS),
        default_floor=DEFAULT_FLOOR,
        used_tool=USED_TOOL,
        took_s=time.perf_counter() - started,
    )
    return result


def plot(result: dict[str, Any], path: Any, baselines: dict[str, float] | None = None) -> None:
    """Held-out top-1 against observed turns: one panel per embedder, a line per arm (colour)
    and description weight (dashed: the current default 1, solid: the weight chosen)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [r for r in result["runs"] if r["floor"] == result["default_floor"]]
    methods = list(dict.fromkeys(r["method"] for r in curves))
    fig, axes = plt.subplots(
        1, len(methods), figsize=(4.8 * len(methods), 4.2), sharey=True, squeeze=False
    )
    colours = {"teacher on": "tab:blue", "teacher off": "tab:orange", "teacher only": "tab:green"}
    chosen = result.get("chosen_description_weight", {})
    for ax, method in zip(axes[0], methods, strict=True):
        for r in (r for r in curves if r["method"] == method):
            dw = r["description_weight"]
            faded = method in chosen and dw != chosen[method]
            xs = [p["observed"] for p in r["points"]]
            ys = [100 * p["top1"] for p in r["points"]]
            ax.plot(
                xs,
                ys,
                "--" if faded else "-",
                marker="o",
                markersize=3,
                color=colours.get(r["arm"], "black"),
                alpha=0.45 if faded else 1.0,
                label=f"{r['arm']}, dw {dw:g}",
            )
        bound = result.get("truth_bound", {}).get(method)
        if bound:
            ax.axhline(
                100 * bound["top1"], color="grey", linestyle=":", label="all labels true, dw 1"
            )
        for name, value in (baselines or {}).items():
            ax.axhline(100 * value, color="tab:red", linestyle="-.", linewidth=1, label=name)
        ax.set_title(method)
        ax.set_xlabel("observed mis-routed turns (learn half)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    axes[0][0].set_ylabel("held-out top-1 (%)")
    fig.suptitle(f"Learning curve (margin floor {result['default_floor']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
