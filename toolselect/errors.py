"""The one exception root of toolselect.

    ToolselectError
     ├── ConfigError (ValueError)          settings that cannot work; raised at start-up
     ├── InvalidInput (ValueError)         a caller's mistake, with the field at fault
     ├── NotFound (LookupError)            a named tool or exemplar does not exist
     │    └── UnknownTenant                a tenant that has no key and no data yet
     ├── NotReady                          the catalog is not loaded yet (store not reached)
     ├── StoreError                        the store refused an operation
     │    └── StoreUnavailable             the store cannot be reached (retry or degrade)
     ├── ToolSourceError                   an MCP server to import tools from failed to list them
     ├── SpoolError                        the local write spool cannot be opened or written
     ├── EmbedderError
     │    └── EmbedderUnavailable          a remote embedder cannot be reached
     ├── TeacherError
     │    ├── AnswerTooLarge               the teacher's answer passed 1 MiB (`oracle/base.py`)
     │    └── TeacherUnavailable           the teacher failed transiently (retry or record `error`)
     │         └── RetryLater              ... and said how long to wait (`oracle/base.py`)
     ├── HttpError                         the server's refusal as one JSON response (`api/errors.py`)
     └── ClientError                       `toolselect.client` could not get an answer
          ├── ApiError                     the server answered an error: status, code, message, field
          └── Unreachable                  no answer: refused, reset, timed out, or a proxy's page

Three of these live beside the code that raises them: `RetryLater` and `AnswerTooLarge` in
`toolselect.oracle.base`, `HttpError` in `toolselect.api.errors` (the server's; the client's
`ApiError` is what a caller gets back from it).

Adapters translate their library's errors into this tree at the boundary (`raise ... from exc`),
so nothing from `neo4j`, `sqlite3`, `aiohttp` or `anthropic` leaks to callers.
"""

from __future__ import annotations


class ToolselectError(Exception):
    """Root of every error toolselect raises on purpose."""


class ConfigError(ToolselectError, ValueError):
    """A setting is missing, malformed or contradicts another."""


class InvalidInput(ToolselectError, ValueError):
    """A caller sent something that breaks a rule; `field` names the part at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class NotFound(ToolselectError, LookupError):
    """A named thing (tool, exemplar, analysis) does not exist; `field` names where it was named."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UnknownTenant(NotFound):
    """A request that makes no data named a tenant that does not exist yet: starting it would
    make its store (`TenantServices.existing`)."""


class NotReady(ToolselectError):
    """The service cannot rank yet: its catalog has not been loaded from the store."""


class StoreError(ToolselectError):
    """The store rejected an operation."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or authenticated against; transient from a caller's view."""


class ToolSourceError(ToolselectError):
    """An MCP server named for an import could not be started, or did not list its tools."""


class SpoolError(ToolselectError):
    """The local write spool cannot be opened, read or written; the writes it would hold are
    not acknowledged."""


class EmbedderError(ToolselectError):
    """The embedder could not produce vectors."""


class EmbedderUnavailable(EmbedderError):
    """A remote embedder did not answer."""


class TeacherError(ToolselectError):
    """The teacher gave an unusable answer. The tokens are those the provider reported (and
    billed) for it: a call that answered with nothing usable was still paid for."""

    def __init__(self, message: str, *, input_tokens: int = 0, output_tokens: int = 0) -> None:
        super().__init__(message)
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens

    @property
    def paid(self) -> bool:
        return self.input_tokens > 0 or self.output_tokens > 0


class TeacherUnavailable(TeacherError):
    """The teacher failed transiently (timeout, 429, 5xx, overloaded)."""


class ClientError(ToolselectError):
    """`toolselect.client` did not get the answer it asked for."""


class ApiError(ClientError):
    """The server answered `{"error": {"code", "message", "field"?}}` with a non-2xx status.

    `retry_after` holds the server's `Retry-After` in seconds, when it sent one.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        where = f" (field {field})" if field else ""
        super().__init__(f"{status} {code}: {message}{where}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after


class Unreachable(ClientError):
    """The server could not be reached, or did not answer in time, or a proxy answered in its
    place with a page that is not JSON (transient: retry or degrade).

    `sent` is False only when the connection was never made, so the server cannot have acted
    on the request; after a timeout or a dropped connection it may have."""

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent
