"""Per-tool centroids of embeddings, ranked by cosine: pure numpy, no I/O, no locks for readers.

The public names are importable from here; the modules behind them, one concept each:

- `records`: what the ranker takes and gives (`Ranking`, `LearnedVector`, `LabelView`);
- `centroids`: the exemplar sums writers keep and the weighted fold that makes a centroid;
- `snapshot`: one immutable state and how queries are scored against it;
- `topk`: the cut to the top k, with its tie and margin rules, for one query or a batch;
- `centroid_ranker`: `CentroidRanker`, the writers that swap in new snapshots;
- `configured`: `build_ranker`, the ranker a service (and the exec selector) starts with
  from settings (not imported here: the rest of the package knows no settings).
"""

from toolselect.ranker.centroid_ranker import CentroidRanker
from toolselect.ranker.records import EMPTY_RANKING, LabelView, LearnedVector, Ranked, Ranking
from toolselect.ranker.snapshot import Snapshot

__all__ = [
    "EMPTY_RANKING",
    "CentroidRanker",
    "LabelView",
    "LearnedVector",
    "Ranked",
    "Ranking",
    "Snapshot",
]
