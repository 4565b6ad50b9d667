"""`toolselect serve` as a subprocess, measured from outside.

The server runs in its own process, as deployed, so its CPU time and RSS are its own and the
load generator (`bench.vegeta`) does not share its event loop.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

TOOLSELECT = str(Path(sys.executable).parent / "toolselect")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def server_env(store: str, workdir: Path) -> dict[str, str]:
    """A clean environment: no inherited toolselect settings, no teacher, quiet logs."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TOOLSELECT_", "ANTHROPIC_", "NEO4J_"))
    }
    env.update(
        TOOLSELECT_STORE=store,
        TOOLSELECT_DATA_DIR=str(workdir),
        TOOLSELECT_LOG_LEVEL="warning",
        TOOLSELECT_TEACHER="none",
        # The targets are stated for `hashing`; `auto` would pick the MiniLM hybrid here.
        TOOLSELECT_EMBEDDER="hashing",
        # The benchmarks send a few hundred queries over and over: with the query vector
        # cache every request after the first round would skip the embedder.
        TOOLSELECT_QUERY_CACHE="0",
    )
    if store == "neo4j":
        env.update({k: v for k, v in os.environ.items() if k.startswith("NEO4J_")})
    return env


def import_catalog(env: dict[str, str], path: Path, workdir: Path) -> dict[str, Any]:
    done = subprocess.run(
        [TOOLSELECT, "tools", "import", str(path)],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def wait_ready(
    url: str, proc: subprocess.Popen[bytes], serving: Callable[[], bool] = lambda: True
) -> None:
    """Until `url`'s `/readyz` answers 200 and `serving()` holds, for 300 s at most; `proc`
    exiting first is an error."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as resp:
                if resp.status == 200 and serving():
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready within 300 s")


class ServerProcess:
    """`toolselect serve` on a free loopback port; RSS, CPU time and metrics read from outside."""

    def __init__(self, env: dict[str, str], workdir: Path, args: Sequence[str] = ()) -> None:
        self.args = list(args)
        self.workers = (
            int(self.args[self.args.index("--workers") + 1]) if "--workers" in args else 1
        )
        # With several workers the first one ready answers /readyz while the others still load
        # the catalog: a load generator connecting then would put every connection on the first
        # (SO_REUSEPORT places a connection when it opens). The supervisor says at info level
        # when all of them serve.
        self.env = {**env, "TOOLSELECT_LOG_LEVEL": "info"} if self.workers > 1 else env
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"server-{self.port}.log"

    def __enter__(self) -> ServerProcess:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [TOOLSELECT, "serve", "--host", "127.0.0.1", "--port", str(self.port), *self.args],
                env=self.env,
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_ready(self.url, self.proc, self._all_workers_serve)
        except RuntimeError as e:
            raise RuntimeError(f"{e}: {self.log.read_text()[-2000:]}") from None
        return self

    def _all_workers_serve(self) -> bool:
        return self.workers == 1 or b'"workers_serving"' in self.log.read_bytes()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> dict[str, Any]:
        """SIGTERM, then wait; returns the exit code and how long the graceful stop took."""
        if self.proc is None or self.proc.poll() is not None:
            return {}
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return {"exit_code": code, "stop_s": round(time.perf_counter() - t0, 2)}

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
        return 0.0

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def metric(self, name: str) -> dict[str, float]:
        """Every sample of a Prometheus metric by label set (`""` without labels)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        found: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                labels, _, value = line[len(name) :].rpartition(" ")
                found[labels.strip("{} ")] = float(value)
        return found

    def post(
        self, path: str, body: object, method: str = "POST", headers: dict[str, str] | None = None
    ) -> Any:
        """`body` as JSON to `path`; the JSON answer."""
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **(headers or {})},
            method=method,
        )
        with urllib.request.urlopen(req, timeout=300) as resp:
            return json.loads(resp.read())
