"""API fixtures: a started service on a fresh embedded store, behind aiohttp's test server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from toolselect.api.app import create_app
from toolselect.config import Settings
from toolselect.graph.store import Tool
from toolselect.service import Service

HAND_CATALOG = [
    Tool("get_weather", "Current weather and forecast for a city: temperature, rain, wind.",
         {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}}),
    Tool("send_email", "Send an email message to a recipient with a subject and body.",
         {"type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"}}}),
    Tool("web_search", "Search the web for pages matching a query and return links.", {}),
    Tool("create_calendar_event", "Create a calendar event or meeting at a date and time.", {}),
    Tool("stock_quote", "Latest stock price quote for a ticker symbol on the market.", {}),
    Tool("translate_text", "Translate text from one language into another language.", {}),
    Tool("shell_exec", "Run a shell command on the host and return its output.", {}),
    Tool("fs_read", "Read a file from the local filesystem.", {}),
]  # fmt: skip


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings of an isolated embedded store in `tmp_path` (no environment read)."""
    base = Settings(
        store=f"sqlite:{tmp_path / 'toolselect.db'}",
        data_dir=str(tmp_path),
        poll_interval_s=0.2,
    )
    return base.override(**overrides)


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Service]:
    """A service over a fresh embedded store holding the hand-made catalog."""
    svc = await Service.start(settings_for(tmp_path))
    await svc.upsert_tools(HAND_CATALOG, pack="assistant")
    try:
        yield svc
    finally:
        await svc.close()


ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


@pytest.fixture
async def client(service: Service, aiohttp_client: ClientFactory) -> TestClient[Any, Any]:
    """An HTTP client of the real aiohttp app over the service, on a real socket."""
    return await aiohttp_client(create_app(service))
