import asyncio
import os

from pydantic_ai import Agent

from toolselect.client import AsyncClient
from toolselect.integrations.pydantic_ai import ToolselectCapability


def get_weather(city: str) -> str:
    """Current weather and forecast for a city: temperature, rain, wind."""
    return f"Rain expected in {city} tomorrow."


def send_email(to: str, subject: str) -> str:
    """Send an email message to a recipient with a subject and body."""
    return f"Sent {subject!r} to {to}."


def stock_quote(ticker: str) -> str:
    """Latest stock price quote for a ticker symbol on the market."""
    return f"{ticker}: 42.00"


async def main(question: str) -> None:
    async with AsyncClient(os.environ.get("TOOLSELECT_URL", "http://127.0.0.1:8080")) as ts:
        # Each model request is offered the 2 tools that fit the question best; the tools
        # the model called are reported to toolselect when the run ends.
        toolselect = ToolselectCapability(ts, agent="assistant-pa", k=2)
        agent = Agent(
            "openai:gpt-5.4",  # OPENAI_API_KEY, OPENAI_BASE_URL
            tools=[get_weather, send_email, stock_quote],
            capabilities=[toolselect],
        )
        result = await agent.run(question)
        print(result.output)
        print("reported as turn", toolselect.reported[-1])


asyncio.run(main("Will it rain in Turin tomorrow?"))
