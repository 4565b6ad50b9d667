"""The client's failure paths: 503 + Retry-After, an absent server, full buffers, bad bodies.

A local stub (tests/stubs.py) plays the failing server; the recorded `sleep` makes the waits
visible and instant.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import warnings
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.services import free_port
from tests.stubs import Reply, Stub, start_stub
from toolselect.api import models as m
from toolselect.client import (
    AiohttpTransport,
    ApiError,
    AsyncClient,
    Client,
    ClientError,
    Unreachable,
)

RANKED = {
    "results": [{"tool": "get_weather", "score": 0.7}],
    "margin": 0.7,
    "embedder": "hashing-v1",
    "took_ms": 0.1,
    "search_id": "5e4c8d0e9f1a2b3c4d5e6f70",
}
OVERLOADED = {"error": {"code": "overloaded", "message": "expected at most 256 requests"}}


class Sleeps:
    """An injected `sleep` that records the delays asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest_asyncio.fixture(loop_scope="function")
async def rank_stub() -> AsyncIterator[Stub]:
    """A stand-in for `POST /v1/rank` answering what each test scripts."""
    async for stub in start_stub("/v1/rank"):
        yield stub


def down_url() -> str:
    """A loopback URL nothing listens on."""
    return f"http://127.0.0.1:{free_port()}"


async def test_503_is_retried_after_the_servers_retry_after(rank_stub: Stub) -> None:
    """A 503 with `Retry-After: 2` is waited out for 2 s, then the 200 is returned."""
    rank_stub.reply(
        Reply(503, OVERLOADED, headers={"Retry-After": "2"}),
        Reply(200, RANKED),
    )
    sleeps = Sleeps()
    async with AsyncClient(rank_stub.url, sleep=sleeps) as ts:
        ranking = await ts.rank("weather in Turin?")
    assert ranking.results[0].tool == "get_weather"
    assert sleeps.delays == [2.0]
    assert len(rank_stub.received) == 2


async def test_503_without_retry_after_backs_off_exponentially(rank_stub: Stub) -> None:
    """Without `Retry-After`, each wait is jittered within [b*2^n / 2, b*2^n]."""
    rank_stub.reply(Reply(503, OVERLOADED), Reply(503, OVERLOADED), Reply(200, RANKED))
    sleeps = Sleeps()
    async with AsyncClient(rank_stub.url, sleep=sleeps, backoff_s=1.0) as ts:
        await ts.rank("weather in Turin?")
    first, second = sleeps.delays
    assert 0.5 <= first <= 1.0
    assert 1.0 <= second <= 2.0


async def test_503_after_the_last_retry_is_raised(rank_stub: Stub) -> None:
    """When every attempt gets 503, the last one surfaces with its code and `retry_after`."""
    rank_stub.reply(Reply(503, OVERLOADED, headers={"Retry-After": "30"}))
    sleeps = Sleeps()
    async with AsyncClient(rank_stub.url, sleep=sleeps, retries=2, max_backoff_s=5) as ts:
        with pytest.raises(ApiError) as caught:
            await ts.rank("weather in Turin?")
    assert (caught.value.status, caught.value.code) == (503, "overloaded")
    assert caught.value.retry_after == 30.0
    assert sleeps.delays == [5.0, 5.0]  # the server's 30 s, capped at max_backoff_s
    assert len(rank_stub.received) == 3


async def test_other_errors_are_not_retried(rank_stub: Stub) -> None:
    """A 4xx is the caller's mistake: raised at once, not retried."""
    body = {"error": {"code": "invalid_request", "message": "expected k in 1..100, got 0"}}
    rank_stub.reply(Reply(422, {**body, "error": {**body["error"], "field": "k"}}))
    sleeps = Sleeps()
    async with AsyncClient(rank_stub.url, sleep=sleeps) as ts:
        with pytest.raises(ApiError) as caught:
            await ts.rank("weather?")
    assert caught.value.field == "k"
    assert sleeps.delays == []


async def test_a_body_that_is_not_the_error_model_still_raises_api_error(
    rank_stub: Stub,
) -> None:
    """A proxy's HTML 502 becomes `ApiError` with code `http_502` and the body's start."""
    rank_stub.reply(Reply(502, text="<html>Bad Gateway</html>", content_type="text/html"))
    async with AsyncClient(rank_stub.url, sleep=Sleeps()) as ts:
        with pytest.raises(ApiError) as caught:
            await ts.rank("weather?")
    assert caught.value.code == "http_502"
    assert "Bad Gateway" in caught.value.message


async def test_a_2xx_body_of_the_wrong_shape_is_a_client_error(rank_stub: Stub) -> None:
    """A 200 that is not a `RankResponse` raises a `ClientError` naming what was expected."""
    rank_stub.reply(Reply(200, {"ranked": []}))
    async with AsyncClient(rank_stub.url) as ts:
        with pytest.raises(Exception, match="expected a RankResponse") as caught:
            await ts.rank("weather?")
    assert not isinstance(caught.value, ApiError)


async def test_unknown_answer_fields_are_ignored(rank_stub: Stub) -> None:
    """A newer server's extra fields do not break an older client."""
    rank_stub.reply(Reply(200, {**RANKED, "explanation": "added later"}))
    async with AsyncClient(rank_stub.url) as ts:
        assert (await ts.rank("weather?")).margin == 0.7


async def test_no_server_retries_then_raises_unreachable() -> None:
    """Connection refused is retried `retries` times, then raised as `Unreachable`."""
    sleeps = Sleeps()
    async with AsyncClient(down_url(), sleep=sleeps, retries=2) as ts:
        with pytest.raises(Unreachable):
            await ts.rank("weather?")
    assert len(sleeps.delays) == 2


async def test_observe_never_raises_when_the_server_is_down() -> None:
    """Turns for an absent server are counted as failed; neither `observe` nor `close` raise."""
    sleeps = Sleeps()
    ts = AsyncClient(down_url(), sleep=sleeps, retries=1, observe_batch=2)
    for i in range(5):
        ts.observe(f"request {i}", "web_search")
    await ts.close()
    stats = ts.observe_stats
    assert (stats.failed, stats.sent, stats.pending) == (5, 0, 0)


def test_sync_observe_never_raises_when_the_server_is_down() -> None:
    """The blocking client's `observe` and `close` stay silent too, however many turns."""
    with Client(down_url(), retries=0, observe_interval_s=0.01) as ts:
        for i in range(50):
            ts.observe(f"request {i}", "web_search")
    assert ts.observe_stats.failed == 50
    ts.observe("after close", "web_search")  # a closed client drops the turn, quietly
    assert ts.observe_stats.dropped == 1


async def test_full_buffer_drops_and_counts(rank_stub: Stub) -> None:
    """Beyond `observe_capacity` buffered turns, new ones are dropped and counted."""
    ts = AsyncClient(down_url(), retries=0, observe_capacity=2, observe_interval_s=3600)
    for i in range(5):
        ts.observe(f"request {i}", "web_search")
    assert (ts.observe_stats.pending, ts.observe_stats.dropped) == (2, 3)
    await ts.close()
    assert ts.observe_stats.failed == 2


async def test_a_malformed_turn_is_counted_not_raised() -> None:
    """A turn that breaks the request model (a 300-character tool name) is counted `invalid`."""
    async with AsyncClient(down_url(), retries=0) as ts:
        ts.observe("request", "x" * 300)
        ts.observe("request", "web_search", outcome="maybe")
        assert (ts.observe_stats.invalid, ts.observe_stats.pending) == (2, 0)


def test_import_leaves_the_model_stack_out() -> None:
    """Importing the client loads no numpy, onnxruntime, scikit-learn or structlog."""
    code = (
        "import sys, toolselect.client; "
        "print(sorted(m for m in ('numpy', 'onnxruntime', 'sklearn', 'structlog',"
        " 'toolselect.service') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_async_observe_off_the_loop_is_counted_not_raised() -> None:
    """`AsyncClient.observe` called with no running loop refuses the turn quietly."""
    ts = AsyncClient(down_url())
    ts.observe("request", "web_search")
    assert (ts.observe_stats.invalid, ts.observe_stats.pending) == (1, 0)


@pytest_asyncio.fixture(loop_scope="function")
async def keys_stub() -> AsyncIterator[Stub]:
    """A stand-in for `POST /v1/keys`."""
    async for stub in start_stub("/v1/keys"):
        yield stub


async def test_a_key_is_not_asked_for_twice_once_the_server_may_have_made_it(
    keys_stub: Stub, rank_stub: Stub
) -> None:
    """A create that timed out may have made its key: sending it again would make a second
    key nobody is shown, so it is raised after one attempt. A ranking, which repeats without
    harm, is retried; so is a create the server never received (connection refused)."""
    keys_stub.reply(Reply(hang=True))
    async with AsyncClient(keys_stub.url, sleep=Sleeps(), retries=3, timeout_s=0.2) as ts:
        with pytest.raises(Unreachable) as raised:
            await ts.create_key("team-a", "agent")
    assert raised.value.sent and len(keys_stub.received) == 1
    rank_stub.reply(Reply(hang=True))
    async with AsyncClient(rank_stub.url, sleep=Sleeps(), retries=3, timeout_s=0.2) as ts:
        with pytest.raises(Unreachable):
            await ts.rank("weather?")
    assert len(rank_stub.received) == 4
    sleeps = Sleeps()
    async with AsyncClient(down_url(), sleep=sleeps, retries=2) as ts:
        with pytest.raises(Unreachable) as raised:
            await ts.create_key("team-a", "agent")
    assert not raised.value.sent and len(sleeps.delays) == 2


def test_a_closed_sync_client_raises_a_client_error() -> None:
    """A call after `close` is a `ClientError` saying so, not the event loop's RuntimeError."""
    client = Client(down_url())
    client.close()
    with pytest.raises(ClientError, match="the client is closed"):
        client.rank("weather?")


async def test_a_closed_async_client_sends_nothing_more(rank_stub: Stub) -> None:
    """After `close` a call is a `ClientError` (it reopened a session nobody would close),
    and a turn observed is counted dropped, not sent."""
    ts = AsyncClient(rank_stub.url)
    await ts.close()
    with pytest.raises(ClientError, match="the client is closed"):
        await ts.rank("weather?")
    ts.observe("weather?", "get_weather")
    assert ts.observe_stats.dropped == 1
    with pytest.raises(ClientError, match="the client is closed"):
        await ts.call("POST", "/v1/observe/batch", m.ObserveBatchResponse, {"turns": []})
    assert rank_stub.received == []


def test_a_client_refused_its_options_leaves_no_thread() -> None:
    """Bad options raise from the constructor before the client's loop thread starts."""
    before = {t for t in threading.enumerate() if t.name == "toolselect-client"}
    for options in ({"bogus": 1}, {"observe_batch": 0}):
        with pytest.raises((TypeError, ValueError)):
            Client(down_url(), **options)
    after = {t for t in threading.enumerate() if t.name == "toolselect-client"}
    assert after == before


@pytest_asyncio.fixture(loop_scope="function")
async def batch_stub() -> AsyncIterator[Stub]:
    """A stand-in for `POST /v1/observe/batch`."""
    async for stub in start_stub("/v1/observe/batch"):
        yield stub


async def test_turns_wait_out_a_server_that_cannot_take_them(batch_stub: Stub) -> None:
    """A batch the server cannot take now (503 while it starts, after the client's retries)
    goes back to the buffer and is sent on a later round, in order, with its turn ids: a
    restart loses no turn."""
    answers = iter([Reply(503, OVERLOADED)] * 3)
    batch_stub.responder = lambda body: next(
        answers, Reply(202, {"queued": len(body["turns"]), "dropped": 0})
    )
    async with AsyncClient(
        batch_stub.url, sleep=Sleeps(), retries=0, observe_batch=4, observe_interval_s=0.01
    ) as ts:
        for i in range(10):
            ts.observe(f"request {i}", "web_search", turn_id=f"t{i}")
        for _ in range(500):
            if ts.observe_stats.sent == 10:
                break
            await asyncio.sleep(0.01)
        stats = ts.observe_stats
    assert (stats.sent, stats.failed, stats.pending) == (10, 0, 0)
    sent = [t["turn_id"] for r in batch_stub.received for t in r.body["turns"]]
    assert sent[:4] == sent[4:8] == sent[8:12] == sent[12:16] == ["t0", "t1", "t2", "t3"]
    assert sorted(set(sent)) == sorted(f"t{i}" for i in range(10))


async def test_closing_on_a_down_server_tries_one_batch_not_each() -> None:
    """`close` with thousands of turns for an absent server tries one batch once, without the
    client's retries, then fails the rest at once, counted."""
    sleeps = Sleeps()
    ts = AsyncClient(down_url(), sleep=sleeps, retries=2, observe_batch=500,
                     observe_interval_s=3600)  # fmt: skip
    for i in range(5000):
        ts.observe(f"request {i}", "web_search")
    await ts.close()
    assert (ts.observe_stats.failed, ts.observe_stats.pending) == (5000, 0)
    assert sleeps.delays == []


# What a reverse proxy answers while the server behind it restarts or hangs, or in its place.
BAD_GATEWAY = Reply(502, text="<html><body>502 Bad Gateway</body></html>", content_type="text/html")
GATEWAY_TIMEOUT = Reply(504, text="<html>504 Gateway Time-out</html>", content_type="text/html")
PORTAL_PAGE = Reply(200, text="<html>captive portal</html>", content_type="text/html")


@pytest.mark.parametrize("fault", [BAD_GATEWAY, GATEWAY_TIMEOUT, PORTAL_PAGE])
async def test_turns_wait_out_a_proxy_answering_for_a_restarting_server(
    batch_stub: Stub, fault: Reply
) -> None:
    """A proxy's 502 or 504, or its page where the server's answer should be, is a server
    that cannot take turns now: they wait in the buffer and go on a later round (the server
    stores a turn sent again once, by its id), none counted failed."""
    answers = iter([fault] * 2)
    batch_stub.responder = lambda body: next(
        answers, Reply(202, {"queued": len(body["turns"]), "dropped": 0})
    )
    async with AsyncClient(
        batch_stub.url, sleep=Sleeps(), retries=0, observe_interval_s=0.01
    ) as ts:
        for i in range(3):
            ts.observe(f"request {i}", "web_search", turn_id=f"t{i}")
        for _ in range(500):
            if ts.observe_stats.sent == 3:
                break
            await asyncio.sleep(0.01)
        stats = ts.observe_stats
    assert (stats.sent, stats.failed, stats.pending) == (3, 0, 0)
    sent = [[t["turn_id"] for t in r.body["turns"]] for r in batch_stub.received]
    assert sent == [["t0", "t1", "t2"]] * 3


async def test_a_proxys_answers_are_retried_unless_the_call_makes_something(
    rank_stub: Stub, keys_stub: Stub
) -> None:
    """A ranking goes again after a 502, a 504 and a proxy's page, with the backoff of a 503;
    a 500 is the server's answer, raised at once. A new key is not asked for again after any
    of the proxy's answers: the server behind it may have made one."""
    rank_stub.reply(BAD_GATEWAY, GATEWAY_TIMEOUT, PORTAL_PAGE, Reply(200, RANKED))
    sleeps = Sleeps()
    async with AsyncClient(rank_stub.url, sleep=sleeps, backoff_s=1.0, max_backoff_s=8) as ts:
        assert (await ts.rank("weather?")).results[0].tool == "get_weather"
        assert len(rank_stub.received) == 4
        first, second, third = sleeps.delays
        assert 0.5 <= first <= 1.0 and 1.0 <= second <= 2.0 and 2.0 <= third <= 4.0
        rank_stub.script[:] = [Reply(500, {"error": {"code": "internal", "message": "a bug"}})]
        with pytest.raises(ApiError) as caught:
            await ts.rank("weather?")
    assert caught.value.status == 500 and len(rank_stub.received) == 5
    for fault in (BAD_GATEWAY, GATEWAY_TIMEOUT, PORTAL_PAGE):
        keys_stub.script[:] = [fault]
        before = len(keys_stub.received)
        async with AsyncClient(keys_stub.url, sleep=Sleeps(), retries=3) as ts:
            with pytest.raises(ClientError):
                await ts.create_key("team-a", "agent")
        assert len(keys_stub.received) == before + 1


class HeldSleep:
    """An injected `sleep` that waits until the test releases it (a long `Retry-After`), and
    notes whether it was cut short."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cut = False

    async def __call__(self, seconds: float) -> None:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cut = True
            raise


async def test_close_ends_a_retry_waiting_its_turn_and_sends_nothing_more(
    rank_stub: Stub,
) -> None:
    """A call waiting out a 503 when the client closes fails at once with a `ClientError`
    saying it is closed: the wait is cut short and no attempt follows."""
    rank_stub.reply(Reply(503, OVERLOADED, headers={"Retry-After": "5"}))
    sleep = HeldSleep()
    ts = AsyncClient(rank_stub.url, sleep=sleep, retries=2)
    ranking = asyncio.create_task(ts.rank("weather?"))
    await sleep.started.wait()
    await ts.close()
    sleep.release.set()  # had the wait gone on, the retry would go now
    with pytest.raises(ClientError, match="the client is closed"):
        await ranking
    assert sleep.cut
    assert len(rank_stub.received) == 1


async def test_close_ends_an_attempt_in_flight_without_another(rank_stub: Stub) -> None:
    """An attempt awaiting a server that does not answer when the client closes ends with a
    `ClientError` saying it is closed, not `Unreachable`, and is not made again."""
    rank_stub.reply(Reply(hang=True))
    ts = AsyncClient(rank_stub.url, sleep=Sleeps(), retries=2, timeout_s=0.5)
    ranking = asyncio.create_task(ts.rank("weather?"))
    await rank_stub.arrived.wait()
    await ts.close()
    with pytest.raises(ClientError, match="the client is closed"):
        await ranking
    assert len(rank_stub.received) == 1


async def test_a_closed_transport_opens_no_session(rank_stub: Stub) -> None:
    """`AiohttpTransport.send` after `aclose` raises a `ClientError` and opens no session
    (which nobody would close)."""
    transport = AiohttpTransport()
    await transport.aclose()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(ClientError, match="the client is closed"):
            await transport.send(
                "POST", f"{rank_stub.url}/v1/rank", body=b"{}", headers={}, timeout_s=1.0
            )
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
    assert rank_stub.received == []


@pytest.mark.parametrize(
    "fault", [Reply(hang=True), Reply(503, OVERLOADED, headers={"Retry-After": "5"})]
)
async def test_close_tries_the_buffered_turns_once(batch_stub: Stub, fault: Reply) -> None:
    """Closing on a server that accepts connections but never answers, or answers 503, sends
    the buffered batch once (its timeout within `close_timeout_s`), without the client's
    retries or their waits, and counts its turns failed."""
    batch_stub.reply(fault)
    sleeps = Sleeps()
    ts = AsyncClient(
        batch_stub.url, sleep=sleeps, retries=3, timeout_s=0.3, observe_interval_s=3600
    )
    for i in range(3):
        ts.observe(f"request {i}", "web_search")
    await ts.close()
    stats = ts.observe_stats
    assert (stats.sent, stats.failed, stats.pending) == (0, 3, 0)
    assert len(batch_stub.received) == 1
    assert sleeps.delays == []


async def test_close_waits_for_a_batch_in_flight_at_most_close_timeout(batch_stub: Stub) -> None:
    """A batch the sender has in flight when the client closes gets `close_timeout_s` to be
    answered, not the client's timeout and retries: cut short, it and the turns behind it are
    counted failed, and nothing more is sent."""
    batch_stub.reply(Reply(hang=True))
    ts = AsyncClient(
        batch_stub.url,
        sleep=Sleeps(),
        retries=1,
        timeout_s=5.0,
        close_timeout_s=0.2,
        observe_batch=1,
        observe_interval_s=3600,
    )
    ts.observe("request 0", "web_search")
    await batch_stub.arrived.wait()
    ts.observe("request 1", "web_search")
    await ts.close()
    stats = ts.observe_stats
    assert (stats.sent, stats.failed, stats.pending) == (0, 2, 0)
    assert len(batch_stub.received) == 1
