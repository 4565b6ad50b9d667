"""One immutable state of the ranker, and how a query (or a batch of them) is scored against it.

The snapshot stores centroids feature-major (`columns`, shape `(dim, n)`): a hashed query has
only ~100 non-zero features out of thousands, and the scores then need those ~100 rows of
`columns` only, which makes ranking cost independent of `dim`. Dense queries use the whole
matrix (one matrix-vector product either way).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from toolselect.errors import InvalidInput
from toolselect.ranker.records import EMPTY_RANKING, Ranking, Rows, Vector
from toolselect.ranker.topk import top, top_many

_NO_ROWS: Rows = np.zeros(0, dtype=np.intp)
_NO_COLUMNS = np.zeros((0, 0), dtype=np.float32)
# A query with at most this fraction of non-zero features is scored by gathering rows.
_SPARSE_FRACTION = 0.25
# A restriction to fewer than 1/8 of the tools gathers their columns instead of scanning all.
_GATHER_FRACTION = 8


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """One immutable state of the ranker; `columns[:, i]` is the centroid of `names[i]`."""

    version: int
    names: tuple[str, ...]
    rows: Mapping[str, int]
    packs: Mapping[str, Rows]
    columns: Vector
    dim: int

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def matrix(self) -> Vector:
        """Centroids tool-major, shape `(n, dim)` (a read-only view)."""
        return self.columns.T

    def rank(
        self,
        query_vec: npt.NDArray[np.floating],
        k: int,
        restrict: Collection[str] | None = None,
        pack: str | None = None,
        prior: Mapping[str, float] | None = None,
        prior_weight: float = 0.0,
    ) -> Ranking:
        """See `CentroidRanker.rank`; a snapshot ranks the same way forever."""
        if k <= 0 or not self.names:
            return EMPTY_RANKING
        query = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        if query.shape[0] != self.dim:
            raise InvalidInput(
                f"expected a query vector of {self.dim} dimensions, got {query.shape[0]}",
                field="query",
            )
        rows = candidate_rows(self, restrict, pack)
        if rows is not None and rows.size == 0:
            return EMPTY_RANKING
        found = scores(self, query, rows)
        if prior and prior_weight > 0.0:
            found = with_prior(self, found, rows, prior, prior_weight)
        return top(found, rows, self.names, k)

    def rank_many(
        self,
        queries: npt.NDArray[np.floating],
        k: int,
        restrict: Collection[str] | None = None,
        pack: str | None = None,
    ) -> list[Ranking]:
        """`rank` of every row of `queries` (shape `(n, dim)`), with the same top-k, tie and
        margin rules, the cut to the top k done for all rows at once. Sparse rows are scored as
        `rank` scores them (a gather of their features' rows), so they rank identically; dense
        rows together, in one matrix product, so their scores may differ from `rank`'s in the
        last float32 bits."""
        matrix = np.asarray(queries, dtype=np.float32)
        if matrix.ndim != 2:
            raise InvalidInput(
                f"expected query vectors of shape (n, dim), got {matrix.shape}", field="query"
            )
        count = matrix.shape[0]
        if k <= 0 or not self.names:
            return [EMPTY_RANKING] * count
        if matrix.shape[1] != self.dim:
            raise InvalidInput(
                f"expected query vectors of {self.dim} dimensions, got {matrix.shape[1]}",
                field="query",
            )
        rows = candidate_rows(self, restrict, pack)
        if rows is not None and rows.size == 0:
            return [EMPTY_RANKING] * count
        dense = np.count_nonzero(matrix, axis=1) > _SPARSE_FRACTION * self.dim
        width = self.size if rows is None else rows.size
        batch = np.empty((count, width), dtype=np.float32)
        for i in np.flatnonzero(~dense).tolist():
            batch[i] = scores(self, matrix[i], rows)
        at = np.flatnonzero(dense)
        if at.size:
            columns = self.columns if rows is None else self.columns[:, rows]
            batch[at] = matrix[at] @ columns
        return top_many(batch, rows, self.names, k)


EMPTY_SNAPSHOT = Snapshot(0, (), MappingProxyType({}), MappingProxyType({}), _NO_COLUMNS, 0)


def candidate_rows(
    snap: Snapshot, restrict: Collection[str] | None, pack: str | None
) -> Rows | None:
    """Row indices allowed by the restriction and the pack, sorted; None means every row."""
    rows: Rows | None = None
    if pack is not None:
        rows = snap.packs.get(pack, _NO_ROWS)
    if restrict is not None:
        wanted = np.fromiter(
            sorted({snap.rows[name] for name in restrict if name in snap.rows}), dtype=np.intp
        )
        rows = wanted if rows is None else np.intersect1d(rows, wanted, assume_unique=True)
    return rows


def with_prior(
    snap: Snapshot,
    found: npt.NDArray[np.float32],
    rows: Rows | None,
    prior: Mapping[str, float],
    weight: float,
) -> npt.NDArray[np.float32]:
    """`(cosine + weight * prior) / (1 + weight)` per candidate (a prior in [0, 1] keeps the
    scores in [-1, 1]); tools the prior does not name get 0."""
    bonus = np.zeros(found.size, dtype=np.float32)
    at = [snap.rows[name] for name in prior if name in snap.rows]
    values = np.fromiter((prior[snap.names[i]] for i in at), dtype=np.float32, count=len(at))
    where = np.asarray(at, dtype=np.intp)
    if rows is not None:
        place = np.searchsorted(rows, where)
        inside = (place < rows.size) & (rows[np.minimum(place, rows.size - 1)] == where)
        where, values = place[inside], values[inside]
    bonus[where] = values
    mixed = (found + np.float32(weight) * bonus) / np.float32(1 + weight)
    return mixed.astype(np.float32, copy=False)


def scores(snap: Snapshot, query: Vector, rows: Rows | None) -> npt.NDArray[np.float32]:
    """Cosine of `query` with every candidate centroid (centroids are unit length)."""
    columns = snap.columns
    features = np.flatnonzero(query)
    sparse = features.size <= _SPARSE_FRACTION * query.size
    weights = query[features] if sparse else query
    found: npt.NDArray[np.float32]
    if rows is not None and rows.size * _GATHER_FRACTION < snap.size:
        found = weights @ (columns[np.ix_(features, rows)] if sparse else columns[:, rows])
        return found
    found = weights @ (columns[features] if sparse else columns)
    return found if rows is None else found[rows]
