"""The centroid fold: what writers keep per tool, and the weighted mix each centroid is made of.

A tool's centroid is the normalised weighted sum of its description vector (weight
`description`) and its exemplar vectors (each `exemplar / count ** shrink`: with `shrink` 0
every exemplar counts fully, with 1 a tool's exemplars weigh like their mean; the ranker's own
free-tier labels count `self_weight` each, the agents' successful choices (`usage` labels)
`usage_weight` each, trusted ones 1); normalising makes it the same direction as the weighted
mean.

Exemplars are kept as running sums per tool, one set per label group (trusted, usage, the
ranker's own), so a fold recomputes only the tools it touched. Nothing here locks: `CentroidRanker` owns the one
`CatalogState` and mutates it under its writer lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from toolselect.ranker.records import Group, Vector
from toolselect.records import Tool

# Where a label's truth comes from: a teacher or a human (`trusted`), the agent's own successful
# choice (`usage`), or the ranker's own confident top-1 (`own`).
GROUPS: tuple[Group, ...] = ("trusted", "usage", "own")


class Weights(NamedTuple):
    """How much a description, an exemplar, the agents' usage labels and the ranker's own labels
    weigh in a centroid.

    A tuple, so that comparing weights (is a reweight a change?) keeps tuple semantics."""

    description: float
    exemplar: float
    shrink: float
    self_weight: float
    usage_weight: float = 1.0

    def of(self, group: Group) -> float:
        """What one label of `group` counts, against 1 for a trusted one."""
        return (
            self.self_weight if group == "own" else self.usage_weight if group == "usage" else 1.0
        )


def checked_weights(
    description_weight: float,
    exemplar_weight: float,
    shrink: float,
    self_weight: float,
    usage_weight: float = 1.0,
) -> Weights:
    """The weights, once they are known to be in range; ValueError otherwise."""
    if (
        description_weight < 0
        or exemplar_weight < 0
        or not 0.0 <= shrink <= 1.0
        or not 0.0 <= self_weight <= 1.0
        or not 0.0 <= usage_weight <= 1.0
    ):
        raise ValueError(
            "expected non-negative weights, shrink, self and usage weights in 0..1, got "
            f"description_weight={description_weight}, exemplar_weight={exemplar_weight}, "
            f"shrink={shrink}, self_weight={self_weight}, usage_weight={usage_weight}"
        )
    return Weights(description_weight, exemplar_weight, shrink, self_weight, usage_weight)


@dataclass(slots=True)
class ExemplarSum:
    """Running sum of one tool's exemplar vectors (float64: folds add and subtract forever)."""

    total: npt.NDArray[np.float64]
    count: int = 0


@dataclass(slots=True)
class CatalogState:
    """What writers keep besides the snapshot: the catalog, its description vectors and the
    exemplars with their per-tool sums."""

    tools: dict[str, Tool] = field(default_factory=dict)
    descriptions: dict[str, Vector] = field(default_factory=dict)
    # Every exemplar, whether its tool is in the catalog or not (then it waits for the tool):
    # query_norm -> (tool, vector, group).
    exemplars: dict[str, tuple[str, Vector, Group]] = field(default_factory=dict)
    # Exemplar sums per label group, then per tool.
    groups: dict[Group, dict[str, ExemplarSum]] = field(
        default_factory=lambda: {group: {} for group in GROUPS}
    )
    # Exemplars held per label group.
    held: dict[Group, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    # Changes ever made to the labels a fit validates on (`validating`): what a refit waits
    # for. Counting changes, not the net count, lets corrections at a constant count add up.
    validating_changes: int = 0
    dim: int = 0

    @property
    def validating(self) -> Group:
        """The group a fit validates on: the trusted labels, else the agents' usage labels."""
        return "trusted" if self.held["trusted"] else "usage"

    def relabel(self, query_norm: str, label: tuple[str, Vector, Group] | None) -> tuple[str, ...]:
        """Hold `label` (tool, vector, group) for `query_norm` in place of what is held (None:
        hold nothing); the tools whose sums changed. Counts one validating change when the
        old or new label validates, and both groups' labels when the validating group switches
        (every label the fit validated on left its set, every one now in it joined)."""
        before = self.exemplars.get(query_norm)
        was = before[2] if before is not None else None
        group, held = self.validating, self.held[self.validating]
        touched = self.detach(query_norm)
        if label is not None:
            tool, vector, into = label
            self.attach(query_norm, tool, vector, into)
            touched += (tool,)
        if self.validating != group:
            self.validating_changes += held + self.held[self.validating]
        elif group in (was, label[2] if label is not None else None):
            self.validating_changes += 1
        return touched

    def attach(self, query_norm: str, tool: str, vector: Vector, group: Group) -> None:
        """Hold an exemplar and add it to its tool's sum; the query must not be held already."""
        self.exemplars[query_norm] = (tool, vector, group)
        self.held[group] += 1
        sums = self.groups[group]
        found = sums.get(tool)
        if found is None:
            found = sums[tool] = ExemplarSum(np.zeros(self.dim, dtype=np.float64))
        found.total += vector
        found.count += 1

    def detach(self, query_norm: str) -> tuple[str, ...]:
        """Drop the exemplar of `query_norm`, if held; the tool whose sum changed."""
        held = self.exemplars.pop(query_norm, None)
        if held is None:
            return ()
        tool, vector, group = held
        self.held[group] -= 1
        sums = self.groups[group]
        found = sums[tool]
        found.count -= 1
        if found.count == 0:
            # Start from exact zero again rather than carrying rounding residue.
            del sums[tool]
        else:
            found.total -= vector
        return (tool,)

    def clear_exemplars(self) -> None:
        self.validating_changes += self.held[self.validating]
        self.exemplars.clear()
        for group in GROUPS:
            self.groups[group].clear()
            self.held[group] = 0


def centroid_columns(state: CatalogState, names: Sequence[str], weights: Weights) -> Vector:
    """The centroids of catalog tools `names`, as columns of shape `(dim, len(names))`."""
    mix = np.empty((len(names), state.dim), dtype=np.float64)
    for i, name in enumerate(names):
        mix[i] = state.descriptions[name]
    mix *= weights.description
    for i, name in enumerate(names):
        total: npt.NDArray[np.float64] | None = None
        count = 0.0
        for group in GROUPS:
            found, weight = state.groups[group].get(name), weights.of(group)
            if found is None or not weight:
                continue
            total = found.total * weight if total is None else total + found.total * weight
            count += weight * found.count
        if total is not None:
            mix[i] += total * (weights.exemplar / count**weights.shrink)
    norms = np.sqrt(np.einsum("ij,ij->i", mix, mix))[:, None]
    np.divide(mix, norms, out=mix, where=norms > 0.0)
    columns = np.empty((state.dim, len(names)), dtype=np.float32)
    # Transposed in blocks that stay in cache: ~10x faster than one strided copy.
    for start in range(0, len(names), 64):
        columns[:, start : start + 64] = mix[start : start + 64].T
    return columns
