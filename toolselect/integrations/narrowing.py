"""What every agent-framework integration shares: narrow an agent's tools to the few that fit the
turn, report the tools the model then called, and never break the agent's loop.

    narrower = ToolNarrower(AsyncClient(url), agent="support-bot", k=5, always=["handoff"])
    kept, search_id = await narrower.narrow(user_message, specs, context=earlier_messages)
    ...  # offer only `kept` to the model; run the tools it calls
    narrower.report(user_message, ["get_order"], search_id=search_id, outcome="ok")

- **Catalog**: uploaded under a pack named after the agent, once per content (a SHA-256 of the
  names, descriptions and schemas, kept per process, server and API key) and again in the
  background every `recheck_s`, in bodies the server takes: a turn never waits for it longer
  than its own timeout (`await narrower.upload(specs)` warms up first). A tool the server cannot
  hold (a name too long, a schema too deep) is offered, never ranked; a key that may not upload
  (an agent's) still narrows over the catalog an editor put (`uploads.Uploader`).
- **Narrow**: the `k` best tools for the turn plus every `always` tool, **in the order the agent
  gave them** (only removing tools: a recurring set yields the same tool block, which keeps
  provider prompt caches warm), with the ranking's `search_id`. A tool the ranking shows the
  server lacks (it answered fewer than asked) is kept too, and the catalog goes again. The query
  is the latest user message; the earlier messages (`context`, oldest first) and a turn's
  `session_id` go to the ranking beside it (an id over the server's limit as a stable short
  stand-in: `sessions.fit_session_id`), weighed as the server's session fit decides from its
  own labels; `companions` keeps tools used with the ranked. `context_chars` > 0 glues that
  many characters of earlier messages onto the query text itself, which the fit cannot turn
  down: on BFCL's multi-turn turns 1,000 of them cut all@5 from 0.88 to 0.72 and top-1 from
  0.79 to 0.41 (`python -m bench.experiments.composed_query`), so it is 0 by default.
- **Degrade**: when toolselect is down, slow (over `timeout_s`, 0.25 s by default: well under a
  model call), refusing, or knows none of the tools, every tool is kept, `search_id` is None and
  one `toolselect_narrow_degraded` line is logged. Nothing here raises into the agent's loop.
- **Report**: `report` hands the called tools to the client's background `observe` (returns at
  once, never raises); `turn()` collects one user request's narrowings and calls across model
  calls and reports them once, with the id of the ranking that showed the first called tool.

Works with an `AsyncClient` on the caller's loop or a blocking `Client` (its private loop thread
runs the requests, and serves frameworks' synchronous hooks: `*_sync`). No numpy, no onnxruntime.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
import uuid
from collections.abc import Collection, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict, TypeVar

from toolselect.api.models import MAX_USED_TOOLS
from toolselect.client import AsyncClient, Client, clip_text, recent_context
from toolselect.integrations.sessions import fit_session_id
from toolselect.integrations.uploads import RECHECK_S, Uploader, describe
from toolselect.integrations.uploads import ToolSpec as ToolSpec
from toolselect.integrations.uploads import catalog_hash as catalog_hash

# stdlib logging: this runs in the host's process and follows its logging setup.
log = logging.getLogger("toolselect.integrations")

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 0.25
# The rank request's `k` bound: the server's max_k, 100 by default.
MAX_RANK_K = 100
OUTCOMES = frozenset({"ok", "error", "corrected"})


class NarrowingOptions(TypedDict, total=False):
    """A `ToolNarrower`'s keywords, as every framework's adapter takes them (one statement)."""

    k: int
    always: Collection[str]
    timeout_s: float
    context_chars: int
    companions: int


class Narrowed(NamedTuple):
    """What one narrowing kept: tool names (the agent's order) and its id (None: degraded)."""

    tools: list[str]
    search_id: str | None


def compose_query(request: str, context: Iterable[str] | None, limit: int) -> str:
    """The latest user message, then earlier messages, newest first, while they fit `limit`
    characters; cut to the server's default text limit (8 KiB of UTF-8)."""
    query = request.strip()
    budget = limit - len(query)
    for text in reversed(list(context or ())):
        text = text.strip()
        if not text or text == request.strip():
            continue
        if len(text) + 1 > budget:
            break
        query += "\n" + text
        budget -= len(text) + 1
    return clip_text(query)


class ToolNarrower:
    """Narrows one agent's tools through toolselect; see the module's docstring.

    - `agent`: names the pack the catalog goes to and the turns' `agent_id`;
    - `k`: how many ranked tools to keep (the `always` tools come on top of them);
    - `always`: tool names kept every turn, never ranked;
    - `timeout_s`: the most a narrowing waits for toolselect before keeping every tool;
    - `context_chars`: how much of the earlier conversation is glued onto the query (0: none);
    - `companions`: how many tools often used with the ranked ones to keep too (0..10; 0);
    - `recheck_s`: how long an upload is trusted before it is sent again, in the background.
    """

    def __init__(
        self,
        client: AsyncClient | Client,
        *,
        agent: str,
        k: int = 5,
        always: Collection[str] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S,
        context_chars: int = 0,
        companions: int = 0,
        recheck_s: float = RECHECK_S,
    ) -> None:
        if not agent.strip():
            raise ValueError("expected a non-blank agent name (it names the tools' pack)")
        if k < 1:
            raise ValueError(f"expected k >= 1, got {k}")
        if not 0 <= companions <= 10:
            raise ValueError(f"expected companions in 0..10, got {companions}")
        self.client = client
        self.agent = agent
        self.pack = agent
        self.k = k
        self.always = frozenset(always)
        self.timeout_s = timeout_s
        self.context_chars = context_chars
        self.companions = companions
        self._async = client if isinstance(client, AsyncClient) else client._async
        # The blocking client's private loop, where its requests run; None for an AsyncClient.
        self._loop = None if isinstance(client, AsyncClient) else client._loop
        self.uploader = Uploader(self._async, pack=self.pack, agent=agent, recheck_s=recheck_s)

    # -- catalog ---------------------------------------------------------------------------

    async def upload(self, specs: Sequence[ToolSpec], timeout_s: float | None = 30.0) -> bool:
        """Upload the catalog unless this process already did (same content); True when the
        server holds it. Waits up to `timeout_s`; never raises."""
        try:
            return await self._hop(self.uploader.upload(specs, timeout_s))
        except Exception as exc:
            log.warning("toolselect_upload_failed", extra={"error": describe(exc)})
            return False

    def upload_sync(self, specs: Sequence[ToolSpec], timeout_s: float | None = 30.0) -> bool:
        """`upload` for synchronous code (needs a blocking `Client`)."""
        try:
            return self._block(self.uploader.upload(specs, timeout_s), timeout_s)
        except Exception as exc:
            log.warning("toolselect_upload_failed", extra={"error": describe(exc)})
            return False

    # -- narrowing -------------------------------------------------------------------------

    async def narrow(
        self,
        request: str,
        tools: Sequence[ToolSpec],
        *,
        context: Iterable[str] | None = None,
        k: int | None = None,
        always: Collection[str] | None = None,
        session_id: str | None = None,
    ) -> Narrowed:
        """The tools to offer for `request` (see the class); never raises, never waits longer
        than `timeout_s` (then keeps every tool and logs one line)."""
        started = time.perf_counter()
        try:
            return await self._hop(self._narrow(request, tools, context, k, always, session_id))
        except Exception as exc:
            return self._degraded(tools, exc, started)

    def narrow_sync(
        self,
        request: str,
        tools: Sequence[ToolSpec],
        *,
        context: Iterable[str] | None = None,
        k: int | None = None,
        always: Collection[str] | None = None,
        session_id: str | None = None,
    ) -> Narrowed:
        """`narrow` for synchronous code (needs a blocking `Client`)."""
        started = time.perf_counter()
        try:
            coroutine = self._narrow(request, tools, context, k, always, session_id)
            # The coroutine bounds itself by `timeout_s`; the margin covers the thread hop.
            return self._block(coroutine, self.timeout_s + 0.5)
        except Exception as exc:
            return self._degraded(tools, exc, started)

    async def _narrow(
        self,
        request: str,
        tools: Sequence[ToolSpec],
        context: Iterable[str] | None,
        k: int | None,
        always: Collection[str] | None,
        session_id: str | None,
    ) -> Narrowed:
        digest = catalog_hash(tools)
        # A tool the server cannot hold is offered, never ranked (see `uploads.plan_upload`).
        keep = self.uploader.plan(tools, digest).left_out | self.always | frozenset(always or ())
        names = [t.name for t in tools]
        rankable = [n for n in dict.fromkeys(names) if n not in keep]
        want = min(self.k if k is None else k, len(rankable), MAX_RANK_K)
        if want < 1:
            return Narrowed(names, None)  # nothing to choose from: no ranking to report
        context = list(context or ())
        query = compose_query(request, context, self.context_chars)
        if not query:
            raise ValueError("expected a non-blank request to rank the tools for")
        async with asyncio.timeout(self.timeout_s):
            if refused := await self.uploader.held(tools, digest):
                keep |= refused
                rankable = [n for n in rankable if n not in refused]
                want = min(want, len(rankable))
                if want < 1:
                    return Narrowed(names, None)
            ranking = await self._async.rank(
                query,
                want,
                tools=rankable,
                session_id=fit_session_id(session_id),  # a longer one would be refused
                context=recent_context(context) or None,
                companions=self.companions,
            )
        ranked = {r.tool for r in ranking.results}
        if len(ranked) < want and (unknown := set(rankable) - ranked):
            # Asked for more than it holds, the server ranks all it holds: the rest it lacks
            # (deleted there, a store reset, never uploaded). They stay offered; the catalog goes
            # again at the next turn.
            keep |= unknown
            if self.uploader.forget(digest):
                log.info("toolselect_tools_unknown", extra={"agent": self.agent, **_few(unknown)})
        chosen = ranked & set(rankable)
        if not chosen:
            raise LookupError("toolselect ranked none of the agent's tools")
        chosen |= {c.tool for c in ranking.companions or ()} & set(rankable)
        return Narrowed([n for n in names if n in chosen or n in keep], ranking.search_id)

    def _degraded(self, tools: Sequence[ToolSpec], exc: BaseException, started: float) -> Narrowed:
        waited_ms = round((time.perf_counter() - started) * 1000, 1)
        fields = {"agent": self.agent, "error": describe(exc), "kept": len(tools)}
        log.warning("toolselect_narrow_degraded", extra={**fields, "waited_ms": waited_ms})
        return Narrowed([t.name for t in tools], None)

    # -- reporting -------------------------------------------------------------------------

    def report(
        self,
        request: str,
        called_tools: Sequence[str],
        *,
        search_id: str | None,
        outcome: str | None = None,
        session_id: str | None = None,
        turn_id: str | None = None,
    ) -> str | None:
        """Report the tools the model called for `request`, in order (the first is the one routed
        to), with the `search_id` of the narrowing that showed them and the `outcome` (`ok`,
        `error`, `corrected`) when known. In the background: returns the turn's id (None if no
        tool was called), never raises. Call it on an `AsyncClient`'s loop; a `Client`: anywhere."""
        used = list(dict.fromkeys(n for n in called_tools if n))[:MAX_USED_TOOLS]
        if not used or not request.strip():
            return None
        turn_id = turn_id or uuid.uuid4().hex
        try:
            self.client.observe(
                clip_text(request),  # the server would refuse a longer one, losing the turn
                used[0],
                turn_id=turn_id,
                agent_id=self.agent,
                pack=self.pack,
                outcome=outcome if outcome in OUTCOMES else None,
                search_id=search_id,
                used_tools=used if len(used) > 1 else None,
                session_id=fit_session_id(session_id),  # a longer one loses the turn
            )
        except Exception as exc:  # observe never raises; a bug of ours must not either
            log.warning("toolselect_report_failed", extra={"error": describe(exc)})
            return None
        return turn_id

    def turn(self, request: str, *, session_id: str | None = None) -> NarrowedTurn:
        """Collects one user request's narrowings and tool calls; `finish` reports them."""
        return NarrowedTurn(self, request, session_id=session_id)

    # -- running on the client's loop ------------------------------------------------------

    async def _hop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await `coroutine` on the client's loop (here, or the blocking client's thread)."""
        if self._loop is None:
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    def _block(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        """Run `coroutine` on the blocking client's loop and wait (from any thread but its)."""
        if self._loop is None:
            coroutine.close()
            raise TypeError("synchronous narrowing needs a blocking toolselect.client.Client")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise


@dataclass
class NarrowedTurn:
    """One user request: the narrowings shown to the model and the tools it called, in order.

    `finish` reports them once (a turn that called no tool reports nothing): the first called
    tool, every called tool, the id of the latest narrowing that showed the first one (else the
    latest), and `error` when a call failed, else the `outcome` given (`ok` by default)."""

    narrower: ToolNarrower
    request: str
    session_id: str | None = None
    turn_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    shown: list[Narrowed] = field(default_factory=list)
    called_tools: list[str] = field(default_factory=list)
    failed: bool = False
    search_id: str | None = None
    reported: bool = False

    async def narrow(
        self, tools: Sequence[ToolSpec], *, context: Iterable[str] | None = None
    ) -> Narrowed:
        narrowed = await self.narrower.narrow(
            self.request, tools, context=context, session_id=self.session_id
        )
        self.shown.append(narrowed)
        return narrowed

    def narrow_sync(
        self, tools: Sequence[ToolSpec], *, context: Iterable[str] | None = None
    ) -> Narrowed:
        narrowed = self.narrower.narrow_sync(
            self.request, tools, context=context, session_id=self.session_id
        )
        self.shown.append(narrowed)
        return narrowed

    def called(self, name: str, *, failed: bool = False) -> None:
        """Note a tool call (and whether it failed)."""
        self.failed = self.failed or failed
        if name in self.called_tools:
            return
        if not self.called_tools:
            self.search_id = shown_by(self.shown, name)
        self.called_tools.append(name)

    def finish(self, outcome: str | None = "ok") -> str | None:
        """Report the turn (once); its id, or None when no tool was called."""
        if self.reported or not self.called_tools:
            return None
        self.reported = True
        return self.narrower.report(
            self.request,
            self.called_tools,
            search_id=self.search_id,
            outcome="error" if self.failed else outcome,
            session_id=self.session_id,
            turn_id=self.turn_id,
        )


def latest_user_text(texts: Sequence[tuple[bool, str]]) -> tuple[str, list[str]]:
    """A conversation's latest user text and every text before it, from `(from the user, text)`
    pairs in order (what a framework's messages become); with no user text, `""` and all."""
    latest = max((i for i, (user, _) in enumerate(texts) if user), default=None)
    if latest is None:
        return "", [text for _, text in texts]
    return texts[latest][1], [text for _, text in texts[:latest]]


# `tool_choice` values that name no tool: the model picks (or calls none).
_CHOICE_MODES = frozenset({"auto", "none", "required", "any"})


def forced_tools(tool_choice: object) -> frozenset[str]:
    """The tools a request's `tool_choice` forces, which narrowing must keep (the provider
    refuses, or the model cannot call, a forced tool it was not offered): a tool's name
    (LangChain, the OpenAI Agents SDK), `{"type": "function", "function": {"name"}}` (Chat
    Completions), `{"type": "function" | "tool", "name"}` (Responses, Anthropic) or a list of
    names (PydanticAI); nothing for a mode (`auto`, `required`, ...)."""
    if isinstance(tool_choice, str):
        return frozenset() if tool_choice in _CHOICE_MODES else frozenset({tool_choice})
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        named = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
        return frozenset({named}) if isinstance(named, str) and named else frozenset()
    if isinstance(tool_choice, list | tuple):
        return frozenset(n for n in tool_choice if isinstance(n, str) and n not in _CHOICE_MODES)
    return frozenset()


def shown_by(shown: Sequence[Narrowed], name: str) -> str | None:
    """The id of the narrowing a tool was picked from: the latest that kept it, else the latest
    (the model called a tool it was not offered)."""
    for narrowed in reversed(shown):
        if name in narrowed.tools:
            return narrowed.search_id
    return shown[-1].search_id if shown else None


def _few(names: Collection[str]) -> dict[str, Any]:
    """Log fields naming a few of `names` (a catalog can be large) and their count."""
    return {"count": len(names), "names": sorted(names)[:5]}
