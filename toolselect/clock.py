"""The time labels and turns are stamped with: injected, so a test (or a replay) can set it.

`Clock` is any callable returning an aware UTC datetime; `utc_now` is the real one.
`toolselect.testing.FakeClock` is one a test moves by hand. The parts that count in float
seconds (the oracle's call stamps, the teacher budget's rolling hour) take `epoch_seconds` or
`window_seconds` of the same clock, so one injected clock decides every part's time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(UTC)


def epoch_seconds(clock: Clock) -> Callable[[], float]:
    """`clock` as seconds since the Unix epoch (`time.time` for the real clock)."""
    if clock is utc_now:
        return time.time
    return lambda: clock().timestamp()


def window_seconds(clock: Clock) -> Callable[[], float]:
    """Seconds to measure a rolling window by: `time.monotonic` for the real clock, which a
    step of the wall clock (NTP, a VM resumed) cannot move; an injected clock's own time
    otherwise, so a test or a replay decides when the window moves."""
    if clock is utc_now:
        return time.monotonic
    return epoch_seconds(clock)
