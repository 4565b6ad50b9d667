"""README's "Analytics" section names every analysis of the registry, and says how many."""

from __future__ import annotations

import re
from pathlib import Path

from toolselect.analytics.registry import NAMES

README = Path(__file__).resolve().parents[2] / "README.md"
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
