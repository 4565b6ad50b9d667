"""JSON text as every boundary reads it: HTTP bodies, catalog files, the exec selector's stdin.

The standard parser, refusing what has no JSON value to give back: `NaN` and `Infinity` (which
`json.loads` takes) and numbers past a float's range (which it turns into infinity, stored and
then written back as `null`).
"""

from __future__ import annotations

import json
import math
from typing import Any


def parse_json(text: str | bytes) -> Any:
    """`json.loads` where every refusal is a ValueError whose message says why: not JSON
    (`JSONDecodeError`, `UnicodeDecodeError`), a non-finite number, or nesting deeper than the
    parser's recursion (a `RecursionError` otherwise)."""
    try:
        return json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a 64-bit float")
    return value
