"""The narrowing's catalog upload against a real toolselect server: one cache entry per API key
(two tenants on one server each get their catalog), a tool the server lost stays offered and is
uploaded again, an agent-role key narrows over an editor's catalog, a catalog over the server's
limits is clipped, split and left partly unranked rather than refused whole, and an upload its
client was closed under does not hold later clients' turns."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integrations.test_narrowing import TOOLS, CountingTransport, error_lines
from tests.live import LiveServer, live_server
from tests.services import WatchedTransport
from toolselect.catalog import MAX_DESCRIPTION_BYTES, MAX_NAME_CHARS, MAX_SCHEMA_DEPTH
from toolselect.client import AsyncClient, Client, Unreachable
from toolselect.integrations import ledger
from toolselect.integrations.narrowing import ToolNarrower, ToolSpec

ADMIN = "k-admin-narrowing-2c9d"
WEATHER = "Will it rain in Turin tomorrow?"


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[LiveServer]:
    """A server whose API needs a key (`ADMIN`, an admin of `default`)."""
    yield from live_server(tmp_path, api_keys=(ADMIN,))


class UnansweredPuts(WatchedTransport):
    """The real transport, but a PUT gets no answer until `release` (a slow first upload: a
    big catalog, a busy server); then it fails as a dropped connection would."""

    def __init__(self) -> None:
        super().__init__()
        self.released = asyncio.Event()

    async def before(self, method: str, url: str, body: bytes | None) -> None:
        if method == "PUT":
            await self.released.wait()
            raise Unreachable(f"{method} {url}: released by the test")


async def key_of(server: LiveServer, tenant: str, role: str) -> str:
    async with AsyncClient(server.url, api_key=ADMIN) as admin:
        return (await admin.create_key(tenant, role)).key


def nested(depth: int) -> dict[str, object]:
    """A JSON schema whose objects nest `depth` deep below the top one."""
    schema: dict[str, object] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


async def test_two_tenants_on_one_server_each_get_their_catalog(keyed: LiveServer) -> None:
    """Editor keys of two tenants on one URL: the second tenant's catalog is uploaded too (the
    upload cache was keyed by URL and pack only, so it was never sent and every turn of the
    second tenant degraded)."""
    keys = [await key_of(keyed, tenant, "editor") for tenant in ("team-a", "team-b")]
    for key in keys:
        async with AsyncClient(keyed.url, api_key=key) as ts:
            narrower = ToolNarrower(ts, agent="shared-agent", k=2)
            kept, search_id = await narrower.narrow(WEATHER, TOOLS)
            listed = {t.name for t in await ts.tools.list(pack="shared-agent")}
        assert search_id is not None and "get_weather" in kept and len(kept) == 2
        assert listed == {t.name for t in TOOLS}
    assert AsyncClient(keyed.url, api_key=keys[0]).credential not in keys[0]


async def test_a_tool_the_server_lost_stays_offered_and_is_uploaded_again(
    server: LiveServer,
) -> None:
    """`send_email` deleted on the server after the upload: the ranking answers fewer tools than
    asked, so the tool is kept this turn and the catalog goes again at the next, after which
    the server ranks it again."""
    transport = CountingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        narrower = ToolNarrower(ts, agent="core-lost", k=4, always=["handoff"], timeout_s=5.0)
        assert (await narrower.narrow(WEATHER, TOOLS)).search_id is not None
        assert await ts.tools.delete("send_email")
        kept, search_id = await narrower.narrow("send an email to Ann", TOOLS)
        assert search_id is not None
        assert kept == [t.name for t in TOOLS]  # send_email too, though the server lacks it
        await narrower.narrow(WEATHER, TOOLS)
        assert transport.count("PUT", "tools") == 2
        assert (await ts.tools.get("send_email")).packs == ["core-lost"]
        narrowed = await narrower.narrow("send an email to Ann", TOOLS, k=1)
    assert narrowed.tools == ["send_email", "handoff"]


async def test_an_old_upload_is_sent_again_in_the_background(server: LiveServer) -> None:
    """A lost tool that no ranking shows missing (the server still fills `k`) comes back when
    the upload is older than `recheck_s`: sent again beside the turn, which does not wait."""
    transport = CountingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        narrower = ToolNarrower(ts, agent="core-recheck", k=1, recheck_s=0.0, timeout_s=5.0)
        assert await narrower.upload(TOOLS)
        assert await ts.tools.delete("send_email")
        assert (await narrower.narrow(WEATHER, TOOLS)).tools == ["get_weather"]
        for _ in range(100):  # the background upload: bounded, it takes milliseconds
            if any(t.name == "send_email" for t in await ts.tools.list(pack="core-recheck")):
                break
            await asyncio.sleep(0.05)
        assert transport.count("PUT", "tools") == 2
        # Listed once stored; ranked once its PUT answered: wait for that (recheck_s=0 makes
        # this an upload too, or the wait for the one in flight).
        assert await narrower.upload(TOOLS)
        narrowed = await narrower.narrow("send an email to Ann", TOOLS)
    assert narrowed.tools == ["send_email"]


async def test_an_agent_key_narrows_over_the_catalog_an_editor_put(
    keyed: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent-role key may rank but not PUT: the 403 is logged once, never asked again, and
    every turn ranks the catalog an editor uploaded."""
    async with AsyncClient(keyed.url, api_key=await key_of(keyed, "team-c", "editor")) as editor:
        assert await ToolNarrower(editor, agent="ro-agent").upload(TOOLS)
    transport = CountingTransport()
    agent_key = await key_of(keyed, "team-c", "agent")
    async with AsyncClient(keyed.url, api_key=agent_key, transport=transport) as ts:
        narrower = ToolNarrower(ts, agent="ro-agent", k=1, timeout_s=5.0)
        with caplog.at_level(logging.INFO, logger="toolselect"):
            first = await narrower.narrow(WEATHER, TOOLS)
            second = await narrower.narrow("send an email to Ann", TOOLS)
            assert not await narrower.upload(TOOLS)
    assert (first.tools, second.tools) == (["get_weather"], ["send_email"])
    assert first.search_id is not None and second.search_id is not None
    assert transport.count("PUT", "tools") == 1
    [line] = error_lines(caplog)
    assert line.getMessage() == "toolselect_upload_forbidden"
    assert "forbidden" in line.__dict__["error"]


async def test_tools_over_the_servers_limits_are_clipped_or_offered_unranked(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A 9,000-byte description is clipped to 8 KiB; a 301-character name, a schema nested
    past 64 and one holding an infinite default (a Python tool's `max_price: float = inf`,
    which JSON cannot say) are left out of the upload (the server would refuse the whole body)
    and offered every turn; the rest is ranked."""
    long_name = "n" * (MAX_NAME_CHARS + 45)
    tools = [
        *TOOLS,
        ToolSpec("long_story", "Tell a long story about dragons. " + "x" * 9000),
        ToolSpec(long_name, "A tool whose name is over the limit."),
        ToolSpec("deep_tool", "A tool with a deep schema.", nested(MAX_SCHEMA_DEPTH + 6)),
        ToolSpec("find_flights", "Find flights.", {"properties": {"max": {"default": math.inf}}}),
    ]
    transport = CountingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        narrower = ToolNarrower(ts, agent="core-limits", k=1, timeout_s=5.0)
        with caplog.at_level(logging.WARNING, logger="toolselect"):
            kept, search_id = await narrower.narrow(WEATHER, tools)
            again = await narrower.narrow("send an email to Ann", tools)
        stored = await ts.tools.get("long_story")
        listed = {t.name for t in await ts.tools.list(pack="core-limits")}
    assert search_id is not None, error_lines(caplog)
    assert kept == ["get_weather", long_name, "deep_tool", "find_flights"]
    assert again.tools == ["send_email", long_name, "deep_tool", "find_flights"]
    assert error_lines(caplog) == []
    assert transport.count("PUT", "tools") == 1
    assert len(stored.description.encode()) == MAX_DESCRIPTION_BYTES
    assert listed == {t.name for t in TOOLS} | {"long_story"}


async def test_a_catalog_over_the_body_limit_goes_in_several_puts(server: LiveServer) -> None:
    """601 tools of about 2.2 KB (1.3 MB, over the 1 MiB body limit): several PUTs, each taken."""
    tools = [
        ToolSpec(f"tool_{i:03d}", f"Tool number {i} does task {i}. " + "word " * 430)
        for i in range(601)
    ]
    transport = CountingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        narrower = ToolNarrower(ts, agent="core-big", k=3)
        assert await narrower.upload(tools, timeout_s=120)
        listed = await ts.tools.list(pack="core-big")
    assert len(listed) == 601
    assert transport.count("PUT", "tools") == 2


async def test_a_lower_body_limit_halves_the_puts(tmp_path: Path) -> None:
    """A server configured below the default body limit answers 413: the body is halved until
    each part is taken; one tool alone over the limit is left out, offered unranked."""
    server = LiveServer(tmp_path, max_body_bytes=16 << 10)
    try:
        tools = [*TOOLS, *(ToolSpec(f"tool_{i}", f"Tool {i}. " + "w " * 900) for i in range(20))]
        big = ToolSpec("big_schema", "A tool with a large schema.", {"enum": ["v" * 40] * 500})
        transport = CountingTransport()
        async with AsyncClient(server.url, transport=transport) as ts:
            narrower = ToolNarrower(ts, agent="core-small", k=1, timeout_s=30.0)
            assert await narrower.upload([*tools, big])
            listed = {t.name for t in await ts.tools.list(pack="core-small")}
            kept = (await narrower.narrow(WEATHER, [*tools, big])).tools
    finally:
        server.stop()
    assert listed == {t.name for t in tools}
    assert kept == ["get_weather", "big_schema"]
    assert transport.count("PUT", "tools") > 3


async def test_a_refused_upload_is_not_sent_again_at_every_turn(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal the narrower cannot mend (here a pack name over the server's 256 characters)
    is logged, the turn ranks on, and the same content waits before it is sent again."""
    transport = CountingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        narrower = ToolNarrower(ts, agent="p" * 300, k=1, timeout_s=5.0)
        with caplog.at_level(logging.WARNING, logger="toolselect"):
            for question in (WEATHER, "send an email to Ann", WEATHER):
                await narrower.narrow(question, TOOLS)
    assert transport.count("PUT", "tools") == 1
    assert transport.count("POST", "rank") == 3
    [line] = error_lines(caplog)
    assert line.getMessage() == "toolselect_upload_failed"
    assert line.__dict__["retry_in_s"] == ledger.RETRY_FIRST_S


async def test_narrowers_built_at_once_upload_one_catalog_once(server: LiveServer) -> None:
    """Thirty narrowers of one agent (an agent rebuilt per request) narrowing at once on one
    client send the catalog once: the upload in flight is the process's, not each narrower's."""
    transport = CountingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        narrowers = [ToolNarrower(ts, agent="core-many", k=1, timeout_s=5.0) for _ in range(30)]
        narrowed = await asyncio.gather(*(n.narrow(WEATHER, TOOLS) for n in narrowers))
    assert {tuple(n.tools) for n in narrowed} == {("get_weather",)}
    assert transport.count("PUT", "tools") == 1


def test_a_blocking_client_closed_during_its_first_upload_does_not_stop_narrowing(
    server: LiveServer,
) -> None:
    """A job's blocking `Client` closed while its first PUT is unanswered stops its loop with the
    upload pending: the jobs after it, each with a new client, upload and rank (the dead upload
    stayed in the process's ledger and every later turn waited on it, then degraded)."""
    with Client(server.url, transport=UnansweredPuts()) as ts:
        narrower = ToolNarrower(ts, agent="core-stranded", k=1, timeout_s=0.2)
        assert narrower.narrow_sync(WEATHER, TOOLS).search_id is None  # the PUT never answered
    for question, tool in ((WEATHER, "get_weather"), ("send an email to Ann", "send_email")):
        with Client(server.url) as ts:
            narrower = ToolNarrower(ts, agent="core-stranded", k=1, timeout_s=5.0)
            narrowed = narrower.narrow_sync(question, TOOLS)
        assert narrowed.search_id is not None and narrowed.tools == [tool]


async def test_an_async_client_closed_during_its_first_upload_does_not_hold_the_next(
    server: LiveServer,
) -> None:
    """An `AsyncClient` closed while its first PUT is unanswered, on a loop that goes on: the
    next client's narrower starts its own upload at once instead of waiting on the old one."""
    hanging = UnansweredPuts()
    try:
        async with AsyncClient(server.url, transport=hanging) as ts:
            narrower = ToolNarrower(ts, agent="core-stranded-async", k=1, timeout_s=0.2)
            assert (await narrower.narrow(WEATHER, TOOLS)).search_id is None
        async with AsyncClient(server.url) as ts:
            narrower = ToolNarrower(ts, agent="core-stranded-async", k=1, timeout_s=5.0)
            narrowed = await narrower.narrow(WEATHER, TOOLS)
    finally:
        hanging.released.set()  # the old upload ends before the test's loop does
    assert narrowed.search_id is not None and narrowed.tools == ["get_weather"]


async def test_two_agents_tools_of_one_name_are_one_stored_tool(server: LiveServer) -> None:
    """What README's "One tool per name" tells users: a tenant's tools are keyed by name and
    packs only group them, so a news agent's `search` and a Jira agent's are one tool, described
    by the latest upload and held by both packs (a change to that model changes the README)."""
    news = [ToolSpec("search", "Search the web for news articles and headlines."), *TOOLS]
    jira = [ToolSpec("search", "Search Jira issues, tickets and bugs with JQL.")]
    async with AsyncClient(server.url) as ts:
        assert await ToolNarrower(ts, agent="news-bot").upload(news)
        assert await ToolNarrower(ts, agent="jira-bot").upload(jira)
        stored = await ts.tools.get("search")
    assert stored.description == jira[0].description
    assert sorted(stored.packs) == ["jira-bot", "news-bot"]


async def test_a_pack_remembers_its_latest_catalogs_and_uploads_a_forgotten_one_again(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent whose tool descriptions keep changing: the process remembers a pack's latest
    `per_pack` contents only (it remembered every one it ever uploaded), and a forgotten content
    that comes back is uploaded again, the server answering it as it holds it."""
    monkeypatch.setattr(ledger.LEDGER, "per_pack", 2)
    catalogs = [
        [ToolSpec("handoff", f"Hand the chat to operator {i}."), *TOOLS[:2]] for i in (1, 2, 3)
    ]
    transport = CountingTransport()
    async with AsyncClient(server.url, transport=transport) as ts:
        narrower = ToolNarrower(ts, agent="core-bounded", k=1, timeout_s=5.0)
        for catalog in catalogs:
            assert await narrower.upload(catalog)
        assert len(ledger.LEDGER.held[narrower.uploader.key]) == 2
        assert await narrower.upload(catalogs[2])  # among the latest: not sent again
        assert transport.count("PUT", "tools") == 3
        assert await narrower.upload(catalogs[0])  # forgotten: sent again, and remembered
        assert await narrower.upload(catalogs[0])
        assert transport.count("PUT", "tools") == 4
        stored = await ts.tools.get("handoff")
    assert stored.description == "Hand the chat to operator 1."


def test_the_ledger_forgets_a_packs_oldest_contents_past_its_cap() -> None:
    """Past `HELD_PER_PACK` contents of one pack, uploaded or refused, the oldest are forgotten
    first (a refused one may be tried again at once); another pack keeps its own."""
    book = ledger.Ledger()
    pack, other = ("http://ts", "", "agent"), ("http://ts", "", "other")
    book.remember(other, "kept", frozenset())
    digests = [f"content-{i}" for i in range(ledger.HELD_PER_PACK + 10)]
    for digest in digests:
        book.remember(pack, digest, frozenset())
        book.failed(pack, f"refused-{digest}")
    book.remember(pack, digests[10], frozenset())  # uploaded again: the newest now
    book.remember(pack, "latest", frozenset())  # so the oldest is digests[11]
    assert len(book.held[pack]) == len(book.failures[pack]) == ledger.HELD_PER_PACK
    assert [book.holds(pack, d, 60.0)[0] for d in digests[:12]] == [False] * 10 + [True, False]
    assert book.holds(pack, "latest", 60.0)[0] and book.holds(other, "kept", 60.0)[0]
    assert book.may_try(pack, f"refused-{digests[0]}")
    assert not book.may_try(pack, f"refused-{digests[-1]}")
