import os

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from toolselect.client import Client
from toolselect.integrations.langchain import ToolselectMiddleware, turn_id_of


@tool
def get_weather(city: str) -> str:
    """Current weather and forecast for a city: temperature, rain, wind."""
    return f"Rain expected in {city} tomorrow."


@tool
def send_email(to: str, subject: str) -> str:
    """Send an email message to a recipient with a subject and body."""
    return f"Sent {subject!r} to {to}."


@tool
def stock_quote(ticker: str) -> str:
    """Latest stock price quote for a ticker symbol on the market."""
    return f"{ticker}: 42.00"


with Client(os.environ.get("TOOLSELECT_URL", "http://127.0.0.1:8080")) as ts:
    agent = create_agent(
        ChatOpenAI(model="gpt-4.1-mini"),  # OPENAI_API_KEY, OPENAI_BASE_URL
        [get_weather, send_email, stock_quote],
        # Each model call is offered the 2 tools that fit the user's words best; the tools
        # the model called are reported to toolselect when the run ends.
        middleware=[ToolselectMiddleware(ts, agent="assistant-lc", k=2)],
    )
    question = {"role": "user", "content": "Will it rain in Turin tomorrow?"}
    result = agent.invoke({"messages": [question]})
    print(result["messages"][-1].content)
    print("reported as turn", turn_id_of(result["messages"][0]))
