"""`Snapshot.rank_many`: the batch form of `rank`, with the same results row by row."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.test_ranker import CATALOG, EMBEDDER, build
from toolselect.errors import InvalidInput
from toolselect.ranker import EMPTY_RANKING, CentroidRanker
from toolselect.records import Tool

QUERIES = [
    "what is the weather in Turin",
    "send the report to Marco by email",
    "bitcoin price now",
    "translate this into French",
    "book a meeting with Anna on Monday",
    "run ls in the home folder",
    "",  # an all-zero vector: every score ties at zero
]


@pytest.mark.parametrize("k", [1, 2, 3, 20])
@pytest.mark.parametrize("pack", [None, "office", "home", "no-such-pack"])
def test_sparse_rows_rank_exactly_as_rank(k: int, pack: str | None) -> None:
    """Hashed (sparse) queries get the identical ranking, scores, ties and margin as `rank`."""
    snapshot = build().snapshot
    vectors = EMBEDDER.embed_now(QUERIES)
    batch = snapshot.rank_many(vectors, k, pack=pack)
    assert batch == [snapshot.rank(v, k, pack=pack) for v in vectors]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_tied_scores_break_by_name_as_rank(k: int) -> None:
    """Tools with equal centroids tie on every query; the batch breaks ties by name as rank."""
    tools = [Tool(name) for name in ("b", "a", "d", "c", "z")]
    twin, other = EMBEDDER.embed_now(["send an email message to a recipient", "weather forecast"])
    ranker = CentroidRanker()
    ranker.set_catalog(tools, np.stack([twin, twin, twin, twin, other]))
    snapshot = ranker.snapshot
    vectors = EMBEDDER.embed_now(["send an email", "weather", "email the weather", ""])
    batch = snapshot.rank_many(vectors, k)
    assert batch == [snapshot.rank(v, k) for v in vectors]
    assert batch[0].tools[:k] == ("a", "b", "c")[:k]


@pytest.mark.parametrize("restrict", [None, ["send_email", "web_search", "ghost"], []])
def test_dense_rows_rank_as_rank(restrict: list[str] | None) -> None:
    """Dense queries, scored together in one product, give `rank`'s tools, and its scores and
    margins to float32 precision."""
    rng = np.random.default_rng(7)
    dim = 48
    ranker = CentroidRanker()
    ranker.set_catalog(CATALOG, rng.standard_normal((len(CATALOG), dim)).astype(np.float32))
    snapshot = ranker.snapshot
    vectors = rng.standard_normal((40, dim)).astype(np.float32)
    batch = snapshot.rank_many(vectors, 4, restrict=restrict)
    for vector, got in zip(vectors, batch, strict=True):
        want = snapshot.rank(vector, 4, restrict=restrict)
        assert got.tools == want.tools
        assert got.margin == pytest.approx(want.margin, abs=1e-6)
        for g, w in zip(got.results, want.results, strict=True):
            assert g.score == pytest.approx(w.score, abs=1e-6)


def test_mixed_batch_keeps_row_order() -> None:
    """A batch mixing dense and sparse rows answers each row in its place."""
    snapshot = build().snapshot
    sparse = EMBEDDER.embed_now(QUERIES[:3])
    dense = np.full((1, snapshot.dim), 0.01, dtype=np.float32)
    vectors = np.vstack([sparse[0], dense[0], sparse[1], sparse[2]])
    batch = snapshot.rank_many(vectors, 3)
    assert [r.tools for r in batch] == [snapshot.rank(v, 3).tools for v in vectors]


def test_empty_inputs_and_bad_shapes() -> None:
    """No rows, no tools or k <= 0 answer empty rankings; a wrong shape is refused."""
    snapshot = build().snapshot
    assert snapshot.rank_many(np.zeros((0, snapshot.dim), dtype=np.float32), 3) == []
    assert snapshot.rank_many(EMBEDDER.embed_now(["a", "b"]), 0) == [EMPTY_RANKING] * 2
    assert CentroidRanker().snapshot.rank_many(np.ones((2, 4)), 3) == [EMPTY_RANKING] * 2
    with pytest.raises(InvalidInput):
        snapshot.rank_many(np.ones(snapshot.dim), 3)
    with pytest.raises(InvalidInput):
        snapshot.rank_many(np.ones((2, snapshot.dim + 1)), 3)
    one = build([Tool("only", "the only tool")]).snapshot
    assert one.rank_many(EMBEDDER.embed_now(["the only tool"]), 2) == [
        one.rank(EMBEDDER.embed_now(["the only tool"])[0], 2)
    ]
