"""`toolselect mcp` over stdio (`mcp_server.run`): the SDK's transport, ended by SIGTERM or
SIGINT as by stdin closing.

A host ends its server by closing stdin, and a supervisor (or a host that gives up waiting) by a
signal. Either way the lifespan closes the service, which drains the learner within the shutdown
timeout, so turns answered `queued` reach the store; then the process exits 0.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio
import structlog
from mcp.server.mcpserver import MCPServer

from toolselect.mcp_resources import Running
from toolselect.service import Service

log = structlog.get_logger("toolselect.mcp")


async def serve_stdio(server: MCPServer[Service], running: Running) -> None:
    """Serve over stdin and stdout until stdin closes, SIGTERM or SIGINT."""
    running.stopped = anyio.Event()
    serving = anyio.CancelScope()
    async with anyio.create_task_group() as group:
        group.start_soon(_stop_on_signal, serving, running.stopped)
        with serving:
            await server.run_stdio_async()
        group.cancel_scope.cancel()


async def _stop_on_signal(serving: anyio.CancelScope, stopped: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("mcp_stopping", signal=signal.Signals(signum).name)
            # The lifespan's close is shielded from this cancel (`mcp_server.build_server`).
            serving.cancel()
            await stopped.wait()
            # The SDK's stdin reader is a thread blocked on the host's pipe, which nothing in
            # this process can wake and which the transport waits for before it returns: with
            # the service closed nothing is left to lose, so the process ends here.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
