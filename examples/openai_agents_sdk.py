import asyncio
import os

from agents import Agent, Runner, function_tool

from toolselect.client import AsyncClient
from toolselect.integrations.openai_agents import ToolselectTools


@function_tool
def get_weather(city: str) -> str:
    """Current weather and forecast for a city: temperature, rain, wind."""
    return f"Rain expected in {city} tomorrow."


@function_tool
def send_email(to: str, subject: str) -> str:
    """Send an email message to a recipient with a subject and body."""
    return f"Sent {subject!r} to {to}."


@function_tool
def stock_quote(ticker: str) -> str:
    """Latest stock price quote for a ticker symbol on the market."""
    return f"{ticker}: 42.00"


async def main(question: str) -> None:
    async with AsyncClient(os.environ.get("TOOLSELECT_URL", "http://127.0.0.1:8080")) as ts:
        toolselect = ToolselectTools(ts, agent="assistant-oa", k=2)
        # A copy of the agent whose tools are offered only when they rank in the run's top 2.
        agent = toolselect.agent(
            Agent(name="assistant", model="gpt-5.4", tools=[get_weather, send_email, stock_quote])
        )  # OPENAI_API_KEY, OPENAI_BASE_URL
        with toolselect.hooks() as hooks:  # reports the run's tool calls (error if it raises)
            result = await Runner.run(agent, question, hooks=hooks)
        print(result.final_output)
        print("reported as turn", hooks.reported[-1])


asyncio.run(main("Will it rain in Turin tomorrow?"))
