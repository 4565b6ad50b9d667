"""`serve --workers N`: N server processes on one port, and the process that supervises them.

Each worker is a whole service (store, embedder, ranker, learner, HTTP) bound to the same
address with `SO_REUSEPORT`, so the kernel spreads new connections over them; they keep in step
through the store's version poll, as replicas on several machines do. Workers are started with
`multiprocessing`'s spawn method: clean interpreters that import prometheus_client after this
process has set `PROMETHEUS_MULTIPROC_DIR` to a fresh folder, so every worker's metrics go to
files there and `/metrics` in any worker aggregates all of them.

The supervisor serves nothing itself. It migrates an embedded store once (two processes
switching a new SQLite file to WAL at once may find it locked), starts the workers, forwards
SIGTERM and SIGINT to them and waits while each drains as a single server does; it exits 0 when
every worker did. A worker that exits on its own (a crash, the OOM killer) is not restarted: the
supervisor stops the others and exits 1, so the failure is visible and the process manager
(systemd, Kubernetes) restarts the whole group. A supervisor killed outright leaves no group:
each worker notices it is orphaned and drains. A port something else listens on is refused
before any worker starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import tempfile
import threading
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from multiprocessing.queues import SimpleQueue
from types import FrameType

import structlog

from toolselect.config import Settings

log = structlog.get_logger("toolselect.workers")

_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_POLL_S = 0.2


def _worker(settings: Settings, index: int, metrics_dir: str, ready: SimpleQueue[int]) -> None:
    """A worker's whole life: one server with multiprocess metrics on the shared port."""
    from toolselect.api.server import run_server
    from toolselect.logs import configure_logging
    from toolselect.metrics import Metrics

    configure_logging(settings.log_level, settings.log_format)
    structlog.contextvars.bind_contextvars(worker=index)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        watch = asyncio.create_task(_stop_when_orphaned(stop), name="toolselect-parent-watch")
        await run_server(
            settings,
            stop,
            metrics=Metrics(multiprocess_dir=metrics_dir),
            reuse_port=True,
            on_serving=lambda: ready.put(index),
        )
        watch.cancel()

    asyncio.run(main())


async def _stop_when_orphaned(stop: asyncio.Event) -> None:
    """Stop (draining as on SIGTERM) once the supervisor is gone: killed with SIGKILL it could
    not forward a signal, and its workers would go on serving the port unsupervised."""
    parent = os.getppid()
    while os.getppid() == parent:  # noqa: ASYNC110 - a parent's death sets no event
        await asyncio.sleep(_POLL_S * 5)
    log.warning("supervisor_gone", supervisor=parent)
    stop.set()


def _migrate_embedded(settings: Settings) -> None:
    """Create or upgrade an embedded store before several processes open it at once."""
    if settings.store_kind != "sqlite":
        return
    from toolselect.store.factory import open_store

    async def migrate() -> None:
        store = await open_store(settings)
        try:
            await store.migrate()
        finally:
            await store.close()

    asyncio.run(migrate())


class _Supervisor:
    def __init__(self, settings: Settings, count: int, metrics_dir: str) -> None:
        self.settings = settings
        self.count = count
        self.metrics_dir = metrics_dir
        context = multiprocessing.get_context("spawn")
        self.ready: SimpleQueue[int] = context.SimpleQueue()
        self.procs: list[BaseProcess] = [
            context.Process(
                target=_worker,
                args=(settings, i, metrics_dir, self.ready),
                name=f"toolselect-worker-{i}",
            )
            for i in range(count)
        ]
        self.serving: set[int] = set()
        self.stopping = threading.Event()

    def forward(self, signum: int, _frame: FrameType | None = None) -> None:
        """Pass a stop signal to every worker still running."""
        self.stopping.set()
        for proc in self.procs:
            if proc.exitcode is None and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

    def _collect_ready(self) -> None:
        while not self.ready.empty():
            index = self.ready.get()
            self.serving.add(index)
            if len(self.serving) == self.count:
                log.info(
                    "workers_serving",
                    url=f"http://{self.settings.host}:{self.settings.port}",
                    workers=self.count,
                    pids=[p.pid for p in self.procs],
                )

    def run(self) -> int:
        for proc in self.procs:
            proc.start()
        log.info("workers_started", workers=self.count, pids=[p.pid for p in self.procs])
        died: BaseProcess | None = None
        while not self.stopping.is_set():
            wait([p.sentinel for p in self.procs], timeout=_POLL_S)
            self._collect_ready()
            # A worker that ended after a stop signal was asked to: only one that ended before
            # any stop has died (the wait above also returns when a stopping worker exits).
            exited = next((p for p in self.procs if p.exitcode is not None), None)
            if exited is not None and not self.stopping.is_set():
                died = exited
                log.error("worker_died", worker=died.name, pid=died.pid, exitcode=died.exitcode)
                self.forward(signal.SIGTERM)
                break
        return self._join(died)

    def _join(self, died: BaseProcess | None) -> int:
        """Wait for every worker to drain (a worker still starting may need its catalog
        loaded first), then clear the finished workers' live gauges."""
        from prometheus_client import multiprocess

        grace = self.settings.shutdown_timeout_s + 60.0
        clean = died is None
        for proc in self.procs:
            proc.join(grace)
            if proc.exitcode is None:
                log.error("worker_killed", worker=proc.name, pid=proc.pid, after_s=grace)
                proc.kill()
                proc.join()
            index = self.procs.index(proc)
            # Stopped by the forwarded signal before it could install its own handler: it had
            # not served anything, so nothing was lost.
            early = index not in self.serving and proc.exitcode in (
                -signal.SIGTERM,
                -signal.SIGINT,
            )
            if proc.exitcode != 0 and not early:
                log.warning(
                    "worker_exit_unclean", worker=proc.name, pid=proc.pid, exitcode=proc.exitcode
                )
                clean = False
            if proc.pid is not None:
                multiprocess.mark_process_dead(proc.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
        log.info("stopped", workers=self.count, clean=clean)
        return 0 if clean else 1


def serve_workers(settings: Settings, *, insecure: bool = False) -> int:
    """Run `settings.worker_count` servers on one port until SIGTERM/SIGINT; 0 if all drained
    cleanly, 1 if a worker died on its own or failed to stop."""
    from toolselect.api.server import check_bind, check_port_free

    check_bind(settings, insecure)
    check_port_free(settings)
    count = settings.worker_count
    _migrate_embedded(settings)
    with tempfile.TemporaryDirectory(prefix="toolselect-metrics-") as metrics_dir:
        # Inherited by the spawned workers; read by prometheus_client when they import it.
        os.environ[_MULTIPROC_ENV] = metrics_dir
        supervisor = _Supervisor(settings, count, metrics_dir)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, supervisor.forward)
        return supervisor.run()
