"""BFCL's multi-turn conversations (package `bfcl-eval`, data files only), for the dev rule.

Dev rule: only the conversations that involve no `VehicleControlAPI` function are used; those
that do are held back for a later check. A held-back conversation is never parsed: a question
line that names the class anywhere (its `involved_classes`, its `initial_config`) is skipped as
raw text before `json.loads`, and an answer line is parsed only when its id (read from the raw
line) belongs to a kept conversation. The ground truth of a kept conversation is checked again:
a call of a held-back class's function raises.

Files (under `bfcl_eval/data/`):
  `BFCL_v*_multi_turn_<category>.json`   the conversations: `question` (one list of messages
                                         per turn), `involved_classes`, `missed_function`
  `possible_answer/<same name>`          `ground_truth`: per turn, the calls as Python source
                                         (`cd(folder='document')`); the name is the callee
  `multi_turn_func_doc/<class file>`     the function docs of each API class (the mapping is
                                         BFCL's own `MULTI_TURN_FUNC_DOC_FILE_MAPPING`)

Catalog: by default (`catalog="all"`) every function of the eight multi-turn API classes, 128
(the issue's setting): the held-back class's 22 function *docs* are in it as distractors, as
they will be when the held-back conversations are checked; only its conversations stay out.
`catalog="dev"` keeps the functions of the classes the dev conversations involve. Per
conversation, `Conversation.catalog` is the functions of its own classes (what BFCL gives the
model); `missed_function` (miss_func) and `excluded_function` (read by no BFCL code) are ignored.

Tool names are BFCL's bare function names (`cd`, `post_tweet`): no two functions of the eight
classes share a name, and the ground truth uses bare names; a collision would raise
(`Dataset.tool_class` maps each name back to its class).

Categories: the four multi-turn categories share their scenarios, numbered alike (`base_12`,
`miss_param_12`, ... are one scenario with the same classes), so the split is by scenario
number and a scenario's variants always fall in the same half. `long_context` repeats base's
messages (a few reworded) over a bigger environment, `miss_func` repeats them with a function
withheld for a turn (the user message of that turn has no call; a turn with no message then adds
the function), `miss_param` rewords one message per conversation so a parameter is missing (no
call) and adds a user turn that supplies it (the calls). `DEFAULT_CATEGORIES` loads `base` and
`miss_param`; `bench/conversations.py` scores `base` and, apart, miss_param's supplying turns.

A turn is scored (`Turn.scored`) when it has a user message and at least one call; the others
stay in the conversation as earlier messages. Order is deterministic: category in
`CATEGORIES` order, then scenario number; the split shuffles the dev scenario numbers with a
seeded `random.Random` and gives the first half to `traffic` (observed), the rest to `held`.
"""

from __future__ import annotations

import ast
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.data import INSTALL_HINT, data_dir
from toolselect.records import Tool, canonical_json

HELD_BACK_CLASS = "VehicleControlAPI"
# BFCL's MULTI_TURN_FUNC_DOC_FILE_MAPPING, restricted to the multi-turn classes (its other
# entries, web search and memory, belong to the agentic categories).
CLASS_FILES: dict[str, str] = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
DEFAULT_CATEGORIES = ("base", "miss_param")
CATALOGS = ("all", "dev")
SEED = 0
_ID = re.compile(r'"id"\s*:\s*"([^"]+)"')


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn of a conversation."""

    index: int  # BFCL's turn index in the conversation, from 0
    messages: tuple[str, ...]  # this turn's user messages (none: a turn that only adds a function)
    calls: tuple[str, ...]  # ground-truth function names in call order, repeats kept
    earlier: tuple[str, ...]  # the user messages of the earlier turns, oldest first
    earlier_calls: tuple[tuple[str, ...], ...]  # `calls` of each earlier turn, oldest first

    @property
    def text(self) -> str:
        return "\n".join(self.messages)

    @property
    def needed(self) -> tuple[str, ...]:
        """The distinct functions the turn calls, in order of first call."""
        return tuple(dict.fromkeys(self.calls))

    @property
    def scored(self) -> bool:
        return bool(self.messages) and bool(self.calls)

    @property
    def first(self) -> bool:
        """No user message before this turn's."""
        return not self.earlier

    @property
    def answers_unanswered(self) -> bool:
        """The previous turn had a user message but no call (miss_param: the turn that
        supplies the missing parameter)."""
        return bool(self.earlier_calls) and not self.earlier_calls[-1] and bool(self.earlier)

    def recent(self, n: int) -> tuple[str, ...]:
        """The last `n` user messages up to this turn's, oldest first."""
        return (self.earlier + self.messages)[-n:]


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str  # BFCL's id, e.g. multi_turn_base_12
    category: str  # base, long_context, miss_func or miss_param
    number: int  # the scenario: the same number in each category is one scenario
    classes: tuple[str, ...]  # involved API classes, BFCL's order
    catalog: tuple[str, ...]  # the functions of those classes, doc order
    turns: tuple[Turn, ...]

    @property
    def scored(self) -> tuple[Turn, ...]:
        return tuple(t for t in self.turns if t.scored)


@dataclass(frozen=True)
class Dataset:
    tools: tuple[Tool, ...]  # the ranked catalog
    tool_class: dict[str, str]  # function name -> API class
    conversations: tuple[Conversation, ...]  # every dev conversation, in load order
    traffic_numbers: frozenset[int]  # the scenarios of the traffic half
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def traffic(self) -> tuple[Conversation, ...]:
        return tuple(c for c in self.conversations if c.number in self.traffic_numbers)

    @property
    def held(self) -> tuple[Conversation, ...]:
        return tuple(c for c in self.conversations if c.number not in self.traffic_numbers)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)


def _order(c: Conversation) -> tuple[int, int]:
    return CATEGORIES.index(c.category), c.number


def _raw_lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield line


def _file(folder: Path, category: str) -> Path:
    found = sorted(folder.glob(f"BFCL_*_multi_turn_{category}.json"))
    if not found:
        raise SystemExit(f"no multi_turn_{category} file under {folder}; {INSTALL_HINT}")
    return found[-1]


def function_docs(classes: Sequence[str] = tuple(CLASS_FILES)) -> dict[str, list[dict[str, Any]]]:
    """The function docs of each class (the held-back class's docs are tool descriptions, not
    conversations: they are loaded for the catalog)."""
    folder = data_dir() / "multi_turn_func_doc"
    out: dict[str, list[dict[str, Any]]] = {}
    for cls in classes:
        out[cls] = [json.loads(line) for line in _raw_lines(folder / CLASS_FILES[cls])]
    return out


def call_name(source: str) -> str:
    """The callee of one ground-truth call, `cd(folder='x')` -> `cd` (`A.b(...)` -> `b`)."""
    node = ast.parse(source.strip(), mode="eval").body
    if not isinstance(node, ast.Call):
        raise ValueError(f"not a call: {source!r}")
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    raise ValueError(f"unexpected callee in {source!r}")


def _user_messages(turn: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    return tuple(
        m["content"].strip()
        for m in turn
        if m.get("role") == "user" and isinstance(m.get("content"), str) and m["content"].strip()
    )


def _conversation(
    entry: dict[str, Any], answer: dict[str, Any], category: str, docs: dict[str, list[Any]]
) -> Conversation:
    classes = tuple(entry["involved_classes"])
    questions = entry["question"]
    truth = answer["ground_truth"]
    if len(truth) != len(questions):
        raise ValueError(f"{entry['id']}: {len(questions)} turns, {len(truth)} answers")
    turns: list[Turn] = []
    earlier: list[str] = []
    earlier_calls: list[tuple[str, ...]] = []
    for i, (question, calls) in enumerate(zip(questions, truth, strict=True)):
        messages = _user_messages(question)
        names = tuple(call_name(c) for c in calls)
        turns.append(Turn(i, messages, names, tuple(earlier), tuple(earlier_calls)))
        earlier.extend(messages)
        earlier_calls.append(names)
    catalog = tuple(f["name"] for cls in classes for f in docs[cls])
    number = int(entry["id"].rsplit("_", 1)[1])
    return Conversation(entry["id"], category, number, classes, catalog, tuple(turns))


def _kept(category: str, folder: Path) -> tuple[list[dict[str, Any]], int]:
    """The dev conversations of a category and how many lines were held back unparsed."""
    kept: list[dict[str, Any]] = []
    held_back = 0
    for line in _raw_lines(_file(folder, category)):
        if HELD_BACK_CLASS in line:
            held_back += 1
            continue
        entry = json.loads(line)
        if HELD_BACK_CLASS in entry.get("involved_classes", ()):  # cannot happen; kept explicit
            raise AssertionError(entry["id"])
        kept.append(entry)
    return kept, held_back


def load(
    categories: Sequence[str] = DEFAULT_CATEGORIES, catalog: str = "all", seed: int = SEED
) -> Dataset:
    """The dev conversations of `categories`, the catalog, the seeded traffic / held split."""
    if catalog not in CATALOGS:
        raise ValueError(f"expected a catalog in {CATALOGS}, got {catalog!r}")
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"expected categories in {CATEGORIES}, got {unknown}")
    folder = data_dir()
    docs = function_docs()
    tool_class: dict[str, str] = {}
    for cls, functions in docs.items():
        for f in functions:
            if f["name"] in tool_class:
                raise ValueError(f"{f['name']} is in {tool_class[f['name']]} and {cls}")
            tool_class[f["name"]] = cls
    conversations: list[Conversation] = []
    per_category: dict[str, dict[str, int]] = {}
    for category in sorted(categories, key=CATEGORIES.index):
        entries, held_back = _kept(category, folder)
        ids = {e["id"] for e in entries}
        answers: dict[str, dict[str, Any]] = {}
        for line in _raw_lines(folder / "possible_answer" / _file(folder, category).name):
            match = _ID.search(line)
            if match and match.group(1) in ids:
                answer = json.loads(line)
                answers[answer["id"]] = answer
        found = [_conversation(e, answers[e["id"]], category, docs) for e in entries]
        for c in found:
            called = {n for t in c.turns for n in t.calls}
            if any(tool_class.get(n) == HELD_BACK_CLASS for n in called):
                raise AssertionError(f"{c.id} calls a {HELD_BACK_CLASS} function")
        conversations.extend(sorted(found, key=_order))
        per_category[category] = {
            "conversations": len(found),
            "held_back_unparsed": held_back,
            "turns": sum(len(c.turns) for c in found),
            "scored_turns": sum(len(c.scored) for c in found),
            "turns_without_message": sum(1 for c in found for t in c.turns if not t.messages),
            "turns_without_calls": sum(1 for c in found for t in c.turns if not t.calls),
        }
    dev_classes = sorted({cls for c in conversations for cls in c.classes})
    chosen = list(CLASS_FILES) if catalog == "all" else [c for c in CLASS_FILES if c in dev_classes]
    tools = tuple(
        Tool(
            name=f["name"],
            description=f.get("description") or "",
            # As stored by the service: canonical JSON, parameters in name order.
            input_schema=json.loads(canonical_json(f.get("parameters") or {})),
        )
        for cls in chosen
        for f in docs[cls]
    )
    names = {t.name for t in tools}
    calls = [n for c in conversations for t in c.turns for n in t.calls]
    outside_conversation = sum(
        1 for c in conversations for t in c.turns for n in t.calls if n not in c.catalog
    )
    numbers = sorted({c.number for c in conversations})
    order = list(numbers)
    random.Random(seed).shuffle(order)
    traffic_numbers = frozenset(order[: len(order) // 2])
    needed = [len(t.needed) for c in conversations for t in c.scored]
    counts: dict[str, Any] = {
        "source": f"bfcl-eval {_version()}: multi_turn {', '.join(per_category)}",
        "rule": f"conversations involving {HELD_BACK_CLASS} are held back (never parsed)",
        "per_category": per_category,
        "catalog": catalog,
        "catalog_classes": chosen,
        "tools": len(tools),
        "dev_classes": dev_classes,
        "calls": len(calls),
        "calls_outside_catalog": sum(1 for n in calls if n not in names),
        "calls_outside_conversation_catalog": outside_conversation,
        "needed_per_scored_turn": {
            "mean": sum(needed) / max(len(needed), 1),
            "max": max(needed, default=0),
        },
        "scenarios": len(numbers),
        "traffic_scenarios": len(traffic_numbers),
        "held_scenarios": len(numbers) - len(traffic_numbers),
        "seed": seed,
    }
    return Dataset(tools, tool_class, tuple(conversations), traffic_numbers, counts)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bfcl-eval")
    except PackageNotFoundError:
        return "?"
