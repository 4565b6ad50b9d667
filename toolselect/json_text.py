"""JSON text as every boundary reads it: HTTP bodies, catalog files, the exec selector's stdin.

The standard parser, refusing what has no JSON value to give back: `NaN` and `Infinity` (which
`json.loads` takes) and numbers past a float's range (which it turns into infinity, stored and
then written back as `null`), and a string escaping a lone UTF-16 surrogate. That is the one
rule for strings both ends hold: a lone surrogate is not text (`has_lone_surrogate`), which
every boundary refuses (a body, a catalog file, the exec selector's stdin) and the client in a
turn before it is buffered.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

LONE_SURROGATE = "escapes a lone UTF-16 surrogate (\\uD800-\\uDFFF): not Unicode text"
# JSON may escape half of a UTF-16 pair ("\ud800"): json.loads accepts it. Only text with
# such an escape is walked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


# Matches every text in which `parse_json` refuses a number (`NaN`, `Infinity`, a literal past
# a float's range), so a parser that takes them (pydantic's) needs `parse_json` only on a text
# it matches. A literal past the range is at least 10^308: its exponent has 3 digits or more,
# or, the exponent being at most 99, it has at least 210 digits before the point. Any run of 200
# digits covers the latter with room to spare; a match that is no such number costs a parse.
MAYBE_NOT_FINITE = re.compile(rb"NaN|Infinity|[eE]\+?[0-9]{3}|[0-9]{200}")


def parse_json(text: str | bytes) -> Any:
    """`json.loads` where every refusal is a ValueError whose message says why: not JSON
    (`JSONDecodeError`, `UnicodeDecodeError`), a non-finite number, nesting deeper than the
    parser's recursion (a `RecursionError` otherwise), or a lone surrogate."""
    try:
        value = json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    escapes = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if _SURROGATE_ESCAPE.search(escapes) and has_lone_surrogate(value):
        raise ValueError(LONE_SURROGATE)
    return value


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a 64-bit float")
    return value


def has_lone_surrogate(value: Any) -> bool:
    """Whether a string in `value` (parsed JSON: object keys too) holds half of a UTF-16 pair
    (U+D800-U+DFFF) without the other. JSON can escape one (`"\\ud83d"`) and a Python string
    can hold one, but it is not Unicode text: UTF-8 cannot carry it and no store can encode
    it."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False
