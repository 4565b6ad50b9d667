"""How long a server asked us to wait: the one reader of `Retry-After`.

The client reads it from toolselect's own 503s, the teachers from their providers' 429s and 5xx;
both go through `parse_retry_after`. Standard library only, so the client (which must not load
the oracle package) and the oracle share it.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms` or `retry-after` (delta-seconds or an HTTP date),
    never negative; None when absent or unreadable. `headers` are looked up by lower-case name
    (a case-insensitive mapping, or one with lower-cased names); `now` is the epoch time an
    HTTP date is counted from (the current time when None)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(value, 0.0)
    text = headers.get("retry-after")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        value = when.timestamp() - (time.time() if now is None else now)
    return max(value, 0.0) if math.isfinite(value) else None
