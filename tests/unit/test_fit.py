"""The fitting core: exact leave-one-out, fold choice, calibration, teacher depth, token budget."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolselect.learn import fit as F
from toolselect.oracle.base import (
    FULL_DESCRIPTIONS,
    MAX_DESCRIPTION_CHARS,
    Candidate,
    cut_description,
    estimated_tokens,
    prompt_line,
    within_budget,
)
from toolselect.ranker import CentroidRanker, LearnedVector
from toolselect.records import Tool


def _unit(rows: np.ndarray) -> np.ndarray:
    unit: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def _ranker(
    weights: F.FoldWeights, descriptions: np.ndarray, learned: list[LearnedVector]
) -> CentroidRanker:
    ranker = CentroidRanker(
        weights.description_weight, 1.0, weights.shrink, weights.self_weight, weights.usage_weight
    )
    ranker.set_catalog([Tool(f"t{i}") for i in range(len(descriptions))], descriptions)
    ranker.fold(learned)
    return ranker


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "weights",
    [
        F.FoldWeights(2.0, 0.0, 0.0, 1.0),
        F.FoldWeights(0.5, 1.0, 1.0, 0.25),
        F.FoldWeights(3.0, 0.5, 0.5, 0.5),
        F.FoldWeights(1.0, 0.0, 1.0, 0.0),
    ],
)
def test_leave_one_out_equals_refolding_without_the_label(
    seed: int, weights: F.FoldWeights
) -> None:
    """Each label's scores (trusted, usage or the ranker's own) equal a ranker folded from
    scratch without that label, whatever the weights of descriptions, shrink, own and usage
    labels."""
    rng = np.random.default_rng(seed)
    tools, dim, count = 6, 10, 30
    descriptions = _unit(rng.normal(size=(tools, dim)))
    vectors = _unit(rng.normal(size=(count, dim)))
    owners = rng.integers(0, tools - 1, size=count)
    group = rng.choice(["trusted", "usage", "own"], size=count, p=[0.4, 0.35, 0.25])
    learned = [
        LearnedVector(
            f"q{i}", f"t{owners[i]}", vectors[i], group[i] == "trusted", group[i] == "usage"
        )
        for i in range(count)
    ]
    view, names = _ranker(weights, descriptions, learned).label_view(1000)
    scores = F.Products(view).scores(weights)
    # Trusted labels first, then usage labels, then the ranker's own, each in folding order.
    held_out = [i for g in ("trusted", "usage", "own") for i in range(count) if group[i] == g]
    assert view.size == int((group == "trusted").sum())
    assert list(view.trusted) == [group[i] == "trusted" for i in held_out]
    assert list(view.usage) == [group[i] == "usage" for i in held_out]
    for row, i in enumerate(held_out):
        refolded = _ranker(weights, descriptions, [lv for j, lv in enumerate(learned) if j != i])
        ranking = refolded.rank(vectors[i].astype(np.float32), tools)
        expected = {r.tool: r.score for r in ranking.results}
        assert np.allclose(scores[row], [expected[n] for n in names], atol=1e-5)


def test_without_trusted_labels_the_fit_validates_on_usage_labels() -> None:
    """With only usage labels the fold is still chosen (they are what the ranker should
    predict), the usage weight among the grid; with trusted labels those decide."""
    descriptions, learned = _clustered(0, noise=2.0, labels_per_tool=8)
    usage = [LearnedVector(lv.query_norm, lv.tool, lv.vector, usage=True) for lv in learned]
    policy = F.FitPolicy(prior=F.FoldWeights(64.0))
    view, _ = _ranker(policy.prior, descriptions, usage).label_view(1000)
    assert view.size == len(usage) and not view.trusted.any()
    fitted = F.fit(view, policy)
    assert fitted.labels == len(usage)
    assert {a for _, _, _, a, _ in fitted.scores} == set(F.USAGE_WEIGHTS)
    assert fitted.fold_source == "validated" and fitted.fold.description_weight < 64.0
    assert fitted.calibration.labels == len(usage)
    mixed = usage[: len(usage) // 2] + [
        LearnedVector(lv.query_norm, lv.tool, lv.vector, trusted=True)
        for lv in learned[len(usage) // 2 :]
    ]
    view, _ = _ranker(policy.prior, descriptions, mixed).label_view(1000)
    assert view.size == len(learned) - len(usage) // 2
    assert F.fit(view, policy).calibration.labels == view.size


def _clustered(
    seed: int, noise: float, labels_per_tool: int
) -> tuple[np.ndarray, list[LearnedVector]]:
    """Tools whose queries cluster around a hidden centre; descriptions point elsewhere by
    `noise` (large noise: descriptions mislead and exemplars should weigh more)."""
    rng = np.random.default_rng(seed)
    tools, dim = 12, 24
    centres = _unit(rng.normal(size=(tools, dim)))
    descriptions = _unit(centres + noise * rng.normal(size=(tools, dim)) / np.sqrt(dim))
    learned = []
    for t in range(tools):
        for j in range(labels_per_tool):
            query = _unit((centres[t] + 0.8 * rng.normal(size=dim) / np.sqrt(dim))[None, :])[0]
            learned.append(LearnedVector(f"q{t}-{j}", f"t{t}", query, True))
    return descriptions, learned


def test_fold_moves_off_a_misleading_description_weight() -> None:
    """With descriptions that mislead and plenty of labels, a lighter description is chosen."""
    descriptions, learned = _clustered(0, noise=2.0, labels_per_tool=8)
    prior = F.FoldWeights(64.0)
    view, _ = _ranker(prior, descriptions, learned).label_view(1000)
    fold, source, scores, loo = F.choose_fold(F.Products(view), prior)
    assert source == "validated"
    assert fold.description_weight < 64.0
    by_point = {(dw, p, w): top1 for dw, p, w, _, top1 in scores}
    chosen = by_point[(fold.description_weight, fold.shrink, fold.self_weight)]
    assert loo.top1 == chosen > by_point[(64.0, 0.0, 0.0)]


def test_the_rankers_own_labels_count_only_when_validated() -> None:
    """Own (untrusted) labels that are wrong half the time get self weight 0; right ones may
    count: the grid tries both, validated on the trusted labels."""
    descriptions, learned = _clustered(2, noise=2.0, labels_per_tool=8)
    rng = np.random.default_rng(3)
    wrong = [
        LearnedVector(f"own{i}", f"t{int(rng.integers(0, 12))}", lv.vector, False)
        for i, lv in enumerate(learned[::2])
    ]
    prior = F.FoldWeights(64.0, 0.0, 1.0)
    view, _ = _ranker(prior, descriptions, [*learned[1::2], *wrong]).label_view(1000)
    fold, source, scores, _ = F.choose_fold(F.Products(view), prior)
    assert {w for _, _, w, _, _ in scores} == set(F.SELF_WEIGHTS)
    assert (source, fold.self_weight) == ("validated", 0.0)


def test_fold_keeps_the_prior_without_evidence() -> None:
    """Too few labels to tell grid points apart: the prior stays and says so."""
    descriptions, learned = _clustered(1, noise=0.1, labels_per_tool=1)
    policy = F.FitPolicy(prior=F.FoldWeights(16.0))
    view, _ = _ranker(policy.prior, descriptions, learned).label_view(1000)
    fitted = F.fit(view, policy)
    assert view.size < policy.min_labels
    assert (fitted.fold, fitted.fold_source, fitted.scores) == (policy.prior, "prior", ())


def test_prior_calibration_is_conservative() -> None:
    """Without labels the free tier needs a margin of 0.15 to reach 95%."""
    empty = np.zeros(0)
    calibration = F.calibrate(empty, empty.astype(bool), 0.95)
    assert calibration.labels == 0
    assert calibration.floor == pytest.approx(0.15, abs=0.03)
    assert calibration.probability(0.0) < 0.6


def test_labels_outweigh_the_prior() -> None:
    """Many labels that are right above margin 0.04 and wrong below pull the floor to 0.04."""
    margins = np.linspace(0.0, 0.3, 600)
    right = margins >= 0.04
    calibration = F.calibrate(margins, right, 0.95)
    assert 0.03 <= calibration.floor <= 0.06
    probabilities = calibration.probabilities
    assert list(probabilities) == sorted(probabilities)


def test_unreachable_target_means_no_free_labels() -> None:
    """When the ranker is never reliably right, the floor is infinite: no margin qualifies."""
    margins = np.linspace(0.0, 0.5, 800)
    calibration = F.calibrate(margins, np.arange(800) % 2 == 0, 0.95)
    assert math.isinf(calibration.floor)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3]),  # ties are common
            st.booleans(),
            st.floats(0.05, 3.0),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_isotonic_fit_is_scikit_learns(samples: list[tuple[float, bool, float]]) -> None:
    """The pool-adjacent-violators fit gives scikit-learn's `IsotonicRegression` thresholds."""
    from sklearn.isotonic import IsotonicRegression

    x = np.array([s[0] for s in samples])
    y = np.array([float(s[1]) for s in samples])
    w = np.array([s[2] for s in samples])
    model = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
    model.fit(x, y, sample_weight=w)
    xs, ys = F.isotonic_fit(x, y, w)
    np.testing.assert_allclose(xs, model.X_thresholds_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ys, model.y_thresholds_, rtol=0, atol=1e-9)


def test_teacher_depth_is_the_prior_before_enough_answers() -> None:
    """Fewer answers than the minimum: the prior depth, no measured recall."""
    assert F.teacher_depth([(30, 0)] * 5, 0.95, prior=30, min_answers=30) == (30, None)


def test_teacher_depth_is_the_shallowest_with_enough_recall() -> None:
    """Answers always within the top 3: the depth shrinks to 3 (recall 1)."""
    answers = [(30, i % 3) for i in range(300)]
    assert F.teacher_depth(answers, 0.95, prior=30, min_answers=30) == (3, 1.0)


def test_teacher_depth_grows_when_declines_are_frequent() -> None:
    """One call in five declined (true tool not shown): show half as many again."""
    answers = [(20, None) if i % 5 == 0 else (20, 1) for i in range(200)]
    depth, recall = F.teacher_depth(answers, 0.95, prior=20, min_answers=30)
    assert depth == 30
    assert recall == pytest.approx(0.8)


def test_teacher_depth_counts_declines_as_misses() -> None:
    """A decline is a miss at every depth it was shown at: 3% declines keep depth > 1."""
    answers = [(10, None) if i % 33 == 0 else (10, 0) for i in range(1000)]
    depth, recall = F.teacher_depth(answers, 0.95, prior=10, min_answers=30)
    assert depth == 1
    assert recall is not None and 0.96 < recall < 0.98


def test_token_budget_cuts_candidates_but_keeps_two() -> None:
    """Past what shortening saves, candidates are kept best first while they fit; never fewer
    than two."""
    named = [Candidate(f"tool_{i}", " ".join(["word"] * 30)) for i in range(4)]
    each = estimated_tokens(named[0])
    assert within_budget(named, 2 * each + 1) == named[:2]
    assert within_budget(named, 3 * each) == named[:3]
    assert within_budget(named, 1) == named[:2]
    assert within_budget(named[:1], 1) == named[:1]
    assert within_budget(named, 4 * each) == named


def test_token_budget_shortens_the_tail_before_dropping_any() -> None:
    """Over budget, the first FULL_DESCRIPTIONS keep their descriptions and the rest are cut,
    at a word boundary, just enough to fit; only names alone that still do not fit are dropped."""
    words = " ".join(["does things"] * 30)
    ranked = [Candidate(f"tool_{i:02d}", f"Tool {i} {words}") for i in range(40)]
    head = ranked[:FULL_DESCRIPTIONS]
    full = sum(map(estimated_tokens, ranked))
    head_cost = sum(map(estimated_tokens, head))
    names_only = [Candidate(c.name) for c in ranked[FULL_DESCRIPTIONS:]]
    floor = head_cost + sum(map(estimated_tokens, names_only))

    assert within_budget(ranked, full) == ranked
    for budget in (full - 1, (full + floor) // 2, floor):
        shown = within_budget(ranked, budget)
        assert [c.name for c in shown] == [c.name for c in ranked]
        assert shown[:FULL_DESCRIPTIONS] == head
        assert sum(map(estimated_tokens, shown)) <= budget
        for cut, whole in zip(shown[FULL_DESCRIPTIONS:], ranked[FULL_DESCRIPTIONS:], strict=True):
            assert len(cut.description) < len(whole.description)
            assert whole.description.startswith(cut.description.removesuffix("..."))
    assert all(not c.description for c in within_budget(ranked, floor)[FULL_DESCRIPTIONS:])

    dropped = within_budget(ranked, floor - 1)
    assert [c.name for c in dropped] == [c.name for c in ranked[: len(dropped)]]
    assert FULL_DESCRIPTIONS <= len(dropped) < len(ranked)


def test_descriptions_are_cut_at_a_word_and_short_ones_kept() -> None:
    assert cut_description("alpha beta gamma delta", 100) == "alpha beta gamma delta"
    assert cut_description("alpha beta gamma delta", 15) == "alpha beta..."
    assert cut_description("alpha beta gamma delta", 0) == ""
    assert cut_description("unbreakable", 5) == "un..."
    # The teacher's line collapses whitespace and cuts the same way at MAX_DESCRIPTION_CHARS.
    long = Candidate("t", "alpha   beta\n" + "word " * 200)
    line = prompt_line(long)
    assert line.startswith("- t: alpha beta word") and line.endswith(" word...")
    assert len(line) <= len("- t: ") + MAX_DESCRIPTION_CHARS


def test_estimated_tokens_grow_with_the_description() -> None:
    """A long description costs more tokens than a short one, and both cost something."""
    short = estimated_tokens(Candidate("a", "x"))
    long = estimated_tokens(Candidate("a", "word " * 80))
    assert 0 < short < long
    # The estimate counts exactly the line the teacher is sent, plus the enum entry.
    for candidate in (
        Candidate("a"),
        Candidate("send_email", "x"),
        Candidate("tool", "  spaced   out\ttext "),
        Candidate("tool", "word " * 200),
    ):
        line = prompt_line(candidate)
        assert estimated_tokens(candidate) == (len(line) + len(candidate.name) + 8) // 4 + 1
