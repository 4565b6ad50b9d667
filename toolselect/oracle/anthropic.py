"""Anthropic teacher: one Messages API call that must answer through the `choose_tool` tool.

The SDK's own retries are switched off (`max_retries=0`): the `Oracle` retries, so that every
attempt is traced and counted against the budget rules.

The client `anthropic_client` makes refuses an answer over `MAX_ANSWER_BYTES` as it is read
(decoded: it offers gzip alone, whose output it counts), as the OpenAI-compatible
teacher does; the SDK would otherwise hold a body of any size, and parse it, on the loop.

No `temperature` is sent. SDK 2.x removed the sampling parameters and sends API version
2026-10-21, which rejects them with 400 (even `temperature: 1.0`); the forced tool choice with an
`enum` of candidate names already leaves the model nothing to be creative with.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anthropic
import httpx2
from anthropic.types import Message, ToolChoiceToolParam, ToolParam

from toolselect.errors import TeacherError, TeacherUnavailable
from toolselect.oracle.base import (
    CHOICE_TOOL,
    MAX_ANSWER_BYTES,
    MAX_OUTPUT_TOKENS,
    NONE_CHOICE,
    SYSTEM_PROMPT,
    AnswerTooLarge,
    Candidate,
    RawAnswer,
    RetryLater,
    choice_schema,
    match_candidate,
    quoted,
    token_count,
    user_prompt,
)
from toolselect.retry_after import parse_retry_after

DEFAULT_MODEL = "claude-haiku-4-5"


def anthropic_client(
    *, api_key: str, base_url: str | None = None, timeout_s: float = 20.0
) -> anthropic.AsyncAnthropic:
    """An SDK client as the teacher wants it: no SDK retries, the per-attempt timeout, answers
    capped at `MAX_ANSWER_BYTES`."""
    http = anthropic.DefaultAsyncHttpxClient(
        headers={"Accept-Encoding": ", ".join(_CODINGS)},
        event_hooks={"response": [_cap_answer]},
    )
    return anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=base_url or None,
        timeout=timeout_s,
        max_retries=0,
        http_client=http,
    )


# The content codings offered, each one whose decoded size `_CappedBody` counts (zlib's window
# bits for it). Not deflate: servers send it raw or zlib-wrapped, and the SDK decodes both.
_CODINGS = {"gzip": 31}


async def _cap_answer(response: httpx2.Response) -> None:
    """Refuse an answer declared over the cap; count the bytes of any other as it is read."""
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_ANSWER_BYTES:
        raise AnswerTooLarge("anthropic")
    codings = [
        coding.strip().lower()
        for coding in response.headers.get_list("content-encoding", split_commas=True)
        if coding.strip().lower() not in ("", "identity")
    ]
    if len(codings) > 1 or (codings and codings[0] not in _CODINGS):
        raise TeacherError(f"anthropic: response in a coding not offered: {codings}"[:200])
    if isinstance(response.stream, httpx2.AsyncByteStream):
        response.stream = _CappedBody(response.stream, codings[0] if codings else None)


class _CappedBody(httpx2.AsyncByteStream):
    """A body read through, refused once it, or what it decodes to, passes the cap."""

    def __init__(self, raw: httpx2.AsyncByteStream, coding: str | None) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(_CODINGS[coding]) if coding else None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = decoded = 0
        async for chunk in self._raw:
            read += len(chunk)
            if self._inflate is not None:
                decoded += _inflated(self._inflate, chunk, MAX_ANSWER_BYTES - decoded)
            if max(read, decoded) > MAX_ANSWER_BYTES:
                raise AnswerTooLarge("anthropic")
            yield chunk

    async def aclose(self) -> None:
        await self._raw.aclose()


def _inflated(inflate: Any, data: bytes, room: int) -> int:
    """How many bytes `data` decodes to, counted only up to just past `room` (a small
    compressed chunk may stand for gigabytes)."""
    size = 0
    try:
        while data and size <= room:
            size += len(inflate.decompress(data, room - size + 1))
            data = inflate.unconsumed_tail
    except zlib.error as exc:
        raise TeacherError(f"anthropic: malformed compressed response: {exc}") from exc
    return size


def _transient_status(status: int) -> bool:
    # The statuses the SDK itself would retry: timeout, lock conflict, rate limit, server side
    # (500, 502, 503, 504, 529 overloaded).
    return status in (408, 409, 429) or status >= 500


class AnthropicTeacher:
    """Asks a Claude model which candidate tool the agent should have used."""

    provider = "anthropic"

    def __init__(self, client: anthropic.AsyncAnthropic, model: str = DEFAULT_MODEL) -> None:
        # A copy with retries off whatever the caller configured; copying does no I/O.
        self._client = client.with_options(max_retries=0)
        self._model = model or DEFAULT_MODEL

    @property
    def model(self) -> str:
        return self._model

    async def aclose(self) -> None:
        await self._client.close()

    async def ask(self, request: str, used_tool: str, candidates: Sequence[Candidate]) -> RawAnswer:
        """One Messages call; see `Teacher.ask` for the errors."""
        tool: ToolParam = {
            "name": CHOICE_TOOL,
            "description": "Record the tool the agent should have used for the request.",
            "input_schema": choice_schema(candidates),
        }
        choice: ToolChoiceToolParam = {
            "type": "tool",
            "name": CHOICE_TOOL,
            "disable_parallel_tool_use": True,
        }
        try:
            message = await self._client.messages.create(
                model=self._model,
                max_tokens=MAX_OUTPUT_TOKENS,
                system=SYSTEM_PROMPT,
                messages=[{"role": "user", "content": user_prompt(request, used_tool, candidates)}],
                tools=[tool],
                tool_choice=choice,
            )
        except anthropic.APIStatusError as exc:
            detail = f"anthropic {exc.status_code}: {quoted(exc.message)}"
            if _transient_status(exc.status_code):
                raise RetryLater(detail, parse_retry_after(exc.response.headers)) from exc
            raise TeacherError(detail) from exc
        except anthropic.APIConnectionError as exc:  # APITimeoutError is a subclass
            if isinstance(exc.__cause__, TeacherError):  # refused by `_cap_answer`
                raise exc.__cause__ from None
            raise TeacherUnavailable(f"anthropic unreachable: {quoted(exc.message)}") from exc
        except anthropic.AnthropicError as exc:  # response validation, credentials, ...
            raise TeacherError(f"anthropic: {quoted(str(exc))}") from exc
        except json.JSONDecodeError as exc:  # a 200 whose body is not JSON
            raise TeacherError(f"anthropic: malformed response: {quoted(str(exc))}") from exc
        return _parse(message, candidates)


def _parse(message: Any, candidates: Sequence[Candidate]) -> RawAnswer:
    # The SDK builds responses without validation, so any field may be missing or mistyped.
    if not isinstance(message, Message):
        raise TeacherError(f"anthropic: malformed response: {quoted(repr(message))}")
    usage = getattr(message, "usage", None)
    tokens = {
        "input_tokens": _count(usage, "input_tokens"),
        "output_tokens": _count(usage, "output_tokens"),
    }
    blocks = getattr(message, "content", None)
    if not isinstance(blocks, list):
        raise TeacherError("anthropic: malformed response: no content", **tokens)
    for block in blocks:
        if getattr(block, "type", None) == "tool_use" and getattr(block, "name", None) == (
            CHOICE_TOOL
        ):
            arguments = getattr(block, "input", None)
            picked = arguments.get("tool") if isinstance(arguments, dict) else None
            if not isinstance(picked, str):
                raise TeacherError(
                    f"anthropic: malformed {CHOICE_TOOL} input: {quoted(repr(arguments))}", **tokens
                )
            return RawAnswer(
                choice=None if picked == NONE_CHOICE else picked,
                label=match_candidate(picked, candidates),
                **tokens,
            )
    stop = getattr(message, "stop_reason", None)
    raise TeacherError(
        f"anthropic: no {CHOICE_TOOL} call in the answer (stop_reason {stop})", **tokens
    )


def _count(usage: object, name: str) -> int:
    return token_count(getattr(usage, name, 0))
