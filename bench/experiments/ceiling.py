"""How far learning can lift held-out top-1 at all: `python -m bench.experiments.ceiling`.

Run on demand (not part of `make bench`). Every learn-half query is folded with its true label
(a perfect teacher that labels every turn), so no labeller can do better than these figures with
the same fold; a change to the ranker family is worth trying only if it raises them. For the
`hybrid` embedder, per hybrid weight and description weight:

  centroid       the service's fold: `dw * description + sum of exemplars`, normalised
  + nearest      plus `beta * max(0, max cosine to the tool's exemplars - centroid cosine)`
                 (a nearest-exemplar term that only ever lifts a tool)
  + prior        plus `gamma * log(1 + labels of the tool)` (a frequency prior)
  + head         a linear head: the centroid matrix as the starting weights, trained by
                 softmax cross-entropy on the labelled queries and the tool descriptions,
                 with an L2 pull back to the centroids (`lam`) and a logit scale (`scale`)
  + adapter      a query adapter: one near-identity map `W` of the queries' dense (MiniLM)
                 part, trained by softmax cross-entropy of the labelled queries against the
                 descriptions with an L2 pull to the identity; every held-out query is mapped
                 before it is scored against the centroid fold. Unlike the head it can move
                 the requests of tools without labels, so its rows split held-out top-1 into
                 requests of tools with and without learn-half labels

Each row gives the best of its grid. Prints one JSON object; needs the bench extra and bfcl-eval
(see bench/README.md). The hybrid weight moves the two parts of stored vectors, so the grid
re-weights the cached 0.5 vectors instead of embedding again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.cache import Encoders
from bench.data import load
from toolselect.catalog import tool_text
from toolselect.embed.base import normalise_rows

Matrix = npt.NDArray[np.float32]

HYBRID_WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7)
DESCRIPTION_WEIGHTS = (2.0, 4.0, 8.0, 16.0, 32.0)
BETAS = (0.05, 0.1, 0.25, 0.5)
GAMMAS = (0.005, 0.01, 0.02, 0.04)
# A small grid: ~7 s per point here. Without the pull, or at rates of 0.01, the head fits the
# 726 learn-half queries (fewer than one per tool) and loses 1-6 points against its start.
HEAD_SCALES = (40.0, 80.0)
HEAD_PULLS = (0.1, 1.0)
HEAD_STEPS = 100
ADAPTER_PULLS = (0.01, 0.03, 0.1)
ADAPTER_SCALE = 28.0  # on the hybrid vectors' dot products
ADAPTER_STEPS = 150


def _top1(scores: npt.NDArray[np.floating], labels: npt.NDArray[np.intp]) -> float:
    return round(100.0 * float(np.mean(scores.argmax(axis=1) == labels)), 1)


def _softmax_residual(logits: npt.NDArray[np.floating], onehot: Matrix) -> npt.NDArray[np.floating]:
    """`softmax(logits) - onehot`, row by row (the cross-entropy's gradient in the logits)."""
    logits = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    residual: npt.NDArray[np.floating] = probs - onehot
    return residual


def _adam(
    weights: Matrix, gradient: Callable[[Matrix], npt.NDArray[np.floating]], steps: int, rate: float
) -> Matrix:
    """`weights` after `steps` of full-batch Adam on `gradient` (updated in place)."""
    moment: npt.NDArray[np.floating] = np.zeros_like(weights)
    velocity: npt.NDArray[np.floating] = np.zeros_like(weights)
    for step in range(1, steps + 1):
        grad = gradient(weights)
        moment = 0.9 * moment + 0.1 * grad
        velocity = 0.999 * velocity + 0.001 * grad * grad
        m_hat = moment / (1.0 - 0.9**step)
        v_hat = velocity / (1.0 - 0.999**step)
        weights -= (rate * m_hat / (np.sqrt(v_hat) + 1e-8)).astype(np.float32)
    return weights


def _onehot(labels: npt.NDArray[np.intp], width: int) -> Matrix:
    onehot = np.zeros((labels.size, width), dtype=np.float32)
    onehot[np.arange(labels.size), labels] = 1.0
    return onehot


def train_head(
    start: Matrix,
    examples: Matrix,
    labels: npt.NDArray[np.intp],
    *,
    scale: float,
    pull: float,
    steps: int = HEAD_STEPS,
    rate: float = 0.002,
) -> Matrix:
    """Weights from `start` by full-batch Adam on mean softmax cross-entropy of
    `scale * examples @ W.T` plus `pull * ||W - start||^2` (numpy only, a few seconds)."""
    onehot = _onehot(labels, start.shape[0])

    def gradient(weights: Matrix) -> npt.NDArray[np.floating]:
        residual = _softmax_residual(scale * (examples @ weights.T), onehot)
        grad: npt.NDArray[np.floating] = scale * (residual.T @ examples) / examples.shape[0]
        return grad + 2.0 * pull * (weights - start)

    return _adam(start.copy(), gradient, steps, rate)


def train_adapter(
    dense: Matrix, lexical: Matrix, labels: npt.NDArray[np.intp], catalog: Matrix, pull: float
) -> Matrix:
    """`W` for the dense block (first `dense.shape[1]` dimensions of the hybrid vectors) by
    full-batch Adam on the softmax cross-entropy of `dense @ W @ catalog_dense.T + lexical
    @ catalog_lexical.T`, plus `pull * ||W - I||^2`."""
    width = dense.shape[1]
    identity = np.eye(width, dtype=np.float32)
    targets, rest = catalog[:, :width], lexical @ catalog[:, width:].T
    onehot = _onehot(labels, catalog.shape[0])

    def gradient(weights: Matrix) -> npt.NDArray[np.floating]:
        logits = ADAPTER_SCALE * ((dense @ weights) @ targets.T + rest)
        residual = _softmax_residual(logits, onehot)
        grad = ADAPTER_SCALE * (dense.T @ (residual @ targets)) / labels.size
        return grad + 2.0 * pull * (weights - identity)

    return _adam(identity.copy(), gradient, ADAPTER_STEPS, 0.003)


def adapter_rows(
    catalog: Matrix,
    learn: Matrix,
    learn_labels: npt.NDArray[np.intp],
    held: Matrix,
    held_labels: npt.NDArray[np.intp],
    dense_dim: int,
) -> dict[str, Any]:
    """Held-out top-1 (all, requests of tools with learn-half labels, without) of the centroid
    fold with and without a query adapter trained on every learn-half label, per description
    weight and pull."""
    summed = np.zeros_like(catalog)
    np.add.at(summed, learn_labels, learn)
    seen = np.bincount(learn_labels, minlength=catalog.shape[0])[held_labels] > 0

    def split(scores: npt.NDArray[np.floating]) -> dict[str, float]:
        return {
            "all": _top1(scores, held_labels),
            "labelled tools": _top1(scores[seen], held_labels[seen]),
            "tools without labels": _top1(scores[~seen], held_labels[~seen]),
        }

    rows: list[dict[str, Any]] = []
    for pull in ADAPTER_PULLS:
        weights = train_adapter(
            learn[:, :dense_dim], learn[:, dense_dim:], learn_labels, catalog, pull
        )
        block = held[:, :dense_dim]
        mapped = block @ weights
        mapped *= np.linalg.norm(block, axis=1, keepdims=True) / np.maximum(
            np.linalg.norm(mapped, axis=1, keepdims=True), 1e-12
        )
        adapted = np.hstack((mapped, held[:, dense_dim:])).astype(np.float32)
        for dw in DESCRIPTION_WEIGHTS:
            centroids = normalise_rows(dw * catalog + summed).T
            rows.append(
                {
                    "pull": pull,
                    "description_weight": dw,
                    "without": split(held @ centroids),
                    "with": split(adapted @ centroids),
                }
            )
    return {"held_with_labelled_tool": int(seen.sum()), "held": int(seen.size), "rows": rows}


def head_rows(
    start: Matrix,
    examples: Matrix,
    labels: npt.NDArray[np.intp],
    held: Matrix,
    held_labels: npt.NDArray[np.intp],
) -> dict[str, Any]:
    """Held-out top-1 of a linear head trained from `start` on `examples`, per (scale, pull)."""
    grid = {
        f"scale {scale:g}, pull {pull:g}": _top1(
            held @ train_head(start, examples, labels, scale=scale, pull=pull).T, held_labels
        )
        for scale in HEAD_SCALES
        for pull in HEAD_PULLS
    }
    best = max(grid, key=lambda k: grid[k])
    return {"best": best, "top1": grid[best], "grid": grid}


def ceiling_rows(
    catalog: Matrix,
    learn: Matrix,
    learn_labels: npt.NDArray[np.intp],
    held: Matrix,
    held_labels: npt.NDArray[np.intp],
    *,
    with_head: bool = False,
) -> dict[str, Any]:
    """Held-out top-1 before learning and, per description weight, with every label folded:
    the centroid fold alone and its best nearest-exemplar and prior variants; `with_head`
    adds the linear head started at the best description weight's centroids."""
    tools = catalog.shape[0]
    summed = np.zeros_like(catalog)
    np.add.at(summed, learn_labels, learn)
    counts = np.bincount(learn_labels, minlength=tools)
    labelled = counts > 0
    nearest = np.full((held.shape[0], tools), -np.inf, dtype=np.float32)
    similarity = held @ learn.T
    for tool in np.flatnonzero(labelled):
        nearest[:, tool] = similarity[:, learn_labels == tool].max(axis=1)
    prior = np.log1p(counts).astype(np.float32)[None, :]
    rows: list[dict[str, Any]] = []
    for dw in DESCRIPTION_WEIGHTS:
        base = held @ normalise_rows(dw * catalog + summed).T
        gap = np.where(labelled[None, :], np.maximum(nearest - base, 0.0), 0.0)
        with_nearest = {b: _top1(base + b * gap, held_labels) for b in BETAS}
        with_prior = {g: _top1(base + g * prior, held_labels) for g in GAMMAS}
        best_b = max(with_nearest, key=lambda b: with_nearest[b])
        best_g = max(with_prior, key=lambda g: with_prior[g])
        rows.append(
            {
                "description_weight": dw,
                "centroid": _top1(base, held_labels),
                "nearest": {"beta": best_b, "top1": with_nearest[best_b]},
                "prior": {"gamma": best_g, "top1": with_prior[best_g]},
            }
        )
    before = _top1(held @ normalise_rows(catalog).T, held_labels)
    if not with_head:
        return {"before": before, "after": rows}
    best_dw = float(max(rows, key=lambda row: float(row["centroid"]))["description_weight"])
    start = normalise_rows(best_dw * catalog + summed)
    # The descriptions are examples of their tools too, as they are in the centroids.
    examples = np.vstack((learn, catalog))
    labels = np.concatenate((learn_labels, np.arange(tools, dtype=np.intp)))
    head = head_rows(start, examples, labels, held, held_labels)
    return {"before": before, "after": rows, "linear_head": {"description_weight": best_dw, **head}}


async def main() -> dict[str, Any]:
    data = load()
    encoders = Encoders()
    embedder = encoders.get("hybrid", 0.5)
    dense_dim = encoders.minilm.dim
    half = np.float32(np.sqrt(0.5))

    async def parts(texts: list[str]) -> tuple[Matrix, Matrix]:
        vectors = np.asarray(await embedder.embed(texts), dtype=np.float32) / half
        return vectors[:, :dense_dim], vectors[:, dense_dim:]

    catalog = await parts([tool_text(t) for t in data.tools])
    learn = await parts([q.text for q in data.learn])
    held = await parts([q.text for q in data.held])
    encoders.save()
    index = {name: i for i, name in enumerate(data.names)}
    learn_labels = np.array([index[q.label] for q in data.learn], dtype=np.intp)
    held_labels = np.array([index[q.label] for q in data.held], dtype=np.intp)
    by_weight = {}
    adapter: dict[str, Any] = {}
    for w in HYBRID_WEIGHTS:
        scale = (np.float32(np.sqrt(w)), np.float32(np.sqrt(1.0 - w)))

        def mix(
            pair: tuple[Matrix, Matrix], scale: tuple[np.float32, np.float32] = scale
        ) -> Matrix:
            return np.hstack((pair[0] * scale[0], pair[1] * scale[1])).astype(np.float32)

        by_weight[f"{w:g}"] = ceiling_rows(
            mix(catalog),
            mix(learn),
            learn_labels,
            mix(held),
            held_labels,
            with_head=w == 0.5,  # the default weight only: the head's grid takes minutes
        )
        if w == 0.5:
            adapter = adapter_rows(
                mix(catalog), mix(learn), learn_labels, mix(held), held_labels, dense_dim
            )
    return {
        "queries": {"learn": len(data.learn), "held": len(data.held)},
        "tools": len(data.tools),
        "hybrid": by_weight,
        "query_adapter": adapter,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=1))
