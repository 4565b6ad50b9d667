import asyncio
import os
from typing import Any

import anthropic

from toolselect.client import AsyncClient
from toolselect.integrations.anthropic import ToolSearch

CATALOG = [
    {
        "name": "get_weather",
        "description": "Current weather and forecast for a city: temperature, rain, wind.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "send_email",
        "description": "Send an email message to a recipient with a subject and body.",
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}},
    },
]


def run_tool(name: str, arguments: Any) -> str:
    return f"{name} ran with {arguments}"  # your tools run here


async def main(question: str) -> None:
    claude = anthropic.AsyncAnthropic()  # ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL
    async with AsyncClient(os.environ.get("TOOLSELECT_URL", "http://127.0.0.1:8080")) as ts:
        search = ToolSearch(ts, CATALOG, pack="claude")
        await search.upload()
        messages: list[Any] = [{"role": "user", "content": question}]
        with search.turn(question) as turn:  # on exit: observe(question, the tool Claude used)
            while True:
                reply = await claude.messages.create(
                    model="claude-sonnet-4-5",
                    max_tokens=1024,
                    tools=search.tools(),  # the search tool + the catalog, defer_loading: true
                    messages=messages,
                )
                messages.append({"role": "assistant", "content": reply.content})
                if reply.stop_reason != "tool_use":
                    break
                results: list[Any] = await turn.answer(reply)  # tool_reference blocks
                results += [
                    {"type": "tool_result", "tool_use_id": call.id,
                     "content": run_tool(call.name, call.input)}
                    for call in search.tool_calls(reply)
                ]  # fmt: skip
                messages.append({"role": "user", "content": results})
        print(f"Claude used {turn.used_tool}; reported as turn {turn.turn_id}")


asyncio.run(main("Will it rain in Turin tomorrow?"))
