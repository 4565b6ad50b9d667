"""The exception tree of `toolselect/errors.py` is whole: every exception class toolselect
defines derives from `ToolselectError`, has a name of its own and is drawn in the tree."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import toolselect.errors

ROOT = Path(__file__).resolve().parents[2] / "toolselect"

# Exceptions that stay outside the tree on purpose, with the reason.
OUTSIDE = {
    # The CLI's own signal for "print to stderr, exit 2"; it never leaves `toolselect.cmd`.
    "UsageError": "toolselect/cmd/remote.py",
}


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _classes() -> list[tuple[str, str, list[str]]]:
    """(name, file, base names) of every class in toolselect/."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = str(path.relative_to(ROOT.parent))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found.append((node.name, where, [_base_name(b) for b in node.bases]))
    return found


def _exceptions() -> dict[str, tuple[str, list[str]]]:
    """The classes that derive, through any chain in toolselect/, from a builtin exception."""
    classes = _classes()
    builtin = {
        name
        for name in dir(builtins)
        if isinstance(getattr(builtins, name), type)
        and issubclass(getattr(builtins, name), BaseException)
    }
    known: dict[str, tuple[str, list[str]]] = {}
    grew = True
    while grew:
        grew = False
        for name, where, bases in classes:
            if name in known:
                assert known[name][0] == where, f"{name} in {known[name][0]} and {where}"
                continue
            if any(b in builtin or b in known for b in bases):
                known[name] = (where, bases)
                grew = True
    return known


def _reaches_root(name: str, known: dict[str, tuple[str, list[str]]]) -> bool:
    if name == "ToolselectError":
        return True
    return any(_reaches_root(b, known) for b in known.get(name, ("", []))[1])


def test_every_exception_derives_from_the_root() -> None:
    """Each exception class has a name no other has, and derives from `ToolselectError`
    unless listed in `OUTSIDE` with its reason."""
    known = _exceptions()
    assert "HttpError" in known and "RetryLater" in known
    for name, (where, _) in known.items():
        if name in OUTSIDE:
            assert OUTSIDE[name] == where
            continue
        assert _reaches_root(name, known), f"{name} ({where}) does not derive from ToolselectError"


def test_the_docstring_draws_every_exception() -> None:
    """The tree in `toolselect/errors.py`'s docstring names every exception in the tree."""
    drawn = toolselect.errors.__doc__ or ""
    missing = [n for n in _exceptions() if n not in OUTSIDE and not re.search(rf"\b{n}\b", drawn)]
    assert not missing, f"not drawn in toolselect/errors.py: {missing}"
