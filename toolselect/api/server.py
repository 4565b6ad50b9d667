"""`toolselect serve`: start the service, serve HTTP until SIGTERM/SIGINT, then shut down cleanly.

With more than one worker (`--workers`, `TOOLSELECT_WORKERS`) `toolselect.api.workers` supervises
that many of these servers on one port instead.
"""

from __future__ import annotations

import asyncio
import ipaddress
import signal
import socket
from collections.abc import Callable

import structlog
from aiohttp import web

from toolselect.api.app import create_app_from_settings
from toolselect.api.http import SERVICE
from toolselect.api.protocol import answer_protocol_errors_in_json
from toolselect.config import Settings
from toolselect.errors import ConfigError, ToolselectError
from toolselect.metrics import Metrics
from toolselect.store.factory import open_store

log = structlog.get_logger("toolselect.server")


def is_loopback(host: str) -> bool:
    """A host name or address only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings, insecure: bool) -> None:
    """Refuse to expose an unauthenticated API beyond this machine unless told to: keys are
    configured (`TOOLSELECT_API_KEYS`) or the store answers now with an active stored key.
    `serve` and `mcp --transport http` (the same keys guard both) call it before starting."""
    if settings.api_keys or is_loopback(settings.host) or insecure:
        return
    if asyncio.run(_has_stored_keys(settings)):
        return
    raise ConfigError(
        f"refusing to serve on {settings.host} without API keys (TOOLSELECT_API_KEYS, or "
        "`toolselect keys create` on a store that answers); set keys or pass --insecure"
    )


async def _has_stored_keys(settings: Settings) -> bool:
    """Whether the configured store holds an active API key (False when it cannot be read)."""
    try:
        store = await open_store(settings)
        try:
            await store.migrate()
            return bool(await store.active_keys())
        finally:
            await store.close()
    except ToolselectError as exc:
        log.warning("stored_keys_unreadable", store=settings.store_kind, error=str(exc))
        return False


async def run_server(
    settings: Settings,
    stop: asyncio.Event,
    *,
    metrics: Metrics | None = None,
    reuse_port: bool = False,
    on_serving: Callable[[], None] | None = None,
) -> None:
    """Serve until `stop` is set; in-flight requests get `shutdown_timeout_s` to finish.

    A worker of `serve --workers` passes its multiprocess `metrics`, binds with `reuse_port`
    (the kernel spreads connections over the workers' sockets) and reports `on_serving`.
    """
    app = create_app_from_settings(settings, metrics=metrics)
    runner = web.AppRunner(
        app,
        shutdown_timeout=settings.shutdown_timeout_s,
        access_log=None,
        handle_signals=False,
    )
    try:
        await runner.setup()
        answer_protocol_errors_in_json(runner)
        site = web.TCPSite(
            runner,
            settings.host,
            settings.port,
            reuse_address=True,
            reuse_port=reuse_port or None,
        )
        try:
            await site.start()
        except OSError as exc:
            raise cannot_listen(settings, exc) from None
        if on_serving is not None:
            on_serving()
        service = app[SERVICE]
        log.info(
            "serving",
            url=f"http://{settings.host}:{settings.port}",
            store=service.store_uri,
            embedder=service.ranking.embedder_id,
            tools=service.catalog.size,
            ready=service.loaded,
        )
        await stop.wait()
        log.info("shutting_down")
    finally:
        await runner.cleanup()  # in-flight requests, then the service (the app's cleanup_ctx)
    log.info("stopped")


def cannot_listen(settings: Settings, exc: OSError) -> ConfigError:
    """The one line for an address that cannot be bound: the port is taken, or the address is
    not this machine's."""
    where = f"{settings.host}:{settings.port}"
    return ConfigError(f"cannot listen on {where}: {exc.strerror or exc}")


def serve(settings: Settings, *, insecure: bool = False) -> int:
    """One server process until SIGTERM/SIGINT (`toolselect.api.workers.serve_workers` runs
    several)."""
    check_bind(settings, insecure)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_server(settings, stop)

    asyncio.run(main())
    return 0


def check_port_free(settings: Settings) -> None:
    """`ConfigError` (`cannot_listen`) when the address cannot be bound now: before starting
    what would only find out after its whole start (MCP over HTTP), or workers binding with
    `SO_REUSEPORT`, which would let them share the port with another group without a word."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((settings.host, settings.port))
        except OSError as exc:
            raise cannot_listen(settings, exc) from None
