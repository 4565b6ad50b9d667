"""How the SQLite store writes and reads a time: fixed-width ISO-8601 UTC text."""

from __future__ import annotations

from datetime import UTC, datetime

from toolselect.records import utc


def ts(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC text, so text order is time order (naive means UTC)."""
    return utc(value).isoformat(timespec="microseconds")


def dt(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)
