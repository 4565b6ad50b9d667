"""The vector caches: on disk, hits across processes' instances, misses on any change, no
errors; in memory, the most recently used queries."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from toolselect.embed import (
    CachedEmbedder,
    HashingEmbedder,
    HybridEmbedder,
    MiniLMEmbedder,
    RecentVectors,
    VectorCache,
    build_embedder,
)
from toolselect.embed.cache import text_digest
from toolselect.testing import FakeEmbedder

TEXTS = ["Send an email message to a recipient.", "Current weather for a city.", "Translate"]


async def test_second_instance_reads_the_cache_without_loading_the_model(tmp_path: Path) -> None:
    """A fresh embedder over a warm cache file gives the same bytes and never loads MiniLM."""
    path = tmp_path / "vectors.db"
    first_cache = VectorCache(path)
    first = CachedEmbedder(MiniLMEmbedder(), first_cache)
    cold = await first.embed(TEXTS)
    assert first_cache.writes == len(TEXTS)
    await first.close()

    model = MiniLMEmbedder()
    second_cache = VectorCache(path)
    second = CachedEmbedder(model, second_cache)
    warm = await second.embed(TEXTS)
    assert warm.tobytes() == cold.tobytes()
    assert (second_cache.hits, second_cache.misses, second_cache.writes) == (len(TEXTS), 0, 0)
    assert not model.loaded
    assert second.id == model.id and second.dim == model.dim
    await second.close()


async def test_changed_text_or_embedder_id_misses(tmp_path: Path) -> None:
    """Only an unchanged text under the same embedder id hits; other ids keep their own rows."""
    cache = VectorCache(tmp_path / "vectors.db")
    small = HashingEmbedder(dim=64)
    embedder = CachedEmbedder(small, cache)
    await embedder.embed(TEXTS)
    changed = [TEXTS[0], TEXTS[1] + " Tomorrow too.", TEXTS[2]]
    vectors = await embedder.embed(changed)
    assert (cache.hits, cache.misses) == (2, 4)
    np.testing.assert_array_equal(vectors, small.embed_now(changed))

    other = CachedEmbedder(HashingEmbedder(dim=64, word_weight=0.3), cache)
    await other.embed(TEXTS)
    assert (cache.hits, cache.misses) == (2, 7)
    assert cache.count(small.id) == 4
    assert cache.count(other.id) == 3
    assert cache.get(small.id, TEXTS, dim=32) == [None, None, None]  # wrong width: ignored
    cache.close()


async def test_hybrid_caches_only_its_dense_half(tmp_path: Path) -> None:
    """`build_embedder(cache=...)` caches MiniLM's vectors under its id; hashing is computed."""
    cache = VectorCache(tmp_path / "vectors.db")
    hybrid = build_embedder("hybrid", cache=cache)
    plain = build_embedder("hybrid")
    assert isinstance(hybrid, HybridEmbedder)
    assert hybrid.id == plain.id
    cached, fresh = await hybrid.embed(TEXTS), await plain.embed(TEXTS)
    np.testing.assert_allclose(cached, fresh, atol=1e-6)
    again = await hybrid.embed(TEXTS)
    assert again.tobytes() == cached.tobytes()
    assert cache.count() == len(TEXTS)
    assert cache.count(MiniLMEmbedder().id) == len(TEXTS)
    assert build_embedder("hashing", cache=cache).id == "hashing-v1"
    await hybrid.close()
    await plain.close()


async def test_unusable_cache_file_only_costs_recomputing(tmp_path: Path) -> None:
    """A corrupt cache file (or a folder that cannot be created) is a miss, never an error."""
    corrupt = tmp_path / "vectors.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    blocked = tmp_path / "file" / "vectors.db"
    (tmp_path / "file").write_text("a file where the folder should be")
    inner = HashingEmbedder(dim=64)
    for path in (corrupt, blocked):
        cache = VectorCache(path)
        embedder = CachedEmbedder(inner, cache)
        for _ in range(2):
            np.testing.assert_array_equal(await embedder.embed(TEXTS), inner.embed_now(TEXTS))
        assert cache.hits == 0
        assert cache.count() == 0
        await embedder.close()


def test_oldest_rows_go_past_the_limit(tmp_path: Path) -> None:
    """With `max_entries` n, the n most recently stored rows are kept."""
    cache = VectorCache(tmp_path / "vectors.db", max_entries=3)
    texts = [f"text {i}" for i in range(5)]
    for i, text in enumerate(texts):
        cache.put("e", [text], np.full((1, 4), i, dtype=np.float32))
    assert cache.count() == 3
    kept = cache.get("e", texts, dim=4)
    assert [v is not None for v in kept] == [False, False, True, True, True]
    assert kept[4] is not None and kept[4].tolist() == [4.0] * 4
    with pytest.raises(ValueError, match="max_entries >= 1, got 0"):
        VectorCache(tmp_path / "x.db", max_entries=0)
    cache.close()


def test_rows_are_keyed_by_sha256_of_the_text(tmp_path: Path) -> None:
    """The file holds the embedder id and the SHA-256 of the UTF-8 text, not the text itself."""
    path = tmp_path / "vectors.db"
    cache = VectorCache(path)
    cache.put("minilm-x", ["héllo \ud800"], np.ones((1, 2), dtype=np.float32))
    cache.close()
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT embedder, digest FROM vectors").fetchall()
    assert rows == [("minilm-x", text_digest("héllo \ud800"))]
    assert len(rows[0][1]) == 32


async def test_recent_vectors_embed_only_what_they_have_not_seen() -> None:
    """Texts embedded before come from memory, bit for bit; only new ones reach the embedder."""
    lookups: list[tuple[int, int]] = []
    recent = RecentVectors(8, on_lookup=lambda hits, misses: lookups.append((hits, misses)))
    inner = FakeEmbedder()
    embedder = CachedEmbedder(inner, recent)
    first = await embedder.embed(TEXTS[:2])
    both = await embedder.embed(TEXTS)
    assert both[:2].tobytes() == first.tobytes()
    assert both.tobytes() == FakeEmbedder().embed_now(TEXTS).tobytes()
    assert inner.calls == [tuple(TEXTS[:2]), (TEXTS[2],)]
    assert lookups == [(0, 2), (2, 1)]
    assert (recent.hits, recent.misses, len(recent)) == (2, 3, 3)


def test_recent_vectors_drop_the_least_recently_used() -> None:
    """Past capacity the entry used longest ago goes; a lookup counts as a use."""
    recent = RecentVectors(2)
    vectors = np.eye(3, dtype=np.float32)
    recent.put("e", ["a", "b"], vectors[:2])
    assert recent.get("e", ["a"], 3)[0] is not None  # "a" is now the most recent
    recent.put("e", ["c"], vectors[2:])
    got = recent.get("e", ["a", "b", "c"], 3)
    assert [v is not None for v in got] == [True, False, True]
    assert recent.get("other", ["a"], 3) == [None]  # another embedder id has its own entries
    assert recent.get("e", ["a"], 4) == [None]  # a row of another width is a miss
    with pytest.raises(ValueError, match="capacity >= 1"):
        RecentVectors(0)


async def test_a_reader_uses_recent_vectors_without_adding_to_them() -> None:
    """With `keep_misses=False` hits come from memory and misses are embedded but not kept."""
    recent = RecentVectors(8)
    writer = CachedEmbedder(HashingEmbedder(), recent)
    reader = CachedEmbedder(HashingEmbedder(), recent, keep_misses=False)
    await writer.embed(TEXTS[:1])
    got = await reader.embed(TEXTS)
    assert got.tobytes() == HashingEmbedder().embed_now(TEXTS).tobytes()
    assert (recent.hits, recent.misses, len(recent)) == (1, 3, 1)


async def test_an_offloaded_cache_is_read_and_written_from_worker_threads(tmp_path: Path) -> None:
    """With `offload` (a service's index) the file is used from worker threads, one connection
    for all of them: concurrent embeds each hit or miss once, and `on_lookup` hears of both."""
    seen: list[tuple[int, int]] = []
    cache = VectorCache(tmp_path / "vectors.db")
    embedder = CachedEmbedder(
        FakeEmbedder(),
        cache,
        offload=True,
        on_lookup=lambda hits, misses: seen.append((hits, misses)),
    )
    try:
        first = await embedder.embed(TEXTS)
        again = await asyncio.gather(*(embedder.embed(TEXTS) for _ in range(8)))
    finally:
        await embedder.close()
    assert all(np.array_equal(first, vectors) for vectors in again)
    assert seen == [(0, len(TEXTS))] + [(len(TEXTS), 0)] * 8
    assert (cache.hits, cache.misses, cache.writes) == (8 * len(TEXTS), len(TEXTS), len(TEXTS))
