"""The one-shot exec selector chooses as a started service does, and starts light."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from toolselect.catalog import candidates_to_tools, load_demo_catalog
from toolselect.cmd.select import read_request, select_once
from toolselect.config import Settings
from toolselect.errors import InvalidInput
from toolselect.ranker.configured import build_ranker
from toolselect.records import Tool
from toolselect.service import Service, compose
from toolselect.testing import FakeEmbedder, memory_store

QUERIES = [
    "quanto costa il bitcoin adesso?",
    "send the quarterly figures to Marco",
    "what's the weather like in Turin tomorrow",
    "post the release notes in the team channel",
    "translate this paragraph into German",
]
LABELS = [
    ("quanto costa il bitcoin adesso?", "crypto_price"),
    ("ping Marco on the team chat", "send_slack_message"),
    ("will it rain in Turin", "get_weather"),
]
REQUEST = {
    "query": {"Text": "send the report to Marco", "Kind": "tool", "K": 2},
    "candidates": [
        {"ID": "send_email", "Name": "send_email", "Description": "Send an email"},
        {"ID": "fax_it", "Description": "Send a fax", "Metadata": {"parameters": {}}},
    ],
}


def settings_for(tmp_path: Path) -> Settings:
    return Settings(data_dir=str(tmp_path), embedder="hashing").override(
        store=f"sqlite:{tmp_path / 'toolselect.db'}"
    )


async def test_select_once_matches_a_started_service(tmp_path: Path) -> None:
    """Same store, same candidates (known, known with another description, unknown): the
    one-shot path selects exactly what `Service.select` selects, with the same reason."""
    settings = settings_for(tmp_path)
    service = await Service.start(settings)
    try:
        await service.catalog.upsert_tools(load_demo_catalog())
        for query, tool in LABELS:
            await service.learning.feedback(query, tool)
        demo = {t.name: t for t in load_demo_catalog()}
        candidates = [
            demo["crypto_price"],
            demo["send_email"],
            demo["send_slack_message"],
            Tool("get_weather", "Anything at all: the stored description is what counts"),
            Tool("fax_it", "Send a fax to a phone number"),
            Tool("github__create_pull_request", "Open a pull request on GitHub"),
        ]
        for query in QUERIES:
            for k in (0, 1, 3, 10):
                expected = await service.ranking.select(query, candidates, k)
                # A service remembers what it showed (a search id); one spawn does not.
                assert expected.search_id
                expected = replace(expected, search_id=None)
                assert await select_once(settings, query, candidates, k) == expected
        assert (await select_once(settings, QUERIES[0], [], 3)).reason == "no candidates"
    finally:
        await service.close()


@pytest.mark.parametrize(
    ("pins", "weights", "usage"),
    [
        ({}, (8.0, 1.0, 0.0, 0.0), 1.0),
        (
            {"description_weight": 3.0, "exemplar_weight": 2.0, "self_label_weight": 0.5,
             "usage_label_weight": 0.25},
            (3.0, 2.0, 0.0, 0.5),
            0.25,
        ),
    ],
)  # fmt: skip
async def test_the_exec_selector_starts_from_the_services_ranker(
    pins: dict[str, float], weights: tuple[float, ...], usage: float
) -> None:
    """`build_ranker` is the ranker a composed service starts with, pinned or not: the exec
    selector ranks with the same weights (description, exemplar, shrink, self; usage)."""
    settings = Settings(embedder="hashing", **pins)  # type: ignore[arg-type]
    async with memory_store() as store:
        started = compose(settings, store, FakeEmbedder()).ranker
    built = build_ranker(settings)
    assert (built.weights, built.usage_weight) == (weights, usage)
    assert (started.weights, started.usage_weight) == (weights, usage)


async def test_select_once_checks_the_query(tmp_path: Path) -> None:
    """A blank or oversized query is refused before any store is opened, naming query.Text."""
    settings = settings_for(tmp_path)
    for text in ("  ", "x" * (settings.max_query_bytes + 1)):
        with pytest.raises(InvalidInput) as caught:
            await select_once(settings, text, [Tool("a", "b")], 1)
        assert caught.value.field == "query.Text"
    assert not (tmp_path / "toolselect.db").exists()


def test_read_request_agrees_with_the_api_model() -> None:
    """Plain requests skip pydantic with the model's own defaults; others go through it."""
    from toolselect.api.models import SelectRequest

    model = SelectRequest.model_validate(REQUEST)
    plain = read_request(REQUEST)
    assert plain.text == model.query.Text and plain.k == model.query.K
    assert plain.candidates == [c.model_dump() for c in model.candidates]
    assert candidates_to_tools(plain.candidates)[1].input_schema == {}

    converted = read_request({**REQUEST, "query": {"Text": "hi", "K": 2.0}})
    assert (converted.text, converted.k) == ("hi", 2)
    for bad, field in (
        ({"query": {"K": 1}, "candidates": []}, "query.Text"),
        ({**REQUEST, "query": {"Text": "hi", "K": True}}, "query.K"),
        (
            {"query": {"Text": "hi"}, "candidates": [{"ID": "a", "Name": None}]},
            "candidates[0].Name",
        ),
        ({"query": {"Text": "hi"}, "candidates": [{"ID": 3}]}, "candidates[0].ID"),
    ):
        with pytest.raises(InvalidInput) as caught:
            read_request(bad)
        assert caught.value.field == field
        assert str(caught.value).startswith(f"{field}: ")


def test_exec_select_imports_no_http_stack_or_sklearn(tmp_path: Path) -> None:
    """A spawn with a plain request loads no aiohttp, scikit-learn, pydantic or Neo4j driver."""
    script = (
        "import json, sys\n"
        "from toolselect.cmd.main import main\n"
        "rc = main(['select', '--store', 'sqlite:' + sys.argv[1], '--embedder', 'hashing'])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'aiohttp', 'sklearn', 'pydantic', 'neo4j', 'onnxruntime', 'anthropic'})\n"
        "print(json.dumps(heavy), file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "t.db")],
        input=json.dumps(REQUEST),
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "TOOLSELECT_DATA_DIR": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["selected"] == ["send_email", "fax_it"]
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
