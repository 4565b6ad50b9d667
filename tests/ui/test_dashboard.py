"""The dashboard in headless Chromium against a real seeded server: charts, tables, catalog,
the label and delete forms, and the API-key prompt, at desktop and phone widths."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from tests.api.conftest import HAND_CATALOG
from tests.live import LiveServer, live_server
from tests.ui.conftest import (
    API_KEY,
    HISTORY_DAYS,
    call,
    console_errors,
    open_page,
    screenshot,
    wait_for,
)
from toolselect.records import Turn

LOADED = "document.querySelector('#status').textContent.startsWith('Loaded')"
WIDTHS = [pytest.param(1280, 900, id="1280"), pytest.param(390, 844, id="390")]
# Sessions of turns, some using several tools, in order: (session, the tools of each turn).
# s1 and s2 step from web_search and fs_read; s3's second turn uses six tools (15 pairs, and
# six destinations for translate_text: more than a bar names one by one).
SESSIONS = {
    "s1": [("web_search", "fs_read"), ("web_search", "send_email"), ("web_search",),
           ("fs_read", "web_search")],
    "s2": [("web_search", "fs_read"), ("get_weather",)],
    "s3": [("translate_text",), ("get_weather", "send_email", "stock_quote", "translate_text",
                                 "shell_exec", "create_calendar_event")],
}  # fmt: skip


def _texts(driver: Chrome, selector: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def _rows(driver: Chrome, card: str) -> list[list[str]]:
    """The cells of an analysis card's table (textContent: rows scrolled out of view count)."""
    script = (
        "return [...document.querySelectorAll(arguments[0] + ' .table-host tbody tr')]"
        ".map(tr => [...tr.cells].map(td => td.textContent))"
    )
    rows: list[list[str]] = driver.execute_script(script, f"#card-{card}")
    return rows


def _counts(driver: Chrome) -> dict[str, str]:
    script = (
        "return Object.fromEntries([...document.querySelectorAll('#catalog-table tr[data-tool]')]"
        ".map(tr => [tr.dataset.tool, tr.querySelector('td.count').textContent]))"
    )
    counts: dict[str, str] = driver.execute_script(script)
    return counts


def _set(driver: Chrome, selector: str, value: str) -> None:
    field = driver.find_element(By.CSS_SELECTOR, selector)
    field.clear()
    field.send_keys(value)


@pytest.mark.parametrize(("width", "height"), WIDTHS)
def test_dashboard_draws_every_analysis(
    browser: Chrome, server: LiveServer, width: int, height: int
) -> None:
    """Each analysis, the calibration curve and the catalog render with the seeded data, and
    the page never scrolls sideways (wide tables scroll inside their card)."""
    open_page(browser, f"{server.url}/ui", width, height)
    wait_for(browser, LOADED)

    confusions = _rows(browser, "confusions")
    assert ["web_search", "send_email", "2"] in confusions
    assert ["stock_quote", "get_weather", "1"] in confusions
    heat = browser.find_element(
        By.CSS_SELECTOR, '#card-confusions td[data-pair="web_search -> send_email"]'
    )
    assert heat.text == "2"
    assert heat.value_of_css_property("background-color") != "rgba(0, 0, 0, 0)"

    # Online recall: a point a day. The history's flagged turns used a tool not shown (1 of 4
    # shown 3 days ago, 3 of 4 yesterday); today get_weather was shown, the fallback shell_exec
    # was not, and translate_text reported a search id the server never issued.
    recall = _rows(browser, "online_recall")
    today = recall[-1][0]
    assert [today, "–", "shell_exec", "1", "0", "0", "1", "0", "0", "0"] in recall
    assert [today, "–", "translate_text", "0", "0", "–", "0", "0", "1", "0"] in recall
    assert [today, "–", "get_weather", "1", "1", "1", "0", "0", "0", "0"] in recall
    assert len(browser.find_elements(By.CSS_SELECTOR, "#card-online_recall svg circle.s0")) == (
        HISTORY_DAYS + 1
    )
    points: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('#card-online_recall svg circle.s0 title')]"
        ".map(t => t.textContent)"
    )
    assert [p.rsplit(" → ", 1)[1] for p in points] == ["25%", "50%", "75%", "50%"]
    assert points[-1] == f"recall (shown / turns): {today} (1/2 shown) → 50%"
    assert browser.find_element(By.CSS_SELECTOR, "#card-online_recall .sub").text == (
        "Recall 50%: 7 of 14 turns showed the used tool · not shown: 1 fallback, 6 other tool"
        " · 1 unknown search id, 0 from another pack"
    )
    assert _texts(browser, "#card-online_recall .legend span") == [
        "recall (shown / turns)",
        "not shown: fallback tool",
        "not shown: another tool",
    ]

    # Mis-route rate over time: one point per day with turns, today and the seeded history.
    assert len(_rows(browser, "drift")) == HISTORY_DAYS + 1
    assert (
        len(browser.find_elements(By.CSS_SELECTOR, "#card-drift svg circle.s0")) == HISTORY_DAYS + 1
    )
    assert "shell_exec" in _texts(browser, "#card-misroute_rate .bars .label")
    assert set(_texts(browser, "#card-oracle_usage .bars .label")) == {"ranker", "ratchet"}
    assert browser.find_elements(By.CSS_SELECTOR, "#card-exemplar_growth svg circle")
    # Each tier keeps its colour: the agent's own choices (usage) are a line of their own.
    swatches: dict[str, str] = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll("
        "'#card-exemplar_growth .legend span')].map(s => [s.textContent, s.firstChild.className]))"
    )
    assert swatches == {"ranker": "swatch s0", "usage": "swatch s3", "feedback": "swatch s2"}
    assert browser.find_elements(By.CSS_SELECTOR, "#card-exemplar_growth svg circle.s3")
    assert sorted(r[0] for r in _rows(browser, "cold_tools")) == [
        "create_calendar_event",
        "fs_read",
    ]
    assert _rows(browser, "label_conflicts") == [["no rows"]]
    marks = _texts(browser, "#card-learning svg .mark-label")
    assert marks == ["target", "floor"]
    assert browser.find_elements(By.CSS_SELECTOR, "#card-learning svg polyline.line")

    # Exemplar counts per tool, all tools listed: two labels for send_email (one typed, one the
    # ranker tier added for a mis-routed turn), two for get_weather (one typed, one the agent's
    # own successful use), one usage label for translate_text, none for the rest.
    counts = _counts(browser)
    assert set(counts) == {t.name for t in HAND_CATALOG}
    assert counts["send_email"] == "2"
    assert counts["get_weather"] == "2"
    assert counts["translate_text"] == "1"
    assert counts["fs_read"] == "0"

    page_width = browser.execute_script("return document.documentElement.scrollWidth")
    assert page_width <= width
    if width < 600:
        catalog: Any = browser.execute_script(
            "const w = document.querySelector('#catalog .table-wrap');"
            "return [w.scrollWidth, w.clientWidth]"
        )
        assert catalog[0] > catalog[1]  # the table scrolls, the page does not

    screenshot(browser, f"dashboard-{width}")
    assert console_errors(browser) == []


def test_label_and_delete_forms(browser: Chrome, server: LiveServer) -> None:
    """The label form stores an exemplar the API then lists, the delete form removes it, a
    refused label shows the API's own error message as text, and a tool's exemplars open."""
    open_page(browser, f"{server.url}/ui", 1280, 900)
    wait_for(browser, LOADED)
    query = "book a meeting with Ada on Friday at ten"
    _set(browser, "#label-query", query)
    _set(browser, "#label-tool", "create_calendar_event")
    browser.find_element(By.CSS_SELECTOR, "#label-form button[type=submit]").click()
    result = wait_for(browser, "document.querySelector('#label-form .result').textContent")
    assert result.startswith("Saved"), result

    listed = call(server.url, "GET", "/v1/tools/create_calendar_event/exemplars").body
    [exemplar] = [e for e in listed["exemplars"] if e["query"] == query]
    assert exemplar["id"] in result
    wait_for(
        browser,
        "document.querySelector('#catalog-table tr[data-tool=\"create_calendar_event\"] td.count').textContent === '1'",
    )

    _set(browser, "#delete-id", exemplar["id"])
    browser.find_element(By.CSS_SELECTOR, "#delete-form button[type=submit]").click()
    deleted = wait_for(browser, "document.querySelector('#delete-form .result').textContent")
    assert deleted == f"Deleted exemplar {exemplar['id']}"
    listed = call(server.url, "GET", "/v1/tools/create_calendar_event/exemplars").body
    assert query not in [e["query"] for e in listed["exemplars"]]
    wait_for(
        browser,
        "document.querySelector('#catalog-table tr[data-tool=\"create_calendar_event\"] td.count').textContent === '0'",
    )

    # Markup in a refused value comes back as text, never as elements.
    _set(browser, "#label-tool", "<b>no_such_tool</b>")
    browser.find_element(By.CSS_SELECTOR, "#label-form button[type=submit]").click()
    wait_for(browser, "document.querySelector('#label-form .result.error')")
    refused = browser.find_element(By.CSS_SELECTOR, "#label-form .result").text
    assert refused == "404 not_found: no tool named '<b>no_such_tool</b>' (tool)"
    assert not browser.find_elements(By.CSS_SELECTOR, "#label-form .result b")
    # A tool's exemplars are fetched when its row is opened.
    browser.find_element(
        By.CSS_SELECTOR, '#catalog-table tr[data-tool="send_email"] button'
    ).click()
    wait_for(browser, "document.querySelectorAll('tr.exemplars li').length === 2")
    queries = _texts(browser, "tr.exemplars li q")
    assert "email the quarterly report to Marco" in queries
    screenshot(browser, "forms-1280")
    # The browser logs the refused request itself; nothing else may be logged.
    assert console_errors(browser, expected=("/v1/exemplars - Failed to load resource",)) == []


def test_since_filters_analyses_not_counts(browser: Chrome, server: LiveServer) -> None:
    """A `since` in the future empties the analyses, while the catalog's exemplar counts stay
    all-time."""
    open_page(browser, f"{server.url}/ui", 1280, 900)
    wait_for(browser, LOADED)
    browser.execute_script("document.querySelector('#since').value = '2999-01-01'")
    browser.find_element(By.CSS_SELECTOR, "#since-form button[type=submit]").click()
    wait_for(browser, f"document.querySelector('#card-confusions tbody td.empty') && {LOADED}")
    assert _rows(browser, "drift") == [["no rows"]]
    assert not browser.find_elements(By.CSS_SELECTOR, "#card-drift svg")
    assert _counts(browser)["send_email"] == "2"
    assert browser.find_element(By.ID, "card-learning").is_displayed()
    assert console_errors(browser) == []


@pytest.mark.parametrize(("width", "height"), WIDTHS)
def test_api_key_prompt(browser: Chrome, keyed_server: LiveServer, width: int, height: int) -> None:
    """With keys configured the page loads but its data requests are refused until the key is
    typed; a wrong key is reported, the right one shows the dashboard."""
    url = keyed_server.url
    page = call(url, "GET", "/ui")
    assert page.status == 200 and "<main" in page.body
    assert call(url, "GET", "/v1/analytics").status == 401
    # Cleared from another page of the origin: a load of /ui with the key an earlier test kept
    # could still be asking when its key is cleared, and be refused.
    open_page(browser, f"{url}/healthz", width, height)
    browser.execute_script("sessionStorage.clear()")
    browser.get(f"{url}/ui")
    wait_for(browser, "!document.querySelector('#key-prompt').hidden")
    assert not browser.find_element(By.ID, "dashboard").is_displayed()
    screenshot(browser, f"key-prompt-{width}")

    _set(browser, "#api-key", "wrong-key")
    browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
    error = wait_for(browser, "document.querySelector('#key-error').textContent")
    assert error.startswith("The server refused that key")

    _set(browser, "#api-key", API_KEY)
    browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
    wait_for(browser, LOADED)
    assert _counts(browser)["send_email"] == "2"
    assert browser.find_element(By.ID, "forget-key").is_displayed()
    # Only the refused data requests (no key, then the wrong one) may be logged, and the icon
    # of /healthz.
    refused = ("/v1/analytics - Failed to load resource", "/favicon.ico - Failed to load resource")
    assert console_errors(browser, expected=refused) == []


def _session_turns() -> list[Turn]:
    """The turns of SESSIONS, a minute apart within each session (the order they follow)."""
    start = datetime.now(UTC) - timedelta(hours=1)
    return [
        Turn(
            id=f"{session}-{i}",
            request=f"step {i} of {session}",
            used_tool=tools[0],
            used_tools=tools if len(tools) > 1 else (),
            at=start + timedelta(minutes=i),
            session_id=session,
        )
        for session, turns in SESSIONS.items()
        for i, tools in enumerate(turns)
    ]


@pytest.fixture
def bare_server(tmp_path: Path) -> Iterator[LiveServer]:
    """A server holding the catalog and nothing else: no turns, labels or oracle calls."""
    yield from live_server(tmp_path)


def _styled(driver: Chrome, selector: str, prop: str) -> list[str]:
    """A computed style property of each element `selector` matches."""
    script = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(e => getComputedStyle(e).getPropertyValue(arguments[1]))"
    )
    values: list[str] = driver.execute_script(script, selector, prop)
    return values


def _share_of_track(driver: Chrome, selector: str) -> float:
    """The width of the element `selector` matches over the width of its track."""
    script = (
        "const e = document.querySelector(arguments[0]);"
        "return e.getBoundingClientRect().width / e.closest('.track').getBoundingClientRect().width"
    )
    share: float = driver.execute_script(script, selector)
    return share


@pytest.mark.parametrize(("width", "height"), WIDTHS)
def test_pairs_and_transitions_charts(
    browser: Chrome, bare_server: LiveServer, width: int, height: int
) -> None:
    """With no turns both session charts show the empty state every chart shows (no chart, a
    "no rows" table); once sessions of multi-tool turns are recorded, tools used together are
    bars of the top pairs, and each tool's next turns are stacked segments sized by share."""
    names = ("tool_pairs", "tool_transitions", "drift")
    open_page(browser, f"{bare_server.url}/ui", width, height)
    wait_for(browser, LOADED)
    for name in names:
        assert _rows(browser, name) == [["no rows"]], name
        assert not browser.find_elements(By.CSS_SELECTOR, f"#card-{name} .chart-host *"), name

    bare_server.run(bare_server.service.store.record_turns(_session_turns()))
    browser.find_element(By.ID, "refresh").click()
    wait_for(browser, f"document.querySelector('#card-tool_pairs .bars') && {LOADED}")

    # Pairs: web_search with fs_read in three turns (s1 twice, s2 once), web_search with
    # send_email once, and the 15 pairs of s3's six tools once each; the top 12 are drawn (by
    # turns, then names), the table lists all.
    pairs = _rows(browser, "tool_pairs")
    assert len(pairs) == 17
    assert pairs[:2] == [
        ["fs_read", "web_search", "3"],
        ["create_calendar_event", "get_weather", "1"],
    ]
    assert ["send_email", "web_search", "1"] in pairs
    card = "#card-tool_pairs"
    assert browser.find_element(By.CSS_SELECTOR, f"{card} .sub").text == (
        "Top 12 of 17 pairs, by turns that used both tools"
    )
    labels = _texts(browser, f"{card} .bars .label")
    assert len(labels) == 12
    assert labels[:3] == [
        "fs_read + web_search",
        "create_calendar_event + get_weather",
        "create_calendar_event + send_email",
    ]
    assert labels[-1] == "send_email + stock_quote"
    assert "send_email + web_search" not in labels
    values = [v.get_attribute("textContent") for v in browser.find_elements(
        By.CSS_SELECTOR, f"{card} .bars .value"
    )]  # fmt: skip
    assert values == ["3 turns"] + ["1 turn"] * 11
    top = browser.find_element(By.CSS_SELECTOR, f"{card} .bars .track")
    assert top.get_attribute("title") == "fs_read and web_search: used together in 3 turns"
    assert _share_of_track(browser, f"{card} .bars .fill") == pytest.approx(1.0, abs=0.01)
    fills = browser.find_elements(By.CSS_SELECTOR, f"{card} .bars .fill")
    assert fills[1].size["width"] == pytest.approx(fills[0].size["width"] / 3, abs=1)

    # Transitions, the tools with the most steps first (a tie by name): translate_text's six
    # steps went to six tools, once each (the last two merged); web_search's six to web_search
    # three times, fs_read, get_weather and send_email once each.
    steps = _rows(browser, "tool_transitions")
    assert ["web_search", "web_search", "3", "0.5"] in steps
    assert ["fs_read", "get_weather", "1", "0.3333"] in steps
    card = "#card-tool_transitions"
    assert browser.find_element(By.CSS_SELECTOR, f"{card} .sub").text == (
        "4 tools; each bar splits a tool's steps by the tools of the next turn"
    )
    assert _texts(browser, f"{card} .bars .label") == [
        "translate_text",
        "web_search",
        "fs_read",
        "send_email",
    ]
    values = [v.get_attribute("textContent") for v in browser.find_elements(
        By.CSS_SELECTOR, f"{card} .bars .value"
    )]  # fmt: skip
    assert values == ["6 steps", "6 steps", "3 steps", "1 step"]
    segments: list[list[str]] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' .track.stack')]"
        ".map(t => [...t.children].map(s => s.textContent))",
        card,
    )
    assert segments == [
        ["17% create_calendar_event", "17% get_weather", "17% send_email", "17% shell_exec",
         "33% 2 other tools"],
        ["50% web_search (again)", "17% fs_read", "17% get_weather", "17% send_email"],
        ["33% get_weather", "33% send_email", "33% web_search"],
        ["100% web_search"],
    ]  # fmt: skip
    again = f'{card} .seg[data-step="web_search -> web_search"]'
    assert browser.find_element(By.CSS_SELECTOR, again).get_attribute("title") == (
        "web_search → web_search (again): 3 of 6 steps (50%)"
    )
    assert _share_of_track(browser, again) == pytest.approx(0.5, abs=0.01)
    rest = f'{card} .seg[data-step="translate_text -> stock_quote, translate_text"]'
    assert browser.find_element(By.CSS_SELECTOR, rest).get_attribute("title") == (
        "translate_text → 2 other tools: 2 of 6 steps (33%): stock_quote, translate_text"
    )
    assert _share_of_track(browser, rest) == pytest.approx(1 / 3, abs=0.01)
    described = [
        t.get_attribute("aria-label")
        for t in browser.find_elements(By.CSS_SELECTOR, f"{card} .track.stack")
    ]
    assert described[1] == (
        "web_search: web_search (again) 50%, fs_read 17%, get_weather 17%, send_email 17%"
    )
    # A destination keeps its colour in every bar: the four with the most steps drawn have
    # their own, the others are grey and the merged rest lighter.
    assert _texts(browser, f"{card} .legend span") == [
        "web_search",
        "get_weather",
        "send_email",
        "create_calendar_event",
        "another tool",
        "the rest, merged",
    ]
    colours = _styled(browser, f'{card} .seg[data-step$="-> get_weather"]', "background-color")
    assert len(colours) == 3 and len(set(colours)) == 1
    assert set(
        _styled(
            browser,
            f'{card} .seg[data-step$="-> fs_read"], {card} .seg[data-step$="-> shell_exec"]',
            "background-color",
        )
    ) == set(_styled(browser, f"{card} .legend .swatch.s4", "background-color"))

    page_width = browser.execute_script("return document.documentElement.scrollWidth")
    assert page_width <= width
    screenshot(browser, f"sessions-{width}")
    assert console_errors(browser) == []
