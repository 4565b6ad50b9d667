"""The centroid ranker: ranking, restriction, folding exemplars, snapshots and invariants."""

from __future__ import annotations

import itertools
import random

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from toolselect.catalog import tool_text
from toolselect.embed.hashing import HashingEmbedder
from toolselect.errors import InvalidInput
from toolselect.ranker import CentroidRanker, LearnedVector, Ranking
from toolselect.records import Tool

EMBEDDER = HashingEmbedder()

CATALOG = [
    Tool("get_weather", "Current weather conditions: temperature, rain, wind.", packs=("home",)),
    Tool(
        "send_email",
        "Send an email message to recipients with a subject and body.",
        packs=("office",),
    ),
    Tool(
        "crypto_price",
        "Current price of a cryptocurrency such as bitcoin or ethereum.",
        packs=("finance",),
    ),
    Tool(
        "create_calendar_event",
        "Create a calendar meeting with attendees at a time.",
        packs=("office",),
    ),
    Tool(
        "translate_text",
        "Translate text from one language into another language.",
        packs=("office", "home"),
    ),
    Tool("web_search", "Search the web for pages about a query.", packs=("home",)),
    Tool("shell_exec", "Run a shell command and return its output."),
    Tool("whatsapp__send_message", "Send a WhatsApp chat message to a contact.", packs=("home",)),
]


def vec(text: str) -> npt.NDArray[np.float32]:
    row: npt.NDArray[np.float32] = EMBEDDER.embed_now([text])[0]
    return row


def build(tools: list[Tool] = CATALOG, **weights: float) -> CentroidRanker:
    ranker = CentroidRanker(**weights)
    ranker.set_catalog(tools, EMBEDDER.embed_now([tool_text(t) for t in tools]))
    return ranker


def learned(query: str, tool: str) -> LearnedVector:
    return LearnedVector(query_norm=query.lower(), tool=tool, vector=vec(query))


def column(ranker: CentroidRanker, name: str) -> npt.NDArray[np.float32]:
    snap = ranker.snapshot
    return np.array(snap.matrix[snap.rows[name]])


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("is it going to rain? what's the temperature", "get_weather"),
        ("email the quarterly report to the team", "send_email"),
        ("how much is bitcoin worth", "crypto_price"),
        ("set up a meeting with Anna on the calendar", "create_calendar_event"),
        ("translate this sentence into Italian", "translate_text"),
        ("send a whatsapp to Luca", "whatsapp__send_message"),
        ("run ls -la in a shell", "shell_exec"),
    ],
)
def test_obvious_queries_rank_the_right_tool_first(query: str, expected: str) -> None:
    """A query that plainly names a tool's job ranks that tool first with the hashing embedder."""
    ranking = build().rank(vec(query), 3)
    assert ranking.results[0].tool == expected
    assert ranking.margin == pytest.approx(ranking.results[0].score - ranking.results[1].score)


def test_scores_are_cosines_to_the_normalised_description_vectors() -> None:
    """Without exemplars a score is the cosine of the query and the tool's description vector."""
    ranker = build()
    query = vec("send a message")
    expected = {t.name: float(EMBEDDER.embed_now([tool_text(t)])[0] @ query) for t in CATALOG}
    for result in ranker.rank(query, len(CATALOG)).results:
        assert result.score == pytest.approx(expected[result.tool], abs=1e-6)


def test_restriction_to_names_ignores_unknown_names() -> None:
    """Only the named tools are ranked; names outside the catalog are ignored."""
    ranking = build().rank(vec("send an email"), 10, restrict={"send_email", "web_search", "nope"})
    assert sorted(ranking.tools) == ["send_email", "web_search"]
    assert ranking.tools[0] == "send_email"


def test_empty_restriction_gives_empty_results() -> None:
    """An empty restriction leaves no candidate: no results and a zero margin."""
    assert build().rank(vec("send an email"), 5, restrict=[]) == Ranking((), 0.0)
    assert build().rank(vec("send an email"), 5, restrict=["unknown"]) == Ranking((), 0.0)


def test_pack_restriction_and_its_intersection_with_names() -> None:
    """A pack keeps its tools only; with names too, only tools in both remain."""
    ranker = build()
    query = vec("send a message")
    assert set(ranker.rank(query, 10, pack="office").tools) == {
        "send_email",
        "create_calendar_event",
        "translate_text",
    }
    both = ranker.rank(query, 10, pack="office", restrict=["translate_text", "web_search"])
    assert both.tools == ("translate_text",)
    assert ranker.rank(query, 10, pack="no-such-pack").results == ()


def test_k_larger_than_the_catalog_returns_every_tool() -> None:
    """Asking for more tools than exist returns them all, once each, by descending score."""
    ranking = build().rank(vec("weather"), 100)
    assert sorted(ranking.tools) == sorted(t.name for t in CATALOG)
    scores = [r.score for r in ranking.results]
    assert scores == sorted(scores, reverse=True)


def test_empty_catalog_and_non_positive_k_give_empty_results() -> None:
    """An empty catalog (or k <= 0) answers no results and margin 0 instead of failing."""
    assert CentroidRanker().rank(vec("anything"), 5) == Ranking((), 0.0)
    assert build().rank(vec("anything"), 0) == Ranking((), 0.0)


def test_margin_is_over_all_candidates_even_for_k_one() -> None:
    """With k=1 the margin still compares the winner with the runner-up."""
    ranker = build()
    one = ranker.rank(vec("how much is bitcoin worth"), 1)
    two = ranker.rank(vec("how much is bitcoin worth"), 2)
    assert len(one.results) == 1
    assert one.margin == pytest.approx(two.results[0].score - two.results[1].score)


def test_single_candidate_margin_is_its_score() -> None:
    """With one candidate the margin is that candidate's (non-negative) score."""
    ranking = build().rank(vec("bitcoin price"), 5, restrict=["crypto_price"])
    assert ranking.margin == pytest.approx(ranking.results[0].score)


def test_ties_are_broken_by_name() -> None:
    """Tools with identical vectors come out in name order, and k=1 picks the first name."""
    tools = [Tool(name) for name in ("delta", "alpha", "charlie", "bravo")]
    ranker = CentroidRanker()
    same = np.tile(vec("identical text"), (4, 1))
    ranker.set_catalog(tools, same)
    assert ranker.rank(vec("identical text"), 4).tools == ("alpha", "bravo", "charlie", "delta")
    assert ranker.rank(vec("identical text"), 1).tools == ("alpha",)
    assert ranker.rank(vec("identical text"), 2, restrict=["delta", "charlie"]).tools == (
        "charlie",
        "delta",
    )


def test_fold_recomputes_only_the_touched_tools() -> None:
    """Folding exemplars of one tool changes its centroid only; other rows are identical."""
    ranker = build()
    before = np.array(ranker.snapshot.matrix)
    version, rebuilds = ranker.version, ranker.rebuilds
    changed = ranker.fold([learned("quanto costa il bitcoin", "crypto_price")])
    after = ranker.snapshot.matrix
    row = ranker.snapshot.rows["crypto_price"]
    assert changed == 1
    assert ranker.version == version + 1
    assert ranker.rebuilds == rebuilds + 1
    assert not np.array_equal(before[row], after[row])
    others = [i for i in range(len(CATALOG)) if i != row]
    assert np.array_equal(before[others], after[others])
    assert ranker.exemplar_count("crypto_price") == 1


def test_exemplars_teach_a_query_the_right_tool() -> None:
    """A query the descriptions get wrong ranks the labelled tool first after folding exemplars."""
    ranker = build()
    query = "quanto costa il bitcoin adesso"
    assert ranker.rank(vec("quanto costa"), 1).tools != ("crypto_price",)
    ranker.fold(
        [learned(query, "crypto_price"), learned("quanto costa l'ethereum", "crypto_price")]
    )
    assert ranker.rank(vec("quanto costa"), 1).tools == ("crypto_price",)


def test_fold_moves_a_query_between_tools() -> None:
    """Upserting a query held by another tool moves it: the old tool reverts, the new one learns."""
    ranker = build()
    original = column(ranker, "web_search")
    ranker.fold([learned("what is new in rust", "web_search")])
    assert ranker.exemplar_count("web_search") == 1
    ranker.fold([learned("what is new in rust", "shell_exec")])
    assert ranker.exemplar_count("web_search") == 0
    assert ranker.exemplar_count("shell_exec") == 1
    assert ranker.exemplar_total == 1
    np.testing.assert_allclose(column(ranker, "web_search"), original, atol=1e-6)


def test_deletion_restores_the_description_centroid() -> None:
    """Deleting a tool's only exemplar brings back its description-only centroid."""
    ranker = build()
    original = column(ranker, "send_email")
    ranker.fold([learned("mail marco the invoice", "send_email")])
    assert not np.allclose(column(ranker, "send_email"), original)
    assert ranker.fold([], deleted=["mail marco the invoice", "never held"]) == 1
    np.testing.assert_allclose(column(ranker, "send_email"), original, atol=1e-6)
    assert ranker.exemplar_count("send_email") == 0


def test_deletions_apply_before_upserts() -> None:
    """A fold that deletes and re-adds the same query keeps the re-added exemplar."""
    ranker = build()
    ranker.fold([learned("ping the server", "shell_exec")])
    ranker.fold([learned("ping the server", "web_search")], deleted=["ping the server"])
    assert ranker.exemplar_count("web_search") == 1
    assert ranker.exemplar_count("shell_exec") == 0


def test_exemplars_of_unknown_tools_wait_for_the_tool() -> None:
    """An exemplar for a tool not in the catalog is kept and shapes the tool once it arrives."""
    ranker = build()
    version = ranker.version
    assert ranker.fold([learned("book a table for two", "book_restaurant")]) == 0
    assert ranker.version == version
    assert not ranker.has("book_restaurant")
    assert ranker.exemplar_count("book_restaurant") == 1
    newcomer = Tool("book_restaurant", "Reserve a restaurant.")
    ranker.upsert_tools([newcomer], EMBEDDER.embed_now([tool_text(newcomer)]))
    plain = build([*CATALOG, newcomer])
    assert ranker.has("book_restaurant")
    assert not np.allclose(column(ranker, "book_restaurant"), column(plain, "book_restaurant"))
    assert ranker.rank(vec("book a table for two"), 1).tools == ("book_restaurant",)


def test_a_fresh_ranker_learns_before_and_grows_by_upserts() -> None:
    """Exemplars folded before any catalog wait; upserts alone build the catalog."""
    ranker = CentroidRanker()
    ranker.fold([learned("bitcoin now", "crypto_price")])
    assert ranker.size == 0
    tools = CATALOG[:3]
    ranker.upsert_tools(tools, EMBEDDER.embed_now([tool_text(t) for t in tools]))
    assert ranker.size == 3
    assert ranker.exemplar_count("crypto_price") == 1
    assert ranker.rank(vec("bitcoin now"), 1).tools == ("crypto_price",)
    assert ranker.remove_tools([t.name for t in tools]) == 3
    assert ranker.rank(vec("bitcoin now"), 5) == Ranking((), 0.0)


def test_removed_tools_are_not_ranked_and_keep_their_exemplars() -> None:
    """A removed tool leaves the rankings; re-adding it brings its exemplars back."""
    ranker = build()
    ranker.fold([learned("bitcoin now", "crypto_price")])
    with_exemplar = column(ranker, "crypto_price")
    assert ranker.remove_tools(["crypto_price", "not-there"]) == 1
    assert "crypto_price" not in ranker.rank(vec("bitcoin now"), 10).tools
    assert ranker.size == len(CATALOG) - 1
    tool = CATALOG[2]
    ranker.upsert_tools([tool], EMBEDDER.embed_now([tool_text(tool)]))
    np.testing.assert_allclose(column(ranker, "crypto_price"), with_exemplar, atol=1e-6)


def test_upsert_replaces_a_known_tool_and_appends_a_new_one() -> None:
    """Upserting changes a known tool's centroid in place and adds new tools at the end."""
    ranker = build()
    changed = Tool("web_search", "Look up flights and airline tickets.", packs=("travel",))
    added = Tool("get_forecast", "Weather forecast for the coming days.")
    before = np.array(ranker.snapshot.matrix)
    ranker.upsert_tools(
        [changed, added], EMBEDDER.embed_now([tool_text(changed), tool_text(added)])
    )
    assert ranker.size == len(CATALOG) + 1
    assert ranker.names[-1] == "get_forecast"
    assert ranker.rank(vec("cheap airline tickets"), 1, pack="travel").tools == ("web_search",)
    row = ranker.snapshot.rows["web_search"]
    others = [i for i in range(len(CATALOG)) if i != row]
    assert np.array_equal(before[others], ranker.snapshot.matrix[others])


def test_description_weight_trades_off_against_exemplars() -> None:
    """A heavier description weight keeps a tool's centroid closer to its description."""
    light = build(description_weight=0.1)
    heavy = build(description_weight=10.0)
    exemplar = learned("zzz qqq xxx", "web_search")
    light.fold([exemplar])
    heavy.fold([exemplar])
    query = vec("Search the web for pages about a query")
    assert heavy.rank(query, 1, restrict=["web_search"]).results[0].score > (
        light.rank(query, 1, restrict=["web_search"]).results[0].score
    )


def test_an_old_snapshot_keeps_ranking_the_same_after_swaps() -> None:
    """A snapshot taken before updates ranks exactly as before; its matrix is read-only."""
    ranker = build()
    old = ranker.snapshot
    query = vec("send a message to a friend")
    before = old.rank(query, 5)
    ranker.fold([learned("send a message to a friend", "shell_exec")])
    ranker.upsert_tools([Tool("zzz", "message friend")], EMBEDDER.embed_now(["message friend"]))
    ranker.remove_tools(["send_email"])
    assert ranker.snapshot is not old
    assert old.rank(query, 5) == before
    assert ranker.rank(query, 5) != before
    with pytest.raises(ValueError, match="read-only"):
        old.columns[0, 0] = 1.0


def test_sparse_dense_and_gathered_scoring_agree_with_numpy() -> None:
    """Every scoring path (sparse or dense query, gathered or scanned rows) equals matrix @ q."""
    rng = np.random.default_rng(7)
    tools = [Tool(f"t{i:03d}", packs=("small",) if i < 5 else ()) for i in range(200)]
    vectors = rng.normal(size=(200, 64)).astype(np.float32)
    ranker = CentroidRanker()
    ranker.set_catalog(tools, vectors)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sparse = np.zeros(64, dtype=np.float32)
    sparse[[3, 17, 40]] = [0.5, -0.7, 0.2]
    dense = rng.normal(size=64).astype(np.float32)
    sparse /= np.linalg.norm(sparse)
    dense /= np.linalg.norm(dense)
    many = [f"t{i:03d}" for i in range(0, 200, 2)]
    for query in (sparse, dense):
        reference = unit @ query
        for restrict, pack in (
            (None, None),
            (many, None),
            (None, "small"),
            (["t001", "t150"], None),
        ):
            for result in ranker.rank(query, 200, restrict=restrict, pack=pack).results:
                assert result.score == pytest.approx(reference[int(result.tool[1:])], abs=1e-5)


def test_wrong_dimensions_and_duplicates_are_rejected() -> None:
    """Mismatched vector sizes and duplicate tool names raise InvalidInput naming the field."""
    ranker = build()
    with pytest.raises(InvalidInput) as query_error:
        ranker.rank(np.ones(3, dtype=np.float32), 5)
    assert query_error.value.field == "query"
    with pytest.raises(InvalidInput) as fold_error:
        ranker.fold([LearnedVector("q", "web_search", np.ones(3))])
    assert fold_error.value.field == "vector"
    with pytest.raises(InvalidInput) as dup_error:
        ranker.set_catalog([Tool("a"), Tool("a")], np.ones((2, 4), dtype=np.float32))
    assert dup_error.value.field == "tools[1].name"
    with pytest.raises(InvalidInput):
        ranker.set_catalog([Tool("a")], np.ones((2, 4), dtype=np.float32))


def test_a_new_dimension_needs_the_exemplars_cleared() -> None:
    """Replacing the catalog with vectors of another size fails while exemplars are held."""
    ranker = build()
    ranker.fold([learned("hello", "web_search")])
    with pytest.raises(InvalidInput, match="clear_exemplars"):
        ranker.set_catalog([Tool("a")], np.ones((1, 4), dtype=np.float32))
    ranker.clear_exemplars()
    ranker.set_catalog([Tool("a")], np.ones((1, 4), dtype=np.float32))
    assert ranker.rank(np.ones(4, dtype=np.float32), 1).tools == ("a",)


# ---- invariants ----------------------------------------------------------------------------

DIM = 6
catalogs = st.integers(min_value=0, max_value=12).flatmap(
    lambda n: st.tuples(
        st.just(n),
        arrays(np.float32, (n, DIM), elements=st.floats(-1, 1, width=32)),
    )
)
queries = arrays(np.float32, (DIM,), elements=st.floats(-1, 1, width=32))


@settings(max_examples=150, deadline=None)
@given(catalog=catalogs, query=queries, k=st.integers(1, 15), seed=st.integers(0, 2**16))
def test_ranking_invariants(
    catalog: tuple[int, npt.NDArray[np.float32]],
    query: npt.NDArray[np.float32],
    k: int,
    seed: int,
) -> None:
    """Length is min(k, n), scores never increase, margin >= 0, input order is irrelevant."""
    n, vectors = catalog
    tools = [Tool(f"tool{i}") for i in range(n)]
    ranker = CentroidRanker()
    ranker.set_catalog(tools, vectors)
    ranking = ranker.rank(query, k)
    assert len(ranking.results) == min(k, n)
    scores = [r.score for r in ranking.results]
    assert all(a >= b for a, b in itertools.pairwise(scores))
    assert ranking.margin >= 0.0
    assert len(set(ranking.tools)) == len(ranking.tools)
    assert all(-1.0 <= s <= 1.0 for s in scores)

    order = list(range(n))
    random.Random(seed).shuffle(order)
    shuffled = CentroidRanker()
    shuffled.set_catalog([tools[i] for i in order], vectors[order])
    assert shuffled.rank(query, k) == ranking


@settings(max_examples=100, deadline=None)
@given(
    catalog=catalogs,
    query=queries,
    k=st.integers(1, 15),
    subset=st.sets(st.integers(0, 14), max_size=15),
)
def test_restricted_ranking_is_the_filtered_full_ranking(
    catalog: tuple[int, npt.NDArray[np.float32]],
    query: npt.NDArray[np.float32],
    k: int,
    subset: set[int],
) -> None:
    """Restricting to names gives the full ranking's order filtered to those names."""
    n, vectors = catalog
    ranker = CentroidRanker()
    ranker.set_catalog([Tool(f"tool{i}") for i in range(n)], vectors)
    names = {f"tool{i}" for i in subset}
    restricted = ranker.rank(query, k, restrict=names)
    full = [r for r in ranker.rank(query, n).results if r.tool in names]
    assert len(restricted.results) == min(k, len(full))
    for got, want in zip(restricted.results, full, strict=False):
        assert got.score == pytest.approx(want.score, abs=1e-6)
