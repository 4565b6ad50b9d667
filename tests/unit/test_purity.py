"""The pure core imports no adapter library, directly or through toolselect modules it imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE = (
    "ranker/__init__.py",
    "ranker/records.py",
    "ranker/centroids.py",
    "ranker/snapshot.py",
    "ranker/topk.py",
    "ranker/centroid_ranker.py",
    "ranker/relations.py",
    "selection.py",
    "learn/detect.py",
    "learn/records.py",
    "learn/batch.py",
    "learn/window.py",
    "learn/session_fit.py",
    "learn/candidates.py",
    "oracle/tiers.py",
    "store/port.py",
    "records.py",
    "store/rules.py",
    "store/session_rules.py",
    "names.py",
)
FORBIDDEN = frozenset({"neo4j", "anthropic", "aiohttp", "sqlite3", "structlog"})


def imported_modules(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Absolute names of every module an import statement in `source` names."""
    found: set[str] = set()
    package = module if is_package else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            # `from toolselect.embed import base` may name a submodule
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def module_file(name: str) -> Path | None:
    """The file of a toolselect module (or package `__init__`), if it exists."""
    relative = Path(*name.split("."))
    for candidate in (ROOT / f"{relative}.py", ROOT / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def forbidden_imports(module: str) -> dict[str, set[str]]:
    """Forbidden libraries reached from `module`, following toolselect imports and parents."""
    offenders: dict[str, set[str]] = {}
    pending, seen = [module], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name)
        if path is None:
            continue
        source = path.read_text(encoding="utf-8")
        for imported in imported_modules(source, name, is_package=path.name == "__init__.py"):
            if imported.split(".")[0] in FORBIDDEN:
                offenders.setdefault(name, set()).add(imported)
            if imported.startswith("toolselect"):
                parts = imported.split(".")
                # importing a.b.c runs a/__init__ and a/b/__init__ too
                pending.extend(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return offenders


@pytest.mark.parametrize("relative", PURE)
def test_pure_core_imports_no_adapter_library(relative: str) -> None:
    """A pure-core module, and every toolselect module it pulls in, avoids adapter libraries."""
    assert (ROOT / "toolselect" / relative).is_file(), f"toolselect/{relative} is listed as pure"
    module = "toolselect." + relative.removesuffix(".py").removesuffix("/__init__").replace(
        "/", "."
    )
    assert forbidden_imports(module) == {}


def test_the_checker_sees_direct_relative_and_nested_imports() -> None:
    """The AST scan catches plain, from- and function-local imports, so the test can fail."""
    source = (
        "import numpy\n"
        "import neo4j.exceptions\n"
        "from aiohttp import web\n"
        "from . import sibling\n"
        "def f():\n"
        "    import structlog\n"
    )
    found = imported_modules(source, "toolselect.store.thing")
    assert {"neo4j.exceptions", "aiohttp", "structlog", "toolselect.store.sibling"} <= found
    assert {name.split(".")[0] for name in found} & FORBIDDEN == {"neo4j", "aiohttp", "structlog"}
    assert "toolselect.store" in imported_modules(
        "from . import x", "toolselect.store", is_package=True
    )
