"""Integration fixtures: the real toolselect server on its own thread, the Messages API stub."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live import LiveServer, live_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    """A toolselect server with the hand-made catalog and no API keys."""
    yield from live_server(tmp_path)
