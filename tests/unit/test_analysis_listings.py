"""Where analyses are listed by hand (README's "Analytics" section, the dashboard's titles and
captions), every analysis of the registry is there."""

from __future__ import annotations

import re
from pathlib import Path

from toolselect.analytics.registry import NAMES

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DASHBOARD = ROOT / "toolselect" / "ui" / "app.js"
NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve"


def test_readme_analytics_section_names_every_analysis() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Analytics\n", 1)[1].split("\n### ", 1)[0]
    named = set(re.findall(r"`([a-z_]+)`", section))
    assert set(NAMES) <= named, f"README's Analytics section misses {set(NAMES) - named}"
    count = section.split()[section.split().index("named") - 1].lower()
    assert count == NUMBER_WORDS.split()[len(NAMES)], (
        f"README says {count} analyses, the registry has {len(NAMES)}"
    )


def test_dashboard_has_a_title_and_caption_for_every_analysis() -> None:
    """An analysis missing from app.js's ANALYSES still shows, as a bare table under its raw
    name; the registry and the dashboard must not drift apart unnoticed."""
    script = DASHBOARD.read_text(encoding="utf-8")
    block = script.split("const ANALYSES = {", 1)[1].split("\n};", 1)[0]
    titled = set(re.findall(r"^  ([a-z_]+): \{", block, flags=re.MULTILINE))
    assert titled == set(NAMES)
