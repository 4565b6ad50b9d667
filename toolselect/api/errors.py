"""The HTTP error model: every error is `{"error": {"code", "message", "field"?}}` with a stable code.

`HttpError` is the server's side; the client's `toolselect.client.ApiError` is what a caller
gets back from it.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from toolselect.errors import ToolselectError


class HttpError(ToolselectError):
    """An error that becomes one JSON response; raised by handlers and the middleware."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
        *,
        close: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}
        # Answered with `Connection: close`: after a body the server would not take (over the
        # limit, stalled, not decodable) the connection serves no further request.
        self.close = close

    def body(self) -> str:
        """The JSON text of the error, for every server that answers one (aiohttp's, the MCP
        server's Starlette and uvicorn)."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return json.dumps({"error": error}, ensure_ascii=False, separators=(",", ":"))

    def response(self) -> web.Response:
        response = web.Response(
            status=self.status,
            text=self.body(),
            content_type="application/json",
            headers=self.headers,
        )
        if self.close:
            response.force_close()
        return response
