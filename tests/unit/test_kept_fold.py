"""The fold weights kept for the exec selector: read back only for the store and embedder they
were fitted for, and never an error."""

from __future__ import annotations

from pathlib import Path

from toolselect.learn.kept_fold import fold_path, read_fold, write_fold
from toolselect.ranker.centroids import Weights

FITTED = Weights(8.0, 1.0, 0.5, 0.0, 0.25)


def test_weights_come_back_for_their_store_and_embedder_only(tmp_path: Path) -> None:
    """Another store's or embedder's weights are no fit for this spawn (the starting ones)."""
    path = fold_path(str(tmp_path), "default")
    assert path is not None
    write_fold(path, "sqlite:/a.db", "hybrid-x", FITTED)
    assert read_fold(path, "sqlite:/a.db", "hybrid-x") == FITTED
    assert path.stat().st_mode & 0o777 == 0o644  # a spawn may be another user's
    assert read_fold(path, "sqlite:/b.db", "hybrid-x") is None
    assert read_fold(path, "sqlite:/a.db", "hashing-v1") is None
    assert fold_path(str(tmp_path), "acme") != path and fold_path("", "default") is None


def test_a_missing_or_damaged_file_is_no_fit(tmp_path: Path) -> None:
    """Missing, cut short, out of range or of another shape: None, never an exception."""
    path = tmp_path / "fold.json"
    assert read_fold(path, "s", "e") is None
    for text in ('{"store": "s", "embedder": "e", "weights": [8', '{"store": "s"}', "[]",
                 '{"store": "s", "embedder": "e", "weights": [8, 1, 2, 0, 1]}',
                 '{"store": "s", "embedder": "e", "weights": [8, 1]}'):  # fmt: skip
        path.write_text(text)
        assert read_fold(path, "s", "e") is None, text
