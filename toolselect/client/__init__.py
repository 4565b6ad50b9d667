"""A Python client of the toolselect HTTP API: `Client` (blocking) and `AsyncClient`.

    from toolselect.client import Client

    with Client("http://127.0.0.1:8080", api_key="...") as ts:
        ranking = ts.rank("weather in Turin tomorrow?", k=3)
        ...  # the agent picks from ranking.results and calls get_weather
        ts.observe(
            "weather in Turin tomorrow?",
            used_tool="get_weather",
            search_id=ranking.search_id,  # links the turn to what it was shown
            outcome="ok",
        )

Imports only aiohttp, pydantic and structlog (no numpy, no onnxruntime): an agent process
pays a few tens of milliseconds for it, not the service's model load.
"""

from toolselect.client.aio import AsyncClient, clip_text, recent_context
from toolselect.client.observer import ObserveStats
from toolselect.client.sync import Client
from toolselect.client.transport import AiohttpTransport, Response, Transport
from toolselect.errors import ApiError, ClientError, Unreachable
from toolselect.turns import TurnFields

__all__ = [
    "AiohttpTransport",
    "ApiError",
    "AsyncClient",
    "Client",
    "ClientError",
    "ObserveStats",
    "Response",
    "Transport",
    "TurnFields",
    "Unreachable",
    "clip_text",
    "recent_context",
]
