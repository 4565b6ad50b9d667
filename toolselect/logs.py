"""structlog, configured once by the composition root: JSON off a terminal, console on one;
and `Repeats`, which keeps a line that repeats for as long as an outage lasts (a driver's
retry, a 503 a request) to one a `REPEAT_S`."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

import structlog

# How often a line that keeps repeating is logged again, with how many were left out: often
# enough to see that an outage goes on, seldom enough that a busy service logs a few lines a
# minute through it (it logged one a request, thousands a minute).
REPEAT_S = 60.0


class Repeats:
    """Which of many like lines to log: the first of each kind, then at most one every
    `every_s` seconds, which says how many it stands for. Kinds are keys (a route and an error
    code, a logger and a message template); past `limit` of them the least recently logged is
    forgotten, so memory stays bounded whatever the keys. Safe from any thread (stdlib records
    may come from a library's)."""

    def __init__(
        self,
        every_s: float = REPEAT_S,
        *,
        now: Callable[[], float] = time.monotonic,
        limit: int = 1024,
    ) -> None:
        self.every_s = every_s
        self._now = now
        self._limit = limit
        self._lock = threading.Lock()
        self._kinds: OrderedDict[Hashable, tuple[float, int]] = OrderedDict()  # logged at, left out

    def admit(self, key: Hashable) -> int | None:
        """None: leave this line out (it is counted); else log it, saying that this many like
        it were left out since the last one logged (0 for the first)."""
        now = self._now()
        with self._lock:
            seen = self._kinds.get(key)
            if seen is not None and now - seen[0] < self.every_s:
                self._kinds[key] = (seen[0], seen[1] + 1)
                return None
            self._kinds[key] = (now, 0)
            self._kinds.move_to_end(key)
            while len(self._kinds) > self._limit:
                self._kinds.popitem(last=False)
            return seen[1] if seen is not None else 0


class DriverRepeats(logging.Filter):
    """The Neo4j driver warns on every retry of every query while the store is down (about two
    lines a second, for the whole outage, from the upkeep's and the probes' queries alone):
    each kind of its warnings (logger and message template) is logged once a `REPEAT_S`, the
    next one saying how many were left out. The service logs the outage itself
    (`store_unreachable`, `store_reachable`); other loggers' records pass as they are."""

    def __init__(self, repeats: Repeats) -> None:
        super().__init__()
        self._repeats = repeats

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "neo4j" and not record.name.startswith("neo4j."):
            return True
        left_out = self._repeats.admit((record.name, str(record.msg)))
        if left_out is None:
            return False
        if left_out:
            record.msg = f"{record.getMessage()} ({left_out} like it left out)"
            record.args = None
        return True


class CallersMistakes(logging.Filter):
    """aiohttp's server logs a request it cannot parse (a bad chunk size, a header over its
    limit, a NUL in a header) and a body that does not decode at error level with a traceback,
    though each is the caller's mistake, answered 400: a warning without one here, with the
    parser's reason in its first words (what follows them quotes the request's bytes, a key
    maybe). Its records of anything else, the server's own errors, are left as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        # Imported here: only aiohttp's server logs these, and `select --url` stays without it.
        from aiohttp.http_exceptions import HttpProcessingError
        from aiohttp.web_protocol import RequestPayloadError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RequestPayloadError):
            # Met again as aiohttp drains the body after the 400 ("Unhandled exception"); the
            # body's own error (a coding that does not decode) is its cause.
            cause = exc.__cause__
            reason = cause.message if isinstance(cause, HttpProcessingError) else "unreadable"
            event = "Request body unreadable"
        elif isinstance(exc, HttpProcessingError) and 400 <= exc.code < 500:
            reason = exc.message
            event = record.getMessage()
        else:
            return True
        record.msg = f"{event}: {reason.split(':')[0].strip()[:200]}"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        record.levelno = logging.WARNING
        record.levelname = "WARNING"
        return True


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    """Route structlog and stdlib logging to stderr, both rendered alike (JSON lines off a
    terminal); request ids come from contextvars."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write per line: off a terminal, stderr passes each write straight to the file,
        # and `print` writes a line's text and its newline separately, so lines of processes
        # sharing the stream (`serve --workers`, a container's log) could splice together.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries' stdlib records (the Neo4j driver's retries, the MCP SDK, uvicorn) through the
    # same renderer: as plain text they were lines, often several per record, that no JSON log
    # pipeline reads.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    handler.addFilter(DriverRepeats(Repeats()))
    logging.basicConfig(level=max(numeric, logging.WARNING), handlers=[handler], force=True)
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, CallersMistakes) for f in server.filters):
        server.addFilter(CallersMistakes())
