"""Tool relations as a ranking reads them (`ranker/relations.py`), and the session prior mixed
into a ranking's scores (`Snapshot.rank`'s `prior`)."""

from __future__ import annotations

import numpy as np
import pytest

from toolselect.ranker import CentroidRanker
from toolselect.ranker.relations import EMPTY_RELATIONS, Companion, Relations
from toolselect.records import Tool

PAIRS = {("a", "b"): 6, ("a", "c"): 2, ("b", "c"): 1, ("c", "d"): 4}
STEPS = {("a", "b"): 3, ("a", "c"): 1, ("b", "d"): 2, ("c", "c"): 2, ("c", "a"): 2}


def approx(tool: str, share: float, with_: str) -> Companion:
    """A companion compared with a tolerance on its share."""
    return Companion(tool, pytest.approx(share), with_)  # type: ignore[arg-type]


def test_partner_shares_are_the_part_of_a_tools_pairs() -> None:
    rel = Relations(PAIRS, STEPS)
    # a's pairs: b 6, c 2 -> shares 0.75, 0.25
    assert rel.companions(["a"], 5, 0.0) == [Companion("b", 0.75, "a"), Companion("c", 0.25, "a")]
    assert rel.companions(["a"], 5, 0.5) == [Companion("b", 0.75, "a")]
    assert rel.companions(["a"], 1, 0.0) == [Companion("b", 0.75, "a")]
    assert rel.companions(["a"], 0, 0.0) == []


def test_companions_leave_out_ranked_and_disallowed_tools_and_prefer_the_larger_share() -> None:
    rel = Relations(PAIRS, STEPS)
    # ranked a, c: b is a's partner (0.75) and c's (1/7); d is c's (4/7); a and c are taken.
    got = rel.companions(["a", "c"], 5, 0.0)
    assert got == [Companion("b", 0.75, "a"), approx("d", 4 / 7, "c")]
    assert rel.companions(["a", "c"], 5, 0.0, allowed=lambda t: t != "b") == [
        approx("d", 4 / 7, "c")
    ]


def test_successors_of_the_previous_tools_are_companions_too() -> None:
    rel = Relations(PAIRS, STEPS)
    # c's partners: d 4/7, a 2/7, b 1/7. The previous turn used b, and every step from b went
    # to d: d is offered with its larger share, named with b.
    assert rel.companions(["c"], 2, 0.5) == [approx("d", 4 / 7, "c")]
    assert rel.companions(["c"], 2, 0.5, previous=["b"]) == [Companion("d", 1.0, "b")]
    assert rel.companions(["c"], 2, 0.25, previous=["b"]) == [
        Companion("d", 1.0, "b"),
        approx("a", 2 / 7, "c"),
    ]


def test_a_tool_used_again_is_no_companion_of_itself() -> None:
    """c was followed by c in half of its steps: that weighs in the prior, but c is never
    offered as c's own companion; its other successor a is."""
    rel = Relations({}, STEPS)
    assert rel.companions(["b"], 3, 0.25, previous=["c"]) == [Companion("a", 0.5, "c")]
    assert rel.prior(["c"]) == {"c": 0.5, "a": 0.5}


def test_prior_is_the_mean_successor_share_of_the_previous_tools() -> None:
    rel = Relations(PAIRS, STEPS)
    assert rel.prior(["a"]) == {"b": 0.75, "c": 0.25}
    # c: c 0.5, a 0.5; mean with a's row; x has no steps and is left out of the mean.
    assert rel.prior(["a", "c", "x"]) == {"b": 0.375, "c": 0.375, "a": 0.25}
    assert rel.prior(["x"]) == {}
    assert not EMPTY_RELATIONS and rel


def _ranker() -> CentroidRanker:
    ranker = CentroidRanker(description_weight=1.0, exemplar_weight=1.0)
    ranker.set_catalog([Tool(n) for n in "abcd"], np.eye(4, dtype=np.float32))
    return ranker


def test_a_prior_mixes_into_the_scores_and_respects_the_restriction() -> None:
    ranker = _ranker()
    query = np.array([1.0, 0.9, 0.0, 0.0], dtype=np.float32)
    alone = ranker.rank(query, 3)
    assert alone.tools[:2] == ("a", "b")
    mixed = ranker.rank(query, 3, prior={"b": 1.0, "zz": 1.0}, prior_weight=0.5)
    assert mixed.tools[:2] == ("b", "a")
    assert mixed.results[0].score == pytest.approx((0.9 + 0.5) / 1.5)
    assert mixed.results[1].score == pytest.approx(1.0 / 1.5)
    # Within a restriction the prior still lands on the right tool (rows are remapped).
    only = ranker.rank(query, 2, restrict=["b", "c"], prior={"c": 1.0}, prior_weight=2.0)
    assert only.tools == ("c", "b")
    assert only.results[0].score == pytest.approx(2.0 / 3.0)
    # No weight, or an empty prior: bit for bit the message alone.
    assert ranker.rank(query, 3, prior={"b": 1.0}, prior_weight=0.0) == alone
    assert ranker.rank(query, 3, prior={}, prior_weight=1.0) == alone


def test_allowed_names_follow_the_restriction_and_pack() -> None:
    ranker = CentroidRanker(description_weight=1.0, exemplar_weight=1.0)
    tools = [Tool("a", packs=("p",)), Tool("b", packs=("p",)), Tool("c")]
    ranker.set_catalog(tools, np.eye(3, dtype=np.float32))
    assert set(ranker.allowed(None, None)) == {"a", "b", "c"}
    assert set(ranker.allowed(None, "p")) == {"a", "b"}
    assert set(ranker.allowed(["b", "c", "x"], "p")) == {"b"}
