"""The HTTP error model: every error is `{"error": {"code", "message", "field"?}}` with a stable code."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


class ApiError(Exception):
    """An error that becomes one JSON response; raised by handlers and middlewares."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}

    def response(self) -> web.Response:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return web.Response(
            status=self.status,
            text=json.dumps({"error": body}, ensure_ascii=False, separators=(",", ":")),
            content_type="application/json",
            headers=self.headers,
        )


def invalid(message: str, field: str | None = None) -> ApiError:
    return ApiError(422, "invalid_request", message, field)


def not_found(message: str, field: str | None = None) -> ApiError:
    return ApiError(404, "not_found", message, field)
