"""The mis-route detector: fallback and disagreement rules, with namespaced tool names."""

from __future__ import annotations

import math

import pytest

from toolselect.learn.detect import Flag, RankSignal, detect, is_fallback
from toolselect.names import DEFAULT_FALLBACK_TOOLS, fallback_name

FLOOR = 0.05


def flag_of(
    used: str,
    signal: RankSignal | None = None,
    *,
    request: str = "send Ana a whatsapp saying I'm late",
    fallbacks: tuple[str, ...] = DEFAULT_FALLBACK_TOOLS,
) -> Flag | None:
    return detect(request, used, signal, fallback_tools=fallbacks, margin_floor=FLOOR)


@pytest.mark.parametrize("used", ["shell_exec", "mcp__shell_exec", "fs_grep", "a__b__fs_read"])
def test_fallback_tool_is_flagged_by_bare_name(used: str) -> None:
    """A configured fallback tool, plain or namespaced, flags the turn as `fallback`."""
    assert flag_of(used) == Flag("fallback")


@pytest.mark.parametrize("used", ["my_shell_exec", "shell_exec2", "shell", "shell_exec__run"])
def test_fallback_is_never_matched_by_suffix_or_prefix(used: str) -> None:
    """Names that merely contain a fallback tool's name are not fallbacks."""
    assert flag_of(used) is None


def test_namespaced_fallback_config_matches_plain_used_tool() -> None:
    """The bare-name rule is symmetric: a namespaced fallback entry matches the plain name."""
    assert flag_of("shell_exec", fallbacks=("mcp__shell_exec",)) == Flag("fallback")
    assert is_fallback("shell_exec", ("mcp__shell_exec",))
    assert not is_fallback("web_search", ("search",))


def test_fallback_wins_over_disagreement() -> None:
    """When both rules fire, the turn is flagged `fallback`."""
    signal = RankSignal(top1="whatsapp__send_message", margin=0.5)
    assert flag_of("shell_exec", signal) == Flag("fallback")


def test_confident_disagreement_is_flagged() -> None:
    """A confident ranker top-1 that is not the used tool flags `disagreement`."""
    assert flag_of("email_send", RankSignal("whatsapp__send_message", 0.2)) == Flag("disagreement")


def test_margin_exactly_at_floor_counts_as_confident() -> None:
    """The floor is inclusive: margin == floor is confident."""
    assert flag_of("email_send", RankSignal("send_message", FLOOR)) == Flag("disagreement")


def test_unconfident_disagreement_is_not_flagged() -> None:
    """A margin below the floor is not evidence of a mis-route."""
    assert flag_of("email_send", RankSignal("send_message", FLOOR - 1e-9)) is None


def test_nan_margin_is_never_confident() -> None:
    """A NaN margin (broken scores) never flags a disagreement."""
    assert flag_of("email_send", RankSignal("send_message", math.nan)) is None


@pytest.mark.parametrize(
    ("top1", "used"),
    [
        ("whatsapp__send_message", "send_message"),
        ("send_message", "whatsapp__send_message"),
        ("whatsapp__send_message", "mcp__whatsapp__send_message"),
        ("web_search", "web_search"),
    ],
)
def test_a_name_under_more_namespaces_is_agreement(top1: str, used: str) -> None:
    """A name and the same name under more namespaces are one tool, so the ranker agrees."""
    assert flag_of(used, RankSignal(top1, 0.9)) is None


@pytest.mark.parametrize(
    ("top1", "used"),
    [
        ("slack__send_message", "whatsapp__send_message"),
        ("github__create_issue", "mcp__jira__create_issue"),
    ],
)
def test_two_servers_tools_of_one_bare_name_disagree(top1: str, used: str) -> None:
    """Two MCP servers' `send_message` are two tools: a confident ranker that chose the other
    one disagrees (they were one tool by bare name, and the mis-route went unflagged)."""
    assert flag_of(used, RankSignal(top1, 0.9)) == Flag("disagreement")


def test_search_is_not_web_search() -> None:
    """`search` and `web_search` are different tools: a confident ranker disagrees."""
    assert flag_of("search", RankSignal("web_search", 0.9)) == Flag("disagreement")
    assert flag_of("web_search", RankSignal("search", 0.9)) == Flag("disagreement")


def test_without_signal_only_fallback_applies() -> None:
    """With no ranker signal a non-fallback tool is never flagged, a fallback still is."""
    assert flag_of("email_send", None) is None
    assert flag_of("mcp__shell_exec", None) == Flag("fallback")


def test_empty_top1_is_no_disagreement() -> None:
    """A signal with an empty top-1 (empty catalog) does not flag a disagreement."""
    assert flag_of("email_send", RankSignal("  ", 0.9)) is None


@pytest.mark.parametrize(("request_text", "used"), [("", "shell_exec"), ("  \n", "shell_exec")])
def test_empty_request_is_never_flagged(request_text: str, used: str) -> None:
    """An empty or whitespace request is never flagged, even with a fallback tool."""
    assert flag_of(used, RankSignal("web_search", 0.9), request=request_text) is None


@pytest.mark.parametrize("used", ["", "   "])
def test_empty_used_tool_is_never_flagged(used: str) -> None:
    """An empty used tool is never flagged, even when the ranker is confident."""
    assert flag_of(used, RankSignal("web_search", 0.9)) is None


def test_custom_fallback_list_replaces_default() -> None:
    """Only the configured fallback tools count; defaults not in the list do not."""
    assert flag_of("shell_exec", fallbacks=("python_repl",)) is None
    assert flag_of("tools__python_repl", fallbacks=("python_repl",)) == Flag("fallback")


def test_fallback_name_is_the_one_configured_fallback_a_name_is() -> None:
    """The analyses' name for a fallback tool: itself, else the longest fallback the name ends
    with after `__`, else the one fallback with more namespaces; never a bare suffix, and
    nothing when several fallbacks may be meant."""
    fallbacks = ("shell_exec", "bash__run", "x__run", "tools__lint", "tools__lint")
    assert fallback_name("shell_exec", fallbacks) == "shell_exec"
    assert fallback_name("mcp__shell_exec", fallbacks) == "shell_exec"
    assert fallback_name("mcp__bash__run", fallbacks) == "bash__run"
    assert fallback_name("lint", fallbacks) == "tools__lint"  # listed twice: one fallback
    assert fallback_name("run", fallbacks) is None  # bash__run or x__run
    assert fallback_name("my_shell_exec", fallbacks) is None
    assert fallback_name("send_email", fallbacks) is None
    assert all(is_fallback(n, fallbacks) for n in ("mcp__shell_exec", "mcp__bash__run", "lint"))
