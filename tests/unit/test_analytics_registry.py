"""Adding an analysis is one `.cypher` file, its SQL twin and one registry entry (CONTRIBUTING.md).

These pin the parts of that promise that need no server: the registry matches the Cypher files and
the SQL twins, every chart kind draws, and the stores' import of the registry stays light. That
`GET /v1/analytics` lists every registry name is pinned in `tests/api/test_analytics_api.py`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import get_args

from toolselect.analytics import charts, registry
from toolselect.analytics.registry import LEARNING, Analysis, ChartKind
from toolselect.records import AnalyticsResult
from toolselect.store.neo4j import cypher
from toolselect.store.sqlite.store import SqliteStore


def test_every_registry_name_has_a_cypher_file_and_no_file_is_unregistered() -> None:
    """The registry names and the files of `cypher/analytics/` are the same set."""
    assert cypher.names("analytics") == sorted(f"analytics/{n}" for n in registry.NAMES)


async def test_every_registry_name_runs_in_sql_on_the_embedded_store(tmp_path: Path) -> None:
    """The SQLite store answers every registry name with the registry's columns."""
    store = SqliteStore(tmp_path / "store.db")
    await store.migrate()
    try:
        for name in registry.NAMES:
            result = await store.analytics(name)
            assert (result.name, result.columns) == (name, registry.ANALYSES[name].columns)
    finally:
        await store.close()


def test_no_analysis_takes_the_name_the_surfaces_keep_for_the_learning_fit() -> None:
    """`learning` is served beside the analyses, so no registry entry may use that name."""
    assert LEARNING not in registry.NAMES


def test_every_chart_kind_has_a_drawer() -> None:
    """Each chart kind an entry can name is one `charts.plot` can draw."""
    assert set(charts.CHARTS) == set(get_args(ChartKind))
    assert {a.chart for a in registry.ANALYSES.values()} <= set(charts.CHARTS)


def test_a_new_analysis_plots_with_the_generic_bars(tmp_path: Path) -> None:
    """An analysis unknown to the plotting code draws as `bars` from its columns alone."""
    new = Analysis("per_pack", ("pack", "tier", "turns"), "turns per pack", "bars", lambda r: r)
    result = AnalyticsResult(new.name, new.columns, (("mail", "teacher", 4), ("web", None, 1)))
    path = charts.plot(result, tmp_path / "per_pack.png", new)
    assert path.read_bytes()[:4] == b"\x89PNG"
    words = AnalyticsResult(new.name, ("pack",), (("mail",),))
    assert charts.plot(words, tmp_path / "words.png", new).read_bytes()[:4] == b"\x89PNG"


def test_the_registry_imports_no_rendering_plotting_or_surface() -> None:
    """Importing the registry, as both stores do, loads neither render, charts, surfaces nor
    matplotlib."""
    probe = (
        "import sys, toolselect.analytics.registry\n"
        "heavy = ('toolselect.analytics.render', 'toolselect.analytics.charts',\n"
        "         'toolselect.analytics.surfaces', 'matplotlib')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
