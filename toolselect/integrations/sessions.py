"""A conversation's id as the integrations send it, to the ranking and with the turn: the id the
framework or the host gives (a LangGraph `thread_id`, a PydanticAI `conversation_id`, a LiteLLM
session id, the `session_id` passed in) when the server takes it, else a stable short stand-in.

The server refuses a `session_id` over `turns.MAX_NAME_CHARS` (`ReportedTurn`, and the rank
request's), so an id built from several ids lost every turn (counted invalid) while `report`
returned a turn id, and degraded every narrowing. A longer id is sent as its start, `~` and the
SHA-256 of the whole: the same id always maps the same (its turns stay one session), two ids
never share a stand-in in practice, and the start still reads as the id on the dashboard.
"""

from __future__ import annotations

import hashlib

from toolselect.turns import MAX_NAME_CHARS

# The SHA-256 in hex and its separator: what a stand-in adds to the id's start.
_SUFFIX_CHARS = 1 + 64


def fit_session_id(session_id: str | None) -> str | None:
    """`session_id` when the server takes it (None included), else its start, `~` and the
    SHA-256 of the whole: `MAX_NAME_CHARS` characters in all."""
    if session_id is None or len(session_id) <= MAX_NAME_CHARS:
        return session_id
    # surrogatepass: an id holding a lone surrogate still hashes (the client deals with it).
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{session_id[: MAX_NAME_CHARS - _SUFFIX_CHARS]}~{digest}"
