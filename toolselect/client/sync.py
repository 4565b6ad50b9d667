"""`Client`: the blocking face of `AsyncClient`, which runs on a private event loop thread.

Every method hands its coroutine to that loop and waits for the result, so the two clients
share one implementation (retries, parsing, background `observe`) and cannot drift apart.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar, Unpack

from toolselect.api import key_models as km
from toolselect.api import models as m
from toolselect.client.aio import AsyncClient
from toolselect.client.observer import ObserveStats
from toolselect.errors import ClientError
from toolselect.turns import TurnFields

T = TypeVar("T")


class Client:
    """A blocking client; takes the same arguments as `AsyncClient`. Use as a context manager
    (or call `close`) so buffered `observe` turns are sent before the program ends."""

    def __init__(self, base_url: str, **options: Any) -> None:
        # Built before the loop thread starts: bad options then leave no thread behind.
        self._async = AsyncClient(base_url, **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="toolselect-client", daemon=True
        )
        self._thread.start()
        self.tools = Tools(self)
        self._closed = False

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._loop.is_closed():
            coroutine.close()  # never awaited: say so to nobody
            raise ClientError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def close(self) -> None:
        """Send the buffered turns, release the connections and stop the loop thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._async.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    @property
    def base_url(self) -> str:
        return self._async.base_url

    @property
    def tenant(self) -> str | None:
        """The tenant named on every request (`X-Toolselect-Tenant`), if any."""
        return self._async.tenant

    def rank(
        self,
        query: str,
        k: int | None = None,
        *,
        tools: Sequence[str] | None = None,
        pack: str | None = None,
        session_id: str | None = None,
        previous_tools: Sequence[str] | None = None,
        context: Sequence[str] | None = None,
        companions: bool | int = False,
    ) -> m.RankResponse:
        """The `k` tools that best fit `query`, best first (`POST /v1/rank`); report the
        answer's `search_id` with the turn (`observe`). The conversation keywords are
        `AsyncClient.rank`'s; asked-for companions come in the answer's `companions`."""
        return self._run(
            self._async.rank(
                query,
                k,
                tools=tools,
                pack=pack,
                session_id=session_id,
                previous_tools=previous_tools,
                context=context,
                companions=companions,
            )
        )

    def select(
        self,
        query: m.PromptKitQuery,
        candidates: Sequence[m.PromptKitCandidate],
        *,
        session_id: str | None = None,
        previous_tools: Sequence[str] | None = None,
        context: Sequence[str] | None = None,
        companions: bool | int = False,
    ) -> m.SelectResponse:
        """PromptKit's exec-selector exchange over HTTP (`POST /v1/select`), with `rank`'s
        conversation keywords."""
        return self._run(
            self._async.select(
                query,
                candidates,
                session_id=session_id,
                previous_tools=previous_tools,
                context=context,
                companions=companions,
            )
        )

    def observe(
        self, request: str, used_tool: str | None = None, **turn: Unpack[TurnFields]
    ) -> None:
        """Report the tool an agent used for `request`, with the `search_id` of the ranking
        it chose from (keywords: `TurnFields`); returns at once and never raises."""
        call = functools.partial(self._async.observe, request, used_tool, **turn)
        try:
            self._loop.call_soon_threadsafe(call)
        except RuntimeError:
            # The loop is closed (after `close`): the closed buffer counts the turn dropped and
            # says so, without a loop.
            call()

    @property
    def observe_stats(self) -> ObserveStats:
        """`AsyncClient.observe_stats`, read on the client's loop: a turn `observe` handed it
        is buffered there first, so it is `pending` (not in no count) as soon as `observe`
        returns, and the counts are read between the loop's steps, never amid one."""
        if self._closed or threading.current_thread() is self._thread:
            return self._async.observe_stats  # the loop is stopping, or this runs on it
        return self._run(self._observe_stats())

    async def _observe_stats(self) -> ObserveStats:
        return self._async.observe_stats

    def label(self, query: str, tool: str) -> m.FeedbackResponse:
        """Record a human-confirmed label, tier `feedback` (`POST /v1/exemplars`)."""
        return self._run(self._async.label(query, tool))

    def delete_exemplar(self, exemplar_id: str) -> bool:
        """Undo a label (`DELETE /v1/exemplars/{id}`)."""
        return self._run(self._async.delete_exemplar(exemplar_id))

    def analyses(self) -> list[str]:
        """The names `analytics` accepts."""
        return self._run(self._async.analyses())

    def analytics(self, name: str, *, since: str | None = None) -> m.AnalyticsResult:
        """One analysis as columns and rows; `since` is an ISO-8601 instant."""
        return self._run(self._async.analytics(name, since=since))

    def learning(self) -> m.LearningFit:
        """What the learning loop chose from its labels."""
        return self._run(self._async.learning())

    def whoami(self) -> km.Whoami:
        """This client's key: its tenant (or the one it acts on), role and id."""
        return self._run(self._async.whoami())

    def create_key(self, tenant: str, role: str, *, name: str | None = None) -> km.KeyCreated:
        """A new API key (an admin key's call); the answer's `key` is shown this once."""
        return self._run(self._async.create_key(tenant, role, name=name))

    def list_keys(self, *, tenant: str | None = None) -> list[km.KeyOut]:
        """Every tenant's keys, or `tenant`'s; never a key itself."""
        return self._run(self._async.list_keys(tenant=tenant))

    def revoke_key(self, key_id: str) -> bool:
        """Refuse a key from now on; `ApiError` 404 for an unknown id."""
        return self._run(self._async.revoke_key(key_id))


class Tools:
    """The catalog: `client.tools.put/list/get/delete`."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._tools = client._async.tools

    def put(
        self, tools: Sequence[Mapping[str, Any]], *, pack: str | None = None
    ) -> m.UpsertResponse:
        """Upsert native, MCP or OpenAI-format tools, optionally into `pack`."""
        return self._client._run(self._tools.put(tools, pack=pack))

    def list(self, *, pack: str | None = None) -> list[m.ToolOut]:
        return self._client._run(self._tools.list(pack=pack))

    def get(self, name: str) -> m.ToolOut:
        return self._client._run(self._tools.get(name))

    def delete(self, name: str) -> bool:
        return self._client._run(self._tools.delete(name))

    def exemplars(self, name: str) -> builtins.list[m.ExemplarOut]:
        return self._client._run(self._tools.exemplars(name))
