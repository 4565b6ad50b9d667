import asyncio
import os

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import MockFunctionCallingLLM

from toolselect.client import AsyncClient
from toolselect.integrations.llamaindex import ToolselectToolRetriever


def get_weather(city: str = "Turin") -> str:
    """Current weather and forecast for a city: temperature, rain, wind."""
    return f"Rain expected in {city} tomorrow."


def send_email(to: str = "ann@example.com", subject: str = "Hello") -> str:
    """Send an email message to a recipient with a subject and body."""
    return f"Sent {subject!r} to {to}."


def stock_quote(ticker: str = "ACME") -> str:
    """Latest stock price quote for a ticker symbol on the market."""
    return f"{ticker}: 42.00"


async def main(question: str, conversation_id: str) -> None:
    async with AsyncClient(os.environ.get("TOOLSELECT_URL", "http://127.0.0.1:8080")) as ts:
        tools = ToolselectToolRetriever(
            ts, [get_weather, send_email, stock_quote], agent="assistant-li", k=1
        )
        chat = tools.for_session(conversation_id)  # ranks and reports with the session
        # LlamaIndex's test LLM calls every tool it is offered: put your LLM here.
        agent = FunctionAgent(tool_retriever=chat, llm=MockFunctionCallingLLM())
        output = await agent.run(user_msg=question)
        turn_id = chat.report(output, question)  # the tools the run called, in the background
        print([call.tool_name for call in output.tool_calls], "reported as turn", turn_id)


asyncio.run(main("Will it rain in Turin tomorrow?", "conversation-1"))
