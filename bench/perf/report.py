"""The results of a run: bench/results/perf.json, and perf.md rendered from it.

perf.md holds only the tables generated from the JSON, written with the sentences that say how
they were measured in bench/templates/perf.md; the prose that reads them is written by hand in
FINDINGS.md beside this module, and `python -m bench report` puts it after the tables in
BENCHMARKS.md, so no figure is typed into Python and re-rendering never touches the prose.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import write_json
from bench.markdown import hand_written, prose
from bench.perf.targets import targets

FINDINGS = Path(__file__).with_name("FINDINGS.md")


def findings() -> str:
    """The hand-written findings (Markdown) to follow the generated tables."""
    return hand_written(FINDINGS)


def write(results: dict[str, Any], results_dir: Path) -> Path:
    """perf.json and perf.md in `results_dir`; returns the JSON's path."""
    path = write_json(results_dir / "perf.json", results)
    (results_dir / "perf.md").write_text(render_markdown(results), encoding="utf-8")
    return path


def rerender(results_dir: Path) -> Path:
    """perf.md rewritten from the perf.json beside it (no runs); returns its path."""
    results = json.loads((results_dir / "perf.json").read_text(encoding="utf-8"))
    path = results_dir / "perf.md"
    path.write_text(render_markdown(results), encoding="utf-8")
    return path


def render_markdown(results: dict[str, Any]) -> str:
    """perf.md: the blocks of bench/templates/perf.md, each section's only when it was run."""
    parts = [
        prose(
            "perf",
            "machine",
            results=results,
            machine=results["machine"],
            runs=results.get("runs", []),
            busy=results.get("busy_cores_before", {}),
            targets=targets(results),
        )
    ]
    if "inproc" in results:
        parts.append(prose("perf", "inproc", inproc=results["inproc"]))
    if "http" in results:
        parts.append(prose("perf", "http", http=results["http"]))
    if "cold" in results:
        parts.append(prose("perf", "cold", cold=results["cold"]))
    if "intake" in results:
        rows = _intake_rows(results["intake"])
        parts.append(prose("perf", "intake", intake=results["intake"], rows=rows))
    if "load" in results:
        parts.append(prose("perf", "load", load=results["load"]))
    return "\n\n".join(parts) + "\n"


def _intake_rows(intake: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per store, query cache and kind of turns: the run, the kind's figures and its
    decisions (tier/result, turns) in order."""
    return [
        {"run": r, "name": name, "stats": r[name], "tiers": sorted(r[name]["tier_result"].items())}
        for r in intake
        for name in ("unflagged", "flagged_ranker_tier", "usage_labelled")
        if name in r  # not in the results of a run before usage labels
    ]
