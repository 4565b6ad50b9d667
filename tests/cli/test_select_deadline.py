"""`toolselect select --timeout` bounds the process, in-process and with `--url`: PromptKit
waits for the spawn with its own timeout, so what holds it past `--timeout` (work on a thread
no cancellation reaches, a server answering a byte at a time) must not hold the process."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from tests.cli.test_cli import SELECT, run
from tests.services import cli_env, free_port


def _timed(args: list[str], env: dict[str, str]) -> tuple[int, str, str, float]:
    started = time.monotonic()
    done = run(args, env, stdin=json.dumps(SELECT))
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def test_select_in_process_ends_at_its_timeout_whatever_its_threads_do(tmp_path: Path) -> None:
    """A writer holding the store in exclusive locking mode makes the selector's first read
    wait the 5 s busy timeout on the store's worker thread: the cancelled selection then
    still waited for that thread before exiting (5.5 s for `--timeout 1`). Now one line, exit 1,
    at the timeout."""
    env = cli_env(tmp_path / "toolselect.db")
    assert run(["select"], env, stdin=json.dumps(SELECT)).returncode == 0
    with closing(sqlite3.connect(tmp_path / "toolselect.db", isolation_level=None)) as holder:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("UPDATE tools SET description = description")
        code, out, err, took = _timed(["select", "--timeout", "1"], env)
    assert (code, out) == (1, ""), err
    assert err == "toolselect select: no selection within --timeout 1 s\n"
    assert took < 4  # the timeout and the interpreter's start, not the 5 s busy wait


@contextmanager
def trickling(body: bytes, pause: float) -> Iterator[str]:
    """A server that answers every request with `body`, one byte every `pause` seconds."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
                for byte in head + body:
                    if stop.wait(pause):
                        return
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()
        thread.join(5)


def test_select_url_ends_at_its_timeout_when_the_answer_trickles(tmp_path: Path) -> None:
    """urllib's timeout bounds each read, not the request: a server (or a proxy) sending a
    byte every 0.2 s held `--timeout 1` for as long as it kept sending (44 s for a short
    answer). Now one line, exit 1, at the timeout."""
    env = cli_env(tmp_path / "toolselect.db")
    answer = json.dumps({"selected": ["send_email"], "reason": "slow"}).encode()
    with trickling(answer, 0.2) as url:
        code, out, err, took = _timed(["select", "--url", url, "--timeout", "1"], env)
    assert (code, out) == (1, ""), err
    assert err == "toolselect select: no selection within --timeout 1 s\n"
    assert took < 4


@pytest.mark.parametrize("scheme", ["bolt", "neo4j"])
def test_select_with_neo4j_down_is_one_line(scheme: str, tmp_path: Path) -> None:
    """Neo4j configured and down answers at once with one line naming it, exit 1: with the
    routing scheme (`neo4j://`, a cluster's or Aura's) the driver's own error record came
    first, a second line on stderr."""
    uri = f"{scheme}://127.0.0.1:{free_port()}"
    env = {**cli_env(tmp_path / "toolselect.db"), "TOOLSELECT_STORE": "neo4j", "NEO4J_URI": uri}
    code, out, err, took = _timed(["select", "--timeout", "10"], env)
    assert (code, out) == (1, ""), err
    assert err.count("\n") == 1 and err.startswith(
        f"toolselect select: cannot reach Neo4j at {uri}"
    )
    assert took < 10


def test_select_takes_any_timeout_argparse_takes(tmp_path: Path) -> None:
    """A timeout too long for one sleep of the platform (1e10 s) is no deadline at all, not a
    traceback on stderr beside the answer."""
    code, out, err, _ = _timed(["select", "--timeout", "1e10"], cli_env(tmp_path / "t.db"))
    assert (code, err) == (0, "")
    assert json.loads(out)["selected"]
