"""The published benchmark pages are what their templates make of the committed results: the
report measures nothing, so rendering it again from bench/results/ must give the committed text
byte for byte (an edited template or result without `python -m bench report` fails here)."""

from __future__ import annotations

import json

from bench import RESULTS, ROOT, report
from bench.perf.report import render_markdown


def test_benchmarks_md_is_the_rendered_results() -> None:
    assert report.render() == (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")


def test_perf_md_is_the_rendered_perf_json() -> None:
    results = json.loads((RESULTS / "perf.json").read_text(encoding="utf-8"))
    assert render_markdown(results) == (RESULTS / "perf.md").read_text(encoding="utf-8")
