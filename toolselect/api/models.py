"""Request and response models: they validate bodies and generate `/openapi.json`, so neither drifts."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, RootModel, WithJsonSchema

from toolselect.catalog import PACK_SCHEMA
from toolselect.config import DEFAULT_K, MAX_COMPANIONS, MAX_CONTEXT_MESSAGES, MAX_PREVIOUS_TOOLS
from toolselect.turns import MAX_USED_TOOLS as MAX_USED_TOOLS
from toolselect.turns import Name, ReportedTurn, turn_problem

# Documented in the schema only: the service enforces these (and its configured limits) with
# its own messages, so the JSON Schema describes what is accepted without changing errors.
_NON_BLANK: dict[str, Any] = {"minLength": 1, "pattern": "\\S"}
# A message of a conversation's `context`, under the query's rule (`selection.check_text`).
_Message = Annotated[str, Field(json_schema_extra=_NON_BLANK)]
# A tool name: 1..256 characters, no surrounding whitespace.
_NAME_PATTERN = r"^\S(?:[\s\S]*\S)?$"
_NAME = Field(min_length=1, max_length=256, pattern=_NAME_PATTERN)


def _integral(value: Any) -> Any:
    """JSON Schema counts 42.0 as an integer; strict pydantic would refuse it."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(_integral)]

# `companions: true` asks for this many.
DEFAULT_COMPANIONS = 2


def _companions(value: Any) -> Any:
    """`true` -> DEFAULT_COMPANIONS, `false` -> 0, else the number (one error field either way)."""
    if isinstance(value, bool):
        return DEFAULT_COMPANIONS if value else 0
    return _integral(value)


Companions = Annotated[
    int,
    BeforeValidator(_companions),
    WithJsonSchema(
        {
            "oneOf": [
                {"type": "boolean"},
                {"type": "integer", "minimum": 0, "maximum": MAX_COMPANIONS},
            ]
        }
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class RankRequest(_Strict):
    query: str = Field(
        description="The request to rank tools for (1 byte .. 8 KiB UTF-8).",
        json_schema_extra=_NON_BLANK,
    )
    k: Integer = Field(
        default=DEFAULT_K,
        description=f"How many tools to return (1..max_k, 100 by default; {DEFAULT_K}, or max_k"
        " when lower, when absent).",
        json_schema_extra={"minimum": 1, "maximum": 100},
    )
    tools: list[str] | None = Field(default=None, description="Rank only these tool names.")
    pack: str | None = Field(
        default=None,
        description="Rank only this pack's tools (empty: no pack, as `null`).",
        json_schema_extra=PACK_SCHEMA,
    )
    session_id: Name | None = Field(
        default=None,
        description="The conversation this request belongs to: the tools its last observed "
        "turn used weigh in as the session prior (at its fitted weight; 0 until it helps), "
        "unless that turn is older than the session idle limit (an hour by default). Empty: "
        "no session, as `null`.",
        json_schema_extra=PACK_SCHEMA,  # the pack's rule: "" is none, blank is refused
    )
    previous_tools: list[Name] | None = Field(
        default=None,
        description="The tools used earlier in the conversation (most recent turn's); "
        f"when not empty, overrides what `session_id` would give. At most {MAX_PREVIOUS_TOOLS}.",
        json_schema_extra={"maxItems": MAX_PREVIOUS_TOOLS},
    )
    context: list[_Message] | None = Field(
        default=None,
        description=f"The conversation so far, most recent last (at most {MAX_CONTEXT_MESSAGES} "
        "messages, each "
        "within the query's size limit). The last one is mixed into the query at its fitted "
        "weight: 0 (the message alone) until the store's sessions show it helps.",
        json_schema_extra={"maxItems": MAX_CONTEXT_MESSAGES},
    )
    companions: Companions = Field(
        default=0,
        description="Also answer up to this many tools often used together with the ranked "
        f"ones (`true`: {DEFAULT_COMPANIONS}; at most {MAX_COMPANIONS}), apart in `companions`; "
        "none until the store's sessions "
        "show companions are needed more often than the next-ranked tools.",
    )


class RankedTool(_Strict):
    tool: str
    score: float


class CompanionTool(BaseModel):
    # `with` is a Python keyword: the field is `with_`, named `with` on the wire.
    model_config = ConfigDict(
        strict=True, extra="forbid", validate_by_name=True, serialize_by_alias=True
    )
    tool: str
    score: float = Field(description="Share of the ranked tool's pairs that include this one.")
    with_: str = Field(alias="with", description="The ranked tool it is often used with.")


class RankResponse(_Strict):
    results: list[RankedTool]
    margin: float = Field(description="Top-1 minus top-2 score (top-1 alone: its score).")
    embedder: str
    took_ms: float
    search_id: str | None = Field(
        default=None,
        description="Report it with the turn (`/v1/observe`) so toolselect knows what was shown.",
    )
    companions: list[CompanionTool] | None = Field(
        default=None, description="When asked for: tools often used with the ranked ones."
    )


class PromptKitQuery(BaseModel):
    """PromptKit's `selection.Query`, with its Go field names."""

    model_config = ConfigDict(strict=True, extra="ignore")
    Text: str = Field(json_schema_extra=_NON_BLANK)
    Kind: str = "tool"
    PackID: str = Field(
        default="",
        description="Empty for none; else a pack name, checked as `/v1/rank`'s `pack`.",
        json_schema_extra=PACK_SCHEMA,
    )
    AgentID: str = ""
    K: Integer = 0


class PromptKitCandidate(BaseModel):
    """PromptKit's `selection.Candidate`: `ID` is what a selector returns."""

    model_config = ConfigDict(strict=True, extra="ignore")
    ID: str = Field(
        description="The tool name returned when selected; unique among the candidates.",
        json_schema_extra={"minLength": 1, "maxLength": 256, "pattern": _NAME_PATTERN},
    )
    Name: str = ""
    Description: str = ""
    Metadata: dict[str, Any] | None = None


class SelectRequest(BaseModel):
    """PromptKit's payload, with `/v1/rank`'s optional conversation fields beside it (the
    exec selector, `toolselect select`, accepts and ignores them)."""

    model_config = ConfigDict(strict=True, extra="ignore")
    query: PromptKitQuery
    candidates: list[PromptKitCandidate]
    session_id: Name | None = Field(
        default=None,
        description="As in `/v1/rank`: the session prior's conversation.",
        json_schema_extra=PACK_SCHEMA,
    )
    previous_tools: list[Name] | None = Field(
        default=None,
        description="As in `/v1/rank`: the tools used earlier in the conversation. At most "
        f"{MAX_PREVIOUS_TOOLS}.",
        json_schema_extra={"maxItems": MAX_PREVIOUS_TOOLS},
    )
    context: list[_Message] | None = Field(
        default=None,
        description="As in `/v1/rank`: the conversation so far, most recent last (at most "
        f"{MAX_CONTEXT_MESSAGES} messages, each within the query's size limit).",
        json_schema_extra={"maxItems": MAX_CONTEXT_MESSAGES},
    )
    companions: Companions = Field(
        default=0,
        description=f"As in `/v1/rank` (`true`: {DEFAULT_COMPANIONS}; at most {MAX_COMPANIONS}), "
        "among the candidates, answered "
        "apart in `companions`.",
    )


class SelectResponse(_Strict):
    selected: list[str]
    reason: str
    search_id: str | None = None
    companions: list[CompanionTool] | None = Field(
        default=None, description="When asked for: candidates often used with the selected ones."
    )


class ObserveRequest(ReportedTurn):
    # `POST /v1/observe`, and each turn of a batch: the one definition of a reported turn
    # (`toolselect.turns`), under the API's schema name.
    pass


# The used-tool rule alone (`turn_problem` without the configured sizes), by its old name.
used_tools_problem = turn_problem


class ObserveResponse(_Strict):
    queued: bool
    reason: str | None = None


class ObserveBatchRequest(_Strict):
    turns: list[ObserveRequest] = Field(
        description="The turns, each as `POST /v1/observe` takes one (at most max_batch, 1000 "
        "by default).",
        json_schema_extra={"maxItems": 1000},
    )


class ObserveBatchResponse(_Strict):
    queued: int
    dropped: int


class ToolOut(_Strict):
    name: str
    description: str
    input_schema: dict[str, Any]
    packs: list[str]


class ToolList(_Strict):
    tools: list[ToolOut]


class UpsertResponse(_Strict):
    upserted: int
    unchanged: int


class DeletedResponse(_Strict):
    deleted: bool


class ExemplarOut(_Strict):
    id: str
    query: str
    tool: str
    tier: str
    created_at: str
    count: int = Field(default=1, description="Times the label was seen (usage labels).")


class ExemplarList(_Strict):
    exemplars: list[ExemplarOut]


class FeedbackRequest(_Strict):
    query: str = Field(json_schema_extra=_NON_BLANK)
    # The upload's rule (`catalog.check_tool_name`), which the service applies with its words.
    tool: str = Field(
        json_schema_extra={"minLength": 1, "maxLength": 256, "pattern": _NAME_PATTERN}
    )


class FeedbackResponse(_Strict):
    saved: bool
    exemplar: ExemplarOut | None = None


class AnalyticsList(_Strict):
    analyses: list[str]


class FoldPoint(_Strict):
    description_weight: float
    shrink: float
    self_weight: float
    usage_weight: float
    top1: float


class FoldOut(_Strict):
    description_weight: float
    shrink: float
    self_weight: float
    usage_weight: float
    source: str = Field(description="`prior`, `validated` (chosen by leave-one-out) or `pinned`")
    validation: list[FoldPoint]


class CurvePoint(_Strict):
    margin: float
    probability: float


class FreeTierOut(_Strict):
    target_precision: float
    margin_floor: float | None = Field(
        default=None, description="absent: the free tier does not label"
    )
    floor_source: str
    labels: int
    curve: list[CurvePoint]


class TeacherDepthOut(_Strict):
    depth: int
    measured_recall: float | None = None


class SignalOut(_Strict):
    weight: float
    source: str = Field(description="`fitted` on the store's sessions, or `pinned` by a setting.")


class ContextSignalOut(SignalOut):
    below_margin: float | None = Field(
        default=None,
        description="The context is used only when the message alone's margin is below this.",
    )


class CompanionsFitOut(_Strict):
    least_share: float | None = Field(
        default=None, description="Least share of a ranked tool's pairs; none: no companions."
    )
    precision: float | None = None
    next_ranks_precision: float | None = None


class ConversationFitOut(_Strict):
    """The conversation signals' weights, fitted on the store's sessions, and the evidence."""

    prior: SignalOut
    context: ContextSignalOut
    companions: CompanionsFitOut
    sessions: int
    turns: int
    follow_ups: int
    follow_up_score: dict[str, float | None]
    all_needed_shown: dict[str, float | None]
    relations: dict[str, int]
    reason: str


class LearningFit(_Strict):
    """What the learning loop chose from its own labels, and the evidence."""

    embedder: str
    labels: int
    fitted_at: str | None = None
    fold: FoldOut
    free_tier: FreeTierOut
    teacher: TeacherDepthOut
    conversation: ConversationFitOut | None = None


class AnalyticsResult(_Strict):
    name: str
    columns: list[str]
    rows: list[list[Any]]


class Health(_Strict):
    status: str
    reason: str | None = None
    # True while ranking from the catalog snapshot kept for a start the store did not answer.
    snapshot: bool | None = None


class ErrorBody(_Strict):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(_Strict):
    error: ErrorBody


class ToolIn(BaseModel):
    """One tool of an MCP or native `PUT /v1/tools` body; unknown keys are ignored."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            # The schema is read from `inputSchema` when present, else from `input_schema`.
            "anyOf": [
                {
                    "required": ["inputSchema"],
                    "properties": {"inputSchema": {"type": ["object", "null"]}},
                },
                {
                    "not": {"required": ["inputSchema"]},
                    "properties": {"input_schema": {"type": ["object", "null"]}},
                },
            ]
        },
    )
    name: str = _NAME
    description: str | None = Field(default=None, description="At most 8 KiB of UTF-8.")


class ToolsIn(BaseModel):
    """MCP `tools/list` result or native body; names unique within the body."""

    model_config = ConfigDict(extra="allow")
    tools: list[ToolIn] = Field(max_length=10_000)
    pack: str | None = Field(
        default=None,
        description="The pack the tools join (empty: none, as `null`).",
        json_schema_extra=PACK_SCHEMA,
    )


class OpenAIFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = _NAME
    description: str | None = Field(default=None, description="At most 8 KiB of UTF-8.")
    parameters: dict[str, Any] | None = None


class OpenAITool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: OpenAIFunction


class UpsertRequest(RootModel[ToolsIn | list[OpenAITool]]):
    """`PUT /v1/tools` (schema only: `catalog.parse_tools` validates, with its own messages)."""
