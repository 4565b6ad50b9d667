"""The fold weights a service's tuner applied, kept in the data folder for the exec selector.

`toolselect select` starts no service, so no tuner: it folded the stored labels with the weights
a service starts with, while a server on the same store refits them as the labels grow
(`hybrid`: description weight 16 at start, 8 once fitted on the labels of
tests/cli/test_select_parity.py), and the same request then selected other tools in a spawn
and from `POST /v1/select`. The tuner writes the weights it applies to `fold.json` (a tenant's
own file, `keys.tenant_file`) with the store and the embedder they were fitted for; a spawn on
that store with that embedder folds with them. A file that is missing, unreadable, or another
store's or embedder's is no fit: the starting weights, as before. Standard library only.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from toolselect.keys import tenant_file
from toolselect.ranker.centroids import Weights, checked_weights

FILE = "fold.json"


def fold_path(data_dir: str, tenant: str) -> Path | None:
    """Where `tenant`'s fold weights are kept: none without a data folder."""
    return tenant_file(Path(data_dir).expanduser() / FILE, tenant) if data_dir else None


def write_fold(path: Path, store: str, embedder: str, weights: Weights) -> None:
    """Replace the file at `path`, atomically (blocking: call it on a worker thread)."""
    text = json.dumps({"store": store, "embedder": embedder, "weights": list(weights)})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        # Readable by all, as the store beside it: a spawn may be another user's (mkstemp: 600).
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def read_fold(path: Path | None, store: str, embedder: str) -> Weights | None:
    """The weights kept at `path` for `store` and `embedder`, if any."""
    if path is None:
        return None
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept["store"] != store or kept["embedder"] != embedder:
            return None
        return checked_weights(*(float(w) for w in kept["weights"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None
