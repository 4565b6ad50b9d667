"""OpenAI-compatible teacher: one `/chat/completions` call forced through `choose_tool`.

Works with any server speaking the OpenAI chat API with function calling (OpenAI, vLLM,
Ollama, LiteLLM, ...). One attempt per `ask`; the `Oracle` retries and traces.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import aiohttp

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


def _transient_status(status: int) -> bool:
    return status in (408, 409, 429) or status >= 500


class OpenAICompatTeacher:
    """Asks an OpenAI-compatible chat model which candidate tool the agent should have used.

    With `session=None` the teacher opens its own `aiohttp.ClientSession` on first use (never
    in `__init__`) and closes it in `aclose()`; a given session belongs to the caller.
    """

    provider = "openai"

    def __init__(
        self,
        session: aiohttp.ClientSession | None,
        base_url: str,
        model: str,
        api_key: str = "",
    ) -> None:
        self._session = session
        self._owns_session = session is None
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        self._api_key = api_key

    @property
    def model(self) -> str:
        return self._model

    async def aclose(self) -> None:
        """Close the session the teacher opened itself (a caller's session is left alone)."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._owns_session = True
        return self._session

    def payload(
        self, request: str, used_tool: str, candidates: Sequence[Candidate]
    ) -> dict[str, Any]:
        """The request body: forced `choose_tool` call, temperature 0, 64 output tokens."""
        return {
            "model": self._model,
            "temperature": 0,
            "max_tokens": MAX_OUTPUT_TOKENS,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": user_prompt(request, used_tool, candidates)},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": CHOICE_TOOL,
                        "description": "Record the tool the agent should have used.",
                        "parameters": choice_schema(candidates),
                    },
                }
            ],
            "tool_choice": {"type": "function", "function": {"name": CHOICE_TOOL}},
        }

    async def ask(self, request: str, used_tool: str, candidates: Sequence[Candidate]) -> RawAnswer:
        """One chat completion; see `Teacher.ask` for the errors."""
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        body = self.payload(request, used_tool, candidates)
        try:
            async with self._client().post(self._url, json=body, headers=headers) as response:
                raw = await _read_capped(response)
                if response.status >= 400:
                    detail = f"openai {response.status}: {quoted(raw.decode(errors='replace'))}"
                    if _transient_status(response.status):
                        retry_after = parse_retry_after(response.headers)
                        raise RetryLater(detail, retry_after)
                    raise TeacherError(detail)
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise TeacherUnavailable(f"openai unreachable: {quoted(str(exc))}") from exc
        except aiohttp.ClientError as exc:
            raise TeacherError(f"openai: {quoted(str(exc))}") from exc
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TeacherError(f"openai: malformed response: {quoted(str(exc))}") from exc
        return _parse(data, candidates)


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    # aiohttp hands the body decoded: the cap holds for a compressed one too.
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise AnswerTooLarge("openai")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(data: Any, candidates: Sequence[Candidate]) -> RawAnswer:
    usage = data.get("usage") if isinstance(data, dict) else None
    tokens = {
        "input_tokens": _count(usage, "prompt_tokens"),
        "output_tokens": _count(usage, "completion_tokens"),
    }
    try:
        call = data["choices"][0]["message"]["tool_calls"][0]["function"]
        if call.get("name") not in (None, CHOICE_TOOL):
            raise TeacherError(
                f"openai: called {quoted(repr(call.get('name')))}, not {CHOICE_TOOL}", **tokens
            )
        arguments = call["arguments"]
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        picked = parsed["tool"]
    except TeacherError:
        raise
    except (KeyError, IndexError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise TeacherError(f"openai: malformed response: {quoted(repr(exc))}", **tokens) from exc
    if not isinstance(picked, str):
        raise TeacherError(
            f"openai: malformed {CHOICE_TOOL} arguments: {quoted(repr(parsed))}", **tokens
        )
    return RawAnswer(
        choice=None if picked == NONE_CHOICE else picked,
        label=match_candidate(picked, candidates),
        **tokens,
    )


def _count(usage: Any, name: str) -> int:
    return token_count(usage.get(name, 0) if isinstance(usage, dict) else 0)
