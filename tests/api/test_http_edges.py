"""The HTTP layer's edges against the real app on a real socket: header bytes that are not
UTF-8, repeated credentials, bodies declared over the limit or never finished, numbers past a
float, the parser's limits at their boundary, and the field every error names."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient
from multidict import CIMultiDict

from tests.services import ServiceFactory, service_of
from toolselect.api.protocol import answer_protocol_errors_in_json
from toolselect.json_text import MAYBE_NOT_FINITE, parse_json
from toolselect.keys import TENANT_HEADER
from toolselect.records import Tool

Client = TestClient[Any, Any]
ClientFactory = Callable[..., Awaitable[Client]]
ADMIN = "tsk_admin-4c1e"
RANK = b'{"query":"weather"}'


@pytest_asyncio.fixture(loop_scope="function")
async def factory(tmp_path: Path) -> AsyncIterator[ServiceFactory]:
    services = ServiceFactory("sqlite", tmp_path, None)
    yield services
    await services.aclose()


async def serve(factory: ServiceFactory, aiohttp_client: ClientFactory, **settings: Any) -> Client:
    client, service = await factory.serve(aiohttp_client, **settings)
    await service.catalog.upsert_tools([Tool("get_weather", "Weather for a city")])
    return client


class Answer:
    """One response read off a raw connection: the status line's code, headers, JSON body,
    and any interim (1xx) status lines before it."""

    def __init__(self, status: int, headers: dict[str, str], body: Any, interim: list[int]):
        self.status, self.headers, self.body, self.interim = status, headers, body, interim

    @property
    def error(self) -> dict[str, Any]:
        return dict(self.body["error"])


async def _answer(reader: asyncio.StreamReader) -> Answer:
    interim = []
    while True:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        lines = head.split("\r\n")
        status = int(lines[0].split()[1])
        if status >= 200:
            break
        interim.append(status)
    headers = {k.lower(): v for k, v in (ln.split(": ", 1) for ln in lines[1:] if ln)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    is_json = headers.get("content-type", "").startswith("application/json")
    return Answer(status, headers, json.loads(body) if is_json else body, interim)


async def exchange(client: Client, request: bytes, *, guard_s: float = 20.0) -> Answer:
    """Send `request` as bytes on a new connection and read the one answer. `guard_s` only
    keeps a server that never answers from hanging the test."""
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(_answer(reader), guard_s)
    finally:
        writer.close()


def post(
    path: str, body: bytes, *headers: str, length: int | None = None, method: str = "POST"
) -> bytes:
    """A POST of `body` with JSON's content type, `headers` ("Name: value") and a
    Content-Length of `length` (the body's own by default)."""
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: x",
        "Content-Type: application/json",
        f"Content-Length: {len(body) if length is None else length}",
        *headers,
    ]
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body


async def test_a_key_whose_bytes_are_not_utf8_is_401_on_every_guarded_route(
    factory: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """One byte that is not UTF-8 in the key is an unknown key (401 naming Authorization), on
    /v1/* and on /metrics; without any key it is served as any other unknown key is."""
    client = await serve(factory, aiohttp_client, api_keys=(ADMIN,))
    garbled = "Authorization: Bearer tsk_\xe9"
    answer = await exchange(client, post("/v1/rank", RANK, garbled))
    assert (answer.status, answer.error["code"]) == (401, "unauthorized")
    assert answer.error["field"] == "Authorization"
    assert answer.headers["www-authenticate"] == "Bearer"
    scrape = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n\r\n"
    assert (await exchange(client, scrape)).status == 401
    text = await (await client.get("/metrics")).text()
    assert 'toolselect_http_rejected_total{reason="unauthorized"} 2.0' in text
    assert 'status="500"' not in text

    open_client = await serve(factory, aiohttp_client)
    answer = await exchange(open_client, post("/v1/rank", RANK, garbled))
    assert answer.status == 200, answer.body
    scrape = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\r\n\r\n"
    assert (await exchange(open_client, scrape)).status == 200


async def test_repeated_credentials_are_refused_whichever_comes_first(
    factory: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Two Authorization headers (an agent key and an admin key, either way round) or two
    tenant headers are 400 naming the header: no one of them silently counts."""
    client = await serve(factory, aiohttp_client, api_keys=(ADMIN,))
    admin = f"Bearer {ADMIN}"
    made = await client.post(
        "/v1/keys", json={"tenant": "default", "role": "agent"}, headers={"Authorization": admin}
    )
    assert made.status == 201, await made.text()
    agent = f"Bearer {(await made.json())['key']}"
    for first, second in ((agent, admin), (admin, agent)):
        headers = CIMultiDict([("Authorization", first), ("Authorization", second)])
        resp = await client.get("/v1/keys", headers=headers)
        assert resp.status == 400, await resp.text()
        error = (await resp.json())["error"]
        assert (error["code"], error["field"]) == ("bad_request", "Authorization")
    twice = CIMultiDict(
        [("Authorization", admin), (TENANT_HEADER, "team-a"), (TENANT_HEADER, "default")]
    )
    resp = await client.post("/v1/rank", json={"query": "weather"}, headers=twice)
    assert resp.status == 400
    assert (await resp.json())["error"]["field"] == TENANT_HEADER


async def test_a_body_declared_over_the_limit_is_413_before_any_of_it(
    factory: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    """Content-Length over the limit is 413 too_large at once, the connection closed: without
    `100 Continue` when the client waits for one, whether or not a byte of it came."""
    client = await serve(factory, aiohttp_client, request_timeout_s=60.0)
    cases = [
        post("/v1/rank", b"", "Expect: 100-continue", length=5_000_000),
        post("/v1/rank", b"{", length=5_000_000),
        post("/v1/tools", b"", length=1024**2 + 1, method="PUT"),
    ]
    for request in cases:
        answer = await exchange(client, request)
        assert answer.interim == []
        assert (answer.status, answer.error["code"]) == (413, "too_large"), answer.body
        assert answer.error["field"] == "body"
        assert answer.headers["connection"] == "close"
    # At the limit the client is told to go on.
    at_limit = post("/v1/rank", b"", "Expect: 100-continue", length=1024**2)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(at_limit)
    assert await asyncio.wait_for(reader.readline(), 20) == b"HTTP/1.1 100 Continue\r\n"
    writer.close()


async def test_an_unknown_expectation_is_417_in_json(client: Client) -> None:
    resp = await client.post("/v1/rank", json={"query": "w"}, headers={"Expect": "coffee"})
    assert resp.status == 417
    error = (await resp.json())["error"]
    assert (error["code"], error["field"]) == ("expectation_failed", "Expect")


@pytest.mark.slow  # waits seconds: kept out of `make test-fast`
async def test_overload_and_timeout_name_retry_after(
    factory: ServiceFactory, aiohttp_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests held in the ranker fill the slots: the next is 503 overloaded, one held past
    the time limit 503 timeout, each naming Retry-After, the header that says when to retry."""
    client = await serve(factory, aiohttp_client, max_concurrency=1, request_timeout_s=1.0)
    ranking = service_of(client).ranking
    entered, release = asyncio.Event(), asyncio.Event()
    search = ranking.search

    async def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        return await search(*args, **kwargs)

    monkeypatch.setattr(ranking, "search", held)
    first = asyncio.create_task(client.post("/v1/rank", json={"query": "weather"}))
    await entered.wait()
    refused = await client.post("/v1/rank", json={"query": "weather"})
    assert refused.status == 503 and refused.headers["Retry-After"] == "1"
    error = (await refused.json())["error"]
    assert (error["code"], error["field"]) == ("overloaded", "Retry-After")
    timed_out = await first
    error = (await timed_out.json())["error"]
    assert (timed_out.status, error["code"], error["field"]) == (503, "timeout", "Retry-After")


async def test_rate_limited_names_retry_after(
    factory: ServiceFactory, aiohttp_client: ClientFactory
) -> None:
    client = await serve(factory, aiohttp_client, tenant_rps=0.001, tenant_burst=1)
    assert (await client.post("/v1/rank", json={"query": "weather"})).status == 200
    resp = await client.post("/v1/rank", json={"query": "weather"})
    error = (await resp.json())["error"]
    assert (resp.status, error["code"], error["field"]) == (429, "rate_limited", "Retry-After")


@pytest.mark.parametrize(
    "number",
    ["1" + "0" * 400 + ".0", "-1" + "0" * 400 + ".5", "1" + "0" * 250 + "e99", "1e400", "NaN"],
)
async def test_a_number_past_a_float_is_400_on_select(client: Client, number: str) -> None:
    """Any literal that is infinite as a float is refused, however it is written."""
    candidate = '{"ID":"a","Metadata":{"x":NUMBER}}'.replace("NUMBER", number)
    text = '{"query":{"Text":"hi"},"candidates":[' + candidate + "]}"
    resp = await client.post("/v1/select", data=text, headers={"Content-Type": "application/json"})
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"]["code"] == "invalid_json"


def test_the_pre_check_finds_every_number_parse_json_refuses() -> None:
    """`MAYBE_NOT_FINITE` matches each literal past a float's range, for any split of its
    magnitude between digits and exponent, so `read_model` never lets one through unparsed."""
    missed = []
    for digits in range(1, 320, 7):
        for exponent in (*range(0, 100, 9), 99, 300, 308, 309):
            for fraction in ("", ".5"):
                literal = "9" * digits + fraction + f"e{exponent}"
                if MAYBE_NOT_FINITE.search(literal.encode()) is None:
                    try:
                        parse_json(literal)
                    except ValueError:
                        missed.append(f"{digits} digits{fraction} e{exponent}")
    assert missed == []


async def test_the_parser_limits_at_their_boundary(client: Client) -> None:
    """The request target and each header value may be 8,190 bytes, a header name 8,186, not
    one more; at most 128 headers. Past a limit: 400 bad_request naming the request (as
    `serve` answers it)."""
    assert client.server.runner is not None
    answer_protocol_errors_in_json(client.server.runner)

    def get(target_bytes: int, value_bytes: int = 0, headers: int = 1, name: int = 3) -> bytes:
        target = "/healthz?" + "a" * (target_bytes - len("/healthz?"))
        extra = [f"X-{i}: a" for i in range(headers - 2)]
        last = "X" * name + ": " + "v" * value_bytes
        lines = [f"GET {target} HTTP/1.1", "Host: x", *extra, last]
        return "\r\n".join(lines).encode() + b"\r\n\r\n"

    assert (await exchange(client, get(8190))).status == 200
    assert (await exchange(client, get(100, value_bytes=8190))).status == 200
    assert (await exchange(client, get(100, headers=128))).status == 200
    assert (await exchange(client, get(100, value_bytes=1, name=8186))).status == 200
    past = (get(8191), get(100, value_bytes=8191), get(100, headers=129), get(100, 1, name=8187))
    for request in past:
        answer = await exchange(client, request)
        assert (answer.status, answer.error["code"]) == (400, "bad_request")
        assert answer.error["field"] == "request"


async def test_request_ids_are_bounded(client: Client) -> None:
    """A caller's X-Request-Id of at most 128 printable ASCII characters is echoed; a longer one
    or one with spaces or other bytes is replaced by a generated one."""
    given = "r" * 127 + "~"
    resp = await client.post("/v1/rank", json={"query": "w"}, headers={"X-Request-Id": given})
    assert resp.headers["X-Request-Id"] == given
    for odd in ("r" * 129, "two words", "caf\xe9"):
        request = post("/v1/rank", b'{"query":"w"}', f"X-Request-Id: {odd}")
        answer = await exchange(client, request)
        assert answer.status == 200
        assert re.fullmatch("[0-9a-f]{32}", answer.headers["x-request-id"]), odd


async def test_a_missing_content_type_is_named_as_none(client: Client) -> None:
    request = b'POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{"query":"w"}'
    answer = await exchange(client, request)
    assert (answer.status, answer.error["field"]) == (415, "Content-Type")
    assert answer.error["message"].endswith("got none")
