"""`toolselect select` in-process and `POST /v1/select` on the same input: the same selection,
the same refusals in the same words (the runtime logs the one line; an operator compares it
with the server's answer)."""

from __future__ import annotations

import json
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


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url + "/v1/select", data=json.dumps(body).encode(), method="POST",
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
