"""Log lines of processes that share one stderr (the workers of `serve --workers`, the
containers of a pod) stay whole: every line a JSON object of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

LINES = 3000
# Logs as a worker does, each line a few hundred bytes.
WRITER = f"""
import structlog
from toolselect.logs import configure_logging
configure_logging("info", "json")
log = structlog.get_logger("t")
for i in range({LINES}):
    log.info("catalog_loaded", tools=3, catalog_version=i, payload="x" * 200)
"""


def test_lines_of_processes_sharing_stderr_never_splice() -> None:
    """Two processes log at once into one pipe. Off a terminal Python's stderr sends every
    write to the pipe as it comes, so a line written as its text and then its newline (what
    `print` does) can have the other process's line land between the two."""
    read_end, write_end = os.pipe()
    try:
        writers = [
            subprocess.Popen([sys.executable, "-c", WRITER], stderr=write_end) for _ in range(2)
        ]
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        out = pipe.read().decode()
    assert [w.wait(120) for w in writers] == [0, 0]
    lines = out.splitlines()
    assert len(lines) == 2 * LINES
    events = [json.loads(line) for line in lines]
    assert sorted(e["catalog_version"] for e in events) == sorted(list(range(LINES)) * 2)


LIBRARY = """
import logging
from toolselect.logs import configure_logging
configure_logging("info", "json")
logging.getLogger("neo4j").warning("Transaction failed and will be retried\\nin 1.15s")
try:
    raise ValueError("bad")
except ValueError:
    logging.getLogger("mcp").exception("handler failed")
logging.getLogger("neo4j").info("below the floor for libraries")
"""


def test_libraries_stdlib_records_are_json_lines_too() -> None:
    """The Neo4j driver's retry warnings (several lines of plain text each), the MCP SDK's and
    uvicorn's records reach stderr as JSON lines like toolselect's own, named by logger; the
    libraries' info records stay below the floor."""
    done = subprocess.run(
        [sys.executable, "-c", LIBRARY], capture_output=True, text=True, timeout=60, check=True
    )
    events = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["logger"], e["level"], e["event"]) for e in events] == [
        ("neo4j", "warning", "Transaction failed and will be retried\nin 1.15s"),
        ("mcp", "error", "handler failed"),
    ]
    assert "ValueError: bad" in events[1]["exception"]
