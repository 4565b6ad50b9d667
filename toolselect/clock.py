"""The time labels and turns are stamped with: injected, so a test (or a replay) can set it.

`Clock` is any callable returning an aware UTC datetime; `utc_now` is the real one.
`toolselect.testing.FakeClock` is one a test moves by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(UTC)
