"""`toolselect select` in-process and `POST /v1/select` on the same input: the same selection,
the same refusals in the same words (the runtime logs the one line; an operator compares it
with the server's answer)."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import SELECT, run, serving
from tests.services import cli_env

QUERY = SELECT["query"]
REFUSED: list[dict[str, Any]] = [
    {"query": QUERY, "candidates": None},
    {"query": QUERY, "candidates": {"ID": "send_email"}},
    {"query": QUERY, "candidates": ["send_email"]},
    {"query": QUERY, "candidates": [{"ID": "a", "Metadata": [1]}]},
    {"query": {**QUERY, "K": "2"}, "candidates": SELECT["candidates"]},
    {"query": "send it", "candidates": []},
]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], str]]:
    """The environment of a data folder, and a server on it."""
    folder: Path = tmp_path_factory.mktemp("parity")
    env = cli_env(folder / "toolselect.db")
    with serving(env) as url:
        yield env, url


def _post(url: str, body: dict[str, Any], path: str = "/v1/select") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("body", REFUSED, ids=range(len(REFUSED)))
def test_select_refuses_in_the_servers_words(
    both: tuple[dict[str, str], str], body: dict[str, Any]
) -> None:
    """A body the server refuses with 422 exits 2 in-process with the server's message: it said
    "Input should be a valid list" where the server says "a valid array", and "a valid
    dictionary or instance of PromptKitCandidate" for "an object" (the model's Python-mode
    words, for a body that came as JSON)."""
    env, url = both
    status, answer = _post(url, body)
    assert status == 422
    done = run(["select"], env, stdin=json.dumps(body))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"toolselect select: {answer['error']['message']}\n"


def _labels() -> list[dict[str, str]]:
    """Human labels a fit of the fold moves on (with `hybrid`: description weight 16 -> 8)."""
    rng = random.Random(7)
    labels = [
        {"query": f"please {word} the thing number {i} {rng.choice(['now', 'today', 'asap'])}",
         "tool": tool}
        for tool, word in JARGON.items() for i in range(8)
    ]  # fmt: skip
    for city in ("Turin", "Milan", "Rome", "Paris", "Berlin", "Oslo", "Lima", "Quito", "Cairo"):
        labels += [
            {"query": f"weather in {city} right now", "tool": "get_forecast"},
            {"query": f"email {city} office about it", "tool": "send_sms"},
            {"query": f"note the meeting in {city}", "tool": "todo_add"},
            {"query": f"search the web for {city} news", "tool": "get_news"},
        ]
    return labels


JARGON = {"send_sms": "yeet", "shell_exec": "zorp", "note_create": "blorb", "todo_add": "quax"}


def _fold_weight(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    line = next(x for x in text.splitlines() if x.startswith("toolselect_fold_description_weight"))
    return float(line.rsplit(" ", 1)[1])


@pytest.mark.slow
def test_select_in_process_folds_labels_with_the_servers_fitted_weights(tmp_path: Path) -> None:
    """After a server refitted its fold on the labels (hybrid: description weight 16 -> 8), a
    spawn on its store folded the same labels with the starting weights, and so selected
    other tools than `POST /v1/select` for the same request (9 of 28 requests here). The
    weights the server applies are kept in the data folder, and a spawn folds with them."""
    env = cli_env(
        tmp_path / "toolselect.db", TOOLSELECT_EMBEDDER="hybrid", TOOLSELECT_LOAD_DEMO="true"
    )
    with serving(env) as url:
        started = _fold_weight(url)
        for label in _labels():
            status, _ = _post(url, label, "/v1/exemplars")
            assert status == 201, label
        deadline = time.monotonic() + 60
        while _fold_weight(url) == started:
            assert time.monotonic() < deadline, "the server did not refit its fold"
            time.sleep(0.2)
        tools = [*JARGON, "get_forecast", "get_news", "get_weather", "send_email", "web_search"]
        candidates = [{"ID": t, "Name": t, "Description": ""} for t in tools]
        for text in ("yeet it again", "zorp it for me", "blorb it for me", "Kyiv news on the web"):
            body = {"query": {"Text": text, "K": 3}, "candidates": candidates}
            status, served = _post(url, body)
            assert status == 200
            spawned = run(["select"], env, stdin=json.dumps(body))
            assert spawned.returncode == 0, spawned.stderr
            assert json.loads(spawned.stdout)["selected"] == served["selected"], text
