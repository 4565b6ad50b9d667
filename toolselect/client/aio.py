"""`AsyncClient`: the HTTP API v1 as typed coroutines, with retries and background `observe`.

Requests and answers are the pydantic models the server validates with
(`toolselect.api.models`), so a field the server renames breaks here, in a type checker,
rather than in production. Every failure is a `ClientError`: `ApiError` when the server
answered an error, `Unreachable` when it did not answer (or a proxy's page came instead).
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack
from urllib.parse import quote, urlencode

from pydantic import BaseModel, ValidationError

from toolselect.api import key_models as km
from toolselect.api import models as m
from toolselect.client.exchange import Attempts, Exchange, Sleep
from toolselect.client.observer import ObserveStats, TurnBuffer, encoded, turn_request
from toolselect.client.transport import AiohttpTransport, Response, Transport
from toolselect.errors import ApiError, ClientError, InvalidInput
from toolselect.keys import TENANT_HEADER, check_tenant
from toolselect.retry_after import parse_retry_after
from toolselect.turns import TurnFields

# stdlib logging, not structlog: this module runs inside other people's agent processes,
# whose logging setup it must follow (an unconfigured structlog would print to stdout, which
# an MCP stdio host reads as protocol). Messages are event names; fields go in `extra`.
log = logging.getLogger(__name__)

Model = TypeVar("Model", bound=BaseModel)

# The server's default limit on a query, a turn's request and each `context` message (UTF-8
# bytes: `TOOLSELECT_MAX_QUERY_BYTES`).
MAX_TEXT_BYTES = 8 << 10


class AsyncClient:
    """A client of one toolselect server; use as `async with AsyncClient(url) as ts: ...`.

    `retries` extra attempts follow a failure worth another (`toolselect.client.exchange`: no
    answer, a 503 or a 429, and for all calls but `create_key` a proxy's 502, 504 or page),
    waiting the server's `Retry-After` when it sent one, else `backoff_s * 2**attempt`
    (jittered, at most `max_backoff_s`). Turns given to `observe` are sent in the background,
    in batches of `observe_batch`, at least every `observe_interval_s`; `close` sends what is
    left within `close_timeout_s`, each batch once (what it cannot send is counted `failed`).
    `tenant` goes as `X-Toolselect-Tenant` on every request: the tenant an admin key (or any
    request while the server has no key) acts on; `InvalidInput` here when it breaks the
    server's tenant rule. Usable from one event loop after another (`asyncio.run` per job), one
    at a time: the transport and the observe buffer start afresh on each.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        tenant: str | None = None,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.25,
        max_backoff_s: float = 10.0,
        observe_capacity: int = 10_000,
        observe_batch: int = 500,
        observe_interval_s: float = 1.0,
        close_timeout_s: float = 2.0,
        transport: Transport | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        if tenant is not None:
            self._headers[TENANT_HEADER] = check_tenant(tenant)
        self.tenant = tenant
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._transport: Transport = transport or AiohttpTransport()
        self._exchange = Exchange(self._transport, sleep)
        self._turns = TurnBuffer(
            self._observe_batch,
            capacity=observe_capacity,
            batch=observe_batch,
            interval_s=observe_interval_s,
            close_timeout_s=close_timeout_s,
        )
        self.tools = AsyncTools(self)

    @property
    def credential(self) -> str:
        """A short hash naming the bearer key this client presents and the tenant it names,
        never the key itself (what a cache per credential may keep, or a log show); "" with
        neither. One admin key naming two tenants holds two catalogs, so both count."""
        key = self._headers.get("Authorization", "")
        tenant = self._headers.get(TENANT_HEADER, "")
        if not key and not tenant:
            return ""
        return hashlib.sha256(f"{key}\n{tenant}".encode()).hexdigest()[:16]

    @property
    def closed(self) -> bool:
        """Whether `aclose` has released the connections (every call then fails at once)."""
        return self._exchange.closed

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Send the buffered turns (within `close_timeout_s`), then release the connections; a
        call after this raises `ClientError`."""
        try:
            await self._turns.close()  # sends what is buffered: the last calls allowed
        finally:
            await self._exchange.aclose()

    # -- ranking ---------------------------------------------------------------------------

    async def rank(
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
        """The `k` tools that best fit `query`, best first (`POST /v1/rank`; without `k`, the
        server's default: 5, or its `TOOLSELECT_MAX_K` when lower); report the answer's
        `search_id` with the turn (`observe`).

        The conversation, all optional: `session_id` (its last observed turn's tools weigh in
        as the session prior), `previous_tools` (instead of the session's), `context` (earlier
        messages, most recent last: `recent_context` keeps them within the server's limits)
        and `companions` (`True`: 2, or up to 10 tools often used with the ranked ones, in the
        answer's `companions`). Each weighs only as much as the server's fit on its stored
        sessions says it helps (nothing, until it does)."""
        body = _build(
            m.RankRequest,
            query=query,
            **({} if k is None else {"k": k}),
            tools=None if tools is None else list(tools),
            pack=pack,
            **_conversation(session_id, previous_tools, context, companions),
        )
        return await self.call("POST", "/v1/rank", m.RankResponse, body)

    async def select(
        self,
        query: m.PromptKitQuery,
        candidates: Sequence[m.PromptKitCandidate],
        *,
        session_id: str | None = None,
        previous_tools: Sequence[str] | None = None,
        context: Sequence[str] | None = None,
        companions: bool | int = False,
    ) -> m.SelectResponse:
        """PromptKit's exec-selector exchange over HTTP (`POST /v1/select`); the answer's
        `search_id` goes with the turn (`observe`). The conversation keywords are `rank`'s
        (companions among the candidates)."""
        body = _build(
            m.SelectRequest,
            query=query,
            candidates=list(candidates),
            **_conversation(session_id, previous_tools, context, companions),
        )
        return await self.call("POST", "/v1/select", m.SelectResponse, body)

    # -- learning --------------------------------------------------------------------------

    def observe(
        self, request: str, used_tool: str | None = None, **turn: Unpack[TurnFields]
    ) -> None:
        """Report the tool an agent used for `request`; returns at once and never raises.

        Pass the `search_id` of the ranking the agent chose from, and the `outcome` when known
        (the other keywords: `TurnFields`). Must be called on the client's event loop. The
        turn is sent in the background; see `observe_stats` for what became of it; a turn that
        breaks a rule is counted `invalid` and logged.
        """
        try:
            self._turns.add(encoded(turn_request(request, used_tool, turn)))
        except Exception as exc:
            # The agent loop comes first: a malformed turn (or a call off the loop) is
            # counted and logged, not raised into it.
            self._turns.counts.invalid += 1
            log.warning("observe_turn_refused", extra={"error": str(exc).splitlines()[0]})

    @property
    def observe_stats(self) -> ObserveStats:
        """Where the observed turns went (`ObserveStats`); `pending` counts those without an
        outcome yet, the batch on its way included."""
        return self._turns.stats()

    async def _observe_batch(
        self, turns: Sequence[bytes], last_try_s: float | None
    ) -> m.ObserveBatchResponse:
        # `ObserveBatchRequest` as JSON, from the turns encoded when they were buffered.
        body = b'{"turns":[' + b",".join(turns) + b"]}"
        path, answer = "/v1/observe/batch", m.ObserveBatchResponse
        if last_try_s is None:
            return await self.call("POST", path, answer, body)
        # Closing: once, within what is left of `close_timeout_s`.
        timeout_s = min(last_try_s, self.timeout_s)
        return await self.call("POST", path, answer, body, retries=0, timeout_s=timeout_s)

    async def label(self, query: str, tool: str) -> m.FeedbackResponse:
        """Record a human-confirmed label, tier `feedback` (`POST /v1/exemplars`)."""
        body = _build(m.FeedbackRequest, query=query, tool=tool)
        return await self.call("POST", "/v1/exemplars", m.FeedbackResponse, body)

    async def delete_exemplar(self, exemplar_id: str) -> bool:
        """Undo a label (`DELETE /v1/exemplars/{id}`)."""
        path = f"/v1/exemplars/{quote(exemplar_id, safe='')}"
        return (await self.call("DELETE", path, m.DeletedResponse)).deleted

    # -- analytics -------------------------------------------------------------------------

    async def analyses(self) -> list[str]:
        """The names `analytics` accepts (`GET /v1/analytics`)."""
        return (await self.call("GET", "/v1/analytics", m.AnalyticsList)).analyses

    async def analytics(self, name: str, *, since: str | None = None) -> m.AnalyticsResult:
        """One analysis as columns and rows; `since` is an ISO-8601 instant."""
        if name == "learning":
            raise InvalidInput("expected an analysis name other than 'learning': use learning()")
        query = f"?{urlencode({'since': since})}" if since else ""
        path = f"/v1/analytics/{quote(name, safe='')}{query}"
        return await self.call("GET", path, m.AnalyticsResult)

    async def learning(self) -> m.LearningFit:
        """What the learning loop chose from its labels (`GET /v1/analytics/learning`)."""
        return await self.call("GET", "/v1/analytics/learning", m.LearningFit)

    async def whoami(self) -> km.Whoami:
        """This client's key: its tenant (or the one it acts on), role and id (`GET
        /v1/whoami`, any role)."""
        return await self.call("GET", "/v1/whoami", km.Whoami)

    # -- keys (an admin key's) -------------------------------------------------------------

    async def create_key(self, tenant: str, role: str, *, name: str | None = None) -> km.KeyCreated:
        """A new API key of `tenant` with `role` (`agent`, `editor` or `admin`); the answer's
        `key` is the one time it is shown (`POST /v1/keys`)."""
        body = _build(km.KeyCreateRequest, tenant=tenant, role=role, name=name)
        # Not sent again once it may have arrived: a second key would be made, never shown.
        return await self.call("POST", "/v1/keys", km.KeyCreated, body, repeatable=False)

    async def list_keys(self, *, tenant: str | None = None) -> list[km.KeyOut]:
        """Every tenant's keys, or `tenant`'s, revoked ones too; never a key itself."""
        query = f"?{urlencode({'tenant': tenant})}" if tenant else ""
        return (await self.call("GET", f"/v1/keys{query}", km.KeyList)).keys

    async def revoke_key(self, key_id: str) -> bool:
        """Refuse a key from now on (`DELETE /v1/keys/{id}`): at once on the server that
        answers, on the others within their poll interval; `ApiError` 404 for an unknown id."""
        path = f"/v1/keys/{quote(key_id, safe='')}"
        return (await self.call("DELETE", path, km.KeyRevoked)).revoked

    # -- the exchange ----------------------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        answer: type[Model],
        body: Any = None,
        *,
        repeatable: bool = True,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Model:
        """Send `body` (a model, a JSON-able value or JSON already encoded as bytes), retrying
        transient failures, and parse a 2xx answer as `answer`; raise `ApiError` for any other
        status, `InvalidInput` (nothing sent) for a body JSON cannot carry. A call that is not
        `repeatable` (it creates something each time) is retried only when it cannot have
        reached the server: a refused connection, a 503 or a 429. `retries` and `timeout_s`
        stand for the client's in this call."""
        data = _encoded(body)
        if self.closed:
            raise ClientError("the client is closed")
        self._turns.resume()  # on a new loop, turns an ended one left go out now
        attempts = Attempts(
            self.retries if retries is None else retries,
            self.timeout_s if timeout_s is None else timeout_s,
            self.backoff_s,
            self.max_backoff_s,
        )
        sent = await self._exchange.send(
            method, self.base_url + path, data, self._headers, attempts, repeatable=repeatable
        )
        if not 200 <= sent.response.status < 300:
            raise _api_error(sent.response)
        try:
            # Keys this client does not know are dropped: a newer server may add fields.
            known = {k: v for k, v in sent.payload.items() if k in answer.model_fields}
            return answer.model_validate(known, strict=False)
        except (AttributeError, ValidationError) as exc:
            raise ClientError(
                f"expected a {answer.__name__} from {method} {path}, "
                f"got {sent.response.body[:200]!r}"
            ) from exc


class AsyncTools:
    """The catalog: `client.tools.put/list/get/delete`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def put(
        self, tools: Sequence[Mapping[str, Any]], *, pack: str | None = None
    ) -> m.UpsertResponse:
        """Upsert tools given as native or MCP dicts (`name`, `description`, `input_schema` or
        `inputSchema`) or as OpenAI function tools, optionally into `pack`."""
        items = [dict(t) for t in tools]
        openai = bool(items) and all(t.get("type") == "function" for t in items)
        body: Any = items if openai else {"tools": items}
        query = f"?{urlencode({'pack': pack})}" if pack else ""
        return await self._client.call("PUT", f"/v1/tools{query}", m.UpsertResponse, body)

    async def list(self, *, pack: str | None = None) -> list[m.ToolOut]:
        query = f"?{urlencode({'pack': pack})}" if pack else ""
        return (await self._client.call("GET", f"/v1/tools{query}", m.ToolList)).tools

    async def get(self, name: str) -> m.ToolOut:
        return await self._client.call("GET", f"/v1/tools/{quote(name, safe='')}", m.ToolOut)

    async def delete(self, name: str) -> bool:
        path = f"/v1/tools/{quote(name, safe='')}"
        return (await self._client.call("DELETE", path, m.DeletedResponse)).deleted

    async def exemplars(self, name: str) -> builtins.list[m.ExemplarOut]:
        path = f"/v1/tools/{quote(name, safe='')}/exemplars"
        return (await self._client.call("GET", path, m.ExemplarList)).exemplars


def recent_context(messages: Iterable[str] | None, most: int = 10) -> list[str]:
    """The `most` most recent non-blank `messages` (oldest first), each cut to the server's
    default size limit (8 KiB of UTF-8): a `context` the server accepts whatever the
    conversation holds (it mixes in the last message; a few keep the request small)."""
    kept = [text for text in messages or () if text.strip()][-most:] if most > 0 else []
    return [clip_text(text) for text in kept]


def clip_text(text: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """`text` cut to at most `max_bytes` of UTF-8 (at a character's end): what a server with the
    default limit takes, for callers that must not be refused (the framework adapters)."""
    data = text.encode("utf-8", "surrogatepass")
    return text if len(data) <= max_bytes else data[:max_bytes].decode("utf-8", "ignore")


def _conversation(
    session_id: str | None,
    previous_tools: Sequence[str] | None,
    context: Sequence[str] | None,
    companions: bool | int,
) -> dict[str, Any]:
    """A request's conversation fields, those given only."""
    fields: dict[str, Any] = {
        "session_id": session_id,
        "previous_tools": None if previous_tools is None else list(previous_tools),
        "context": None if context is None else list(context),
        "companions": companions or None,  # 0 and False both ask for none
    }
    return {key: value for key, value in fields.items() if value is not None}


def _encoded(body: Any) -> bytes | None:
    """The request body's bytes; `InvalidInput` for what JSON cannot carry (a lone surrogate,
    which the server would refuse anyway), rather than the serialiser's own error."""
    try:
        if isinstance(body, BaseModel):
            # What the caller left unset is left to the server's defaults (which know its limits).
            return body.model_dump_json(exclude_none=True, exclude_unset=True).encode()
        if isinstance(body, bytes) or body is None:
            return body
        return json.dumps(body, ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:  # pydantic's and UTF-8's errors are ValueErrors
        raise InvalidInput(f"expected a body JSON can carry, got {exc}", "body") from None


def _build(model: type[Model], **fields: Any) -> Model:
    """Validate a request before sending it; a breach is the caller's `InvalidInput`."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise InvalidInput(f"{field}: {first['msg']}", field) from None


def _api_error(response: Response) -> ApiError:
    """The server's error body, or a stand-in naming the status when the body is not one
    (a proxy's HTML page, say)."""
    wait = parse_retry_after(response.headers)
    try:
        error = m.ErrorResponse.model_validate_json(response.body, strict=False).error
    except ValidationError:
        text = response.body[:200].decode("utf-8", "replace")
        return ApiError(response.status, f"http_{response.status}", text, retry_after=wait)
    return ApiError(response.status, error.code, error.message, error.field, retry_after=wait)
