"""Schemathesis against the real server's `/openapi.json`: no 5xx, every response as documented.

The app runs under aiohttp's real server (AppRunner + TCPSite on a free loopback port) in a
background thread with its own event loop, because schemathesis drives it over HTTP with
`requests` from the (synchronous) test thread; once on the embedded SQLite store, once on the
test Neo4j, each holding the demo catalog. Bounded for CI: a fixed seed, deterministic
generation, `MAX_EXAMPLES` per operation plus schemathesis' coverage cases (about 900 requests
per store, ~35 s for both on 2 cores).

The server requires an API key (`FUZZ_KEY`, configured, so the key routes' cases cannot turn
authentication on or off midway) and every case carries it through the document's `bearer`
scheme; the key routes are fuzzed with the rest.

Not checked: `positive_data_acceptance`. JSON Schema cannot say "names unique within the list",
so schema-valid bodies with a repeated tool name or candidate ID are rightly refused (422).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, settings
from pydantic import ValidationError
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from tests.neo4j_server import NEO4J, Neo4jServer
from tests.services import wipe
from toolselect.api import models as m
from toolselect.api.app import create_app_from_settings
from toolselect.api.http import SERVICE
from toolselect.api.key_routes import add_key_routes
from toolselect.api.openapi import served_document
from toolselect.api.routes import add_routes
from toolselect.catalog import load_demo_catalog
from toolselect.config import Settings
from toolselect.keys import TENANT_HEADER, TENANT_PATTERN
from toolselect.service import Service

pytestmark = pytest.mark.slow
SEED = 20_240_611
MAX_EXAMPLES = 50
FUZZ_KEY = "tsk_fuzz-0123456789abcdefghijklmnopqrstuvwxyzABC"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
    unsupported_method,
]


class LiveServer:
    """A started service behind aiohttp's real server, on a loop in a background thread."""

    def __init__(self, settings: Settings, server: Neo4jServer | None) -> None:
        self.settings = settings
        self.neo4j = server
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="fuzz-server", daemon=True
        )
        self.service: Service | None = None
        self.runner: web.AppRunner | None = None
        self.url = ""

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def start(self) -> None:
        self.thread.start()
        self.run(self._start())

    async def _start(self) -> None:
        if self.neo4j is not None:
            await wipe(self.neo4j)
        app = create_app_from_settings(self.settings)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        self.service = app[SERVICE]
        await self.service.catalog.upsert_tools(load_demo_catalog(), pack="demo")
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def stop(self) -> None:
        try:
            self.run(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    async def _stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()  # the service too


def _settings(tmp: Path, server: Neo4jServer | None) -> Settings:
    base = Settings(
        data_dir=str(tmp),
        oracle="on",
        poll_interval_s=0.5,
        embedder="hashing",
        api_keys=(FUZZ_KEY,),
    )
    if server is None:
        return base.override(store=f"sqlite:{tmp / 'toolselect.db'}")
    return base.override(
        store="neo4j",
        neo4j_uri=server.uri,
        neo4j_username=server.username,
        neo4j_password=server.password,
        neo4j_database=server.database,
    )


def _live(tmp: Path, server: Neo4jServer | None) -> Iterator[LiveServer]:
    live = LiveServer(_settings(tmp, server), server)
    live.start()
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module", params=["sqlite", NEO4J])
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """The server on one store (SQLite file, then the wiped test Neo4j) with the demo catalog."""
    server: Neo4jServer | None = None
    if request.param == "neo4j":
        server = request.getfixturevalue("neo4j_server")
    yield from _live(tmp_path_factory.mktemp(f"fuzz-{request.param}"), server)


def _served_routes() -> frozenset[str]:
    """The paths the app registers (what `/openapi.json` keeps), without starting anything."""
    app = web.Application()
    add_routes(app)
    add_key_routes(app)
    return frozenset(resource.canonical for resource in app.router.resources())


# schemathesis' lazy `from_fixture` loader touches pytest internals that pytest 9 removed
# (`Function._nodeid`), so the schema is built at import from the same function the
# `/openapi.json` handler serves; `test_served_document_is_the_fuzzed_one` pins that the
# running server answers exactly this document.
DOCUMENT = served_document(_served_routes(), Settings())
SCHEMA = schemathesis.openapi.from_dict(
    DOCUMENT,
    config=schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "auth": {"openapi": {"bearer": {"bearer": FUZZ_KEY}}},
            "suppress-health-check": ["too_slow", "filter_too_much", "data_too_large"],
            # Schemathesis's default list plus 413: a body past the size limit is refused as
            # too large before its items are counted, which is a rejection too.
            "checks": {
                "negative_data_rejection": {
                    "expected-statuses": [
                        "400",
                        "401",
                        "403",
                        "404",
                        "405",
                        "406",
                        "409",
                        "413",
                        "415",
                        "422",
                        "428",
                        "429",
                        "5xx",
                    ]
                }
            },
            "generation": {
                "mode": "all",
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "database": "none",
            },
        }
    ),
)


def _utf8_bytes(turn: object, field: str) -> int:
    """The UTF-8 length of a string field of a turn the request model has accepted (0 when an
    optional one is absent)."""
    assert isinstance(turn, dict)
    value = turn.get(field) or ""
    assert isinstance(value, str)
    return len(value.encode("utf-8", "surrogatepass"))


def _observe_well_formed(case: schemathesis.Case[Any], settings: Settings) -> bool:
    """Whether an observe case is a JSON body the request model accepts, within the limits,
    naming a well-formed tenant if any."""
    headers = {k.lower(): v for k, v in (case.headers or {}).items()}
    content_type = headers.get("content-type", case.media_type or "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        return False
    tenant = headers.get(TENANT_HEADER.lower())
    if tenant is not None and re.search(TENANT_PATTERN, tenant) is None:
        return False
    single = case.path == "/v1/observe"
    body = case.body
    try:
        (m.ObserveRequest if single else m.ObserveBatchRequest).model_validate(body)
    except ValidationError:
        return False
    assert isinstance(body, dict)  # the models accept only a JSON object
    turns = [body] if single else body["turns"]
    assert isinstance(turns, list)
    if any(m.used_tools_problem(m.ObserveRequest.model_validate(t)) for t in turns):
        return False
    return len(turns) <= settings.max_batch and all(
        _utf8_bytes(t, f) <= settings.max_query_bytes
        for t in turns
        for f in ("request", "used_tool")
    )


def test_served_document_is_the_fuzzed_one(live: LiveServer) -> None:
    """The running server's `/openapi.json` is the document the fuzzer generates cases from."""
    response = requests.get(f"{live.url}/openapi.json", timeout=10)
    assert response.status_code == 200
    assert response.json() == DOCUMENT


@SCHEMA.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api(case: schemathesis.Case[Any], live: LiveServer) -> None:
    """Every operation on each store: no 5xx; status, content type and body as documented;
    schema-violating input refused; undocumented methods 405; a well-formed observe with the
    key is 202 (a coverage case leaves the key out, and is refused 401)."""
    response = case.call_and_validate(base_url=live.url, checks=CHECKS, timeout=30)
    observing = case.method == "POST" and case.path.startswith("/v1/observe")
    keyed = response.request.headers.get("Authorization") == f"Bearer {FUZZ_KEY}"
    if observing and keyed and _observe_well_formed(case, live.settings):
        assert response.status_code == 202, (case.body, response.text)
