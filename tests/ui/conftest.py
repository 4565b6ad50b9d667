"""Browser fixtures: Debian's Chromium driven by Selenium through the system chromedriver, and
real toolselect servers (SQLite) seeded with turns and labels so every chart has rows.

Selenium is given both binaries' paths, so its own manager never runs and nothing is downloaded.
Without them the browser tests skip (fail under TOOLSELECT_REQUIRE_BROWSER=1); `make test`
installs them with apt-get when it can.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from selenium import webdriver
from selenium.webdriver import Chrome
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.support.ui import WebDriverWait

from tests.live import LiveServer
from toolselect.records import Turn

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Kept after the run (git-ignored) so a reviewer or CI can look at what the browser drew.
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
API_KEY = "k-ui-0123456789"

# Labels first, so the ratchet tier labels the later mis-routed turns of the same requests.
LABELS = [
    ("email the quarterly report to Marco", "send_email"),
    ("is it going to rain in Turin tomorrow", "get_weather"),
]
TURNS = [
    {"request": "email the quarterly report to Marco", "used_tool": "web_search", "outcome": "error"},
    {"request": "email the quarterly report to Marco", "used_tool": "web_search", "outcome": "error"},
    {"request": "send an email message to Marco", "used_tool": "shell_exec"},
    {"request": "is it going to rain in Turin tomorrow", "used_tool": "stock_quote", "outcome": "error"},
    {"request": "weather in Turin", "used_tool": "get_weather", "outcome": "ok"},
    {"request": "translate hello into French", "used_tool": "translate_text", "outcome": "ok"},
]  # fmt: skip
# Searches the agent reports with its turns (index into TURNS -> the tools a `/v1/rank` call is
# limited to, all shown): turn 4's get_weather is shown, turn 2's fallback shell_exec is not
# (nor is send_email, which the ranker would then not label: the agent would have passed it
# over). Turn 5 reports a search id this server never issued (counted as unknown).
SEARCHED = {4: ["get_weather", "send_email"], 2: ["web_search", "stock_quote"]}
UNKNOWN_SEARCH = {5: "expired-search-id"}
# The API stamps turns with the present; "over time" needs earlier days, written to the store.
HISTORY_DAYS = 3


@dataclass
class Reply:
    status: int
    body: Any  # parsed JSON, else the text
    headers: dict[str, str]


def call(url: str, method: str, path: str, body: Any = None, key: str | None = None) -> Reply:
    """One JSON request to the server under test (urllib: no client code of ours involved)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            raw, status, got = resp.read(), resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        raw, status, got = exc.read(), exc.code, dict(exc.headers)
    try:
        return Reply(status, json.loads(raw), got)
    except ValueError:
        return Reply(status, raw.decode(), got)


def _history(days: int) -> list[Turn]:
    """Earlier days of 4 searched turns each: the flagged ones used a tool the search did not
    show, the others the shown get_weather, so recall rises as flags fall."""
    now = datetime.now(UTC)
    turns = []
    for day in range(days, 0, -1):
        at = now - timedelta(days=day)
        for i in range(4):
            flagged = i < day  # older days flag more: a visibly falling line
            turns.append(
                Turn(
                    id=f"history-{day}-{i}",
                    request=f"weather in city {i}",
                    used_tool="web_search" if flagged else "get_weather",
                    at=at,
                    flagged=flagged,
                    flag_reason="disagreement" if flagged else None,
                    tier="ranker" if flagged else None,
                    label="get_weather" if flagged else None,
                    result="labeled" if flagged else None,
                    search_id=f"history-search-{day}-{i}",
                    search_status="not_shown" if flagged else "shown",
                    shown_position=None if flagged else 1,
                    shown_k=3,
                )
            )
    return turns


def _search_id(server: LiveServer, request: str, tools: list[str], key: str | None) -> str:
    """Rank `request` among `tools` only (so all of them are shown); the answer's search id."""
    body = {"query": request, "k": len(tools), "tools": tools}
    reply = call(server.url, "POST", "/v1/rank", body, key)
    assert reply.status == 200, reply.body
    assert sorted(r["tool"] for r in reply.body["results"]) == sorted(tools)
    search_id: str = reply.body["search_id"]
    return search_id


def seed(server: LiveServer, key: str | None = None) -> None:
    """Labels and turns through the API (plus earlier days in the store), then wait for intake."""
    for query, tool in LABELS:
        assert (
            call(server.url, "POST", "/v1/exemplars", {"query": query, "tool": tool}, key).status
            == 201
        )
    turns = [{**t, "turn_id": f"turn-{i}"} for i, t in enumerate(TURNS)]
    for i, tools in SEARCHED.items():
        turns[i]["search_id"] = _search_id(server, str(TURNS[i]["request"]), tools, key)
    for i, search_id in UNKNOWN_SEARCH.items():
        turns[i]["search_id"] = search_id
    assert call(server.url, "POST", "/v1/observe/batch", {"turns": turns}, key).status == 202
    assert server.run(server.service.learner.drain(60.0))
    server.run(server.service.store.record_turns(_history(HISTORY_DAYS)))


def _require_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        reason = f"no {' or '.join(missing)}: apt-get install chromium chromium-driver"
        if os.environ.get("TOOLSELECT_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Chrome]:
    """One headless Chromium for the session, logging its console at every level."""
    _require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=ChromeService(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def _seeded(server: LiveServer, key: str | None) -> Iterator[LiveServer]:
    try:
        seed(server, key)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A seeded server without API keys."""
    yield from _seeded(LiveServer(tmp_path_factory.mktemp("ui")), None)


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A seeded server whose `/v1/*` needs `Authorization: Bearer API_KEY`."""
    yield from _seeded(
        LiveServer(tmp_path_factory.mktemp("ui-keyed"), api_keys=(API_KEY,)), API_KEY
    )


def _console(driver: Chrome) -> list[dict[str, Any]]:
    """The browser console entries since the last call (selenium leaves `get_log` untyped)."""
    entries: list[dict[str, Any]] = cast(Any, driver).get_log("browser")
    return entries


def open_page(driver: Chrome, url: str, width: int, height: int) -> None:
    """Load `url` with a viewport of exactly width x height CSS pixels (no window chrome)."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    _console(driver)  # start the console log afresh for this page
    driver.get(url)


def wait_for(driver: Chrome, script: str, timeout: float = 20.0) -> Any:
    """Poll a JavaScript expression until it is truthy; its value."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: d.execute_script(f"return {script}")
    )


def screenshot(driver: Chrome, name: str) -> Path:
    """The whole page (not only the viewport) as ARTIFACTS/name.png."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    width = int(driver.execute_script("return document.documentElement.clientWidth"))
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def console_errors(driver: Chrome, expected: tuple[str, ...] = ()) -> list[str]:
    """SEVERE console entries since the page was opened, minus those containing an expected
    text (a refused request the test caused on purpose is logged by the browser itself)."""
    entries = _console(driver)
    return [
        e["message"]
        for e in entries
        if e["level"] == "SEVERE" and not any(text in e["message"] for text in expected)
    ]
