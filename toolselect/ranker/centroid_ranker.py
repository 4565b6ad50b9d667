"""The ranker: per-tool centroids of embeddings, ranked by cosine; no I/O, no locks for readers.

How a centroid is made from a tool's description and exemplars is in `centroids`; the weights can
change at run time (`reweight`), when the learning loop has chosen better ones from its labels.
Readers take the current `Snapshot` once (one attribute read) and rank against it; writers build
a new snapshot and swap it in with one assignment, so a reader never sees half an update and
never waits.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from toolselect.errors import InvalidInput
from toolselect.ranker.centroids import (
    GROUPS,
    CatalogState,
    ExemplarSum,
    centroid_columns,
    checked_weights,
)
from toolselect.ranker.records import Group, LabelView, LearnedVector, Ranking, Vector
from toolselect.ranker.snapshot import EMPTY_SNAPSHOT, Snapshot, candidate_rows
from toolselect.records import Tool


class CentroidRanker:
    """Ranks tools for a query vector by cosine to per-tool centroids.

    Writers (`set_catalog`, `upsert_tools`, `remove_tools`, `fold`, `clear_exemplars`) are
    serialised by a lock and each swaps in one new snapshot when something changed; `rank`
    never takes the lock. Vectors must come from one embedder (one `dim`).
    """

    def __init__(
        self,
        description_weight: float = 1.0,
        exemplar_weight: float = 1.0,
        shrink: float = 0.0,
        self_weight: float = 1.0,
        usage_weight: float = 1.0,
    ) -> None:
        self._weights = checked_weights(
            description_weight, exemplar_weight, shrink, self_weight, usage_weight
        )
        self._snapshot = EMPTY_SNAPSHOT
        self._state = CatalogState()
        self._lock = threading.Lock()
        self._rebuilds = 0

    # ---- reading -------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def size(self) -> int:
        return len(self._snapshot.names)

    @property
    def names(self) -> tuple[str, ...]:
        return self._snapshot.names

    @property
    def dim(self) -> int:
        return self._snapshot.dim

    @property
    def version(self) -> int:
        """Increments on every snapshot swap."""
        return self._snapshot.version

    @property
    def rebuilds(self) -> int:
        """How many centroids have been (re)computed since creation; a fold adds the touched."""
        return self._rebuilds

    def has(self, name: str) -> bool:
        return name in self._snapshot.rows

    def holds(self, query_norm: str, tool: str, group: Group) -> bool:
        """Whether the exemplar of `query_norm` is held for `tool` in `group` (folding it again
        would change nothing)."""
        held = self._state.exemplars.get(query_norm)
        return held is not None and held[0] == tool and held[2] == group

    def exemplar_count(self, tool: str) -> int:
        """Exemplars naming `tool`, including those waiting for the tool to join the catalog."""
        return sum(s[tool].count for s in self._state.groups.values() if tool in s)

    @property
    def exemplar_total(self) -> int:
        return len(self._state.exemplars)

    def learned(self) -> list[LearnedVector]:
        """Every exemplar held, as folded (what folding them into an empty ranker restores)."""
        with self._lock:
            held = list(self._state.exemplars.items())
        return [
            LearnedVector(query, tool, vector, trusted=group == "trusted", usage=group == "usage")
            for query, (tool, vector, group) in held
        ]

    @property
    def validating_total(self) -> int:
        """Exemplars a fit validates on: the trusted ones, else the agents' usage labels."""
        state = self._state
        return state.held[state.validating]

    @property
    def validating_changes(self) -> int:
        """Changes ever made to the exemplars a fit validates on (monotonic): an add, a
        replacement by another tool or group and a removal count one each."""
        return self._state.validating_changes

    @property
    def usage_weight(self) -> float:
        """What one usage label counts in a centroid, against 1 for a trusted one."""
        return self._weights.usage_weight

    @property
    def weights(self) -> tuple[float, float, float, float]:
        """(description weight, exemplar weight, shrink, self weight) of the centroids."""
        w = self._weights
        return w.description, w.exemplar, w.shrink, w.self_weight

    def rank(
        self,
        query_vec: npt.NDArray[np.floating],
        k: int,
        restrict: Collection[str] | None = None,
        pack: str | None = None,
        prior: Mapping[str, float] | None = None,
        prior_weight: float = 0.0,
    ) -> Ranking:
        """Top `k` tools by cosine, descending, ties by name.

        `restrict` keeps only the named tools (unknown names are ignored; an empty collection
        leaves nothing); `pack` keeps only that pack's tools; both together intersect. A
        `prior` (per tool, in [0, 1]) with a positive `prior_weight` mixes in as
        `(cosine + weight * prior) / (1 + weight)`.
        """
        return self._snapshot.rank(query_vec, k, restrict, pack, prior, prior_weight)

    def allowed(self, restrict: Collection[str] | None, pack: str | None) -> Collection[str]:
        """The tool names a ranking with this restriction and pack may answer."""
        snap = self._snapshot
        rows = candidate_rows(snap, restrict, pack)
        return snap.rows if rows is None else {snap.names[i] for i in rows.tolist()}

    # ---- writing -------------------------------------------------------------------------

    def set_catalog(self, tools: Sequence[Tool], vectors: npt.NDArray[np.floating]) -> None:
        """Replace the whole catalog; exemplars are kept and attach to tools by name."""
        matrix = self._check_vectors(tools, vectors)
        with self._lock:
            state = self._state
            if len(tools) and matrix.shape[1] != state.dim and state.exemplars:
                raise InvalidInput(
                    f"expected {state.dim}-dimensional tool vectors like the exemplars held, "
                    f"got {matrix.shape[1]}; clear_exemplars() first when the embedder changed",
                    field="vectors",
                )
            if len(tools):
                state.dim = matrix.shape[1]
            state.tools = {t.name: t for t in tools}
            state.descriptions = {t.name: matrix[i].copy() for i, t in enumerate(tools)}
            # Sorted, so the same catalog in any input order gives the same matrix bit for bit.
            names = tuple(sorted(state.tools))
            self._swap(names, self._centroids(names))

    def upsert_tools(self, tools: Sequence[Tool], vectors: npt.NDArray[np.floating]) -> None:
        """Add new tools and replace known ones (description vector and packs)."""
        matrix = self._check_vectors(tools, vectors)
        if not tools:
            return
        with self._lock:
            state, snap = self._state, self._snapshot
            if (state.tools or state.exemplars) and matrix.shape[1] != state.dim:
                raise InvalidInput(
                    f"expected {state.dim}-dimensional tool vectors, got {matrix.shape[1]}",
                    field="vectors",
                )
            state.dim = matrix.shape[1]
            for i, tool in enumerate(tools):
                state.tools[tool.name] = tool
                state.descriptions[tool.name] = matrix[i].copy()
            added = [t.name for t in tools if t.name not in snap.rows]
            names = snap.names + tuple(added)
            columns = np.empty((state.dim, len(names)), dtype=np.float32)
            if snap.size:  # an empty snapshot's columns are (0, 0), whatever the new dim
                columns[:, : snap.size] = snap.columns
            rows = {**snap.rows, **{name: snap.size + i for i, name in enumerate(added)}}
            updated = [tool.name for tool in tools]
            columns[:, [rows[name] for name in updated]] = self._centroids(updated)
            self._swap(names, columns)

    def remove_tools(self, names: Iterable[str]) -> int:
        """Drop tools from the catalog (their exemplars wait in case the tool comes back)."""
        with self._lock:
            state, snap = self._state, self._snapshot
            gone = {name for name in names if name in state.tools}
            if not gone:
                return 0
            for name in gone:
                del state.tools[name]
                del state.descriptions[name]
            keep = [i for i, name in enumerate(snap.names) if name not in gone]
            self._swap(tuple(snap.names[i] for i in keep), snap.columns[:, keep])
            return len(gone)

    def fold(self, upserted: Sequence[LearnedVector], deleted: Sequence[str] = ()) -> int:
        """Apply exemplar changes; returns how many catalog tools got a new centroid.

        Deletions (normalised queries) apply first. An upsert of a query already held moves it
        to another tool or label group; one that keeps both (a usage label seen again, or a
        label of the same tool from another tier of the group) changes no centroid. Only the touched tools' centroids are
        recomputed, from running sums, so a fold costs O(touched tools), plus one copy of the
        matrix for the new snapshot.
        """
        vectors = [self._check_exemplar(lv) for lv in upserted]
        with self._lock:
            state = self._state
            if vectors and not state.dim:
                state.dim = vectors[0].shape[0]
            for vector in vectors:
                if vector.shape[0] != state.dim:
                    raise InvalidInput(
                        f"expected {state.dim}-dimensional exemplar vectors, got {vector.shape[0]}",
                        field="vector",
                    )
            touched: set[str] = set()
            for query_norm in deleted:
                touched.update(state.relabel(query_norm, None))
            for lv, vector in zip(upserted, vectors, strict=True):
                if self.holds(lv.query_norm, lv.tool, lv.group):
                    continue
                touched.update(state.relabel(lv.query_norm, (lv.tool, vector, lv.group)))
            snap = self._snapshot
            changed = [name for name in touched if name in snap.rows]
            if changed:
                columns = snap.columns.copy()
                columns[:, [snap.rows[name] for name in changed]] = self._centroids(changed)
                self._swap(snap.names, columns, same_tools=True)
            return len(changed)

    def reweight(
        self,
        description_weight: float,
        shrink: float,
        self_weight: float,
        usage_weight: float | None = None,
    ) -> bool:
        """Fold every centroid again with new weights (the exemplar weight stays, and the usage
        weight unless given); True when the weights changed."""
        current = self._weights
        wanted = checked_weights(
            description_weight,
            current.exemplar,
            shrink,
            self_weight,
            current.usage_weight if usage_weight is None else usage_weight,
        )
        with self._lock:
            if wanted == self._weights:
                return False
            self._weights = wanted
            snap = self._snapshot
            if snap.size:
                self._swap(snap.names, self._centroids(snap.names), same_tools=True)
            return True

    def label_view(self, limit: int, seed: int = 0) -> tuple[LabelView, tuple[str, ...]]:
        """A copy of what a fit needs (see `LabelView`): descriptions and exemplar sums of the
        catalog tools, and up to `limit` exemplars of each label group (seeded samples when there
        are more) whose tool is in the catalog; with the tool names by row."""
        with self._lock:
            state, snap = self._state, self._snapshot
            names = snap.names
            rows = snap.rows
            descriptions = np.empty((len(names), state.dim), dtype=np.float32)
            for i, name in enumerate(names):
                descriptions[i] = state.descriptions[name]
            held = sorted({name for sums in state.groups.values() for name in sums if name in rows})
            sum_rows = np.fromiter((rows[name] for name in held), dtype=np.intp)
            zero = ExemplarSum(np.zeros(state.dim, dtype=np.float64))
            empty = np.zeros((0, state.dim))
            totals, counts = {}, {}
            for group in GROUPS:
                found = [state.groups[group].get(name, zero) for name in held]
                totals[group] = np.vstack([t.total for t in found]) if held else empty
                counts[group] = np.fromiter((t.count for t in found), dtype=np.float64)
            labelled = [
                (vector, rows[tool], group)
                for tool, vector, group in state.exemplars.values()
                if tool in rows
            ]
        rng = np.random.default_rng(seed)
        picked: list[tuple[Vector, int, str]] = []
        for group in GROUPS:
            members = [item for item in labelled if item[2] == group]
            if len(members) > limit:
                chosen = sorted(rng.choice(len(members), limit, replace=False))
                members = [members[i] for i in chosen]
            picked += members
        vectors = (
            np.vstack([v for v, _, _ in picked]).astype(np.float32)
            if picked
            else np.zeros((0, descriptions.shape[1]), dtype=np.float32)
        )
        view = LabelView(
            descriptions=descriptions,
            sum_rows=sum_rows,
            sums=totals["trusted"].astype(np.float64, copy=False),
            counts=counts["trusted"],
            own_sums=totals["own"].astype(np.float64, copy=False),
            own_counts=counts["own"],
            vectors=vectors,
            owners=np.fromiter((row for _, row, _ in picked), dtype=np.intp),
            trusted=np.fromiter((g == "trusted" for _, _, g in picked), dtype=np.bool_),
            usage_sums=totals["usage"].astype(np.float64, copy=False),
            usage_counts=counts["usage"],
            usage=np.fromiter((g == "usage" for _, _, g in picked), dtype=np.bool_),
        )
        return view, names

    def clear_exemplars(self) -> None:
        """Forget every exemplar (e.g. before vectors of another embedder are folded)."""
        with self._lock:
            state, snap = self._state, self._snapshot
            had = sorted({name for sums in state.groups.values() for name in sums} & set(snap.rows))
            state.clear_exemplars()
            if had:
                columns = snap.columns.copy()
                columns[:, [snap.rows[name] for name in had]] = self._centroids(had)
                self._swap(snap.names, columns, same_tools=True)

    # ---- internals -----------------------------------------------------------------------

    def _centroids(self, names: Sequence[str]) -> Vector:
        """The centroids of catalog tools `names` under the current weights, as columns."""
        self._rebuilds += len(names)
        return centroid_columns(self._state, names, self._weights)

    def _swap(self, names: tuple[str, ...], columns: Vector, *, same_tools: bool = False) -> None:
        """Publish a new snapshot; `same_tools` reuses the name and pack indexes (a fold)."""
        old = self._snapshot
        columns = np.ascontiguousarray(columns, dtype=np.float32)
        columns.flags.writeable = False
        if same_tools:
            rows, packs = old.rows, old.packs
        else:
            grouped: dict[str, list[int]] = {}
            for i, name in enumerate(names):
                for pack in self._state.tools[name].packs:
                    grouped.setdefault(pack, []).append(i)
            rows = MappingProxyType({name: i for i, name in enumerate(names)})
            packs = MappingProxyType(
                {pack: np.asarray(at, dtype=np.intp) for pack, at in grouped.items()}
            )
        self._snapshot = Snapshot(
            version=old.version + 1,
            names=names,
            rows=rows,
            packs=packs,
            columns=columns,
            dim=self._state.dim if names else 0,
        )

    @staticmethod
    def _check_vectors(tools: Sequence[Tool], vectors: npt.NDArray[np.floating]) -> Vector:
        if not tools:
            return np.zeros((0, 0), dtype=np.float32)
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(tools) or matrix.shape[1] == 0:
            raise InvalidInput(
                f"expected vectors of shape ({len(tools)}, dim), got {matrix.shape}",
                field="vectors",
            )
        seen: set[str] = set()
        for i, tool in enumerate(tools):
            if tool.name in seen:
                raise InvalidInput(f"duplicate tool name {tool.name!r}", field=f"tools[{i}].name")
            seen.add(tool.name)
        if not np.isfinite(matrix).all():
            raise InvalidInput("expected finite tool vectors", field="vectors")
        return matrix

    @staticmethod
    def _check_exemplar(lv: LearnedVector) -> Vector:
        vector = np.array(lv.vector, dtype=np.float32).reshape(-1)
        if vector.size == 0 or not np.isfinite(vector).all():
            raise InvalidInput(
                f"expected a finite exemplar vector for {lv.query_norm!r}", field="vector"
            )
        return vector
