"""Process-level faults: SIGTERM under load drains and exits 0; SIGKILL leaves SQLite whole."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from tests.services import cli_env, free_port
from toolselect.store.sqlite.store import SqliteStore

pytestmark = pytest.mark.slow

EXE = [sys.executable, "-m", "toolselect.cmd.main"]
CATALOG = {
    "tools": [
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "send_email", "description": "Send an email message to a recipient."},
        {"name": "shell_exec", "description": "Run a shell command on the host."},
    ]
}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path / "serve.db", TOOLSELECT_SHUTDOWN_TIMEOUT="10")


async def wait_ready(url: str, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        while True:
            assert proc.returncode is None, "server exited during start"
            try:
                async with session.get(url + "/readyz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)


async def test_sigterm_under_load_drains_and_exits_zero(
    env: dict[str, str], tmp_path: Path
) -> None:
    """SIGTERM while 32 clients rank and observe: every answer was 2xx, the process exits 0,
    and every turn acknowledged as queued is in the store afterwards."""
    catalog = tmp_path / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    imported = await asyncio.to_thread(
        subprocess.run, [*EXE, "tools", "import", str(catalog)], env=env, capture_output=True
    )
    assert imported.returncode == 0, imported.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = await asyncio.create_subprocess_exec(
        *EXE, "serve", "--port", str(port), env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_ready(url, proc)
        acknowledged: list[str] = []
        statuses: list[int] = []
        stop_at = time.monotonic() + 6

        async def client(n: int) -> None:
            async with aiohttp.ClientSession() as session:
                i = 0
                while time.monotonic() < stop_at:
                    i += 1
                    try:
                        if i % 4 == 0:
                            turn_id = f"c{n}-{i}"
                            body: dict[str, object] = {"request": f"send an email {n} {i}", "used_tool": "shell_exec",
                                    "turn_id": turn_id}  # fmt: skip
                            async with session.post(url + "/v1/observe", json=body) as resp:
                                statuses.append(resp.status)
                                if (await resp.json()).get("queued"):
                                    acknowledged.append(turn_id)
                        else:
                            body = {"query": f"weather {n} {i}", "k": 2}
                            async with session.post(url + "/v1/rank", json=body) as resp:
                                statuses.append(resp.status)
                                await resp.read()
                    except (aiohttp.ClientError, ConnectionError):
                        return  # the server stopped accepting: this client is done

        clients = [asyncio.create_task(client(n)) for n in range(32)]
        await asyncio.sleep(1.5)
        proc.send_signal(signal.SIGTERM)
        await asyncio.gather(*clients)
        code = await asyncio.wait_for(proc.wait(), 30)
        assert code == 0, await proc.stderr.read() if proc.stderr else b""
        assert statuses and set(statuses) <= {200, 202}, set(statuses)
        assert acknowledged
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    store = SqliteStore(tmp_path / "serve.db")
    try:
        missing = [t for t in acknowledged if await store.get_turn(t) is None]
        assert missing == []
    finally:
        await store.close()


WRITER = """
import asyncio, sys
from datetime import UTC, datetime
from pathlib import Path
from tests.services import cli_env, free_port
from toolselect.store.sqlite.store import SqliteStore
from toolselect.records import Turn

async def main():
    store = SqliteStore(Path(sys.argv[1]))
    await store.migrate()
    n = 0
    while True:
        batch = [Turn(id=f"t{n + i}", request="r" * 200, used_tool="shell_exec",
                      at=datetime.now(UTC)) for i in range(1000)]
        await store.record_turns(batch)
        n += 1000
        print(n, flush=True)

asyncio.run(main())
"""


async def test_sigkill_leaves_sqlite_consistent(tmp_path: Path) -> None:
    """SIGKILL of a process writing 1,000-turn batches: the file reopens, passes
    integrity_check, and holds whole batches only."""
    db = tmp_path / "killed.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, str(db), stdout=subprocess.PIPE,
        env={**os.environ, "TOOLSELECT_LOG_FORMAT": "json"},
    )  # fmt: skip
    assert proc.stdout is not None
    committed = 0
    while committed < 3000:  # let a few batches commit, then kill mid-stream
        line = (await proc.stdout.readline()).decode()
        assert line, "writer exited early"
        if line.strip().isdigit():
            committed = int(line)
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        (stored,) = conn.execute("SELECT count(*) FROM turns").fetchone()
    assert stored >= committed and stored % 1000 == 0, stored
    store = SqliteStore(db)
    try:
        await store.migrate()
        assert await store.get_turn(f"t{stored - 1}") is not None
        assert await store.get_turn(f"t{stored}") is None
    finally:
        await store.close()
