"""A reported turn: what an agent tells toolselect after a turn, defined once.

`POST /v1/observe` (and each turn of `/v1/observe/batch`), MCP `report_turn` and the Python
client all take a turn as a `ReportedTurn`: its fields and their limits (the model), and the
rules no schema can say (`turn_problem`: one of `used_tool` and a non-empty `used_tools`,
`used_tool` among `used_tools`, and the text sizes the server is configured for). Each boundary
validates once and hands the value to the service (`LearningFacade.report`), which stamps it
into the learner's `Observation`; in-process callers pass the same keywords (`TurnFields`) to
`LearningFacade.observe`.

Pydantic only (no aiohttp, no MCP SDK): the API models, the MCP server and the client import it
without importing each other. The service and the learner take its types for annotations only,
so the core loads no pydantic for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, TypedDict, cast

from pydantic import BaseModel, ConfigDict, Field

from toolselect.catalog import PACK_SCHEMA, check_pack, check_session_id
from toolselect.errors import InvalidInput
from toolselect.json_text import has_lone_surrogate

# Tools one turn may list in `used_tools`, and the longest tool name or id a turn may carry.
MAX_USED_TOOLS = 64
MAX_NAME_CHARS = 256

Outcome = Literal["ok", "error", "corrected"]
# A tool name, an id or a pack, as a turn reports it.
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
UsedTools = Annotated[list[Name], Field(max_length=MAX_USED_TOOLS)]


class TurnFields(TypedDict, total=False):
    """What `observe` takes besides the request and the used tool, by keyword (one definition
    for `AsyncClient.observe`, `Client.observe`, `LearningFacade.observe`, `Learner.observe`
    and the tool-search adapters).

    - `turn_id`: your id of the turn; the client makes one when absent, so a batch re-sent
      after a lost answer is stored once;
    - `agent_id`, `pack`: which agent took the turn, within which pack;
    - `outcome`: `ok`, `error` or `corrected`, when known (`ok` lets the used tool label the
      request, tier `usage`);
    - `search_id`: the `search_id` of the `rank`/`select` answer the agent chose from, so the
      server knows whether (and where) the used tool was shown;
    - `used_tools`: every tool the turn used, in order, when it used several (`used_tool`,
      when given, must be one of them; when absent it is the first);
    - `session_id`: the conversation the turn belongs to.
    """

    turn_id: str | None
    agent_id: str | None
    pack: str | None
    outcome: str | None
    search_id: str | None
    used_tools: Sequence[str] | None
    session_id: str | None


class ReportedTurn(BaseModel):
    """One reported turn; `turn_problem` says which of its rules it breaks."""

    model_config = ConfigDict(strict=True, extra="forbid")
    request: str
    used_tool: Name | None = Field(
        default=None,
        description="The tool the turn used; required unless `used_tools` is given, and then "
        "one of them.",
    )
    used_tools: UsedTools | None = Field(
        default=None,
        description="Every tool the turn used, in order; `used_tool` (else the first of these) "
        "labels the request when the turn worked.",
    )
    turn_id: Name | None = None
    agent_id: Name | None = None
    pack: Name | None = Field(
        default=None,
        description="The pack the turn's agent ranks within; empty for none, as in `/v1/rank`.",
        json_schema_extra=PACK_SCHEMA,
    )
    outcome: Outcome | None = None
    search_id: Name | None = Field(
        default=None,
        description="The `search_id` of the ranking the agent was shown; unknown or expired "
        "ids are accepted and counted.",
    )
    session_id: Name | None = Field(
        default=None,
        description="The conversation the turn belongs to; empty for none, as in `/v1/rank`.",
        json_schema_extra=PACK_SCHEMA,
    )

    def fields(self) -> TurnFields:
        """The turn's keywords besides `request` and `used_tool`, as `observe` takes them."""
        return cast(TurnFields, {name: getattr(self, name) for name in TURN_FIELDS})


# The keywords of `TurnFields`, which are the model's fields but `request` and `used_tool`.
TURN_FIELDS: frozenset[str] = TurnFields.__optional_keys__


@dataclass(frozen=True, slots=True)
class TurnProblem:
    """The first rule a reported turn breaks: the field at fault, what the rule expects of it
    (starting with the field's name) and, when the rule's sentence says it, what was sent."""

    field: str
    expected: str
    got: str | None = None
    # A text longer than the configured limit, rather than the used-tool rule.
    oversized: bool = False

    @property
    def message(self) -> str:
        """One line: `expected used_tool to be one of used_tools, got 'x'`."""
        return f"expected {self.expected}" + ("" if self.got is None else f", got {self.got}")


def turn_problem(turn: ReportedTurn, max_text_bytes: int | None = None) -> TurnProblem | None:
    """What is wrong with a turn the model accepted, or None. One of `used_tool` and a
    non-empty `used_tools` is required, and with both `used_tool` must be one of `used_tools`
    (the JSON schema cannot say either); with `max_text_bytes`, the request and the used tool
    are at most that many bytes of UTF-8. No field may hold a lone UTF-16 surrogate (it is
    no text a store can encode; a body escaping one never gets here, but the argv of
    `toolselect observe` or a Python caller may). An empty request or used tool is allowed (it
    is recorded; a blank request teaches the learner nothing); an empty pack or session is none,
    a blank one refused."""
    for field, value in turn:
        if has_lone_surrogate(value):
            return TurnProblem(
                field, f"{field} to be Unicode text", "a lone UTF-16 surrogate (\\uD800-\\uDFFF)"
            )
    try:  # one pack rule and one session rule for the turn and the ranking it came from
        check_pack(turn.pack)
        check_session_id(turn.session_id)
    except InvalidInput as exc:
        return TurnProblem(exc.field or "", exc.message.removeprefix("expected "))
    if turn.used_tool is None and not turn.used_tools:
        return TurnProblem("used_tool", "used_tool or a non-empty used_tools")
    if turn.used_tool is not None and turn.used_tools and turn.used_tool not in turn.used_tools:
        return TurnProblem("used_tool", "used_tool to be one of used_tools", repr(turn.used_tool))
    if max_text_bytes is None:
        return None
    for field, value in (("request", turn.request), ("used_tool", turn.used_tool or "")):
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > max_text_bytes:
            return TurnProblem(
                field, f"{field} of at most {max_text_bytes} bytes", str(size), oversized=True
            )
    return None
