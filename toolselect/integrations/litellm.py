"""The LiteLLM proxy (and `litellm.acompletion`) narrows each request's tools with toolselect and
reports the tools the model called.

    # toolselect_callbacks.py, beside the proxy's config.yaml
    from toolselect.client import AsyncClient
    from toolselect.integrations.litellm import ToolselectCallback

    toolselect = ToolselectCallback(AsyncClient("http://127.0.0.1:8080"), k=5)

    # config.yaml
    litellm_settings:
      callbacks: toolselect_callbacks.toolselect

`ToolselectCallback` is a LiteLLM `CustomLogger`:

- `async_pre_call_hook` (the proxy's hook, before routing) replaces a chat completion's `tools`
  with the `k` function tools toolselect ranks first for the latest user message and the
  conversation before it, plus the `always` tools and every tool that is not a function (hosted
  tools, and the tool `tool_choice` forces); the request's `tools` are the catalog, uploaded once
  per content. The pack is named
  after the agent the request comes from: `metadata["toolselect_agent"]` when the caller sets it,
  else the virtual key's alias, else its team's alias, else the model (`agent=` fixes one name).
  The session (`litellm_session_id`, else `metadata["session_id"]`) goes to the ranking, and
  the ranking's search id, the pack and the session into the request's metadata. One
  narrower is kept per pack, at most `max_agents` (`MAX_AGENTS` by default), the least
  recently used dropped first: a caller naming a new agent per request must not grow the
  proxy's memory.
- `async_pre_call_deployment_hook` does the same for calls that did not pass the proxy's hook
  (`litellm.acompletion` and `Router` in an application's own process); a request already
  narrowed is left alone.
- `async_log_success_event` reports the function tools the response called, with the search id
  read back from the metadata, in the background. LiteLLM sees model calls, not tool runs: the
  outcome is left unset (the tool has not run yet), so the server labels the request with the
  tool only when its ranking showed it. A failed model call called no tool: nothing to report.
  The request reported is the latest user message of the call's `messages`, which this callback
  receives unredacted under `turn_off_message_logging` (it sends them to toolselect only).

Every model call is narrowed and reported on its own (a proxy keeps no state between the
requests of one agent loop). When toolselect is down or slow the request keeps every tool and
one line is logged; nothing here fails a request. Async calls only (the proxy's are). LiteLLM
runs success callbacks after a call returns: a process that closes its toolselect client
awaits `flush()` first, so the last calls are reported.

`pip install 'toolselect[litellm]'`. Importing this loads neither numpy nor onnxruntime.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from litellm.caching.dual_cache import DualCache
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import UserAPIKeyAuth
from litellm.types.utils import CallTypes

from toolselect.client import AsyncClient, Client
from toolselect.integrations.narrowing import (
    DEFAULT_TIMEOUT_S,
    ToolNarrower,
    ToolSpec,
    forced_tools,
    latest_user_text,
)

__all__ = ["MAX_AGENTS", "ToolselectCallback", "agent_name", "conversation", "tool_calls"]

log = logging.getLogger("toolselect.integrations")

# Metadata keys this hook writes (and reads back when the call succeeds).
SEARCH_ID = "toolselect_search_id"
PACK = "toolselect_pack"
SESSION = "toolselect_session_id"
# Set by a caller to name its agent (the pack its tools go to).
AGENT = "toolselect_agent"
# The narrowers kept, one per pack: any caller of the proxy names a pack, so a bound keeps one
# that names a new agent per request from growing the proxy without end. A pack dropped and
# used again costs a new narrower, not an upload (the process's ledger remembers it).
MAX_AGENTS = 256

CHAT_CALLS = frozenset({"completion", "acompletion"})


def conversation(messages: object) -> tuple[str, list[str]]:
    """The latest user message of a chat completion's `messages` and the conversation's
    earlier words, oldest first (user and assistant text; tool calls and results left out)."""
    texts: list[tuple[bool, str]] = []  # (a user message?, its text)
    for message in messages if isinstance(messages, Sequence) else ():
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            continue
        if text := _text(message.get("content")):
            texts.append((message["role"] == "user", text))
    return latest_user_text(texts)


def _text(content: object) -> str:
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, Sequence):
        return ""
    parts = (p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return "\n".join(t.strip() for t in parts if isinstance(t, str) and t.strip())


def _function(tool: object) -> Mapping[str, Any] | None:
    """A chat completion tool's `function`, when it is a function tool with a name."""
    if not isinstance(tool, Mapping) or tool.get("type") != "function":
        return None
    function = tool.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        return None
    return function


def tool_calls(response: object) -> list[str]:
    """The names of the function tools a chat completion's first choice called, in order."""
    choices = getattr(response, "choices", None) or ()
    message = getattr(choices[0], "message", None) if choices else None
    names = []
    for call in getattr(message, "tool_calls", None) or ():
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        if isinstance(name, str) and name:
            names.append(name)
    return names


def agent_name(
    metadata: Mapping[str, Any], key: UserAPIKeyAuth | None, model: object
) -> str | None:
    """The agent a request comes from: the caller's `toolselect_agent`, else the virtual key's
    alias, else its team's alias (from `key`, or as the proxy copies them into the metadata),
    else the model."""
    names = [
        metadata.get(AGENT),
        key.key_alias if key is not None else None,
        metadata.get("user_api_key_alias"),
        key.team_alias if key is not None else None,
        metadata.get("user_api_key_team_alias"),
        model,
    ]
    return next((n.strip() for n in names if isinstance(n, str) and n.strip()), None)


def _metadata(data: dict[str, Any]) -> dict[str, Any]:
    """The request's metadata dict (the proxy's `litellm_metadata` on the routes that use it),
    created when the request has none."""
    for name in ("litellm_metadata", "metadata"):
        if isinstance(data.get(name), dict):
            return data[name]  # type: ignore[no-any-return]
    data["metadata"] = {}
    return data["metadata"]  # type: ignore[no-any-return]


class ToolselectCallback(CustomLogger):
    """Narrows chat completions' tools through toolselect and reports the tools called (see the
    module's docstring). `k`, `always`, `timeout_s` and `context_chars` go to each pack's
    `ToolNarrower`; `agent` names the one pack every request uses; `agent_for` replaces the
    naming rule (metadata, the key or None, the model -> a name, or None to leave the request
    alone); `max_agents` bounds the narrowers kept (the least recently used is dropped)."""

    def __init__(
        self,
        client: AsyncClient | Client,
        *,
        k: int = 5,
        always: Collection[str] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S,
        context_chars: int = 0,
        agent: str | None = None,
        agent_for: Callable[[Mapping[str, Any], UserAPIKeyAuth | None, object], str | None]
        | None = None,
        max_agents: int = MAX_AGENTS,
    ) -> None:
        if max_agents < 1:
            raise ValueError(f"expected max_agents >= 1, got {max_agents}")
        super().__init__()
        self.client = client
        self.k = k
        self.always = frozenset(always)
        self.timeout_s = timeout_s
        self.context_chars = context_chars
        self.agent = agent
        self.agent_for = agent_for or agent_name
        self.max_agents = max_agents
        # By pack, least recently used first.
        self.narrowers: OrderedDict[str, ToolNarrower] = OrderedDict()
        # The ids of the turns reported, newest last.
        self.reported: deque[str] = deque(maxlen=1000)

    def narrower(self, pack: str) -> ToolNarrower:
        """The narrower of one agent's pack (made on first use; the least recently used one is
        dropped beyond `max_agents`)."""
        narrower = self.narrowers.get(pack)
        if narrower is not None:
            self.narrowers.move_to_end(pack)
            return narrower
        narrower = self.narrowers[pack] = ToolNarrower(
            self.client,
            agent=pack,
            k=self.k,
            always=self.always,
            timeout_s=self.timeout_s,
            context_chars=self.context_chars,
        )
        if len(self.narrowers) > self.max_agents:
            self.narrowers.popitem(last=False)
        return narrower

    async def narrow(self, data: dict[str, Any], key: UserAPIKeyAuth | None = None) -> None:
        """Narrow `data["tools"]` in place and note the ranking in its metadata; a request
        without function tools or user words, or already narrowed, is left as it is."""
        tools = data.get("tools")
        if not isinstance(tools, list) or not tools:
            return
        metadata = _metadata(data)
        if PACK in metadata:
            return
        functions = [f for f in map(_function, tools) if f is not None]
        request, context = conversation(data.get("messages"))
        pack = self.agent or self.agent_for(metadata, key, data.get("model"))
        if not functions or not request or not pack:
            return
        specs = [
            ToolSpec(f["name"], str(f.get("description") or ""), f.get("parameters") or None)
            for f in functions
        ]
        # A tool the request forces is kept like an `always` one: narrowed away, the provider
        # would refuse the call (tool_choice naming a tool not offered).
        forced = forced_tools(data.get("tool_choice"))
        session = data.get("litellm_session_id") or metadata.get("session_id")
        session_id = session if isinstance(session, str) and session else None
        narrowed = await self.narrower(pack).narrow(
            request, specs, context=context, always=forced, session_id=session_id
        )
        kept = set(narrowed.tools)
        data["tools"] = [t for t in tools if (f := _function(t)) is None or f["name"] in kept]
        metadata[PACK] = pack
        metadata[SEARCH_ID] = narrowed.search_id
        if session_id:
            metadata[SESSION] = session_id

    # -- LiteLLM's hooks -------------------------------------------------------------------

    async def async_pre_call_hook(
        self,
        user_api_key_dict: UserAPIKeyAuth,
        cache: DualCache,
        data: dict[str, Any],
        call_type: Any,
    ) -> dict[str, Any]:
        if _call_name(call_type) in CHAT_CALLS:
            await self._safely(data, user_api_key_dict)
        return data

    async def async_pre_call_deployment_hook(
        self, kwargs: dict[str, Any], call_type: CallTypes | None
    ) -> dict[str, Any] | None:
        if _call_name(call_type) not in CHAT_CALLS:
            return None
        await self._safely(kwargs, None)
        return kwargs

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        try:
            self.report(kwargs, response_obj)
        except Exception as exc:  # a logging callback must not disturb the proxy
            log.warning("toolselect_report_failed", extra={"error": f"{type(exc).__name__}: {exc}"})

    def report(self, kwargs: Mapping[str, Any], response: object) -> str | None:
        """Report the tools `response` called for the request narrowed in `kwargs` (LiteLLM's
        logging kwargs); the turn's id, or None when it called none or was not narrowed."""
        params = kwargs.get("litellm_params")
        params = params if isinstance(params, Mapping) else {}
        for name in ("metadata", "litellm_metadata"):
            metadata = params.get(name)
            if isinstance(metadata, Mapping) and isinstance(metadata.get(PACK), str):
                break
        else:
            return None
        called = tool_calls(response)
        request, _ = conversation(kwargs.get("messages"))
        if not called or not request:
            return None
        turn_id = self.narrower(metadata[PACK]).report(
            request,
            called,
            search_id=metadata.get(SEARCH_ID),
            session_id=metadata.get(SESSION),
        )
        if turn_id is not None:
            self.reported.append(turn_id)
        return turn_id

    def exempt_from_message_redaction(self) -> bool:
        # The report needs the user's words (`turn_off_message_logging` would blank them in the
        # success event): they go to toolselect, which ranked them already, and nowhere else.
        return True

    async def flush(self) -> None:
        """Wait for LiteLLM's logging callbacks of the calls made so far, this one's reports
        among them (LiteLLM runs them in the background after a call returns): an application
        that closes its toolselect client should await this first."""
        from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

        await asyncio.sleep(0)  # a call's logging is queued on the loop's turn after it returns
        await GLOBAL_LOGGING_WORKER.flush()

    async def _safely(self, data: dict[str, Any], key: UserAPIKeyAuth | None) -> None:
        try:
            await self.narrow(data, key)
        except Exception as exc:  # the narrower never raises; a malformed request must not either
            log.warning(
                "toolselect_narrow_degraded", extra={"error": f"{type(exc).__name__}: {exc}"}
            )


def _call_name(call_type: object) -> str:
    return str(getattr(call_type, "value", call_type))
