"""What the PydanticAI, OpenAI Agents SDK and LiteLLM tests share: model stand-ins that call the
tool they are offered (over the Responses or Chat Completions wire format), a toolselect that
never answers, the check that an integration's import leaves the model stack out, and the one
that an example is the README's code block."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.stubs import Reply, Responder, openai_response

# The catalog the agents carry: a weather question should keep get_weather, a stock question
# stock_quote; `handoff` is the tool the tests mark `always`.
TOOLS = {
    "send_email": "Send an email message to a recipient with a subject and body.",
    "get_weather": "Current weather and forecast for a city: temperature, rain, wind.",
    "stock_quote": "Latest stock price quote for a ticker symbol on the market.",
    "translate_text": "Translate a text from one language into another.",
    "handoff": "Hand the conversation over to a human operator.",
}
WEATHER = "Will it rain in Turin tomorrow? I need the weather forecast."
STOCKS = "What is the latest stock price quote for the ACME ticker?"


def first_offered(offered: Sequence[str], prefer: Sequence[str]) -> str:
    """The tool a scripted model calls: the first of `prefer` it was offered, else the first
    offered that is not `handoff` (else `handoff`)."""
    for name in prefer:
        if name in offered:
            return name
    return next((n for n in offered if n != "handoff"), offered[0])


def responses_model(*prefer: str, arguments: str = '{"city": "Turin"}') -> Responder:
    """Plays a Responses API model: a user message -> a `function_call` of the first of `prefer`
    it was offered (else the first tool offered); a `function_call_output` -> a closing text."""

    def respond(body: Any) -> Reply:
        last = body["input"][-1]
        if last.get("type") == "function_call_output":
            text = {"type": "output_text", "text": "Done.", "annotations": []}
            message = {"type": "message", "id": "msg_1", "role": "assistant",
                       "status": "completed", "content": [text]}  # fmt: skip
            return Reply(body=openai_response([message]))
        name = first_offered([t["name"] for t in body.get("tools", [])], prefer)
        call = {"type": "function_call", "id": "fc_1", "call_id": f"call_{name}", "name": name,
                "arguments": arguments, "status": "completed"}  # fmt: skip
        return Reply(body=openai_response([call]))

    return respond


def offered_by_responses(body: Any) -> list[str]:
    """The function tools a Responses request offered the model, in its order."""
    return [t["name"] for t in body.get("tools", []) if t.get("type") == "function"]


def chat_completion(message: dict[str, Any], finish_reason: str) -> Any:
    """A Chat Completions answer in the real wire format with one choice."""
    return {
        "id": "chatcmpl-toolselect",
        "object": "chat.completion",
        "created": 1_763_900_000,
        "model": "gpt-5.4",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 12, "total_tokens": 132},
    }


def chat_model(*prefer: str) -> Responder:
    """Plays a Chat Completions model: a conversation ending with a tool result -> a closing
    text; otherwise a call of the first of `prefer` it was offered (else the first offered)."""

    def respond(body: Any) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            message: dict[str, Any] = {"role": "assistant", "content": "Done."}
            return Reply(body=chat_completion(message, "stop"))
        offered = [t["function"]["name"] for t in body.get("tools", []) if "function" in t]
        name = first_offered(offered, prefer)
        call = {"id": f"call_{name}", "type": "function",
                "function": {"name": name, "arguments": json.dumps({"city": "Turin"})}}  # fmt: skip
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return Reply(body=chat_completion(message, "tool_calls"))

    return respond


async def silent_toolselect() -> AsyncIterator[str]:
    """The URL of a server that accepts every request and never answers it (a toolselect too
    slow to wait for); the held requests are dropped when the server closes."""
    closing = asyncio.Event()

    async def hang(request: web.Request) -> web.StreamResponse:
        await closing.wait()
        return web.json_response({}, status=503)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hang)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        closing.set()
        await server.close()


# toolselect's model stack and service, which an agent process must not pay for.
HEAVY = ("numpy", "onnxruntime", "sklearn", "toolselect.service", "toolselect.embed")


def imported_heavy_modules(module: str, env: dict[str, str] | None = None) -> list[str]:
    """Which of `HEAVY` importing `module` loads, in a fresh interpreter (the frameworks these
    tests cover import none of them themselves)."""
    code = (
        f"import json, sys, {module}; "
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return list(json.loads(out.stdout))


def shown_in_readme(example: str) -> bool:
    """Whether examples/`example` is one of the README's python blocks, character for
    character."""
    root = Path(__file__).resolve().parents[2]
    blocks = re.findall(r"```python\n(.*?)```", (root / "README.md").read_text(), re.S)
    return (root / "examples" / example).read_text() in blocks
