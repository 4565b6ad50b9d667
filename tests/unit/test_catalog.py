"""Catalog parsing (MCP, OpenAI, native, PromptKit), tool text and the bundled demo catalog."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolselect.catalog import candidates_to_tools, load_demo_catalog, parse_tools, tool_text
from toolselect.errors import InvalidInput
from toolselect.names import DEFAULT_FALLBACK_TOOLS, name_words
from toolselect.records import Tool, canonical_json

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "description": "City"}}}


def test_mcp_tools_list_result() -> None:
    """An MCP tools/list result gives tools with their inputSchema and no pack."""
    body = {
        "tools": [
            {"name": "get_weather", "description": "Weather now", "inputSchema": SCHEMA},
            {"name": "ping"},
        ],
        "nextCursor": None,
    }
    tools, pack = parse_tools(body)
    assert pack is None
    assert tools == [
        Tool("get_weather", "Weather now", SCHEMA),
        Tool("ping", "", {}),
    ]


def test_openai_tools_list() -> None:
    """OpenAI function tools give tools whose schema is the function's parameters."""
    body = [
        {
            "type": "function",
            "function": {"name": "send_email", "description": "Send mail", "parameters": SCHEMA},
        },
        {"function": {"name": "noop"}},
    ]
    tools, pack = parse_tools(body)
    assert pack is None
    assert [(t.name, t.description, t.input_schema) for t in tools] == [
        ("send_email", "Send mail", SCHEMA),
        ("noop", "", {}),
    ]


def test_native_body_with_pack() -> None:
    """The native body uses input_schema and names a pack, returned beside the tools."""
    body = {"tools": [{"name": "a", "description": "A", "input_schema": SCHEMA}], "pack": "kit"}
    tools, pack = parse_tools(body)
    assert pack == "kit"
    assert tools == [Tool("a", "A", SCHEMA)]
    assert tools[0].packs == ()


def test_empty_tool_list_is_valid() -> None:
    """An empty tools list parses to no tools rather than an error."""
    assert parse_tools({"tools": []}) == ([], None)
    assert parse_tools([]) == ([], None)


LONG_NAME = "n" * 257


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (42, "body"),
        ("tools", "body"),
        ({}, "tools"),
        ({"tools": "x"}, "tools"),
        ({"tools": [3]}, "tools[0]"),
        ({"tools": [{"description": "no name"}]}, "tools[0].name"),
        ({"tools": [{"name": ""}]}, "tools[0].name"),
        ({"tools": [{"name": "   "}]}, "tools[0].name"),
        ({"tools": [{"name": " padded"}]}, "tools[0].name"),
        ({"tools": [{"name": 7}]}, "tools[0].name"),
        ({"tools": [{"name": "ok"}, {"name": LONG_NAME}]}, "tools[1].name"),
        ({"tools": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}, "tools[2].name"),
        ({"tools": [{"name": "a", "description": 5}]}, "tools[0].description"),
        ({"tools": [{"name": "a", "description": "x" * 8193}]}, "tools[0].description"),
        ({"tools": [{"name": "a", "description": "é" * 4097}]}, "tools[0].description"),
        ({"tools": [{"name": "a", "inputSchema": "{}"}]}, "tools[0].inputSchema"),
        ({"tools": [{"name": "a", "input_schema": []}]}, "tools[0].input_schema"),
        ({"tools": [], "pack": 5}, "pack"),
        ({"tools": [], "pack": " "}, "pack"),
        ([7], "[0]"),
        ([{"type": "retrieval"}], "[0].type"),
        ([{"type": "function"}], "[0].function"),
        ([{"type": "function", "function": {"name": ""}}], "[0].function.name"),
        ([{"function": {"name": "a", "parameters": 1}}], "[0].function.parameters"),
        ([{"function": {"name": "a"}}, {"function": {"name": "a"}}], "[1].function.name"),
    ],
)
def test_invalid_bodies_name_the_field_at_fault(body: object, field: str | None) -> None:
    """Each broken rule raises InvalidInput with a JSON-pointer-like field."""
    with pytest.raises(InvalidInput) as caught:
        parse_tools(body)
    assert caught.value.field == field


def test_limits_accept_their_boundary_values() -> None:
    """A 256-character name and an 8 KiB description are still accepted."""
    tools, _ = parse_tools({"tools": [{"name": "n" * 256, "description": "d" * 8192}]})
    assert len(tools[0].name) == 256


def test_duplicate_message_points_at_the_first_occurrence() -> None:
    """A duplicate name's message says where the name first appeared."""
    with pytest.raises(
        InvalidInput, match=r"duplicate tool name 'a' \(first at tools\[0\]\.name\)"
    ):
        parse_tools({"tools": [{"name": "a"}, {"name": "a"}]})


def test_promptkit_candidates() -> None:
    """Candidates become tools named by ID (Name is display text only), with a schema from
    Metadata; a candidate with a Name but no ID is refused, naming its ID."""
    tools = candidates_to_tools(
        [
            {"ID": "send_email", "Name": "Send", "Description": "Send an email", "Metadata": {}},
            {
                "ID": "lookup",
                "Name": "Look up",
                "Description": None,
                "Metadata": {"inputSchema": SCHEMA},
            },
        ]
    )
    assert tools == [Tool("send_email", "Send an email"), Tool("lookup", "", SCHEMA)]
    with pytest.raises(InvalidInput, match="expected a tool name") as caught:
        candidates_to_tools([{"Name": "lookup", "Description": "no ID"}])
    assert caught.value.field == "candidates[0].ID"


@pytest.mark.parametrize(
    ("candidates", "field"),
    [
        ({"ID": "x"}, "candidates"),
        (["x"], "candidates[0]"),
        ([{"Description": "no id"}], "candidates[0].ID"),
        ([{"ID": "a"}, {"ID": "a"}], "candidates[1].ID"),
        ([{"ID": "a", "Description": 3}], "candidates[0].Description"),
    ],
)
def test_invalid_candidates_name_the_field(candidates: Any, field: str) -> None:
    """Broken candidates raise InvalidInput naming the candidate and key."""
    with pytest.raises(InvalidInput) as caught:
        candidates_to_tools(candidates)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("whatsapp__send_message", "whatsapp send message"),
        ("getWeatherForecast", "get weather forecast"),
        ("github.create_issue", "github create issue"),
        ("HTTPRequest", "http request"),
        ("fs-read", "fs read"),
    ],
)
def test_name_words(name: str, words: str) -> None:
    """Snake, camel, dotted, dashed and namespaced names split into lower-case words."""
    assert name_words(name) == words


def test_tool_text_has_name_description_and_parameters() -> None:
    """Tool text joins name words, description, parameter names and descriptions, one level deep."""
    schema = {
        "type": "object",
        "properties": {
            "targetCity": {"type": "string", "description": "Where to look"},
            "options": {
                "type": "object",
                "description": "Extra settings",
                "properties": {
                    "unitSystem": {"description": "metric or imperial"},
                    "deep": {"properties": {"tooDeep": {"description": "never seen"}}},
                },
            },
            "days": {"type": "array", "items": {"properties": {"dayName": {}}}},
        },
    }
    text = tool_text(Tool("weather__get_forecast", "Forecast for the next days.", schema))
    assert text.startswith("weather get forecast. Forecast for the next days.")
    for piece in (
        "target city",
        "Where to look",
        "options",
        "Extra settings",
        "unit system",
        "metric or imperial",
        "deep",
        "day name",
    ):
        assert piece in text
    assert "never seen" not in text
    assert "too deep" not in text
    assert tool_text(Tool("ping")) == "ping."


def test_demo_catalog() -> None:
    """The demo catalog loads from the package: 55+ tools, unique names, all fallbacks present."""
    tools = load_demo_catalog()
    names = [t.name for t in tools]
    assert len(tools) >= 55
    assert len(set(names)) == len(names)
    assert set(DEFAULT_FALLBACK_TOOLS) | {"fs_write"} <= set(names)
    for tool in tools:
        assert len(tool.description) > 20, tool.name
        assert tool.input_schema.get("type") == "object", tool.name
        assert tool.input_schema.get("properties"), tool.name
    assert load_demo_catalog() is not load_demo_catalog()


def test_tool_text_does_not_depend_on_the_order_of_parameters() -> None:
    """A schema as a caller sent it and as a store gives it back (keys sorted) embed alike."""
    sent = {"properties": {"to": {"description": "recipient"}, "body": {"description": "text"}}}
    stored = json.loads(canonical_json(sent))
    assert list(stored["properties"]) == ["body", "to"]
    assert tool_text(Tool("send_email", "Send", sent)) == tool_text(
        Tool("send_email", "Send", stored)
    )
