"""The tuner over a real ranker: refits when trusted labels grow, re-folds, respects pins."""

from __future__ import annotations

import numpy as np

from toolselect.learn.fit import FitPolicy, FoldWeights
from toolselect.learn.tuning import Tuner
from toolselect.metrics import Metrics
from toolselect.ranker import CentroidRanker, LearnedVector
from toolselect.records import Tool


def _unit(rows: np.ndarray) -> np.ndarray:
    unit: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def misleading(seed: int = 0) -> tuple[list[Tool], np.ndarray, list[LearnedVector]]:
    """Descriptions far from where the tools' queries really are, and 8 true labels a tool."""
    rng = np.random.default_rng(seed)
    tools, dim = 12, 24
    centres = _unit(rng.normal(size=(tools, dim)))
    descriptions = _unit(centres + 2.0 * rng.normal(size=(tools, dim)) / np.sqrt(dim))
    learned = [
        LearnedVector(
            f"q{t}-{j}",
            f"t{t}",
            _unit((centres[t] + 0.8 * rng.normal(size=dim) / np.sqrt(dim))[None, :])[0],
            True,
        )
        for t in range(tools)
        for j in range(8)
    ]
    return [Tool(f"t{i}") for i in range(tools)], descriptions, learned


async def test_trusted_labels_trigger_a_refit_that_refolds_the_ranker() -> None:
    """After enough trusted labels the tuner refits once, validates a lighter description
    weight and applies it to the ranker; the metrics follow."""
    tools, descriptions, learned = misleading()
    ranker = CentroidRanker(64.0)
    ranker.set_catalog(tools, descriptions)
    metrics = Metrics()
    tuner = Tuner(ranker, FitPolicy(prior=FoldWeights(64.0)), embedder="e", metrics=metrics)
    ranker.fold(learned[:5])
    tuner.labels_changed()
    await tuner.settle()
    assert tuner.current.fitted_at is None  # 5 labels: below the refit step
    ranker.fold(learned)
    tuner.labels_changed()
    await tuner.settle()
    fitted = tuner.current
    assert fitted.labels == len(learned)
    assert fitted.fold_source == "validated"
    assert ranker.weights[0] == fitted.fold.description_weight < 64.0
    assert metrics.value("toolselect_learning_refits_total") == 1.0
    assert metrics.value("toolselect_fold_description_weight") == (fitted.fold.description_weight)
    await tuner.close()


async def test_pinned_fold_and_floor_are_reported_not_refitted() -> None:
    """A pinned description weight and margin floor survive a refit unchanged."""
    tools, descriptions, learned = misleading(1)
    ranker = CentroidRanker(64.0)
    ranker.set_catalog(tools, descriptions)
    tuner = Tuner(
        ranker,
        FitPolicy(prior=FoldWeights(64.0)),
        embedder="e",
        pinned_fold=True,
        pinned_floor=0.07,
    )
    ranker.fold(learned)
    fitted = await tuner.refit()
    assert (fitted.fold, fitted.fold_source) == (FoldWeights(64.0), "pinned")
    assert ranker.weights[0] == 64.0
    assert tuner.free_floor == 0.07
    await tuner.close()


async def test_teacher_answers_size_the_depth_unless_pinned() -> None:
    """Answers always in the top 2 shrink the depth; a pinned depth ignores them."""
    tools, descriptions, _ = misleading(2)
    ranker = CentroidRanker(16.0)
    ranker.set_catalog(tools, descriptions)
    free = Tuner(ranker, FitPolicy(prior=FoldWeights(16.0)), embedder="e")
    pinned = Tuner(
        ranker,
        FitPolicy(prior=FoldWeights(16.0), prior_teacher_depth=30),
        embedder="e",
        pinned_depth=True,
    )
    for i in range(200):
        free.teacher_answered(30, i % 2)
        pinned.teacher_answered(30, i % 2)
    assert free.current.teacher_depth == 2
    assert pinned.current.teacher_depth == 30


def test_the_teacher_is_spent_on_the_most_uncertain_share() -> None:
    """With a 25% share only turns below the 25% quantile of recent flagged probabilities go to
    the teacher, and never more calls than the share of flagged turns; with no cap, all do."""
    tools, descriptions, _ = misleading(3)
    ranker = CentroidRanker(16.0)
    ranker.set_catalog(tools, descriptions)
    capped = Tuner(ranker, FitPolicy(prior=FoldWeights(16.0), teacher_share=0.25), embedder="e")
    free = Tuner(ranker, FitPolicy(prior=FoldWeights(16.0)), embedder="e")
    sent = 0
    for i in range(400):
        probability = (i * 37 % 100) / 100
        capped.flagged(probability)
        free.flagged(probability)
        if capped.worth_teaching(probability):
            capped.escalated()
            sent += 1
            assert i < 30 or probability < 0.25
        assert free.worth_teaching(probability)
    assert sent <= 0.25 * 400 + 1
    assert sent >= 0.2 * 400
