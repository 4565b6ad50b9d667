"""`toolselect serve --workers 2` as a user runs it: two real worker processes on one port over
one embedded store, metrics aggregated across them, and the supervisor's exit codes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.test_refused_restart import REQUESTS, asked
from tests.learn.test_learner import TOOLS
from tests.services import cli_env, free_port
from tests.stubs import Reply, Stub, anthropic_message
from toolselect.api import workers as workers_module
from toolselect.config import Settings
from toolselect.service import Service
from toolselect.store.sqlite.store import SqliteStore

EXE = [sys.executable, "-m", "toolselect.cmd.main"]
CATALOG = {
    "tools": [
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "send_email", "description": "Send an email message to a recipient."},
        {"name": "shell_exec", "description": "Run a shell command on the host."},
    ]
}
STARTUP_S = 120.0
WORKER_SERIES = re.compile(r'^toolselect_worker_requests\{pid="(\d+)"\} (\S+)$', re.MULTILINE)


class Workers:
    """A running `serve --workers 2`: its supervisor, URL and the worker pids it logged."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str, pids: list[int]) -> None:
        self.proc = proc
        self.url = url
        self.pids = pids
        self.log: list[str] = []


async def read_events(proc: asyncio.subprocess.Process, log: list[str]) -> None:
    assert proc.stderr is not None
    while line := await proc.stderr.readline():
        log.append(line.decode())


@pytest_asyncio.fixture(loop_scope="function")
async def workers(tmp_path: Path) -> AsyncIterator[Workers]:
    """`serve --workers 2` on a free port over a small imported catalog, all workers serving."""
    async with serving_workers(tmp_path) as running:
        yield running


@contextlib.asynccontextmanager
async def serving_workers(tmp_path: Path, **env_extra: str) -> AsyncIterator[Workers]:
    """`serve --workers 2` as the `workers` fixture starts it, with more variables `env_extra`."""
    env = cli_env(tmp_path / "serve.db", TOOLSELECT_SHUTDOWN_TIMEOUT="10", **env_extra)
    catalog = tmp_path / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    imported = await asyncio.to_thread(
        subprocess.run, [*EXE, "tools", "import", str(catalog)], env=env, capture_output=True
    )
    assert imported.returncode == 0, imported.stderr
    port = free_port()
    # A session of its own, so that a failed test can kill the workers with the supervisor:
    # an orphaned worker would hold the stderr pipe open and the reader would wait forever.
    proc = await asyncio.create_subprocess_exec(
        *EXE, "serve", "--workers", "2", "--port", str(port), env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    running = Workers(proc, f"http://127.0.0.1:{port}", [])
    reader = asyncio.create_task(read_events(proc, running.log))
    deadline = asyncio.get_running_loop().time() + STARTUP_S
    try:
        while not running.pids:  # the supervisor logs once every worker is bound
            assert proc.returncode is None and not reader.done(), "".join(running.log)
            assert asyncio.get_running_loop().time() < deadline, "".join(running.log)
            for line in running.log:
                event = json.loads(line)
                if event.get("event") == "workers_serving":
                    running.pids = event["pids"]
            await asyncio.sleep(0.1)
        yield running
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group is gone when the test stopped it
        await proc.wait()
        await asyncio.wait_for(reader, 30)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_two_workers_share_the_port_and_the_metrics(workers: Workers, tmp_path: Path) -> None:
    """Requests on fresh connections are answered by both workers; /metrics from either one
    counts every request of both; every turn either worker queued is in the shared SQLite
    file after SIGTERM, which stops all of them with exit 0, placed in the search it reports
    whichever worker ranked it."""
    assert len(workers.pids) == 2 and all(alive(pid) for pid in workers.pids)
    acknowledged: list[str] = []
    # force_close: one connection per request, so the kernel spreads them over both sockets.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        for i in range(40):
            body = {"query": f"weather in city {i}", "k": 2}
            async with session.post(workers.url + "/v1/rank", json=body) as resp:
                assert resp.status == 200
                ranked = await resp.json()
            turn = {"request": f"mail the report {i}", "used_tool": ranked["results"][1]["tool"],
                    "turn_id": f"t{i}", "search_id": ranked["search_id"]}  # fmt: skip
            async with session.post(workers.url + "/v1/observe", json=turn) as resp:
                assert resp.status == 202
                if (await resp.json())["queued"]:
                    acknowledged.append(f"t{i}")
        async with session.get(workers.url + "/metrics") as resp:
            text = await resp.text()
    answered = {int(pid): float(n) for pid, n in WORKER_SERIES.findall(text)}
    assert set(answered) == set(workers.pids), text
    assert all(n > 0 for n in answered.values()), answered
    assert sum(answered.values()) == 80
    assert 'toolselect_http_requests_total{route="/v1/rank",status="200"} 40.0' in text
    assert 'toolselect_http_requests_total{route="/v1/observe",status="202"} 40.0' in text
    assert 'toolselect_observe_queue_depth{tenant="default"} ' in text

    workers.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(workers.proc.wait(), 60) == 0, "".join(workers.log)
    assert not any(alive(pid) for pid in workers.pids)
    assert len(acknowledged) == 40
    store = SqliteStore(tmp_path / "serve.db")
    try:
        stored = [await store.get_turn(t) for t in acknowledged]
        assert None not in stored
        # Half of them reach the worker that did not rank them: the id itself says what it showed.
        placed = {(t.search_status, t.shown_position, t.shown_k) for t in stored if t is not None}
        assert placed == {("shown", 2, 2)}
    finally:
        await store.close()


async def test_a_worker_that_dies_stops_the_group_with_exit_1(workers: Workers) -> None:
    """A worker killed from outside is not restarted: the supervisor stops the other worker
    and exits 1, naming the dead worker in its log."""
    dead, other = workers.pids
    os.kill(dead, signal.SIGKILL)
    assert await asyncio.wait_for(workers.proc.wait(), 60) == 1
    assert not alive(other)
    died = [json.loads(line) for line in workers.log if '"worker_died"' in line]
    assert [(e["pid"], e["exitcode"]) for e in died] == [(dead, -signal.SIGKILL)]


async def test_workers_of_a_killed_supervisor_stop_and_free_the_port(workers: Workers) -> None:
    """A supervisor killed outright (SIGKILL: it forwards nothing) leaves no workers serving
    the port on their own: each notices it is orphaned and drains."""
    os.kill(workers.proc.pid, signal.SIGKILL)
    url = urlsplit(workers.url)
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        try:
            _, writer = await asyncio.open_connection(url.hostname, url.port)
        except OSError:
            break  # refused: nobody listens any more
        writer.close()
        assert asyncio.get_running_loop().time() < deadline, "the workers still serve"
        await asyncio.sleep(0.2)
    assert any('"supervisor_gone"' in line for line in workers.log)


@pytest.mark.parametrize(
    "command", [["serve", "--workers", "2"], ["mcp", "--transport", "http"]], ids=["workers", "mcp"]
)
def test_a_port_in_use_is_refused_before_anything_starts(
    command: list[str], tmp_path: Path
) -> None:
    """Something already listening on the port stops `serve --workers` (whose SO_REUSEPORT
    would otherwise share the port with it without a word) and MCP over HTTP (which found out
    only after its whole start) with one line, exit 2."""
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*EXE, *command, "--port", str(port)],
            env=cli_env(tmp_path / "s.db"), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "workers_started" not in done.stderr and "mcp_http_starting" not in done.stderr
    assert "Traceback" not in done.stderr


def test_workers_need_a_fixed_port(tmp_path: Path) -> None:
    """Several workers on port 0 would each bind a different port: refused in one line."""
    env = cli_env(tmp_path / "serve.db")
    done = subprocess.run(
        [*EXE, "serve", "--workers", "2", "--port", "0"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "toolselect serve: TOOLSELECT_WORKERS: several workers share one port, so expected a "
        "fixed TOOLSELECT_PORT, got 0 (workers 2)"
    ]


@pytest.mark.parametrize("value", ["none", "-1"])
def test_bad_workers_flag_is_a_usage_error(tmp_path: Path, value: str) -> None:
    """`--workers` takes a count or `auto`; anything else is refused before anything starts."""
    done = subprocess.run(
        [*EXE, "serve", "--workers", value], env=cli_env(tmp_path / "serve.db"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--workers" in done.stderr


def test_workers_that_end_on_a_stop_while_the_supervisor_waits_are_a_clean_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor's wait also returns when a worker exits because it was told to stop; such
    a worker has not died. With a poll longer than the whole test, the only thing that ends the
    wait is a worker's exit after the stop, the moment at which the supervisor once took the
    stopping worker for a dead one and exited 1 (seen as a rare `clean=false`)."""
    monkeypatch.setattr(workers_module, "_POLL_S", 120.0)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    settings = Settings(
        store=f"sqlite:{tmp_path / 'serve.db'}",
        data_dir=str(tmp_path),
        embedder="hashing",
        teacher="none",
        port=free_port(),
    )
    workers_module._migrate_embedded(settings)
    supervisor = workers_module._Supervisor(settings, 2, str(tmp_path))
    stop = threading.Timer(3.0, supervisor.forward, args=(signal.SIGTERM, None))
    stop.start()
    try:
        assert supervisor.run() == 0
    finally:
        stop.cancel()
    assert all(proc.exitcode is not None for proc in supervisor.procs)


async def _gauges_of(session: aiohttp.ClientSession, url: str, tenant: str) -> dict[str, float]:
    """`tenant`'s gauges at the merged `/metrics` of `serve --workers`, by sample name."""
    async with session.get(url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        if family.type == "gauge" and not family.name.endswith("_created")
        for s in family.samples
        if s.labels.get("tenant") == tenant
    }


@pytest.mark.slow  # waits for the idle sweep of both workers
async def test_a_tenant_closed_in_every_worker_leaves_no_gauges(tmp_path: Path) -> None:
    """Under `serve --workers 2` a tenant's gauges leave the merged `/metrics` once each worker
    that served it closed it (a worker's files kept its last values, stale, for good), and its
    next request shows them again, with its catalog's size."""
    tenant = {"X-Toolselect-Tenant": "team-a"}  # no keys: any request may name its tenant
    async with (
        serving_workers(tmp_path, TOOLSELECT_TENANT_IDLE="1") as workers,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
    ):
        async with session.put(workers.url + "/v1/tools", json=CATALOG, headers=tenant) as resp:
            assert resp.status == 200, await resp.text()
        for _ in range(6):  # on fresh connections: both workers start it, most likely
            async with session.get(workers.url + "/v1/tools", headers=tenant) as resp:
                assert resp.status == 200
        gauges = await _gauges_of(session, workers.url, "team-a")
        assert gauges["toolselect_catalog_tools"] == 3.0, gauges
        deadline = asyncio.get_running_loop().time() + 30.0
        while gauges:
            assert asyncio.get_running_loop().time() < deadline, (gauges, "".join(workers.log))
            await asyncio.sleep(0.2)
            gauges = await _gauges_of(session, workers.url, "team-a")
        assert any("tenant_closed" in line for line in workers.log)
        async with session.get(workers.url + "/v1/tools", headers=tenant) as resp:
            assert resp.status == 200
        gauges = await _gauges_of(session, workers.url, "team-a")
        assert gauges["toolselect_catalog_tools"] == 3.0, gauges
        assert gauges["toolselect_serving_from_snapshot"] == 0.0, gauges


@pytest.mark.slow  # waits for both workers' take-back of the refused turns
async def test_a_group_started_again_asks_about_each_refused_turn_once(
    tmp_path: Path, anthropic_stub: Stub
) -> None:
    """Four turns a spent budget refused, left `limit_reached` in the store; `serve --workers 2`
    started on it with room asks the teacher about each once. Both workers took them back, and
    with a teacher that takes a moment to answer (no call traced yet when the second worker
    looked) each turn was asked about twice: the group paid 8 calls for 4 turns."""
    refused = await refused_burst(tmp_path, anthropic_stub)
    anthropic_stub.script.clear()
    anthropic_stub.reply(Reply(body=anthropic_message("shell_exec"), held=True))
    anthropic_stub.release.clear()
    teacher = {
        "TOOLSELECT_TEACHER": "anthropic", "ANTHROPIC_API_KEY": "test",
        "ANTHROPIC_BASE_URL": anthropic_stub.url, "TOOLSELECT_TEACHER_BUDGET_PER_HOUR": "10",
        "TOOLSELECT_TEACHER_RETRIES": "0", "TOOLSELECT_POLL_INTERVAL": "0.5",
    }  # fmt: skip
    async with serving_workers(tmp_path, **teacher) as workers:
        # Both workers take back at their first poll: wait out a few, the teacher holding.
        await asyncio.sleep(4.0)
        anthropic_stub.release.set()
        workers.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(workers.proc.wait(), 60) == 0, "".join(workers.log)
    assert sorted(asked(anthropic_stub)[1:]) == sorted(REQUESTS[i] for i in refused)
    store = SqliteStore(tmp_path / "serve.db")
    try:
        for turn_id in refused:
            turn = await store.get_turn(turn_id)
            assert turn is not None and (turn.result, turn.label) == ("labeled", "shell_exec")
    finally:
        await store.close()


async def refused_burst(tmp_path: Path, stub: Stub) -> list[str]:
    """The ids of the four turns (of five fallback turns) a service with room for one teacher
    call refused, stored `limit_reached` in the `serve --workers` fixture's store."""
    stub.reply(Reply(body=anthropic_message("shell_exec")))
    settings = Settings(
        store=f"sqlite:{tmp_path / 'serve.db'}", data_dir=str(tmp_path), embedder="hashing",
        teacher="anthropic", anthropic_api_key="test", anthropic_base_url=stub.url,
        teacher_budget_per_hour=1, teacher_retries=0,
    )  # fmt: skip
    service = await Service.start(settings)
    try:
        await service.catalog.upsert_tools(TOOLS)
        for turn_id, request in REQUESTS.items():
            assert service.learner.observe(request, "shell_exec", turn_id=turn_id)
        assert await service.learner.drain(30.0)
        turns = [await service.store.get_turn(turn_id) for turn_id in REQUESTS]
    finally:
        await service.close()
    refused = [t.id for t in turns if t is not None and t.result == "limit_reached"]
    assert len(refused) == 4 and len(stub.received) == 1
    return refused
