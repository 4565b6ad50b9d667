"""What pydantic-settings would add to the exec selector's start:
`python -m bench.experiments.settings_import [--spawns N]`.

`toolselect select` is spawned once per agent turn, so its start is its cost. Three arms, each
a fresh interpreter, interleaved spawn by spawn so the machine's noise falls on all of them:
`today` imports the selector (`toolselect.cmd.select`, which reads `Settings`); `library`
imports pydantic-settings beside it; `settings` also builds a `BaseSettings` with today's 75
fields and reads it from the environment, as adopting the library for `Settings` would. Prints
the medians and p90 in milliseconds, and each arm's difference from `today`, as JSON; the
bound the settings item set was 20 ms.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench.stats import percentile

_SELECTOR = "import toolselect.cmd.select"
_BUILD = """
from dataclasses import fields
from pydantic import create_model
from pydantic_settings import BaseSettings, SettingsConfigDict
from toolselect.config import Settings
types = {'str': str, 'int': int, 'float': float, 'bool': bool}
model = create_model(
    'LibrarySettings',
    __base__=BaseSettings,
    **{f.name: (types.get(str(f.type), str | None), f.default) for f in fields(Settings)},
)
model.model_config = SettingsConfigDict(env_prefix='TOOLSELECT_')
model.model_rebuild(force=True)
model()
"""
ARMS = {
    "today": _SELECTOR,
    "library": f"{_SELECTOR}; import pydantic_settings",
    "settings": f"{_SELECTOR}\n{_BUILD}",
}


def spawn_ms(code: str) -> float:
    """One fresh interpreter running `code`, start to exit, in milliseconds."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=15, help="spawns per arm (15)")
    args = parser.parse_args()
    for code in ARMS.values():  # warm the page cache and the bytecode caches once
        spawn_ms(code)
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for _ in range(args.spawns):
        for arm, code in ARMS.items():
            times[arm].append(spawn_ms(code))
    today = percentile(times["today"], 0.5)
    print(
        json.dumps(
            {
                arm: {
                    "p50_ms": round(percentile(values, 0.5), 1),
                    "p90_ms": round(percentile(values, 0.9), 1),
                    "over_today_ms": round(percentile(values, 0.5) - today, 1),
                }
                for arm, values in times.items()
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
