"""Client fixtures: a real server on its own thread (open, and one that requires a key)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live import LiveServer, live_server

API_KEY = "k-test-0123456789"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    """A toolselect server with the hand-made catalog and no API keys."""
    yield from live_server(tmp_path)


@pytest.fixture
def keyed_server(tmp_path: Path) -> Iterator[LiveServer]:
    """A toolselect server that answers `/v1/*` only with `Authorization: Bearer API_KEY`."""
    yield from live_server(tmp_path, api_keys=(API_KEY,))
