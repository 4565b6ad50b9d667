"""LangChain's `GenericFakeChatModel`, taught `bind_tools`: it records the tools each call was
offered and answers from its script (the LangChain and LangGraph tests share it), and
the tools both offer it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

ARGS: dict[str, dict[str, Any]] = {
    "get_weather": {"city": "Turin"},
    "send_email": {"to": "ann@example.com", "subject": "rain"},
}


class ToolCallingFake(GenericFakeChatModel):
    """LangChain's fake chat model, plus `bind_tools`: it records the names of the tools each
    call was offered and answers from its script."""

    # The names of the tools offered to each call, in order (pydantic copies the default).
    offered: list[list[str]] = []  # noqa: RUF012

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.offered.append([t["function"]["name"] for t in kwargs.get("tools", [])])
        return super()._generate(messages, stop, run_manager, **kwargs)


def scripted(*calls: str | tuple[str, dict[str, Any]]) -> ToolCallingFake:
    """A model that calls `calls` (one per step: a name, or a name and its arguments), then
    answers in words."""
    steps: list[AIMessage | str] = []
    for i, call in enumerate(calls):
        name, args = call if isinstance(call, tuple) else (call, ARGS.get(call, {}))
        steps.append(
            AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{i}"}])
        )
    steps.append("It will rain tomorrow.")
    messages: Iterator[AIMessage | str] = iter(steps)
    return ToolCallingFake(messages=messages, offered=[])


# The tools the LangChain and LangGraph tests offer the model.
@tool
def get_weather(city: str) -> str:
    """Current weather and forecast for a city: temperature, rain, wind."""
    return f"Rain in {city} tomorrow."


@tool
def send_email(to: str, subject: str) -> str:
    """Send an email message to a recipient with a subject and body."""
    return "sent"


@tool
def stock_quote(ticker: str) -> str:
    """Latest stock price quote for a ticker symbol on the market."""
    return "42.0"


@tool
def translate_text(text: str, language: str) -> str:
    """Translate a text from one language into another."""
    return text
