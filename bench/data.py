"""Public tool-retrieval data: BFCL's `live_multiple` and `simple_python` (package `bfcl-eval`).

The package is installed without its dependencies (`pip install --no-deps bfcl-eval`); only its
JSON-lines data files are read, never its code. Per entry: the catalog gets every function the
entry offers (deduplicated by name, the first definition kept, differing redefinitions counted
as collisions); the query is the last user message; the label is the single function of the
ground truth (entries whose ground truth has not exactly one function are skipped and counted).
The queries are split in two halves by a seeded shuffle: `learn` (observed as turns) and
`held` (only ever ranked).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from toolselect.catalog import tool_text
from toolselect.names import name_words
from toolselect.records import Tool, canonical_json

CATEGORIES = ("live_multiple", "simple_python")
SEED = 0
INSTALL_HINT = ".venv/bin/pip install --no-deps bfcl-eval"


@dataclass(frozen=True, slots=True)
class Query:
    id: str
    category: str
    text: str
    label: str


@dataclass(frozen=True)
class Dataset:
    tools: tuple[Tool, ...]
    learn: tuple[Query, ...]
    held: tuple[Query, ...]
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def queries(self) -> tuple[Query, ...]:
        return self.learn + self.held

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)


def data_dir() -> Path:
    """The folder of BFCL's data files inside the installed `bfcl_eval` package."""
    try:
        root = resources.files("bfcl_eval")
    except ModuleNotFoundError as exc:
        raise SystemExit(f"bfcl-eval is not installed: {INSTALL_HINT}") from exc
    return Path(str(root)) / "data"


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def _files(category: str) -> tuple[Path, Path]:
    """(questions, possible answers) of a category, whatever the BFCL version prefix."""
    root = data_dir()
    questions = sorted(root.glob(f"BFCL_*_{category}.json"))
    answers = sorted((root / "possible_answer").glob(f"BFCL_*_{category}.json"))
    if not questions or not answers:
        raise SystemExit(f"no {category} files under {root}; reinstall: {INSTALL_HINT}")
    return questions[-1], answers[-1]


def _last_user_message(entry: Mapping[str, Any]) -> str:
    text = ""
    for turn in entry.get("question", []):
        for message in turn:
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                text = message["content"]
    return text.strip()


def load(seed: int = SEED) -> Dataset:
    """The catalog, both halves of the queries, and the counts the report quotes."""
    tools: dict[str, Tool] = {}
    first: dict[str, Any] = {}
    collided: set[str] = set()
    redefinitions = 0
    queries: list[Query] = []
    per_category: dict[str, dict[str, int]] = {}
    skipped_answers = 0
    skipped_empty = 0
    skipped_unknown = 0
    for category in CATEGORIES:
        questions_path, answers_path = _files(category)
        answers = {a["id"]: a for a in _lines(answers_path)}
        entries = list(_lines(questions_path))
        stats = per_category[category] = {"entries": len(entries), "functions": 0}
        for entry in entries:
            for function in entry.get("function", []):
                stats["functions"] += 1
                name = function["name"]
                if name not in first:
                    first[name] = function
                    # As stored: both stores keep schemas as canonical JSON (sorted keys), so
                    # the service embeds parameters in name order, not in the caller's order.
                    schema = json.loads(canonical_json(function.get("parameters") or {}))
                    tools[name] = Tool(
                        name=name,
                        description=function.get("description") or "",
                        input_schema=schema,
                    )
                elif first[name] != function:
                    collided.add(name)
                    redefinitions += 1
            truth = answers.get(entry["id"], {}).get("ground_truth", [])
            if len(truth) != 1 or not isinstance(truth[0], dict) or len(truth[0]) != 1:
                skipped_answers += 1
                continue
            label = next(iter(truth[0]))
            text = _last_user_message(entry)
            if not text:
                skipped_empty += 1
                continue
            if label not in tools:
                skipped_unknown += 1
                continue
            queries.append(Query(entry["id"], category, text, label))
    order = list(range(len(queries)))
    random.Random(seed).shuffle(order)
    half = len(order) // 2
    learn = tuple(queries[i] for i in order[:half])
    held = tuple(queries[i] for i in order[half:])
    # The same query text may come with different labels; the teacher stub answers the first.
    labels_by_text: dict[str, set[str]] = {}
    for q in queries:
        labels_by_text.setdefault(q.text, set()).add(q.label)
    learn_labels = {q.label for q in learn}
    counts: dict[str, Any] = {
        "source": f"bfcl-eval {_version()}: {', '.join(CATEGORIES)}",
        "per_category": per_category,
        "tools": len(tools),
        "name_collisions": len(collided),
        "redefinitions": redefinitions,
        "queries": len(queries),
        "skipped_not_one_function": skipped_answers,
        "skipped_empty_query": skipped_empty,
        "skipped_label_not_in_catalog": skipped_unknown,
        "distinct_labels": len({q.label for q in queries}),
        "duplicate_query_texts": len(queries) - len(labels_by_text),
        "ambiguous_query_texts": sum(1 for s in labels_by_text.values() if len(s) > 1),
        "learn": len(learn),
        "held": len(held),
        "held_label_seen_in_learn": sum(1 for q in held if q.label in learn_labels),
        "seed": seed,
    }
    return Dataset(tuple(tools.values()), learn, held, counts)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bfcl-eval")
    except PackageNotFoundError:
        return "?"


# -- tool-text variants (bench only: the service always embeds `tool_text`) -------------------

TEXT_VARIANTS = ("full", "param_names", "name_desc")


def variant_text(tool: Tool, variant: str) -> str:
    """`full` is the service's `tool_text`; `param_names` drops the parameter descriptions;
    `name_desc` keeps only the name as words and the description."""
    if variant == "full":
        return tool_text(tool)
    parts = [name_words(tool.name) + ".", tool.description.strip()]
    if variant == "param_names":
        parts.extend(_param_names(tool.input_schema, depth=2))
    elif variant != "name_desc":
        raise ValueError(f"expected a variant in {TEXT_VARIANTS}, got {variant!r}")
    return " ".join(p for p in parts if p)


def _param_names(schema: object, depth: int) -> list[str]:
    if depth <= 0 or not isinstance(schema, Mapping):
        return []
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    names: list[str] = []
    for name, spec in properties.items():
        names.append(name_words(str(name)))
        if isinstance(spec, Mapping):
            names.extend(_param_names(spec, depth - 1))
            items = spec.get("items")
            if isinstance(items, Mapping):
                names.extend(_param_names(items, depth - 1))
    return names
