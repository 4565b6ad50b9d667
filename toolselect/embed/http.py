"""An OpenAI-compatible embeddings endpoint (`POST {base_url}/v1/embeddings`) over aiohttp."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import aiohttp
import numpy as np

from toolselect.embed.base import Vectors, normalise_rows
from toolselect.errors import EmbedderError, EmbedderUnavailable

DEFAULT_BATCH = 64
DEFAULT_TIMEOUT_S = 10.0


def embeddings_url(base_url: str) -> str:
    """`{base_url}/v1/embeddings`, without doubling a `/v1` the base URL already ends with."""
    base = base_url.rstrip("/")
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


class HttpEmbedder:
    """Sends texts in batches of `batch_size`; the vector length is learned from the first answer.

    The session is the caller's when given (and then left open by `close`), else created on the
    first `embed` and closed by `close`. Connection failures, timeouts, 429 and 5xx raise
    `EmbedderUnavailable`; any other refusal or a malformed answer raises `EmbedderError`.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "",
        session: aiohttp.ClientSession | None = None,
        batch_size: int = DEFAULT_BATCH,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        dim: int | None = None,
    ) -> None:
        if not base_url:
            raise ValueError("expected the base URL of an embeddings endpoint, got ''")
        if not model:
            raise ValueError("expected an embedding model name, got ''")
        if batch_size < 1:
            raise ValueError(f"expected batch_size >= 1, got {batch_size}")
        self._url = embeddings_url(base_url)
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session = session
        self._owns_session = session is None
        self._batch_size = batch_size
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s
        self._dim = dim

    @property
    def id(self) -> str:
        return f"http-{self._model}"

    @property
    def dim(self) -> int:
        return self._dim or 0

    @property
    def url(self) -> str:
        return self._url

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._session is None:
            self._session = aiohttp.ClientSession()
        parts = [
            await self._post(self._session, texts[start : start + self._batch_size])
            for start in range(0, len(texts), self._batch_size)
        ]
        return normalise_rows(np.vstack(parts))

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and self._owns_session:
            await session.close()

    async def _post(self, session: aiohttp.ClientSession, texts: Sequence[str]) -> np.ndarray:
        url = self._url
        try:
            async with session.post(
                url,
                json={"model": self._model, "input": list(texts)},
                headers=self._headers,
                timeout=self._timeout,
            ) as response:
                status = response.status
                body = await response.text()
        except TimeoutError as exc:
            raise EmbedderUnavailable(
                f"embedding endpoint {url} unreachable: no answer within {self._timeout_s:g} s"
            ) from exc
        except aiohttp.ClientError as exc:
            cause = str(exc) or type(exc).__name__
            raise EmbedderUnavailable(f"embedding endpoint {url} unreachable: {cause}") from exc
        if status == 429 or status >= 500:
            raise EmbedderUnavailable(f"embedding endpoint {url} answered {status}: {body[:200]}")
        if status >= 400:
            raise EmbedderError(
                f"embedding endpoint {url} refused the request ({status}): {body[:200]}"
            )
        return self._vectors(body, len(texts))

    def _vectors(self, body: str, expected: int) -> np.ndarray:
        """The answer's embeddings in input order, checked for count, shape and finiteness."""
        where = f"embedding endpoint {self._url}"
        try:
            payload: Any = json.loads(body)
            items = payload["data"]
            if not isinstance(items, list):
                raise TypeError(f"'data' is {type(items).__name__}, not a list")
            pairs = sorted(
                (int(item.get("index", position)), item["embedding"])
                for position, item in enumerate(items)
            )
            matrix = np.asarray([vector for _, vector in pairs], dtype=np.float32)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise EmbedderError(f"{where} gave a malformed answer: {exc!r}") from exc
        if [index for index, _ in pairs] != list(range(expected)):
            raise EmbedderError(f"{where} answered {len(items)} embeddings for {expected} texts")
        if matrix.ndim != 2 or matrix.shape[1] == 0:
            raise EmbedderError(f"{where} gave embeddings of shape {matrix.shape}")
        if not np.isfinite(matrix).all():
            raise EmbedderError(f"{where} gave non-finite numbers")
        if self._dim is None:
            self._dim = int(matrix.shape[1])
        elif matrix.shape[1] != self._dim:
            raise EmbedderError(f"{where}: expected {self._dim} dimensions, got {matrix.shape[1]}")
        return matrix
