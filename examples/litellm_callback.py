import asyncio
import os

import litellm

from toolselect.client import AsyncClient
from toolselect.integrations.litellm import ToolselectCallback


def function(name: str, description: str) -> dict[str, object]:
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}
    return {"type": "function",
            "function": {"name": name, "description": description, "parameters": parameters}}  # fmt: skip


TOOLS = [
    function("get_weather", "Current weather and forecast for a city: temperature, rain, wind."),
    function("send_email", "Send an email message to a recipient with a subject and body."),
    function("stock_quote", "Latest stock price quote for a ticker symbol on the market."),
]


async def main(question: str) -> None:
    async with AsyncClient(os.environ.get("TOOLSELECT_URL", "http://127.0.0.1:8080")) as ts:
        toolselect = ToolselectCallback(ts, k=2)  # on the proxy: `callbacks:` in config.yaml
        litellm.callbacks = [toolselect]
        response = await litellm.acompletion(
            model="openai/gpt-5.4",  # OPENAI_API_KEY, OPENAI_BASE_URL
            messages=[{"role": "user", "content": question}],
            tools=TOOLS,  # the model is offered the 2 that fit the question best
            metadata={"toolselect_agent": "assistant-ll"},  # the pack; else key/team alias, model
        )
        print([call.function.name for call in response.choices[0].message.tool_calls or []])
        await toolselect.flush()  # LiteLLM reports in the background: let it finish
        print("reported as turn", toolselect.reported[-1])


asyncio.run(main("Will it rain in Turin tomorrow?"))
