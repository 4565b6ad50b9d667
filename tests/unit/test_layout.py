"""The layout rules of `toolselect/`: small modules, and no module importing its caller."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_purity import imported_modules

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 450


def _modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "toolselect").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _import_graph() -> dict[str, set[str]]:
    """Each module's toolselect imports, deferred ones (inside functions) included: a cycle
    through a function-level import is still a module that imports its caller."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        source = path.read_text(encoding="utf-8")
        imported = imported_modules(source, name, is_package=path.name == "__init__.py")
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    """No toolselect module imports, even lazily, a module that imports it back."""
    assert _cycles(_import_graph()) == []


def test_cycle_finder_sees_a_cycle() -> None:
    """The check above can fail: a two-module loop and a three-module loop are both found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_modules_stay_small() -> None:
    """Every module of toolselect/ is at most 450 lines (one concept per module)."""
    sizes = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in _modules().items()
    }
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
