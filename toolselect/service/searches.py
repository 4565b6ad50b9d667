"""Search ids: what a ranking showed, remembered for a while so a reported turn can say where
its used tool stood.

Every `/v1/rank`, `/v1/select`, MCP `search_tools` and tool-search answer carries a `search_id`;
a turn observed with it is linked to the tools that were shown (`SearchLog.place`). The log is
in memory, bounded in count (oldest forgotten first) and in age, and costs one dict operation
on each side: the ranking path never waits on the store.

A search id also carries its search (`encode`): who issued it, when, for which tenant and pack,
and a 3-byte hash of the name of each of its first `ENCODED_TOOLS` tools. So a turn that
reaches another process than the one that ranked it (another `serve --workers` worker, another
replica behind a load balancer, the same server restarted) is still placed: its used tool is
found by hash, the shown names are read back from the catalog. This process's own ids are only
ever placed from its log, so one it has forgotten or let expire stays `unknown`, as with
`TOOLSELECT_SEARCHES_KEPT=0`, which issues ids that carry nothing.

A used tool is placed as the catalog tool it stands for (`names.catalog_names`), so an agent
reporting `mcp__jira__create_issue` found it where `jira__create_issue` stood, not where a shown
`github__create_issue` did; a name no catalog tool has is matched by `same_tool` among the shown.

A search id that cannot be placed (never issued, expired, forgotten, another tenant's) is
accepted and counted as `unknown`; one issued for another pack is counted as `other_pack`.
Neither is ever an error for the agent.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import secrets
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from toolselect.names import catalog_names, same_tool
from toolselect.records import SearchStatus

# What one search showed: the tools in rank order, within which pack, and when. A plain tuple
# of strings and a float, which the garbage collector stops tracking: a log of 100,000 objects
# it did track made every full collection (and the ranking it interrupts) several times longer.
Shown = tuple[tuple[str, ...], str | None, float]

# The tools an id names, so that with the header it stays within the 256 characters a turn's
# `search_id` may have: version, issuer, nonce, issued (epoch seconds), tenant, pack, count.
ENCODED_TOOLS = 48
_HEADER = struct.Struct(">B4s8sI3s3sH")
_VERSION = 2  # 1 hashed bare names: a tool sharing its bare name was placed by either's tag
_TAG = 3
_NO_PACK = bytes(_TAG)


@functools.lru_cache(maxsize=1 << 16)
def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_TAG).digest()


def _tag(name: str) -> bytes:
    """What an id keeps of a tool: its catalog name hashed."""
    return _digest(name)


@dataclass(frozen=True, slots=True)
class EncodedSearch:
    """What a search id says of its search."""

    issuer: bytes
    issued: int
    tenant: bytes
    pack: bytes
    count: int  # tools shown; `tags` holds the first `ENCODED_TOOLS` of them
    tags: tuple[bytes, ...]


def encode(issuer: bytes, tenant: str, tools: Sequence[str], pack: str | None, at: float) -> str:
    """A new search id for `tools` shown at `at` (epoch seconds) by `issuer`."""
    head = _HEADER.pack(
        _VERSION,
        issuer,
        secrets.token_bytes(8),
        int(at) & 0xFFFFFFFF,
        _digest(tenant),
        _digest(pack) if pack else _NO_PACK,
        min(len(tools), 0xFFFF),
    )
    body = head + b"".join(_tag(t) for t in tools[:ENCODED_TOOLS])
    return base64.urlsafe_b64encode(body).rstrip(b"=").decode("ascii")


def decode(search_id: str) -> EncodedSearch | None:
    """What `search_id` carries, or None when it is no id `encode` made."""
    try:
        raw = base64.urlsafe_b64decode(search_id + "=" * (-len(search_id) % 4))
    except (binascii.Error, ValueError):
        return None
    if len(raw) < _HEADER.size or raw[0] != _VERSION:
        return None
    _, issuer, _, issued, tenant, pack, count = _HEADER.unpack_from(raw)
    tags = raw[_HEADER.size :]
    if len(tags) != _TAG * min(count, ENCODED_TOOLS):
        return None
    split = tuple(tags[i : i + _TAG] for i in range(0, len(tags), _TAG))
    return EncodedSearch(issuer, issued, tenant, pack, count, split)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a turn's used tool stood in the search it reports."""

    status: SearchStatus
    shown: tuple[str, ...] = ()
    position: int | None = None  # 1-based, when shown
    count: int | None = None  # tools shown, when more than `shown` names (another process's id)


class SearchLog:
    """The searches issued recently, by id (thread-safe: servers observe from any thread)."""

    def __init__(
        self,
        capacity: int,
        ttl_s: float,
        clock: Callable[[], float] = time.time,
        *,
        tenant: str = "default",
    ) -> None:
        self._capacity = capacity
        self._ttl_s = ttl_s
        self._clock = clock
        self._tenant = tenant
        self._issuer = secrets.token_bytes(4)
        self._searches: OrderedDict[str, Shown] = OrderedDict()
        self._lock = threading.Lock()
        # The catalog names last read back from tags, by tag: (names, {tag: names}).
        self._by_tag: tuple[Sequence[str], dict[bytes, list[str]]] = ((), {})

    def __len__(self) -> int:
        return len(self._searches)

    def record(self, tools: Sequence[str], pack: str | None = None) -> str:
        """Remember what a ranking showed; its new search id."""
        if self._capacity <= 0:
            return secrets.token_hex(12)
        at = self._clock()
        search_id = encode(self._issuer, self._tenant, tools, pack, at)
        shown: Shown = (tuple(tools), pack or None, at)
        with self._lock:
            self._searches[search_id] = shown
            while len(self._searches) > self._capacity:
                self._searches.popitem(last=False)
        return search_id

    def place(
        self, search_id: str, used_tool: str, pack: str | None = None, catalog: Sequence[str] = ()
    ) -> Placement:
        """Where `used_tool` stood in search `search_id`, for a turn of `pack`; `catalog` (the
        tool names now served) says which tool a reported name stands for and reads back the
        names of a search another process issued."""
        with self._lock:
            shown = self._searches.get(search_id)
        if shown is None:
            return self._place_encoded(search_id, used_tool, pack, catalog)
        tools, shown_pack, at = shown
        if self._clock() - at > self._ttl_s:
            return Placement("unknown")
        if pack and shown_pack and pack != shown_pack:
            return Placement("other_pack")
        wanted = self._tools_of(used_tool, catalog)
        for position, tool in enumerate(tools, start=1):
            if tool in wanted if wanted else same_tool(tool, used_tool):
                return Placement("shown", tools, position)
        return Placement("not_shown", tools)

    def _place_encoded(
        self, search_id: str, used_tool: str, pack: str | None, catalog: Sequence[str]
    ) -> Placement:
        """`place` for an id this process did not issue, from what the id carries."""
        found = decode(search_id) if self._capacity > 0 else None
        if found is None or found.issuer == self._issuer or found.tenant != _digest(self._tenant):
            return Placement("unknown")
        if self._clock() - found.issued > self._ttl_s:
            return Placement("unknown")
        if pack and found.pack != _NO_PACK and found.pack != _digest(pack):
            return Placement("other_pack")
        # The names the id carries; the count stays a number (an id may claim 65,535 tools).
        names = self._names(found.tags, catalog)
        count = found.count if found.count > len(names) else None
        if used_tool:
            wanted = {_tag(tool) for tool in self._tools_of(used_tool, catalog) or (used_tool,)}
            for position, tag in enumerate(found.tags, start=1):
                if tag in wanted:
                    return Placement("shown", names, position, count)
        # Past the tools the id names, the used one may have been shown: nothing tells.
        return Placement("unknown") if count else Placement("not_shown", names)

    def shown(self, search_id: str | None, catalog: Sequence[str]) -> tuple[str, ...]:
        """The tools search `search_id` showed, however long ago: from this log, else what the
        id carries (the first `ENCODED_TOOLS`, read back from `catalog`, '' where no one tool
        has a tag), else none. For a stored turn whose search a predecessor placed."""
        if not search_id:
            return ()
        with self._lock:
            logged = self._searches.get(search_id)
        if logged is not None:
            return logged[0]
        found = decode(search_id)
        return self._names(found.tags, catalog) if found is not None else ()

    def _tools_of(self, used_tool: str, catalog: Sequence[str]) -> list[str]:
        """The catalog tools `used_tool` may stand for (none when the catalog has no such)."""
        return catalog_names(tuple(catalog)).matches(used_tool) if used_tool else []

    def _names(self, tags: Sequence[bytes], catalog: Sequence[str]) -> tuple[str, ...]:
        """The catalog name of each tag ('' where no one tool of the catalog has it)."""
        names, by_tag = self._by_tag
        if names is not catalog:
            by_tag = {}
            for name in catalog:
                by_tag.setdefault(_tag(name), []).append(name)
            self._by_tag = (catalog, by_tag)
        return tuple(found[0] if len(found := by_tag.get(tag, [])) == 1 else "" for tag in tags)
