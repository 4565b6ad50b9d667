"""The mis-route detector: pure rules that say whether an observed turn looks mis-routed.

Three signals, all cheap and embedding-free once the ranker has spoken:
- `fallback`: the agent used a tool it improvises with when it missed the right one
  (`shell_exec`, `fs_grep`, ...);
- `disagreement`: the ranker was confident about another tool than the one the agent used;
- `failed`: the agent reported the turn `error` or `corrected` (the tool it used may be wrong).

Names are compared by `names.same_tool` (`mcp__shell_exec` is `shell_exec`, `my_shell_exec` is
not), so namespaced catalogs work without configuration; the used tool comes resolved to the
catalog tool it stands for (`batch.prepare`), so an agent reporting `mcp__gh__create_issue` for
the catalog's `github__create_issue` agrees with a ranker that chose it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from toolselect.names import same_tool

FlagReason = Literal["fallback", "disagreement", "failed"]


@dataclass(frozen=True, slots=True)
class RankSignal:
    """What the ranker said about a request: its top-1 tool and the top-1/top-2 margin."""

    top1: str
    margin: float


@dataclass(frozen=True, slots=True)
class Flag:
    """Why a turn was flagged as mis-routed."""

    reason: FlagReason


def is_fallback(tool: str, fallback_tools: Collection[str]) -> bool:
    """True when `tool` is one of the configured fallback tools (`mcp__shell_exec` counts)."""
    return any(same_tool(tool, fallback) for fallback in fallback_tools)


def detect(
    request: str,
    used_tool: str,
    signal: RankSignal | None,
    *,
    fallback_tools: Collection[str],
    margin_floor: float,
    outcome: str | None = None,
) -> Flag | None:
    """Flag a turn as mis-routed, or return None.

    `signal` is None when the ranker is not wired or its catalog is empty; then only the
    fallback rule applies. A fallback flag wins over a disagreement flag: it is the stronger
    evidence (the agent improvised) and its policy row does not depend on the outcome; a
    disagreement wins over a failure (the ranker's confident top-1 is a candidate label).
    """
    if not request.strip() or not used_tool.strip():
        return None
    if is_fallback(used_tool, fallback_tools):
        return Flag("fallback")
    if (
        signal is not None
        and signal.top1.strip()
        # NaN margins compare False, so a broken score never counts as confident.
        and signal.margin >= margin_floor
        and not same_tool(signal.top1, used_tool)
    ):
        return Flag("disagreement")
    if outcome is not None and outcome.strip().lower() in ("error", "corrected"):
        return Flag("failed")
    return None
