"""API fixtures: a started service on each store holding a small hand-made catalog, behind
aiohttp's test server on a real socket."""

from __future__ import annotations

from typing import Any

import pytest_asyncio
from aiohttp.test_utils import TestClient

from tests.services import ClientFactory, ServiceFactory, service_of
from toolselect.records import Tool
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

__all__ = ["HAND_CATALOG", "ClientFactory"]


@pytest_asyncio.fixture(loop_scope="function")
async def client(services: ServiceFactory, aiohttp_client: ClientFactory) -> TestClient[Any, Any]:
    """An HTTP client of the real aiohttp app on a fresh store (SQLite, then Neo4j) holding the
    hand-made catalog, on a real socket."""
    client, service = await services.serve(aiohttp_client)
    await service.catalog.upsert_tools(HAND_CATALOG, pack="assistant")
    return client


@pytest_asyncio.fixture(loop_scope="function")
async def service(client: TestClient[Any, Any]) -> Service:
    """The service behind `client` (the `services` factory started it and closes it)."""
    return service_of(client)
