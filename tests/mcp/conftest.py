"""`toolselect mcp` as a host runs it: a real process on a temporary SQLite store with a small
catalog, reached with the MCP SDK's own client over stdio or streamable HTTP."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.services import cli_env, free_port

EXE = [sys.executable, "-m", "toolselect.cmd.main"]
CATALOG = {
    "tools": [
        {
            "name": "send_email",
            "description": "Send an email message to a recipient.",
            "inputSchema": {
                "type": "object",
                "properties": {"to": {"type": "string", "description": "Recipient address"}},
                "required": ["to"],
            },
        },
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "web_search", "description": "Search the web for pages matching a query."},
    ]
}
TRANSPORTS = ("stdio", "http")

Connect = Callable[[], AbstractAsyncContextManager[Client]]


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXE, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def spawn_stdio(store_db: Path, log: Path) -> subprocess.Popen[str]:
    """`toolselect mcp` over stdio on `store_db`, its stderr to `log`, for a test to speak
    JSON-RPC lines to itself (without the SDK's client)."""
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [*EXE, "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=cli_env(store_db),
        )
    return proc


def wait_for_port(port: int, proc: subprocess.Popen[str], log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            pass
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"nothing listening on {port}"
        time.sleep(0.1)


def stop(proc: subprocess.Popen[str], log: Path) -> None:
    """SIGTERM, then the service must have closed (uvicorn then ends by the signal itself)."""
    proc.terminate()
    assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    assert "mcp_service_closed" in log.read_text(), log.read_text()


@pytest.fixture(scope="module")
def store_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh SQLite store holding the three-tool catalog, shared by a module's tests."""
    folder = tmp_path_factory.mktemp("mcp")
    db = folder / "store.db"
    catalog = folder / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    done = run_cli(["tools", "import", str(catalog)], cli_env(db))
    assert done.returncode == 0, done.stderr
    return db


@pytest.fixture(scope="module")
def http_url(store_db: Path) -> Iterator[str]:
    """`toolselect mcp --transport http` on a free loopback port; SIGTERM must end it cleanly."""
    port = free_port()
    log = store_db.parent / "mcp-http.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [*EXE, "mcp", "--transport", "http", "--port", str(port)],
            env=cli_env(store_db),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc, log)


def stdio_params(db: Path) -> StdioServerParameters:
    """How a host starts `toolselect mcp` over stdio, pointed at the store `db`."""
    return StdioServerParameters(command=EXE[0], args=[*EXE[1:], "mcp"], env=cli_env(db))


@pytest.fixture(params=TRANSPORTS)
def connect(request: pytest.FixtureRequest, store_db: Path) -> Connect:
    """Opens an SDK client session on `toolselect mcp` over the transport under test."""
    target: str | StdioServerParameters = (
        request.getfixturevalue("http_url") if request.param == "http" else stdio_params(store_db)
    )

    @asynccontextmanager
    async def session() -> AsyncIterator[Client]:
        async with Client(target, read_timeout_seconds=60) as client:
            yield client

    return session
