"""The OpenAI-compatible teacher behind the Oracle, over aiohttp against a local chat stub."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from tests.oracle.conftest import (
    CANDIDATE_NAMES,
    CANDIDATES,
    REQUEST,
    USED,
    Calls,
    Sleeps,
    sample,
)
from tests.stubs import Reply, Stub
from toolselect.metrics import Metrics
from toolselect.oracle.budget import Budget, RetryPolicy
from toolselect.oracle.openai_compat import OpenAICompatTeacher
from toolselect.oracle.oracle import Oracle
from toolselect.testing import FakeClock

MODEL = "gpt-4o-mini"


def completion(arguments: Any, *, name: str = "choose_tool") -> Any:
    """A chat completion in the real wire format whose one tool call carries `arguments`."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": name, "arguments": text}},
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 200, "completion_tokens": 10, "total_tokens": 210},
    }  # fmt: skip


class Harness:
    """An Oracle over an OpenAICompatTeacher pointed at the stub, with its fakes exposed."""

    def __init__(self, stub: Stub, session: aiohttp.ClientSession) -> None:
        self.stub = stub
        self.session = session
        self.clock = FakeClock()
        self.calls = Calls()
        self.sleeps = Sleeps()
        self.metrics = Metrics()
        self.budget = Budget(60, clock=self.clock.timestamp)
        self.teacher = OpenAICompatTeacher(session, f"{stub.url}/v1/", MODEL, api_key="sk-test")

    def oracle(self, *, enabled: bool = True, retries: int = 2, timeout_s: float = 5.0) -> Oracle:
        return Oracle(
            self.teacher,
            enabled=enabled,
            budget=self.budget,
            retry=RetryPolicy(retries=retries),
            timeout_s=timeout_s,
            record_call=self.calls,
            clock=self.clock.timestamp,
            sleep=self.sleeps,
            metrics=self.metrics,
        )

    async def teach(self, oracle: Oracle | None = None) -> Any:
        return await (oracle or self.oracle()).teach(REQUEST, USED, CANDIDATES, turn_id="t-9")


@pytest_asyncio.fixture(loop_scope="function")
async def h(openai_stub: Stub) -> AsyncIterator[Harness]:
    async with aiohttp.ClientSession() as session:
        yield Harness(openai_stub, session)


async def test_valid_tool_call_is_labeled(h: Harness) -> None:
    """A tool call naming a candidate is `labeled`, with tokens, cost and one trace."""
    h.stub.reply(Reply(body=completion({"tool": "email__send_email"})))
    answer = await h.teach()
    assert (answer.result, answer.label) == ("labeled", "email__send_email")
    assert (answer.input_tokens, answer.output_tokens) == (200, 10)
    assert answer.cost_usd == pytest.approx((200 * 0.15 + 10 * 0.6) / 1e6)
    [call] = h.calls.calls
    assert (call.provider, call.model, call.result, call.turn_id) == (
        "openai", MODEL, "labeled", "t-9"
    )  # fmt: skip
    assert sample(h.metrics, "teacher_tokens", provider="openai", direction="output") == 10


async def test_request_sent_is_the_forced_choice(h: Harness) -> None:
    """The stub receives model, temperature 0, 64 tokens, forced choose_tool with enum + none."""
    h.stub.reply(Reply(body=completion({"tool": "web_search"})))
    await h.teach()
    [got] = h.stub.received
    body = got.body
    assert got.path == "/v1/chat/completions"
    assert got.headers["Authorization"] == "Bearer sk-test"
    assert (body["model"], body["temperature"], body["max_tokens"]) == (MODEL, 0, 64)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "choose_tool"}}
    [tool] = body["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "choose_tool"
    schema = tool["function"]["parameters"]
    assert schema["properties"]["tool"]["enum"] == [*CANDIDATE_NAMES, "none"]
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert REQUEST in body["messages"][1]["content"]


@pytest.mark.parametrize(
    ("tool", "reason"),
    [
        ("telegram__send_message", "teacher picked 'telegram__send_message', not a candidate"),
        ("none", "teacher picked none"),
    ],
)
async def test_outside_candidates_or_none_is_declined(h: Harness, tool: str, reason: str) -> None:
    """A tool outside the candidates, or `none`, is `declined` with the reason."""
    h.stub.reply(Reply(body=completion({"tool": tool})))
    answer = await h.teach()
    assert (answer.result, answer.label, answer.reason) == ("declined", None, reason)
    assert h.calls.results == ["declined"]


async def test_429_with_retry_after_is_retried(h: Harness) -> None:
    """A 429 with `retry-after: 2` is retried after 2 s, then labeled."""
    h.stub.reply(
        Reply(status=429, body={"error": {"message": "slow down"}}, headers={"retry-after": "2"}),
        Reply(body=completion({"tool": "web_search"})),
    )
    answer = await h.teach()
    assert (answer.result, answer.label, answer.attempts) == ("labeled", "web_search", 2)
    assert h.sleeps.delays == [2.0]
    assert h.calls.results == ["error", "labeled"]


async def test_503_every_time_is_an_error_and_refunded(h: Harness) -> None:
    """Persistent 503s give `error` after 1 + retries attempts; the budget is untouched."""
    h.stub.reply(Reply(status=503, body={"error": "unavailable"}))
    answer = await h.teach()
    assert (answer.result, answer.attempts) == ("error", 3)
    assert len(h.stub.received) == 3
    assert h.sleeps.delays == [0.25, 0.5]
    assert h.budget.remaining() == 60


async def test_hang_past_timeout_is_an_error(h: Harness) -> None:
    """An answer slower than the per-attempt timeout is `error`."""
    h.stub.reply(Reply(hang=True))
    answer = await h.teach(h.oracle(retries=0, timeout_s=0.3))
    assert (answer.result, answer.error) == ("error", "timed out after 0.3 s")
    assert h.calls.results == ["error"]


@pytest.mark.parametrize(
    ("reply", "billed"),
    [
        (Reply(text="<html>gateway</html>", content_type="text/html"), (0, 0)),
        (Reply(body=completion("{not json")), (200, 10)),
        (Reply(body=completion({"choice": "web_search"})), (200, 10)),
        (Reply(body={"choices": []}), (0, 0)),
    ],
    ids=["html", "arguments-not-json", "no-tool-key", "no-choices"],
)
async def test_malformed_answers_are_errors_without_retry(
    h: Harness, reply: Reply, billed: tuple[int, int]
) -> None:
    """Malformed answers are permanent `error`s: one request, no delay. One the provider billed
    (it reported usage) keeps its budget slot and is traced with its tokens and cost; one with
    nothing billed is refunded."""
    h.stub.reply(reply)
    answer = await h.teach()
    assert answer.result == "error"
    assert answer.error is not None and "malformed" in answer.error
    assert len(h.stub.received) == 1
    assert h.sleeps.delays == []
    assert (answer.input_tokens, answer.output_tokens) == billed
    assert h.budget.remaining() == (59 if any(billed) else 60)
    (call,) = h.calls.calls
    assert (call.result, call.input_tokens, call.output_tokens) == ("error", *billed)
    assert (call.cost_usd > 0) == any(billed)


async def test_kill_switch_sends_zero_requests(h: Harness) -> None:
    """With the oracle switched off the stub receives nothing."""
    h.stub.reply(Reply(body=completion({"tool": "web_search"})))
    answer = await h.teach(h.oracle(enabled=False))
    assert (answer.result, answer.reason) == ("declined", "teacher off")
    assert h.stub.received == []
    assert h.calls.calls == []


async def test_exhausted_budget_sends_zero_requests(h: Harness) -> None:
    """With no budget left the answer is `limit_reached` and the stub receives nothing."""
    h.budget = Budget(0, clock=h.clock.timestamp)
    answer = await h.teach()
    assert answer.result == "limit_reached"
    assert h.stub.received == []


async def test_own_session_is_opened_lazily_and_closed(openai_stub: Stub) -> None:
    """Without a given session the teacher opens one on first ask and closes it in aclose."""
    openai_stub.reply(Reply(body=completion({"tool": "web_search"})))
    teacher = OpenAICompatTeacher(None, f"{openai_stub.url}/v1", MODEL)
    try:
        raw = await teacher.ask(REQUEST, USED, CANDIDATES)
    finally:
        await teacher.aclose()
    assert raw.label == "web_search"
    assert "Authorization" not in openai_stub.received[0].headers


LONG = "x" * 900_000  # under the answer's cap, far over what a trace or a log line should hold


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=400, text=LONG),
        Reply(body=completion({"tool": [LONG]})),
        Reply(body=completion({"tool": "web_search"}, name=LONG)),
        Reply(body=completion({"tool": LONG})),
    ],
    ids=["error-body", "malformed-arguments", "other-function", "made-up-name"],
)
async def test_teacher_text_is_quoted_cut_short(h: Harness, reply: Reply) -> None:
    """A 900 KB error body, malformed arguments, function or tool name is quoted in the error
    or reason the trace stores and the log writes, cut to a few hundred characters."""
    h.stub.reply(reply)
    answer = await h.teach(h.oracle(retries=0))
    said = answer.error if answer.result == "error" else answer.reason
    assert said is not None and "xxxxx" in said and len(said) < 400
    assert all(len(call.error or "") < 400 for call in h.calls.calls)


async def test_usage_reported_as_integral_floats_is_counted(h: Harness) -> None:
    """A server reporting usage as floats (`200.0`) has its tokens traced and costed; a
    fractional or negative count is no count."""
    body = completion({"tool": "web_search"})
    body["usage"] = {"prompt_tokens": 200.0, "completion_tokens": 10.0, "total_tokens": 210.0}
    odd = completion({"tool": "web_search"})
    odd["usage"] = {"prompt_tokens": 200.5, "completion_tokens": -1.0}
    h.stub.reply(Reply(body=body), Reply(body=odd))
    answer = await h.teach()
    assert (answer.result, answer.input_tokens, answer.output_tokens) == ("labeled", 200, 10)
    assert answer.cost_usd > 0
    (call,) = h.calls.calls
    assert (call.input_tokens, call.output_tokens) == (200, 10)
    answer = await h.teach()
    assert (answer.input_tokens, answer.output_tokens) == (0, 0)
