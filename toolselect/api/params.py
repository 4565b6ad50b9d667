"""What a route reads from its URL besides the body, refused in the API's words: a query
parameter given at most once (and, where a route says so, no other), and a path whose
percent-escapes spell UTF-8.

A query parameter's error names it `query.<name>` (`query.pack`), apart from a body field of
the same name (`PUT /v1/tools` takes a `pack` in both); a header is named as it is spelt.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import unquote

from aiohttp import web

from toolselect.api.errors import HttpError
from toolselect.errors import InvalidInput
from toolselect.keys import shown

T = TypeVar("T")

# A `%` not followed by two hex digits: no escape at all.
_BROKEN_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def query_field(name: str) -> str:
    """The `field` of an error about query parameter `name`."""
    return f"query.{name}"


def query_param(request: web.Request, name: str) -> str | None:
    """The value of a single-valued query parameter, None when absent: `?pack=a&pack=b` is
    refused (422), since taking either would be a guess at which was meant."""
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise InvalidInput(
            f"expected {name} at most once, got it {len(values)} times", query_field(name)
        )
    return values[0] if values else None


def only_query(request: web.Request, name: str) -> None:
    """Refuse (422) a query parameter other than `name`: where it narrows numbers, a misspelt
    one (`sinc`) or one the route has no use for (`pack`) ignored would answer as if obeyed."""
    for given in request.query:
        if given != name:
            raise InvalidInput(
                f"expected no query parameter but {name}, got {shown(given)}", query_field(given)
            )


def checked_query(request: web.Request, name: str, check: Callable[[str | None], T]) -> T:
    """`check` of query parameter `name` (`query_param`), its `InvalidInput` naming the
    parameter as a query parameter."""
    try:
        return check(query_param(request, name))
    except InvalidInput as exc:
        raise InvalidInput(exc.message, query_field(name)) from None


def path_param(request: web.Request, name: str) -> str:
    """Path parameter `name`, once the path is known to be well escaped: aiohttp keeps an escape
    that is not UTF-8 (`%ff`) or not an escape (`%zz`) as its characters, so `/v1/tools/%ff`
    would name the tool `%ff`, which only `/v1/tools/%25ff` spells; 400 `invalid_path`."""
    raw = request.raw_path.partition("?")[0]
    try:
        if _BROKEN_ESCAPE.search(raw):
            raise UnicodeError
        unquote(raw, errors="strict")
    except UnicodeError:
        raise HttpError(
            400,
            "invalid_path",
            f"expected a path whose %-escapes spell UTF-8 (a % itself is %25), got {shown(raw)}",
            name,
        ) from None
    return request.match_info[name]
