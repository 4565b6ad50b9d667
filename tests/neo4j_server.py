"""Find a real Neo4j for the tests: NEO4J_URI, else testcontainers, else scripts/neo4j-local.

The resolution order is the README's: an explicit `NEO4J_URI` always wins; a Docker engine that
answers gets a `neo4j:5.26` container; otherwise a local Community server is started from Maven
Central's jars on this JVM. Whatever is started here is stopped by `stop()`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEO4J_LOCAL = ROOT / "scripts" / "neo4j-local"
CONTAINER_IMAGE = "neo4j:5.26-community"
# The Neo4j parameter of a fixture parametrised over stores: it carries the `neo4j` marker, so
# `-m "not neo4j"` (`make test-fast`) runs the SQLite half alone and never starts the server.
NEO4J = pytest.param("neo4j", marks=pytest.mark.neo4j)


@dataclass
class Neo4jServer:
    """Connection facts of one server, and how to stop it when we started it."""

    uri: str
    username: str = "neo4j"
    password: str = ""
    database: str = "neo4j"
    source: str = "env"
    instance: Path | None = None
    _container: Any = field(default=None, repr=False)

    @property
    def auth(self) -> tuple[str, str] | None:
        return (self.username, self.password) if self.password else None

    def env(self) -> dict[str, str]:
        """Environment variables that point a toolselect process at this server."""
        return {
            "NEO4J_URI": self.uri,
            "NEO4J_USERNAME": self.username,
            "NEO4J_PASSWORD": self.password,
            "NEO4J_DATABASE": self.database,
        }

    def stop(self) -> None:
        if self._container is not None:
            self._container.stop()
        elif self.instance is not None:
            stop_local(self.instance)


def docker_engine_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


def start_local(instance: Path | None = None, port: int | None = None) -> Neo4jServer:
    """Start a Community server with scripts/neo4j-local in its own instance folder."""
    instance = instance or Path(tempfile.mkdtemp(prefix="toolselect-neo4j-"))
    cmd = [sys.executable, str(NEO4J_LOCAL), "start", "--instance", str(instance)]
    if port is not None:
        cmd += ["--port", str(port)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"neo4j-local start failed: {done.stderr.strip()[-2000:]}")
    uri = next(
        line.split("=", 1)[1] for line in done.stdout.splitlines() if line.startswith("NEO4J_URI=")
    )
    return Neo4jServer(uri=uri, source="neo4j-local", instance=instance)


def stop_local(instance: Path, *, keep_data: bool = False, kill: bool = False) -> None:
    """Stop (or SIGKILL) the server of `instance`; kept data lets `start_local` resume it."""
    command = "kill" if kill else "stop"
    extra = ["--keep-data"] if keep_data and not kill else []
    subprocess.run(
        [sys.executable, str(NEO4J_LOCAL), command, "--instance", str(instance), *extra],
        capture_output=True,
        timeout=120,
        check=False,
    )


def resolve() -> tuple[Neo4jServer | None, str]:
    """A server to test against, or None with the reason there is none."""
    env = os.environ
    if env.get("NEO4J_URI"):
        return (
            Neo4jServer(
                uri=env["NEO4J_URI"],
                username=env.get("NEO4J_USERNAME", "neo4j"),
                password=env.get("NEO4J_PASSWORD", ""),
                database=env.get("NEO4J_DATABASE", "neo4j"),
            ),
            "",
        )
    if docker_engine_answers():
        from testcontainers.neo4j import Neo4jContainer

        container = Neo4jContainer(CONTAINER_IMAGE).start()
        return (
            Neo4jServer(
                uri=container.get_connection_url(),
                username=container.username,
                password=container.password,
                source="testcontainers",
                _container=container,
            ),
            "",
        )
    try:
        return start_local(), ""
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return None, f"no Neo4j: NEO4J_URI unset, no Docker engine, neo4j-local failed ({exc})"
