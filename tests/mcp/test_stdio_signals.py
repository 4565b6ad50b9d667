"""`toolselect mcp` over stdio ended by a signal, as a host or a supervisor ends it: the turns
already answered `queued` still reach the store, as when stdin closes. A real process spoken to
in JSON-RPC lines, with its store held locked by another connection while the turns come in."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time
import uuid
from pathlib import Path
from typing import IO, Any

import pytest

from tests.mcp.conftest import spawn_stdio
from tests.mcp.test_server import project_store

TURNS = 20


def send(stdin: IO[str], message: dict[str, Any]) -> None:
    stdin.write(json.dumps(message) + "\n")
    stdin.flush()


def answer(stdout: IO[str], request_id: int) -> dict[str, Any]:
    """The response to request `request_id` (notifications and other lines passed over)."""
    while True:
        line = stdout.readline()
        assert line, "the server closed stdout"
        message: dict[str, Any] = json.loads(line)
        if message.get("id") == request_id:
            return message


async def stored(db: Path, turn_ids: list[str]) -> list[str]:
    """Those of `turn_ids` the store `db` holds."""
    async with project_store(db) as store:
        return [turn_id for turn_id in turn_ids if await store.get_turn(turn_id) is not None]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_drains_the_queued_turns(
    store_db: Path, tmp_path: Path, signum: signal.Signals
) -> None:
    """With the store locked, 20 `report_turn` answered `queued`, then the signal: the process
    closes the service (its learner drained once the lock goes) and exits 0, and every turn is
    in the store."""
    log = tmp_path / "mcp.log"
    proc = spawn_stdio(store_db, log)
    assert proc.stdin is not None and proc.stdout is not None
    lock = sqlite3.connect(store_db, isolation_level=None, timeout=30)
    try:
        send(proc.stdin, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}})  # fmt: skip
        assert "result" in answer(proc.stdout, 0)
        send(proc.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        lock.execute("BEGIN EXCLUSIVE")  # the learner's writes wait for it
        turn_ids = [f"sig-{uuid.uuid4().hex}" for _ in range(TURNS)]
        for n, turn_id in enumerate(turn_ids, start=1):
            arguments = {"request": "weather in Oslo?", "used_tool": "get_weather",
                         "turn_id": turn_id}  # fmt: skip
            send(proc.stdin, {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                              "params": {"name": "report_turn", "arguments": arguments}})  # fmt: skip
        for n in range(1, TURNS + 1):
            result = answer(proc.stdout, n)["result"]
            assert result["structuredContent"] == {"queued": True, "reason": None}, result
        proc.send_signal(signum)
        time.sleep(1.0)  # the signal is in before the store frees up
        lock.execute("ROLLBACK")
        code = proc.wait(timeout=60)  # stdin still open: the signal alone ends it
    finally:
        lock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    assert code == 0, log.read_text()
    assert "mcp_service_closed" in log.read_text()
    assert len(asyncio.run(stored(store_db, turn_ids))) == TURNS
