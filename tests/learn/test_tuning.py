"""The tuner over a real ranker: refits when trusted labels change, re-folds, respects pins."""

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


def _label(query: str, tool: str, seed: int, *, trusted: bool = True) -> LearnedVector:
    vector = np.random.default_rng(seed).normal(size=24)
    return LearnedVector(query, tool, vector / np.linalg.norm(vector), trusted, usage=not trusted)


async def _refits_after(tuner: Tuner, metrics: Metrics) -> int:
    await tuner.settle()
    return int(metrics.value("toolselect_learning_refits_total") or 0)


async def test_corrections_at_a_constant_count_trigger_a_refit() -> None:
    """Trusted labels corrected to other tools, or deleted while others are added, leave the
    count where it was; 10 such changes (the step after 96 labels) refit, 9 do not."""
    tools, descriptions, learned = misleading(4)
    ranker = CentroidRanker(64.0)
    ranker.set_catalog(tools, descriptions)
    metrics = Metrics()
    tuner = Tuner(ranker, FitPolicy(prior=FoldWeights(64.0)), embedder="e", metrics=metrics)
    ranker.fold(learned)
    tuner.labels_changed()
    assert await _refits_after(tuner, metrics) == 1
    moved = [LearnedVector(lv.query_norm, "t0", lv.vector, True) for lv in learned[8:15]]
    ranker.fold(moved)  # 7 corrections: a human overruling the teacher
    ranker.fold([_label("new query", "t1", 0)], deleted=[learned[20].query_norm])  # 2 more
    tuner.labels_changed()
    assert ranker.validating_total == len(learned)
    assert await _refits_after(tuner, metrics) == 1
    ranker.fold([LearnedVector(learned[30].query_norm, "t0", learned[30].vector, True)])
    tuner.labels_changed()
    assert await _refits_after(tuner, metrics) == 2
    assert tuner.current.labels == len(learned)
    await tuner.close()


async def test_pure_growth_refits_at_the_same_label_counts() -> None:
    """Trusted labels added one at a time refit at 10, 20, ... 100, then every 10% more of
    the labels the last fit had (at least 10): the step growth always had."""
    tools, descriptions, _ = misleading(5)
    ranker = CentroidRanker(16.0)
    ranker.set_catalog(tools, descriptions)
    metrics = Metrics()
    tuner = Tuner(ranker, FitPolicy(prior=FoldWeights(16.0)), embedder="e", metrics=metrics)
    refitted_at: list[int] = []
    for i in range(1, 200):
        ranker.fold([_label(f"q{i}", f"t{i % 12}", i)])
        tuner.labels_changed()
        if await _refits_after(tuner, metrics) > len(refitted_at):
            refitted_at.append(ranker.validating_total)
    assert refitted_at == [*range(10, 101, 10), 110, 121, 134, 148, 163, 180, 198]
    await tuner.close()


def test_what_counts_as_a_change_of_the_validating_labels() -> None:
    """An add, a replacement by another tool or group and a removal of a validating label
    count one each; a label folded again, the ranker's own labels and the agents' usage labels
    beside trusted ones count nothing; the validating group switching counts both groups."""
    tools, descriptions, _ = misleading(6)
    ranker = CentroidRanker(16.0)
    ranker.set_catalog(tools, descriptions)
    steps = [
        ([_label("a", "t1", 1, trusted=False), _label("b", "t1", 2, trusted=False)], [], 2),
        ([_label("a", "t1", 1, trusted=False)], [], 0),  # a usage label seen again
        ([_label("a", "t2", 1, trusted=False)], [], 1),  # the agents moved to another tool
        ([LearnedVector("c", "t3", _label("c", "t3", 3).vector)], [], 0),  # the ranker's own
        ([_label("a", "t2", 1)], [], 2 + 1),  # the teacher's first label: usage set out
        ([_label("d", "t4", 4, trusted=False)], [], 0),  # usage beside trusted labels
        ([_label("b", "t1", 2)], [], 1),  # the teacher overrules a usage label
        ([_label("b", "t5", 2)], [], 1),  # a human corrects the teacher
        ([], ["a", "never held"], 1),
        ([], ["b"], 1 + 1),  # the last trusted label gone: the usage label "d" validates
    ]
    for upserted, deleted, counted in steps:
        before = ranker.validating_changes
        ranker.fold(upserted, deleted)
        assert ranker.validating_changes - before == counted, (upserted, deleted)
    before = ranker.validating_changes
    ranker.clear_exemplars()
    assert ranker.validating_changes - before == 1  # "d"
    assert ranker.validating_total == 0


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
