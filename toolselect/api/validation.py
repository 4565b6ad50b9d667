"""Validation errors as the API words them, for HTTP bodies and the CLI's stdin alike (and
the MCP server's, `explain`).

Only pydantic here (no aiohttp): the exec selector validates its stdin with the same models and
the same messages as `POST /v1/select` without importing the HTTP stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from toolselect.errors import InvalidInput
from toolselect.keys import shown

M = TypeVar("M", bound=BaseModel)


class Rejection(NamedTuple):
    """The first validation error: HTTP status, error code, message and the field it names."""

    status: int
    code: str
    message: str
    field: str


def field_path(loc: tuple[int | str, ...]) -> str:
    """`candidates[2].ID` from pydantic's location tuple; `body` for the whole object."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def rejection(exc: ValidationError) -> Rejection:
    """`400 invalid_json` for bytes that do not parse, else `422 invalid_request` naming the
    first invalid field."""
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        return Rejection(400, "invalid_json", f"body is not JSON: {first['msg']}", "body")
    field = field_path(tuple(first["loc"]))
    return Rejection(422, "invalid_request", f"{field}: {first['msg']}", field)


def parse(model: type[M], data: Any) -> M:
    """Validate parsed JSON against a request model (stdin, a command line): `InvalidInput`
    with the message and field the API would answer. In pydantic's JSON mode, as the API
    validates its bodies: the Python mode words the same refusals otherwise ("a valid list"
    for "a valid array", "a valid dictionary or instance of PromptKitQuery" for "an object").
    A value no JSON text carries (a lone surrogate of a command line's undecodable bytes) is
    validated in Python mode, for the caller's own check to word."""
    try:
        try:
            return model.model_validate_json(json.dumps(data))
        except ValidationError as exc:
            if exc.errors()[0]["type"] != "json_invalid":
                raise
        return model.model_validate(data)
    except ValidationError as exc:
        problem = rejection(exc)
        raise InvalidInput(problem.message, problem.field) from None


def explain(errors: Iterable[ErrorDetails], whole: str = "arguments") -> str:
    """Pydantic's errors as one line (MCP's tool arguments, a JSON-RPC message on stdio): each
    field (`whole` for the value itself), the rule it broke, the value sent as the HTTP API
    repeats one (`keys.shown`: cut to 80 characters, a key never shown)."""
    parts = []
    for error in errors:
        field = ".".join(str(p) for p in error["loc"]) or whole
        if error["type"] == "missing":
            parts.append(f"expected {field}, got nothing")
        else:
            rule = error["msg"][0].lower() + error["msg"][1:]
            parts.append(f"expected {field}: {rule}, got {shown(error['input'])}")
    return "; ".join(parts)
