"""`toolselect select` in-process: one PromptKit selection per process, started cheaply.

An agent runtime spawns the exec selector once per turn with ~20 candidates. Starting the whole
service for that (learner, tuner, maintenance task, the full catalog embedded) costs seconds;
this reads only the candidates' stored tools and their exemplars, builds their centroids in
the ranker a service builds (`ranker.configured.build_ranker`), with the weights a server's
tuner last fitted on that store (`learn/kept_fold.py`), and chooses with the service's
`choose`. The dense vectors go through the vector cache in the data folder
(`TOOLSELECT_DATA_DIR/vectors.db`, keyed by embedder id and the text's SHA-256), so a spawn
whose candidates were seen before embeds only the query; with the `minilm`/`http` embedders a
query seen before loads no model at all. A query that needs the model opens MiniLM's graph as optimised by an earlier spawn (`TOOLSELECT_DATA_DIR/models`,
~90 MB), ~100-150 ms sooner than from the packaged file, and without repacking its weights for
the fastest kernels (~40 ms sooner again, for ~4 ms more on the one query). No aiohttp, no
scikit-learn, no teacher is imported on this path.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolselect.catalog import check_pack, load_demo_catalog, tool_text
from toolselect.config import Settings
from toolselect.embed import (
    MODELS_DIR,
    Embedder,
    VectorCache,
    embedder_for,
    vector_cache_path,
)
from toolselect.learn.kept_fold import fold_path, read_fold
from toolselect.ranker import CentroidRanker, LearnedVector
from toolselect.ranker.configured import build_ranker
from toolselect.records import Exemplar, Tool, label_group
from toolselect.selection import Selection, check_text, choose
from toolselect.store.factory import open_store
from toolselect.store.port import Store


@dataclass(frozen=True, slots=True)
class SelectInput:
    """A validated PromptKit request: the query's text and K, candidates as plain dicts."""

    text: str
    k: int
    candidates: list[dict[str, Any]]


_QUERY_DEFAULTS: dict[str, object] = {"Kind": "tool", "PackID": "", "AgentID": ""}
# `POST /v1/select`'s conversation fields: one spawn has no sessions, so they are ignored
# (never validated, never refused), whichever path reads the request.
CONVERSATION_FIELDS = frozenset({"session_id", "previous_tools", "context", "companions"})
_CANDIDATE_DEFAULTS: dict[str, object] = {"Name": "", "Description": ""}


def read_request(data: dict[str, Any]) -> SelectInput:
    """Validate stdin's object as `POST /v1/select` does (`SelectRequest`).

    A request whose every field already has its exact type (the runtime's own, always) is
    taken as is: pydantic would accept it unchanged, and importing it costs more than the rest
    of a spawn's imports. Anything else goes through `SelectRequest`, which either converts it
    or is refused with the API's message (`InvalidInput`). The conversation fields
    (`CONVERSATION_FIELDS`) are dropped first.
    """
    data = {key: value for key, value in data.items() if key not in CONVERSATION_FIELDS}
    query = data.get("query")
    if type(query) is dict:  # the pack is not used here, but refused as the server refuses it
        check_pack(query.get("PackID") or None, "query.PackID")
    plain = _plain(data)
    if plain is not None:
        return plain
    from toolselect.api.models import SelectRequest
    from toolselect.api.validation import parse

    request = parse(SelectRequest, data)
    return SelectInput(
        request.query.Text, request.query.K, [c.model_dump() for c in request.candidates]
    )


def _plain(data: dict[str, Any]) -> SelectInput | None:
    query, candidates = data.get("query"), data.get("candidates")
    if type(query) is not dict or type(candidates) is not list:
        return None
    if type(query.get("Text")) is not str or type(query.get("K", 0)) is not int:
        return None
    if any(type(query.get(key, v)) is not str for key, v in _QUERY_DEFAULTS.items()):
        return None
    out: list[dict[str, Any]] = []
    for candidate in candidates:
        if type(candidate) is not dict or type(candidate.get("ID")) is not str:
            return None
        if any(type(candidate.get(key, v)) is not str for key, v in _CANDIDATE_DEFAULTS.items()):
            return None
        metadata = candidate.get("Metadata")
        if metadata is not None and type(metadata) is not dict:
            return None
        out.append(
            {
                "ID": candidate["ID"],
                "Name": candidate.get("Name", ""),
                "Description": candidate.get("Description", ""),
                "Metadata": metadata,
            }
        )
    return SelectInput(query["Text"], query.get("K", 0), out)


async def select_once(
    settings: Settings, text: str, candidates: Sequence[Tool], k: int
) -> Selection:
    """The selection `Service.select` makes on a freshly started service, without starting one."""
    check_text(text, "query.Text", settings.max_query_bytes)
    vectors = vector_cache_path(settings)
    # Sized as the server sizes the file they share: a cap of its own trimmed the server's rows.
    cap = settings.vector_cache
    embedder = embedder_for(
        settings,
        cache=VectorCache(vectors, max_entries=cap) if cap else None,
        optimized_dir=vectors.parent / MODELS_DIR,
        short_lived=True,
    )
    try:
        # Only read here: a data folder this process cannot write is still one to answer from.
        store = await open_store(_readable(settings), read_only_fallback=True)
        try:
            await store.migrate(reader=True)  # no write lock: a writer's never holds it up
            return await _select(store, embedder, settings, text, candidates, k)
        finally:
            await store.close()
    finally:
        await embedder.close()


def _readable(settings: Settings) -> Settings:
    """`settings`, with an empty in-memory store in place of a SQLite file that is not there
    and cannot be made (its folder, or the folder it would be made in, is one this process
    cannot write): no store is an empty catalog, as a writable folder would start with."""
    if settings.store_kind != "sqlite" or settings.sqlite_path.exists():
        return settings
    folder = settings.sqlite_path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or os.access(folder, os.W_OK | os.X_OK):
        return settings  # made there, or refused as ever (a file in the way)
    return settings.override(store="sqlite::memory:")


async def _select(
    store: Store,
    embedder: Embedder,
    settings: Settings,
    text: str,
    candidates: Sequence[Tool],
    k: int,
) -> Selection:
    if not candidates:
        return choose(CentroidRanker(), np.zeros(0, np.float32), (), None, k, settings.max_k)
    stored, exemplars = await _read(store, settings, candidates)
    known = {t.name for t in stored}
    unknown = [c for c in candidates if c.name not in known]
    # One call: whatever the cache lacks (the query, new candidates, exemplars stored by
    # another embedder) goes to the model in one batch.
    stale = [e for e in exemplars if e.embedder != embedder.id or not e.embedding]
    texts = [text, *(tool_text(t) for t in stored), *(tool_text(c) for c in unknown)]
    vectors = await embedder.embed([*texts, *(e.query for e in stale)])
    fresh = {e.id: vectors[len(texts) + i] for i, e in enumerate(stale)}
    # The weights a server's tuner fitted on these labels, kept in the data folder: folded
    # with the starting ones, a spawn selected other tools than the server did.
    fitted = read_fold(fold_path(settings.data_dir, store.tenant), store.uri, embedder.id)
    ranker = build_ranker(settings, fitted)
    ranker.set_catalog(stored, vectors[1 : 1 + len(stored)])
    ranker.fold(
        [
            LearnedVector(
                query_norm=e.query_norm,
                tool=e.tool,
                vector=fresh[e.id] if e.id in fresh else np.asarray(e.embedding, np.float32),
                trusted=label_group(e.tier) == "trusted",
                usage=label_group(e.tier) == "usage",
            )
            for e in exemplars
        ]
    )
    unknown_vectors = vectors[1 + len(stored) : len(texts)] if unknown else None
    return choose(ranker, vectors[0], candidates, unknown_vectors, k, settings.max_k)


async def _read(
    store: Store, settings: Settings, candidates: Sequence[Tool]
) -> tuple[list[Tool], list[Exemplar]]:
    """The stored tools among the candidates (by name) and their exemplars."""
    if settings.load_demo and not await store.list_tools():
        await store.upsert_tools(load_demo_catalog())
    found = await asyncio.gather(*(store.get_tool(c.name) for c in candidates))
    stored = [t for t in found if t is not None]
    learned = await asyncio.gather(*(store.exemplars_for_tool(t.name) for t in stored))
    return stored, [e for per_tool in learned for e in per_tool]
