"""The wheel declares every package: a package left out of pyproject.toml is missing from
`pip install toolselect` while an editable install still finds it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_declared() -> None:
    """Each folder of `toolselect/` holding Python modules is in `[tool.setuptools] packages`."""
    declared = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(folder.relative_to(ROOT).parts)
        for folder in [ROOT / "toolselect", *(ROOT / "toolselect").rglob("*")]
        if folder.is_dir()
        and folder.name != "__pycache__"
        and (any(folder.glob("*.py")) or any(folder.glob("*.cypher")))
    }
    assert found - declared == set()
