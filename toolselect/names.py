"""Name and text rules shared by every part: bare names, fallback tools, query normalisation."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

DEFAULT_FALLBACK_TOOLS: tuple[str, ...] = (
    "shell_exec",
    "shell_poll",
    "shell_kill",
    "fs_read",
    "fs_glob",
    "fs_grep",
    "skill",
    "text_response",
)

_SPACES = re.compile(r"\s+")


def bare_name(name: str) -> str:
    """The part after the last `__`: `whatsapp__send_message` -> `send_message`."""
    return name.rsplit("__", 1)[-1]


def namespace(name: str) -> str:
    """The part before the last `__`, or the empty string for a plain name."""
    head, sep, _ = name.rpartition("__")
    return head if sep else ""


class CatalogNames:
    """Which catalog tool a reported name stands for: the tool of that name, else the tools
    with its bare name (an agent may report `mcp__server__tool` for the catalog's
    `server__tool`, or the bare `tool`), narrowed, when several have it, to the one the name
    ends with after a `__` (`mcp__jira__create_issue` is `jira__create_issue`, not
    `github__create_issue`). One rule for the labels, the session counts, the session prior
    and the analyses; `catalog` needs to hold every tool of the names asked about and of their
    bare names, not the whole catalog."""

    def __init__(self, catalog: Iterable[str]) -> None:
        # Each name to itself: a match is the catalog's own string, so what keeps one (a
        # session's remembered tools) shares it instead of holding the reported copy.
        self._exact = {name: name for name in catalog}
        self._by_bare: dict[str, list[str]] = {}
        for name in sorted(self._exact):
            self._by_bare.setdefault(bare_name(name), []).append(name)

    def __contains__(self, name: object) -> bool:
        """Whether `name` is a catalog tool's own name."""
        return name in self._exact

    def matches(self, name: str) -> list[str]:
        """The tool of that name; else the tools with its bare name (sorted), or of those, when
        several, the longest that `name` ends with after a `__`."""
        if name in self._exact:
            return [self._exact[name]]
        found = self._by_bare.get(bare_name(name), [])
        within = [tool for tool in found if name.endswith("__" + tool)]
        return [max(within, key=len)] if len(found) > 1 and within else found

    def resolve(self, name: str) -> str | None:
        """The one tool `name` stands for, or None (no tool, or several it may be)."""
        found = self.matches(name)
        return found[0] if len(found) == 1 else None


@functools.lru_cache(maxsize=32)
def catalog_names(names: tuple[str, ...]) -> CatalogNames:
    """`CatalogNames` of a catalog's names, built once while they stand (a fold keeps them)."""
    return CatalogNames(names)


def same_tool(a: str, b: str) -> bool:
    """Two names denote one tool when they are equal or one is the other under more namespaces
    (`mcp__shell_exec` is `shell_exec`, `mcp__jira__create_issue` is `jira__create_issue`);
    never by a bare suffix (`my_shell_exec` is not `shell_exec`), and tools of two namespaces
    are two tools (`github__create_issue` is not `jira__create_issue`). Which catalog tool a
    reported name stands for is `CatalogNames`'s to say; this compares two names as they are."""
    if not a or not b:
        return False
    return a == b or a.endswith("__" + b) or b.endswith("__" + a)


def fallback_name(name: str, fallback_tools: Iterable[str]) -> str | None:
    """The configured fallback tool `name` is by `same_tool` (`mcp__shell_exec` is
    `shell_exec`, as the detector reads it), or None: the fallback of that very name, else the
    longest one `name` ends with after a `__`, else the one fallback with more namespaces than
    `name`; never one of several. The analyses count a fallback tool the catalog lacks under
    this one name, however agents report it (`cypher/analytics/*.cypher` hold the same rule)."""
    found = sorted({tool for tool in fallback_tools if same_tool(name, tool)})
    if name in found:
        return name
    within = [tool for tool in found if name.endswith("__" + tool)]
    if within:
        return max(within, key=len)
    return found[0] if len(found) == 1 else None


# A flagged turn's query is normalised several times on its way (ratchet lookup, save plan,
# stored row); a batch of 512 fits in the cache, and the queries are bounded (8 KiB default).
@functools.lru_cache(maxsize=1024)
def is_blank(text: str) -> bool:
    """Whether `text` shows nothing: empty, whitespace, or only characters that are not printed
    (zero-width spaces and joiners, byte order marks, controls). Such a query embeds to nothing:
    every tool would score zero, and a label under it would teach nothing."""
    return not any(ch.isprintable() and not ch.isspace() for ch in text)


def normalise_query(text: str) -> str:
    """The key under which a query's label is kept: NFKC, case-folded, whitespace collapsed."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_.\-/:\s]+")


def name_words(name: str) -> str:
    """A tool name split into words: snake, camel, dots and `__` namespaces all become spaces."""
    return " ".join(w.lower() for w in _SEPARATORS.split(_CAMEL.sub(" ", name)) if w)
