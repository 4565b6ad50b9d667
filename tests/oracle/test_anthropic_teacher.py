"""The Anthropic teacher behind the Oracle, through the real SDK against a local Messages stub."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
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
from tests.stubs import ANTHROPIC_MODEL as MODEL
from tests.stubs import Reply, Stub
from tests.stubs import anthropic_message as message
from toolselect.config import load_settings
from toolselect.metrics import Metrics
from toolselect.oracle.anthropic import AnthropicTeacher, anthropic_client
from toolselect.oracle.budget import Budget, RetryPolicy
from toolselect.oracle.oracle import SHUTDOWN, Oracle
from toolselect.records import OracleCall
from toolselect.service.parts import build_teacher
from toolselect.testing import FakeClock


def api_error(status: int, kind: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": f"{kind} for the test"}}
    return Reply(status=status, body=body, headers=headers or {})


class Harness:
    """An Oracle over an AnthropicTeacher pointed at the stub, with its fakes exposed."""

    def __init__(self, stub: Stub, client: anthropic.AsyncAnthropic) -> None:
        self.stub = stub
        self.client = client
        self.clock = FakeClock()
        self.calls = Calls()
        self.sleeps = Sleeps()
        self.metrics = Metrics()
        self.budget = Budget(60, clock=self.clock.timestamp)

    def oracle(
        self,
        *,
        enabled: bool = True,
        retries: int = 2,
        timeout_s: float = 5.0,
        client: anthropic.AsyncAnthropic | None = None,
        with_teacher: bool = True,
        teacher: AnthropicTeacher | None = None,
        record: Any = None,
    ) -> Oracle:
        if teacher is None and with_teacher:
            teacher = AnthropicTeacher(client or self.client, MODEL)
        return Oracle(
            teacher,
            enabled=enabled,
            budget=self.budget,
            retry=RetryPolicy(retries=retries),
            timeout_s=timeout_s,
            record_call=record or self.calls,
            clock=self.clock.timestamp,
            sleep=self.sleeps,
            metrics=self.metrics,
        )

    async def teach(self, oracle: Oracle | None = None) -> Any:
        return await (oracle or self.oracle()).teach(REQUEST, USED, CANDIDATES, turn_id="t-1")


@pytest_asyncio.fixture(loop_scope="function")
async def h(anthropic_stub: Stub) -> AsyncIterator[Harness]:
    client = anthropic.AsyncAnthropic(api_key="test", base_url=anthropic_stub.url, max_retries=0)
    try:
        yield Harness(anthropic_stub, client)
    finally:
        await client.close()


async def test_valid_tool_use_is_labeled_and_traced(h: Harness) -> None:
    """A tool_use naming a candidate is `labeled`, traced once with tokens and cost."""
    h.stub.reply(Reply(body=message("whatsapp__send_message")))
    answer = await h.teach()
    assert answer.result == "labeled"
    assert answer.label == "whatsapp__send_message"
    assert (answer.input_tokens, answer.output_tokens, answer.attempts) == (120, 12, 1)
    assert answer.cost_usd == pytest.approx((120 * 1.0 + 12 * 5.0) / 1e6)
    [call] = h.calls.calls
    assert isinstance(call, OracleCall)
    assert (call.provider, call.model, call.result, call.turn_id) == (
        "anthropic", MODEL, "labeled", "t-1"
    )  # fmt: skip
    assert (call.input_tokens, call.output_tokens, call.error) == (120, 12, None)
    assert call.cost_usd == pytest.approx(answer.cost_usd)
    assert call.latency_ms >= 0
    assert h.budget.remaining() == 59
    assert sample(h.metrics, "teacher_tokens", provider="anthropic", direction="input") == 120
    assert h.metrics.value("toolselect_teacher_seconds_count", {"provider": "anthropic"}) == 1


async def test_a_key_in_a_secret_file_is_the_key_sent(h: Harness, tmp_path: Path) -> None:
    """`ANTHROPIC_API_KEY_FILE` (a mounted container secret) picks the Anthropic teacher as the
    variable does, and its text, without the line end, is the key the SDK sends."""
    secret = tmp_path / "anthropic-api-key"
    secret.write_text("sk-ant-from-a-file\n")
    env = {"ANTHROPIC_API_KEY_FILE": str(secret), "ANTHROPIC_BASE_URL": h.stub.url}
    teacher = build_teacher(load_settings(env))
    assert isinstance(teacher, AnthropicTeacher)
    try:
        h.stub.reply(Reply(body=message("web_search")))
        assert (await h.teach(h.oracle(teacher=teacher))).result == "labeled"
    finally:
        await teacher.aclose()
    [received] = h.stub.received
    sent = {k.lower(): v for k, v in received.headers.items()}
    # The SDK sends the key as `x-api-key` or as a bearer token (2.14 does the latter).
    keys = (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))
    assert "sk-ant-from-a-file" in keys


async def test_request_sent_is_the_forced_choice(h: Harness) -> None:
    """The stub receives one Messages call: model, 64 tokens, forced choose_tool, enum + none."""
    h.stub.reply(Reply(body=message("web_search")))
    await h.teach()
    [got] = h.stub.received
    body = got.body
    assert got.path == "/v1/messages"
    assert body["model"] == MODEL
    assert body["max_tokens"] == 64
    # SDK 2.x / API 2026-10-21 rejects sampling parameters, so none is sent.
    assert "temperature" not in body
    assert body["tool_choice"]["type"] == "tool"
    assert body["tool_choice"]["name"] == "choose_tool"
    [tool] = body["tools"]
    assert tool["name"] == "choose_tool"
    assert tool["input_schema"]["required"] == ["tool"]
    assert tool["input_schema"]["properties"]["tool"]["enum"] == [*CANDIDATE_NAMES, "none"]
    assert "tool" in body["system"].lower()
    [user] = body["messages"]
    assert user["role"] == "user"
    assert REQUEST in user["content"] and USED in user["content"]
    assert "whatsapp__send_message: Send a WhatsApp message" in user["content"]
    assert got.headers.get("x-stainless-retry-count") == "0"


async def test_answer_outside_candidates_is_declined(h: Harness) -> None:
    """A tool that is not a candidate is `declined`; the paid call keeps its budget slot."""
    h.stub.reply(Reply(body=message("telegram__send_message")))
    answer = await h.teach()
    assert (answer.result, answer.label) == ("declined", None)
    assert answer.reason is not None and "telegram__send_message" in answer.reason
    assert h.calls.results == ["declined"]
    assert h.budget.remaining() == 59


async def test_none_is_declined(h: Harness) -> None:
    """`none` is `declined` with the reason that the teacher picked none."""
    h.stub.reply(Reply(body=message("none")))
    answer = await h.teach()
    assert (answer.result, answer.label, answer.reason) == ("declined", None, "teacher picked none")
    assert h.calls.results == ["declined"]


async def test_bare_name_answer_resolves_to_the_namespaced_candidate(h: Harness) -> None:
    """A bare name that matches exactly one candidate labels that candidate's full name."""
    h.stub.reply(Reply(body=message("send_message")))
    answer = await h.teach()
    assert (answer.result, answer.label) == ("labeled", "whatsapp__send_message")


async def test_429_with_retry_after_is_retried_after_the_servers_delay(h: Harness) -> None:
    """A 429 with `retry-after: 3` is retried after 3 s (longer than backoff), then labeled."""
    h.stub.reply(
        api_error(429, "rate_limit_error", {"retry-after": "3"}),
        Reply(body=message("whatsapp__send_message")),
    )
    answer = await h.teach()
    assert (answer.result, answer.attempts) == ("labeled", 2)
    assert h.sleeps.delays == [3.0]
    assert len(h.stub.received) == 2
    assert h.calls.results == ["error", "labeled"]
    assert "429" in (h.calls.calls[0].error or "")
    assert h.budget.remaining() == 59


async def test_529_overloaded_is_retried_with_backoff(h: Harness) -> None:
    """A 529 overloaded answer is retried after the first backoff step, then labeled."""
    h.stub.reply(api_error(529, "overloaded_error"), Reply(body=message("web_search")))
    answer = await h.teach()
    assert (answer.result, answer.label) == ("labeled", "web_search")
    assert h.sleeps.delays == [0.25]
    assert h.calls.results == ["error", "labeled"]


async def test_500_every_time_is_an_error_after_all_attempts(h: Harness) -> None:
    """Persistent 500s are tried 1 + retries times with growing delays, then `error`, refunded."""
    h.stub.reply(api_error(500, "api_error"))
    answer = await h.teach()
    assert (answer.result, answer.attempts) == ("error", 3)
    assert answer.error is not None and "500" in answer.error
    assert len(h.stub.received) == 3
    assert h.sleeps.delays == [0.25, 0.5]
    assert h.calls.results == ["error", "error", "error"]
    assert all(c.cost_usd == 0 and c.input_tokens == 0 for c in h.calls.calls)
    assert h.budget.remaining() == 60
    assert h.metrics.value("toolselect_teacher_seconds_count", {"provider": "anthropic"}) == 3


async def test_hang_past_timeout_is_an_error(h: Harness) -> None:
    """An answer slower than the per-attempt timeout is abandoned and recorded as `error`."""
    h.stub.reply(Reply(hang=True))
    answer = await h.teach(h.oracle(retries=0, timeout_s=0.3))
    assert answer.result == "error"
    assert answer.error == "timed out after 0.3 s"
    [call] = h.calls.calls
    assert call.result == "error" and call.error == "timed out after 0.3 s"
    assert 250 <= call.latency_ms < 5000
    assert h.budget.remaining() == 60


async def test_timeout_is_retried(h: Harness) -> None:
    """A timed-out attempt is transient: the next attempt's answer is used."""
    h.stub.reply(Reply(hang=True), Reply(body=message("web_search")))
    answer = await h.teach(h.oracle(retries=1, timeout_s=0.3))
    assert (answer.result, answer.label, answer.attempts) == ("labeled", "web_search", 2)
    assert h.calls.results == ["error", "labeled"]


async def test_malformed_json_is_an_error_without_retry(h: Harness) -> None:
    """A 200 whose body is not JSON is a permanent `error`: one attempt only, budget refunded."""
    h.stub.reply(Reply(text='{"id": "msg_01", "content": [', content_type="application/json"))
    answer = await h.teach()
    assert answer.result == "error"
    assert answer.error is not None and "malformed" in answer.error
    assert len(h.stub.received) == 1
    assert h.sleeps.delays == []
    assert h.calls.results == ["error"]
    assert h.budget.remaining() == 60


async def test_answer_without_tool_use_is_an_error_without_retry(h: Harness) -> None:
    """A well-formed message with only text (no choose_tool call) is a permanent `error`, and
    a paid one: the provider billed it."""
    body = message("web_search")
    body["content"] = [{"type": "text", "text": "I think web_search."}]
    body["stop_reason"] = "end_turn"
    h.stub.reply(Reply(body=body))
    h.budget = Budget(1, clock=h.clock.timestamp)
    answer = await h.teach()
    assert answer.result == "error"
    assert answer.error is not None and "no choose_tool call" in answer.error
    assert len(h.stub.received) == 1
    # Billed all the same: its tokens and cost are traced and counted, and its slot is spent.
    assert (answer.input_tokens, answer.output_tokens) == (120, 12)
    (call,) = h.calls.calls
    assert (call.input_tokens, call.output_tokens, call.cost_usd) == (120, 12, answer.cost_usd)
    assert answer.cost_usd > 0 and h.budget.remaining() == 0
    assert (await h.teach()).result == "limit_reached"
    assert len(h.stub.received) == 1


@pytest.mark.parametrize(
    ("status", "kind"), [(400, "invalid_request_error"), (401, "authentication_error")]
)
async def test_client_errors_are_not_retried(h: Harness, status: int, kind: str) -> None:
    """A 400 or 401 is permanent: one attempt, `error`, no delay."""
    h.stub.reply(api_error(status, kind))
    answer = await h.teach()
    assert answer.result == "error"
    assert str(status) in (answer.error or "")
    assert len(h.stub.received) == 1
    assert h.sleeps.delays == []


async def test_connection_refused_is_retried_then_error(h: Harness) -> None:
    """An unreachable endpoint is transient: retried, then `error`, with every attempt traced."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = anthropic_client(api_key="test", base_url=f"http://127.0.0.1:{port}", timeout_s=2)
    try:
        answer = await h.teach(h.oracle(client=client))
    finally:
        await client.close()
    assert (answer.result, answer.attempts) == ("error", 3)
    assert answer.error is not None and "unreachable" in answer.error
    assert h.calls.results == ["error"] * 3
    assert h.sleeps.delays == [0.25, 0.5]


async def test_exhausted_budget_is_limit_reached_with_zero_requests(h: Harness) -> None:
    """With the hourly budget spent no request is sent; an hour later calls resume."""
    h.budget = Budget(1, clock=h.clock.timestamp)
    h.stub.reply(Reply(body=message("web_search")))
    oracle = h.oracle()
    assert oracle.refusal() is None
    assert (await h.teach(oracle)).result == "labeled"
    answer = await h.teach(oracle)
    assert answer.result == "limit_reached"
    assert answer.reason == "hourly budget of 1 calls spent"
    assert oracle.refusal() == answer  # what teach answers, known before any candidate is built
    assert len(h.stub.received) == 1
    assert h.calls.results == ["labeled"]
    h.clock.advance(hours=1)
    assert oracle.refusal() is None
    assert (await h.teach(oracle)).result == "labeled"
    assert len(h.stub.received) == 2


async def test_failed_calls_do_not_consume_budget(h: Harness) -> None:
    """A budget of one survives a failed call: the next call still goes out and labels."""
    h.budget = Budget(1, clock=h.clock.timestamp)
    h.stub.reply(api_error(400, "invalid_request_error"), Reply(body=message("web_search")))
    assert (await h.teach()).result == "error"
    assert h.budget.remaining() == 1
    assert (await h.teach()).result == "labeled"
    assert h.budget.remaining() == 0


async def test_a_slot_held_by_a_failing_call_is_waited_for_not_spent(h: Harness) -> None:
    """With one call left in the hour and it in flight, a second turn waits for it instead of
    answering `limit_reached`: the first fails (nothing billed), gives its slot back, and the
    second uses it."""
    h.budget = Budget(1, clock=h.clock.timestamp)
    h.stub.reply(*[api_error(500, "api_error")] * 3, Reply(body=message("web_search")))
    oracle = h.oracle()
    first = asyncio.create_task(h.teach(oracle))
    await asyncio.sleep(0)  # the first reserves the last slot
    assert oracle.refusal("t-2") is None  # held in flight, not spent
    second = await h.teach(oracle)
    assert (await first).result == "error"
    assert second.result == "labeled"
    assert h.budget.remaining() == 0 and h.budget.in_flight() == 0
    assert (await h.teach(oracle)).result == "limit_reached"  # now paid: spent


async def test_kill_switch_sends_zero_requests(h: Harness) -> None:
    """With the oracle switched off, teach declines at once: no request, no trace, no budget."""
    h.stub.reply(Reply(body=message("web_search")))
    switched_off = h.oracle(enabled=False)
    answer = await h.teach(switched_off)
    assert (answer.result, answer.reason, answer.attempts) == ("declined", "teacher off", 0)
    assert switched_off.refusal() == answer
    assert h.stub.received == []
    assert h.calls.calls == []
    assert h.budget.remaining() == 60


async def test_no_teacher_configured_declines(h: Harness) -> None:
    """An enabled oracle without a teacher declines like the kill switch."""
    answer = await h.teach(h.oracle(with_teacher=False))
    assert (answer.result, answer.reason) == ("declined", "teacher off")
    assert h.stub.received == []


async def test_cancellation_propagates_and_refunds(h: Harness) -> None:
    """Cancelling an in-flight teach raises CancelledError and gives the budget slot back;
    the attempt cut short is traced, as every attempt is."""
    h.stub.reply(Reply(hang=True))
    task = asyncio.create_task(h.teach(h.oracle(timeout_s=30)))
    await asyncio.wait_for(h.stub.arrived.wait(), timeout=5)
    assert h.budget.remaining() == 59
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert h.budget.remaining() == 60
    assert [(c.result, c.error) for c in h.calls.calls] == [("error", SHUTDOWN)]


async def test_trace_failure_does_not_lose_the_label(h: Harness) -> None:
    """When recording the OracleCall fails (store down), the label is still returned."""

    async def broken(call: OracleCall) -> None:
        raise RuntimeError("store down")

    h.stub.reply(Reply(body=message("web_search")))
    answer = await h.teach(h.oracle(record=broken))
    assert (answer.result, answer.label) == ("labeled", "web_search")


async def test_a_stopped_oracle_starts_no_attempt_and_cuts_the_wait_for_a_retry(
    h: Harness,
) -> None:
    """Stopped while it waits out a 429's retry-after, the oracle makes no retry: the turn is
    `error` with the 429, at once, its slot given back; a later call is declined unsent."""
    h.stub.reply(
        api_error(429, "rate_limit_error", {"retry-after": "3"}),
        Reply(body=message("web_search")),
    )
    waiting = asyncio.Event()

    async def never_over(seconds: float) -> None:
        waiting.set()
        await asyncio.Event().wait()

    oracle = Oracle(
        AnthropicTeacher(h.client, MODEL),
        enabled=True,
        budget=h.budget,
        retry=RetryPolicy(retries=2),
        timeout_s=5.0,
        record_call=h.calls,
        sleep=never_over,
    )
    task = asyncio.create_task(h.teach(oracle))
    await asyncio.wait_for(waiting.wait(), timeout=5)
    oracle.stop()
    answer = await asyncio.wait_for(task, timeout=5)  # not left waiting for the retry
    assert (answer.result, answer.attempts) == ("error", 1)
    assert "429" in (answer.error or "")
    assert len(h.stub.received) == 1
    assert h.calls.results == ["error"]
    assert h.budget.remaining() == 60
    later = await h.teach(oracle)
    assert (later.result, later.reason, later.attempts) == ("declined", SHUTDOWN, 0)
    assert oracle.refusal() == later
    assert len(h.stub.received) == 1 and len(h.calls.calls) == 1


def padded_answer(chars: int, tool: str = "web_search") -> Any:
    """A valid `choose_tool` answer behind a text block of `chars` characters."""
    body = message(tool)
    body["content"].insert(0, {"type": "text", "text": "a" * chars})
    return body


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
async def test_an_answer_over_the_cap_is_an_error_without_retry(
    anthropic_stub: Stub, gzip: bool
) -> None:
    """A 200 carrying 2 MB of text before a valid tool_use is refused as it is read, as the
    OpenAI-compatible teacher refuses one (1 MiB), compressed to a few KB or not: `error`,
    not retried, its slot given back; an answer under the cap, compressed, is labelled."""
    client = anthropic_client(api_key="test", base_url=anthropic_stub.url)
    h = Harness(anthropic_stub, client)
    try:
        anthropic_stub.reply(Reply(body=padded_answer(2_000_000), gzip=gzip))
        answer = await h.teach(h.oracle(client=client))
        assert (answer.result, answer.attempts) == ("error", 1)
        assert answer.error == "anthropic: response larger than 1048576 bytes"
        assert len(anthropic_stub.received) == 1
        assert [(c.result, c.error) for c in h.calls.calls] == [("error", answer.error)]
        assert h.budget.remaining() == 60
        anthropic_stub.script.clear()
        anthropic_stub.reply(Reply(body=padded_answer(500_000), gzip=gzip))
        answer = await h.teach(h.oracle(client=client))
        assert (answer.result, answer.label) == ("labeled", "web_search")
    finally:
        await client.close()


LONG = "x" * 900_000  # under the answer's cap, far over what a trace or a log line should hold


@pytest.mark.parametrize(
    ("reply", "result"),
    [
        (Reply(status=400, body={"type": "error", "error": {"type": "invalid_request_error",
                                                             "message": LONG}}), "error"),
        (Reply(body=message([LONG])), "error"),
        (Reply(body=message(LONG)), "declined"),
    ],
    ids=["error-body", "malformed-input", "made-up-name"],
)  # fmt: skip
async def test_teacher_text_is_quoted_cut_short(h: Harness, reply: Reply, result: str) -> None:
    """A 900 KB error body, malformed input or tool name is quoted in the error or reason the
    trace stores and the log writes, cut to a few hundred characters."""
    h.stub.reply(reply)
    answer = await h.teach(h.oracle(retries=0))
    assert answer.result == result
    said = answer.error if result == "error" else answer.reason
    assert said is not None and "xxxxx" in said and "more characters" in said
    assert len(said) < 400
    assert all(len(call.error or "") < 400 for call in h.calls.calls)


async def test_the_trace_says_what_became_of_the_label(h: Harness) -> None:
    """The label is kept before the call is traced: one not kept is traced and answered
    `declined` with the reason, one the store failed to save `error`; both were paid."""

    async def gone(label: str) -> str | None:
        return f"{label} left the catalog"

    async def store_down(label: str) -> str | None:
        raise RuntimeError("store down")

    h.stub.reply(Reply(body=message("web_search")))
    oracle = h.oracle()
    answers = [
        await oracle.teach(REQUEST, USED, CANDIDATES, turn_id="t-1", keep=keep)
        for keep in (gone, store_down)
    ]
    assert [(a.result, a.label, a.reason, a.error) for a in answers] == [
        ("declined", None, "web_search left the catalog", None),
        ("error", None, None, "store down"),
    ]
    assert [(c.result, c.error, c.input_tokens) for c in h.calls.calls] == [
        ("declined", None, 120),
        ("error", "store down", 120),
    ]
    assert h.budget.remaining() == 58
