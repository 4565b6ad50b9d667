"""Request and response models: they validate bodies and generate `/openapi.json`, so neither drifts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class RankRequest(_Strict):
    query: str = Field(description="The request to rank tools for (1 byte .. 8 KiB UTF-8).")
    k: int = Field(default=5, description="How many tools to return (1..100).")
    tools: list[str] | None = Field(default=None, description="Rank only these tool names.")
    pack: str | None = Field(default=None, description="Rank only this pack's tools.")


class RankedTool(_Strict):
    tool: str
    score: float


class RankResponse(_Strict):
    results: list[RankedTool]
    margin: float = Field(description="Top-1 minus top-2 score (top-1 alone: its score).")
    embedder: str
    took_ms: float


class PromptKitQuery(BaseModel):
    """PromptKit's `selection.Query`, with its Go field names."""

    model_config = ConfigDict(strict=True, extra="ignore")
    Text: str
    Kind: str = "tool"
    PackID: str = ""
    AgentID: str = ""
    K: int = 0


class PromptKitCandidate(BaseModel):
    """PromptKit's `selection.Candidate`: `ID` is what a selector returns."""

    model_config = ConfigDict(strict=True, extra="ignore")
    ID: str
    Name: str = ""
    Description: str = ""
    Metadata: dict[str, Any] | None = None


class SelectRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    query: PromptKitQuery
    candidates: list[PromptKitCandidate]


class SelectResponse(_Strict):
    selected: list[str]
    reason: str


class ObserveRequest(_Strict):
    request: str
    used_tool: str
    turn_id: str | None = None
    agent_id: str | None = None
    pack: str | None = None
    outcome: Literal["ok", "error", "corrected"] | None = None


class ObserveResponse(_Strict):
    queued: bool
    reason: str | None = None


class ObserveBatchRequest(_Strict):
    turns: list[ObserveRequest]


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


class ExemplarList(_Strict):
    exemplars: list[ExemplarOut]


class FeedbackRequest(_Strict):
    query: str
    tool: str


class FeedbackResponse(_Strict):
    saved: bool
    exemplar: ExemplarOut | None = None


class AnalyticsList(_Strict):
    analyses: list[str]


class AnalyticsResult(_Strict):
    name: str
    columns: list[str]
    rows: list[list[Any]]


class Health(_Strict):
    status: str
    reason: str | None = None


class ErrorBody(_Strict):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(_Strict):
    error: ErrorBody
