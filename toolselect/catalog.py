"""Tool catalogs as callers send them: MCP `tools/list`, OpenAI tools, native, PromptKit.

Parsing checks what the ranker and the store rely on (a name, its length, text sizes, unique
names) and reports the first violation with a JSON-pointer-like field (`tools[3].name`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

from toolselect.errors import InvalidInput
from toolselect.keys import shown
from toolselect.names import name_words
from toolselect.records import Tool

MAX_NAME_CHARS = 256
MAX_DESCRIPTION_BYTES = 8 << 10
MAX_PACK_CHARS = 256
# `check_pack`'s rule as a JSON Schema, wherever a pack is given (empty: none).
PACK_SCHEMA: dict[str, Any] = {"maxLength": MAX_PACK_CHARS, "pattern": "^$|\\S"}
# Objects and lists inside one input schema. Real schemas nest a dozen deep; far past this, the
# JSON a tool listing writes back (pydantic's serialiser) refuses the depth, so every listing
# of the catalog would fail for the one tool.
MAX_SCHEMA_DEPTH = 64
# Larger catalogs go in several PUTs; with the default 1 MiB body limit, the body size usually
# binds first.
MAX_TOOLS_PER_PUT = 10_000
_DEMO_FILE = "data/demo_tools.json"


def parse_tools(body: object) -> tuple[list[Tool], str | None]:
    """Tools (with empty `packs`) and the pack named by the body, if any.

    Accepted: `{"tools": [{"name", "description", "inputSchema"}]}` (MCP), the same with
    `input_schema` and an optional `"pack"` (native), and `[{"type": "function", "function":
    {"name", "description", "parameters"}}]` (OpenAI). Unknown keys are ignored.
    """
    if isinstance(body, list):
        return _parse_openai(body), None
    if not isinstance(body, Mapping):
        raise InvalidInput(
            f'expected an object with "tools" or a list of OpenAI tools, got {_kind(body)}', "body"
        )
    if "tools" not in body:
        raise InvalidInput('expected a "tools" list', field="tools")
    entries = body["tools"]
    if not isinstance(entries, list):
        raise InvalidInput(f'expected "tools" to be a list, got {_kind(entries)}', field="tools")
    pack = check_pack(body.get("pack"))
    tools: list[Tool] = []
    for i, entry in enumerate(entries):
        where = f"tools[{i}]"
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"expected a tool object, got {_kind(entry)}", field=where)
        key = "inputSchema" if "inputSchema" in entry else "input_schema"
        tools.append(_tool(entry, where, schema_key=key))
    _check_unique(tools, "tools[{}].name")
    return tools, pack


def candidates_to_tools(candidates: object) -> list[Tool]:
    """PromptKit selector candidates (`{"ID", "Name", "Description", "Metadata"}`) as tools.

    `ID` is the tool name (PromptKit returns IDs); `Name` is display text only.
    A schema in `Metadata` (`inputSchema`, `input_schema` or `parameters`) is kept.
    """
    if not isinstance(candidates, list):
        raise InvalidInput(
            f"expected a list of candidates, got {_kind(candidates)}", field="candidates"
        )
    tools: list[Tool] = []
    for i, cand in enumerate(candidates):
        where = f"candidates[{i}]"
        if not isinstance(cand, Mapping):
            raise InvalidInput(f"expected a candidate object, got {_kind(cand)}", field=where)
        name = _name(cand.get("ID"), f"{where}.ID")
        description = _description(cand.get("Description"), f"{where}.Description")
        metadata = cand.get("Metadata")
        schema: Mapping[str, Any] = {}
        if isinstance(metadata, Mapping):
            for key in ("inputSchema", "input_schema", "parameters"):
                if isinstance(metadata.get(key), Mapping):
                    schema = _schema(metadata[key], f"{where}.Metadata.{key}")
                    break
        tools.append(Tool(name=name, description=description, input_schema=schema))
    _check_unique(tools, "candidates[{}].ID")
    return tools


def tool_text(tool: Tool) -> str:
    """What gets embedded for a tool: its name as words, description and parameters.

    Parameters contribute their names (as words) and descriptions, including the properties
    of object-typed parameters one level down, where callers often hide the real fields.
    """
    parts = [name_words(tool.name) + ".", tool.description.strip()]
    parts.extend(_property_texts(tool.input_schema, depth=2))
    return " ".join(part for part in parts if part)


def load_demo_catalog() -> list[Tool]:
    """The bundled demo catalog (about 60 everyday agent tools, with the fallback tools)."""
    return list(_demo_tools())


@cache
def _demo_tools() -> tuple[Tool, ...]:
    # Imported here: importlib.resources costs ~15 ms, paid by every exec-selector spawn.
    from importlib import resources

    text = resources.files("toolselect").joinpath(_DEMO_FILE).read_text(encoding="utf-8")
    tools, _ = parse_tools(json.loads(text))
    return tuple(tools)


def _parse_openai(entries: list[Any]) -> list[Tool]:
    tools: list[Tool] = []
    for i, entry in enumerate(entries):
        where = f"[{i}]"
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"expected an OpenAI tool object, got {_kind(entry)}", field=where)
        kind = entry.get("type", "function")
        if kind != "function":
            raise InvalidInput(f'expected type "function", got {kind!r}', field=f"{where}.type")
        function = entry.get("function")
        if not isinstance(function, Mapping):
            raise InvalidInput(
                f'expected a "function" object, got {_kind(function)}', field=f"{where}.function"
            )
        tools.append(_tool(function, f"{where}.function", schema_key="parameters"))
    _check_unique(tools, "[{}].function.name")
    return tools


def _tool(entry: Mapping[str, Any], where: str, *, schema_key: str) -> Tool:
    name = _name(entry.get("name"), f"{where}.name")
    description = _description(entry.get("description"), f"{where}.description")
    schema = entry.get(schema_key)
    if schema is None:
        schema = {}
    elif not isinstance(schema, Mapping):
        raise InvalidInput(
            f"expected the input schema to be an object, got {_kind(schema)}",
            field=f"{where}.{schema_key}",
        )
    return Tool(
        name=name,
        description=description,
        input_schema=dict(_schema(schema, f"{where}.{schema_key}")),
    )


def _schema(schema: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    """`schema`, unless its objects and lists nest deeper than `MAX_SCHEMA_DEPTH`."""
    if too_deep(schema):
        raise InvalidInput(
            f"expected an input schema nested at most {MAX_SCHEMA_DEPTH} deep, got more",
            field=field,
        )
    return schema


def too_deep(schema: object) -> bool:
    """Whether the objects and lists inside `schema` nest deeper than `MAX_SCHEMA_DEPTH` (what
    an upload refuses, and what a client leaves out of one)."""
    if not isinstance(schema, Mapping):
        return False
    level: list[Mapping[str, Any] | list[Any] | tuple[Any, ...]] = [schema]
    for _ in range(MAX_SCHEMA_DEPTH):
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, Mapping) else item)
            if isinstance(child, Mapping | list | tuple)
        ]
        if not level:
            return False
    return True


def check_tool_name(value: object, field: str = "name") -> str:
    """`value` as a tool name an upload takes, else `InvalidInput` saying why."""
    return _name(value, field)


def _name(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"expected a tool name (a string), got {_kind(value)}", field=field)
    if not value.strip():
        raise InvalidInput(f"expected a non-empty tool name, got {value!r}", field=field)
    if value != value.strip():
        raise InvalidInput(
            f"expected a tool name without surrounding spaces, got {value!r}", field=field
        )
    if len(value) > MAX_NAME_CHARS:
        raise InvalidInput(
            f"expected a tool name of at most {MAX_NAME_CHARS} characters, got {len(value)}",
            field=field,
        )
    return value


def _description(value: object, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"expected a description string, got {_kind(value)}", field=field)
    size = len(value.encode("utf-8"))
    if size > MAX_DESCRIPTION_BYTES:
        raise InvalidInput(
            f"expected a description of at most {MAX_DESCRIPTION_BYTES} bytes, got {size}",
            field=field,
        )
    return value


def check_pack(value: object, field: str = "pack") -> str | None:
    """A pack name from a body or a query string: None for none, else non-blank and at most
    256 characters. `""` is none, as `session_id` and `PackID` take it: it is the zero value a Go
    or JS client sends for an unset field, and a query string's only way to give none
    (`?pack=`); blank spaces name no pack either, but are refused as a mistake."""
    return _optional_name(value, "a pack name", field)


def check_session_id(value: object, field: str = "session_id") -> str | None:
    """A conversation's id, by the pack's rule (`check_pack`): `""` is no session, blank spaces
    are refused (taken as an id, `" "` joined every caller sending it into one conversation)."""
    return _optional_name(value, "a session id", field)


def _optional_name(value: object, what: str, field: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"expected {what} (a string), got {_kind(value)}", field=field)
    if not value.strip():
        raise InvalidInput(f"expected {what} that is not blank, got {shown(value)}", field)
    if len(value) > MAX_PACK_CHARS:
        raise InvalidInput(
            f"expected {what} of at most {MAX_PACK_CHARS} characters, got {len(value)}",
            field=field,
        )
    return value


def _check_unique(tools: list[Tool], field_pattern: str) -> None:
    first: dict[str, int] = {}
    for i, tool in enumerate(tools):
        if tool.name in first:
            earlier = field_pattern.format(first[tool.name])
            raise InvalidInput(
                f"duplicate tool name {tool.name!r} (first at {earlier})",
                field=field_pattern.format(i),
            )
        first[tool.name] = i


def _property_texts(schema: object, depth: int) -> list[str]:
    if depth <= 0 or not isinstance(schema, Mapping):
        return []
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    texts: list[str] = []
    # In name order, as the stores give schemas back (canonical JSON): a tool embedded as a
    # caller sent it and the same tool reloaded from the store must get the same vector.
    for name, spec in sorted(properties.items(), key=lambda item: str(item[0])):
        texts.append(name_words(str(name)))
        if isinstance(spec, Mapping):
            description = spec.get("description")
            if isinstance(description, str) and description.strip():
                texts.append(description.strip())
            texts.extend(_property_texts(spec, depth - 1))
            items = spec.get("items")
            if isinstance(items, Mapping):
                texts.extend(_property_texts(items, depth - 1))
    return texts


def _kind(value: object) -> str:
    """A JSON-flavoured type name for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"a number ({shown(value)})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
