"""`Retry-After` has one reader, for the client's 503s and the teachers' 429s alike."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from toolselect.retry_after import parse_retry_after


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),
        ({"retry-after": "Thu, 01 Jan 1970 00:00:30 GMT"}, 20.0),
        ({"retry-after": "Thu, 01 Jan 1970 00:00:05 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "-5"}, 0.0),
        ({}, None),
    ],
)
def test_seconds_milliseconds_and_http_dates(
    headers: dict[str, str], seconds: float | None
) -> None:
    """Seconds, milliseconds (first) or an HTTP date counted from `now`; never negative; junk
    is ignored."""
    assert parse_retry_after(headers, now=10.0) == seconds


def test_an_http_date_counts_from_the_current_time() -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    waited = parse_retry_after({"retry-after": soon})
    assert waited is not None and 50 <= waited <= 60


def test_the_client_reads_it_without_the_oracle() -> None:
    """The client's retries use the same reader, and importing the client loads no teacher."""
    code = (
        "import sys, toolselect.client.aio as aio, toolselect.retry_after as r; "
        "assert aio.parse_retry_after is r.parse_retry_after; "
        "print(sorted(m for m in sys.modules if m.startswith('toolselect.oracle')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
