"""Services on either store for API and end-to-end tests (the `services` fixture is in conftest)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import neo4j
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.neo4j_server import Neo4jServer
from toolselect.api.app import create_app
from toolselect.api.http import SERVICE
from toolselect.client import AiohttpTransport, Response
from toolselect.clock import Clock, utc_now
from toolselect.config import Settings
from toolselect.service import Service

# pytest-aiohttp's `aiohttp_client` fixture: an app in, a client of it on a real socket out.
ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


async def wipe(server: Neo4jServer) -> None:
    """Empty the test database so a test starts from nothing."""
    async with neo4j.AsyncGraphDatabase.driver(server.uri, auth=server.auth) as driver:
        await driver.execute_query("MATCH (n) DETACH DELETE n", database_=server.database)


class ServiceFactory:
    """Starts services on one store kind (`sqlite` file or the session Neo4j) and closes them."""

    def __init__(self, kind: str, tmp_path: Path, server: Neo4jServer | None) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.server = server
        self.started: list[Service] = []

    def settings(self, **overrides: Any) -> Settings:
        # Pinned: the service tests' expected rankings were written for the lexical embedder,
        # and it keeps every fixture free of a model load.
        base = Settings(
            data_dir=str(self.tmp_path), poll_interval_s=0.2, oracle="on", embedder="hashing"
        )
        if self.server is None:
            base = base.override(store=f"sqlite:{self.tmp_path / 'toolselect.db'}")
        else:
            base = base.override(
                store="neo4j",
                neo4j_uri=self.server.uri,
                neo4j_username=self.server.username,
                neo4j_password=self.server.password,
                neo4j_database=self.server.database,
            )
        return base.override(**overrides)

    async def start(
        self, *, wait_for_store: bool = False, clock: Clock = utc_now, **overrides: Any
    ) -> Service:
        service = await Service.start(
            self.settings(**overrides), wait_for_store=wait_for_store, clock=clock
        )
        self.started.append(service)
        return service

    async def serve(
        self,
        aiohttp_client: ClientFactory,
        *,
        server_kwargs: dict[str, Any] | None = None,
        clock: Clock = utc_now,
        **overrides: Any,
    ) -> tuple[TestClient[Any, Any], Service]:
        """The HTTP app behind a test client over a service started on these settings as the
        server starts it (with `clock`: a `FakeClock` a test moves), and that service (closed by
        `aclose`, after the client: the `services` fixture is set up first); `server_kwargs` go
        to aiohttp's test server (`handler_cancellation`, say)."""
        service = await self.start(wait_for_store=True, clock=clock, **overrides)
        client = await aiohttp_client(create_app(service), server_kwargs=server_kwargs or {})
        return client, service

    async def aclose(self) -> None:
        for service in reversed(self.started):
            await service.close()


def service_of(client: TestClient[Any, Any]) -> Service:
    """The service an app under test serves."""
    app: web.Application = client.app
    return app[SERVICE]


def free_port() -> int:
    """A loopback port free right now (for a server a test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raw_exchange(url: str, request: bytes) -> tuple[int, dict[str, str], Any]:
    """Send `request` as bytes on a fresh connection to the server at `url` and read until it
    closes: the status, the headers (names in lower case) and the JSON body."""
    where = urlsplit(url)
    address = (where.hostname or "127.0.0.1", where.port or 80)
    with closing(socket.create_connection(address, timeout=10)) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def cli_env(db: Path, **extra: str) -> dict[str, str]:
    """The process environment without inherited toolselect, Neo4j or Anthropic settings,
    pointing `toolselect` at the embedded store `db` with the hashing embedder, its data folder
    (spool, vector cache) beside it: the default one is the user's, shared by every run."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLSELECT_", "NEO4J_"))}
    keep.pop("ANTHROPIC_API_KEY", None)
    return {
        **keep,
        "TOOLSELECT_STORE": f"sqlite:{db}",
        "TOOLSELECT_DATA_DIR": str(db.parent),
        "TOOLSELECT_LOG_FORMAT": "json",
        "TOOLSELECT_EMBEDDER": "hashing",
        **extra,
    }


class WatchedTransport(AiohttpTransport):
    """The real client transport, calling `before` ahead of every request: a test records,
    counts, holds or fails requests there, and the rest goes over the wire as ever."""

    async def before(self, method: str, url: str, body: bytes | None) -> None:
        """Override: runs before `method url` is sent (raise to fail it)."""

    async def send(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> Response:
        await self.before(method, url, body)
        return await super().send(method, url, body=body, headers=headers, timeout_s=timeout_s)
