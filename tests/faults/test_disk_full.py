"""A full disk under a `toolselect serve` on SQLite: its process may grow no file past a limit
(`RLIMIT_FSIZE`, what a full disk looks like to SQLite: a write that fails), so the store and
then the spool beside it stop taking writes while turns keep arriving."""

from __future__ import annotations

import asyncio
import json
import re
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from tests.services import cli_env, free_port

pytestmark = pytest.mark.slow

EXE = [sys.executable, "-m", "toolselect.cmd.main"]
CATALOG = {
    "tools": [
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "send_email", "description": "Send an email message to a recipient."},
    ]
}
FILE_LIMIT = 1_500_000  # bytes any one file of the server may reach
TURNS = 600  # of about 6 KB each: twice what the store's and the spool's files can hold


def limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


def metric(text: str, name: str, labels: str) -> float:
    found = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def rows(db: Path, query: str) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute(query).fetchone()[0])


async def test_a_full_disk_counts_the_turns_it_cannot_keep_in_one_line_a_batch(
    tmp_path: Path,
) -> None:
    """Every acknowledged turn is stored, spooled or counted dropped (`unwritable`) once
    neither file can grow; the log says so once a batch, not with a traceback a turn, and the
    backlog gauge is the spool's true depth."""
    db = tmp_path / "serve.db"
    env = cli_env(db)
    catalog = tmp_path / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    imported = await asyncio.to_thread(
        subprocess.run, [*EXE, "tools", "import", str(catalog)], env=env, check=False
    )
    assert imported.returncode == 0
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (tmp_path / "serve.log").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *EXE, "serve", "--port", str(port), env=env, stdout=subprocess.DEVNULL,
            stderr=log, preexec_fn=limit_files,
        )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 60
            while True:
                assert proc.returncode is None and time.monotonic() < deadline
                try:
                    async with session.get(url + "/readyz") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            for batch in range(TURNS // 50):
                turns = [
                    {"request": f"weather {batch}-{i} " + "x" * 6000, "used_tool": "get_weather",
                     "turn_id": f"full-{batch}-{i}", "outcome": "ok"}
                    for i in range(50)
                ]  # fmt: skip
                async with session.post(url + "/v1/observe/batch", json={"turns": turns}) as resp:
                    assert await resp.json() == {"queued": 50, "dropped": 0}

            async def accounted() -> tuple[float, float, int, int, int]:
                async with session.get(url + "/metrics") as resp:
                    text = await resp.text()
                dropped = metric(
                    text, "toolselect_observe_dropped_total",
                    'reason="unwritable",tenant="default"',
                )  # fmt: skip
                backlog = metric(text, "toolselect_store_backlog", 'tenant="default"')
                stored = rows(db, "SELECT count(*) FROM turns")
                spool = tmp_path / "spool.db"
                spooled = rows(spool, "SELECT count(*) FROM spool WHERE kind = 'turn'")
                return dropped, backlog, stored, spooled, rows(spool, "SELECT count(*) FROM spool")

            deadline = time.monotonic() + 60
            while True:
                dropped, backlog, stored, spooled, records = await accounted()
                if dropped and stored + spooled + dropped >= TURNS:
                    break
                assert time.monotonic() < deadline, (dropped, backlog, stored, spooled)
                await asyncio.sleep(0.5)
            assert stored + spooled + dropped == TURNS
            assert backlog == records
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    text = (tmp_path / "serve.log").read_text()
    assert "intake_turn_failed" not in text
    assert text.count("Traceback") == 0
    assert 1 <= text.count("intake_batch_unwritable") <= TURNS // 50
