"""The narrowing's catalog upload: only what the server can hold, in bodies it accepts, and a
note in the process's ledger (`toolselect.integrations.ledger`) of what each server already holds.

- **Fit**: a description over the server's 8 KiB is clipped (the ranking reads its start); a tool
  the server cannot hold at all (a name over 256 characters or with surrounding spaces, a schema
  nested over 64 deep, one tool over the body limit alone, a schema that is not JSON) is left out
  of the upload and stays offered to the model, unranked. A tool the server refuses all the same
  (`422` naming it: a limit configured lower) is left out the same way.
- **Split**: the catalog goes in PUTs of at most `MAX_TOOLS_PER_PUT` tools and `MAX_BODY_BYTES`
  each (the server's defaults); a `413` (a lower configured limit) halves the body and tries again.
- **Ledger**: an upload is sent unless the ledger holds its content for the server, credential
  and pack; refusals and uploads in flight are noted there too (see that module).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NamedTuple

from toolselect.catalog import (
    MAX_DESCRIPTION_BYTES,
    MAX_TOOLS_PER_PUT,
    check_tool_name,
    too_deep,
)
from toolselect.client import AsyncClient, clip_text
from toolselect.config import DEFAULT_MAX_BODY_BYTES
from toolselect.errors import ApiError, InvalidInput
from toolselect.integrations.ledger import LEDGER, InFlight, Key, finish

# stdlib logging: this runs in the host's process and follows its logging setup.
log = logging.getLogger("toolselect.integrations")

# The server's default body limit (`TOOLSELECT_MAX_BODY_BYTES`); a lower one is met by halving.
MAX_BODY_BYTES = DEFAULT_MAX_BODY_BYTES
# Room for the body's envelope (`{"tools": [...]}`) and the separators between entries.
_ENVELOPE_BYTES = 64
# How long an upload is trusted before it is sent again, in the background: a tool deleted on the
# server (the dashboard, a store reset) comes back within this even when no ranking shows it gone.
RECHECK_S = 300.0


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool as toolselect sees it: its name, what it does, its arguments' JSON Schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] | None = None

    def native(self) -> dict[str, Any]:
        """The tool as a `PUT /v1/tools` entry."""
        tool: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.parameters is not None:
            tool["input_schema"] = dict(self.parameters)
        return tool


def catalog_hash(specs: Sequence[ToolSpec]) -> str:
    """The SHA-256 of a catalog's content, independent of the tools' order."""
    entries = sorted(
        json.dumps(s.native(), sort_keys=True, separators=(",", ":"), default=str) for s in specs
    )
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


class UploadPlan(NamedTuple):
    """A catalog as the server can hold it: the PUT entries with their encoded sizes, and the
    names left out (offered to the model, never ranked)."""

    entries: list[tuple[dict[str, Any], int]]
    left_out: frozenset[str]


def plan_upload(specs: Sequence[ToolSpec]) -> UploadPlan:
    """The entries to PUT for `specs` (descriptions clipped, one per name) and the tools left out
    because the server would refuse them whatever was done."""
    entries: list[tuple[dict[str, Any], int]] = []
    left_out: set[str] = set()
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            continue  # the server refuses a body naming a tool twice; the first one speaks
        seen.add(spec.name)
        description = clip_text(spec.description, MAX_DESCRIPTION_BYTES)
        native: dict[str, Any] = {"name": spec.name, "description": description}
        if spec.parameters is not None:
            native["input_schema"] = dict(spec.parameters)
        size = _encoded_size(native)
        holdable = _holdable_name(spec.name) and not too_deep(native.get("input_schema"))
        if holdable and size is not None and size <= MAX_BODY_BYTES - _ENVELOPE_BYTES:
            entries.append((native, size))
        else:
            left_out.add(spec.name)
    return UploadPlan(entries, frozenset(left_out))


def _holdable_name(name: str) -> bool:
    try:
        check_tool_name(name)
    except InvalidInput:
        return False
    return True


def _encoded_size(entry: Mapping[str, Any]) -> int | None:
    """The entry's bytes as the client sends them; None when it cannot be sent as JSON."""
    try:
        return len(json.dumps(entry, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError):  # not JSON (NaN and infinities included: the server
        # refuses them), or a lone surrogate UTF-8 cannot carry
        return None


def batches(
    entries: Sequence[tuple[dict[str, Any], int]], max_bytes: int = MAX_BODY_BYTES
) -> list[list[dict[str, Any]]]:
    """`entries` in bodies of at most `max_bytes` and `MAX_TOOLS_PER_PUT` tools, in order."""
    found: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    used = _ENVELOPE_BYTES
    for entry, size in entries:
        if current and (used + size + 2 > max_bytes or len(current) >= MAX_TOOLS_PER_PUT):
            found.append(current)
            current, used = [], _ENVELOPE_BYTES
        current.append(entry)
        used += size + 2
    if current:
        found.append(current)
    return found


class Uploaded(NamedTuple):
    """What a catalog upload did: the server's counts over every PUT, and the names it refused."""

    upserted: int
    unchanged: int
    refused: frozenset[str]


async def put_catalog(client: AsyncClient, plan: UploadPlan, pack: str | None) -> Uploaded:
    """PUT `plan`'s entries in bodies the server takes; a `413` halves a body, a `422` naming one
    tool leaves that tool out. Raises any other refusal, and `ClientError` when unanswered."""
    pending = batches(plan.entries)
    upserted = unchanged = 0
    refused: set[str] = set()
    while pending:
        batch = pending.pop()
        try:
            answer = await client.tools.put(batch, pack=pack)
        except ApiError as exc:
            if exc.status == 413 and len(batch) > 1:
                half = len(batch) // 2
                pending += [batch[:half], batch[half:]]
                continue
            index = 0 if exc.status == 413 else _refused_tool(exc, len(batch))
            if index is None:
                raise
            refused.add(batch[index]["name"])
            if rest := batch[:index] + batch[index + 1 :]:
                pending.append(rest)
            continue
        upserted += answer.upserted
        unchanged += answer.unchanged
    return Uploaded(upserted, unchanged, frozenset(refused))


def _refused_tool(exc: ApiError, size: int) -> int | None:
    """The index of the tool a `422` names (`tools[3].description`), if it names one."""
    where = exc.field or ""
    if exc.status != 422 or not where.startswith("tools["):
        return None
    index = where[len("tools[") :].split("]", 1)[0]
    return int(index) if index.isdigit() and int(index) < size else None


class Uploader:
    """One narrower's catalog uploads to its server and pack, through the process's `LEDGER`.

    A turn waits for the upload (within its own timeout) only when this process never put the
    catalog there; an upload older than `recheck_s` is sent again in the background (unchanged
    tools cost the server nothing), so a tool deleted there comes back even when no ranking
    shows it missing. Refusals are not raised: a `403` (an agent-role key) stops uploads for
    the key, logged once; another refusal waits (`Ledger.failed`) before the same content goes
    again. Either way the turn ranks what the server holds."""

    def __init__(self, client: AsyncClient, *, pack: str, agent: str, recheck_s: float) -> None:
        self.client = client
        self.pack = pack
        self.agent = agent
        self.recheck_s = recheck_s
        # The ledger's key: two tenants' keys on one server hold two catalogs.
        self.key: Key = (client.base_url, client.credential, pack)
        # What each recent catalog uploads as (a catalog rarely changes; the plan costs a pass).
        self._plans: dict[str, UploadPlan] = {}

    async def upload(self, specs: Sequence[ToolSpec], timeout_s: float | None) -> bool:
        """Upload unless the server holds this content already; True when it does (on the
        client's loop)."""
        digest = catalog_hash(specs)
        held, stale, _ = LEDGER.holds(self.key, digest, self.recheck_s)
        if held and not stale:
            return True
        task = self._task(specs, digest)
        if task is None:
            return held
        async with asyncio.timeout(timeout_s):
            return await asyncio.shield(task)

    async def held(self, specs: Sequence[ToolSpec], digest: str) -> frozenset[str]:
        """See that the server holds the catalog (see the class); the names it refused, which
        are offered and never ranked."""
        held, stale, _ = LEDGER.holds(self.key, digest, self.recheck_s)
        if not held or stale:
            task = self._task(specs, digest)
            # No task: this key may not upload, or a refused upload waits. The turn ranks on: an
            # editor may have put the catalog, and a ranking shows what the server lacks.
            if task is not None and not held:
                await asyncio.shield(task)
        return LEDGER.holds(self.key, digest, self.recheck_s)[2]

    def forget(self, digest: str) -> bool:
        """The server lacks tools of this content (`Ledger.forget`)."""
        return LEDGER.forget(self.key, digest)

    def plan(self, specs: Sequence[ToolSpec], digest: str) -> UploadPlan:
        """`plan_upload(specs)`, kept for the content's hash `digest`."""
        plan = self._plans.get(digest)
        if plan is None:
            if len(self._plans) >= 8:
                self._plans.clear()
            plan = self._plans[digest] = plan_upload(specs)
        return plan

    def _task(self, specs: Sequence[ToolSpec], digest: str) -> asyncio.Future[bool] | None:
        """The upload of this content: the one in flight in this process (started by any
        narrower, on any loop: an agent rebuilt per request, a blocking client per thread),
        else a new one on the running loop; None when the ledger says not now."""
        loop = asyncio.get_running_loop()

        def start() -> InFlight:
            ended: Future[bool] = Future()
            task = loop.create_task(self._put(self.plan(specs, digest), digest))
            task.add_done_callback(lambda done: _settle(done, ended))
            return InFlight(ended, loop, self.client)

        shared = LEDGER.upload(
            self.key, digest, start if LEDGER.may_try(self.key, digest) else None
        )
        return None if shared is None else asyncio.wrap_future(shared)

    async def _put(self, plan: UploadPlan, digest: str) -> bool:
        try:
            done = await put_catalog(self.client, plan, self.pack)
        except ApiError as exc:
            if exc.status == 403:
                if LEDGER.forbid(self.key):
                    fields = {"agent": self.agent, "error": describe(exc)}
                    log.warning("toolselect_upload_forbidden", extra=fields)
                return False
            wait = LEDGER.failed(self.key, digest)
            log.warning(
                "toolselect_upload_failed",
                extra={"agent": self.agent, "error": describe(exc), "retry_in_s": wait},
            )
            return False
        LEDGER.remember(self.key, digest, done.refused)
        counts = {"upserted": done.upserted, "unchanged": done.unchanged}
        left_out = len(plan.left_out | done.refused)
        log.info(
            "toolselect_catalog_uploaded", extra={"pack": self.pack, **counts, "left_out": left_out}
        )
        return True


def describe(exc: BaseException) -> str:
    """An exception as one log field."""
    if isinstance(exc, TimeoutError):
        return "TimeoutError: toolselect did not answer in time"
    return f"{type(exc).__name__}: {exc}"


def _settle(task: asyncio.Task[bool], ended: Future[bool]) -> None:
    """Hand an upload's end to everyone waiting on it. An exception (the upload did not reach
    the server) is logged and ends it False, so asyncio does not report it: a turn that waited
    degraded and logged it; the next turn tries again."""
    if task.cancelled():
        result = False
    elif (exc := task.exception()) is not None:
        log.debug("toolselect_upload_failed", extra={"error": describe(exc)})
        result = False
    else:
        result = task.result()
    finish(ended, result)
