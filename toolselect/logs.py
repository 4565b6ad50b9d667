"""structlog, configured once by the composition root: JSON off a terminal, console on one."""

from __future__ import annotations

import logging
import sys

import structlog


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
    logging.basicConfig(level=max(numeric, logging.WARNING), handlers=[handler], force=True)
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, CallersMistakes) for f in server.filters):
        server.addFilter(CallersMistakes())
