"""The ranker a service starts with, built from settings: one function for the service
(`compose`) and the exec selector (`toolselect select`), so a spawn ranks as a fresh server does.

Its weights are the settings' pins, or the learning loop's starting points when unpinned: the
ranker's own labels fold at 0 (kept for the ratchet, not moving centroids) and an agent's usage
labels at 1, until the labels show other weights do better (`learn.fit`, which starts its fold
from the same numbers). Settings are named for annotations only: the ranker loads nothing more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolselect.ranker.centroid_ranker import CentroidRanker
from toolselect.ranker.centroids import Weights

if TYPE_CHECKING:
    from toolselect.config import Settings

# How much an agent's successful choice (a usage label) counts against a teacher's or a
# human's label until the labels are fitted, and the ranker's own labels.
DEFAULT_USAGE_WEIGHT = 1.0
DEFAULT_SELF_WEIGHT = 0.0


def usage_weight(settings: Settings) -> float:
    """The usage-label weight to start from: the pinned one, else `DEFAULT_USAGE_WEIGHT`."""
    pinned = settings.usage_label_weight
    return DEFAULT_USAGE_WEIGHT if pinned is None else pinned


def self_weight(settings: Settings) -> float:
    """The ranker's own labels' weight to start from: the pinned one, else 0."""
    pinned = settings.self_label_weight
    return DEFAULT_SELF_WEIGHT if pinned is None else pinned


def fold_pinned(settings: Settings) -> bool:
    """Whether the settings pin the fold, which the tuner then never refits."""
    return (
        settings.description_weight is not None
        or settings.self_label_weight is not None
        or settings.usage_label_weight is not None
        or settings.exemplar_weight == 0.0
    )


def build_ranker(settings: Settings, fitted: Weights | None = None) -> CentroidRanker:
    """An empty ranker with the description weight, exemplar weight and self- and usage-label
    weights a service starts with, before any refit; or with the weights a service's tuner
    `fitted` (`learn/kept_fold.py`, for the exec selector), unless the settings pin them."""
    if fitted is not None and not fold_pinned(settings):
        return CentroidRanker(*fitted)
    return CentroidRanker(
        description_weight=settings.centroid_description_weight,
        exemplar_weight=settings.exemplar_weight,
        self_weight=self_weight(settings),
        usage_weight=usage_weight(settings),
    )
