"""The dashboard's tenant picker in headless Chromium against a real server with two tenants:
an editor key reads its own tenant with no picker and never names one; an admin key picks a
tenant, every request then names it (`X-Toolselect-Tenant`), the panels show that tenant's
catalog and turns, the header says which tenant is shown, and the choice lasts until the key
changes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from tests.api.conftest import HAND_CATALOG
from tests.live import LiveServer
from tests.ui.conftest import API_KEY, call, console_errors, open_page, screenshot, wait_for
from tests.ui.test_dashboard import LOADED, _counts, _rows, _set

# Each tenant's own catalog and turns (tool -> turns that used it): nothing in common, and
# neither is `default`'s HAND_CATALOG.
CATALOGS = {
    "team-a": {"alpha_lookup": 2, "alpha_mail": 1},
    "team-b": {"beta_ledger": 3},
}
HEADER = "X-Toolselect-Tenant"
# Every fetch the page makes, with its headers (app.js passes them as a plain object), kept in
# `window.__sent` from before app.js runs.
RECORDER = """
window.__sent = [];
const fetched = window.fetch.bind(window);
window.fetch = (path, init) => {
  window.__sent.push({ path: String(path), headers: { ...((init && init.headers) || {}) } });
  return fetched(path, init);
};
"""
# The refused requests the page itself causes: no key yet (401), and the icon of /healthz,
# opened to clear the tab's storage. (A non-admin key is never sent to the admins' /v1/keys.)
REFUSED = (
    "/v1/analytics - Failed to load resource",
    "/favicon.ico - Failed to load resource",
)


def _wait_for_turns(url: str, key: str, turns: dict[str, int]) -> None:
    """Until the tenant's intake has stored its turns (misroute_rate counts them per tool)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rows = call(url, "GET", "/v1/analytics/misroute_rate", key=key).body["rows"]
        if {row[0]: row[1] for row in rows} == turns:
            return
        time.sleep(0.1)
    raise AssertionError(f"turns {turns} not stored within 20 s")


@pytest.fixture(scope="module")
def tenants(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """A server with an admin key (TOOLSELECT_API_KEYS) and an editor key per tenant of
    CATALOGS, each tenant's catalog and turns put through the API with its own key."""
    server = LiveServer(tmp_path_factory.mktemp("ui-tenants"), api_keys=(API_KEY,))
    try:
        editors = {}
        for tenant, tools in CATALOGS.items():
            made = call(
                server.url, "POST", "/v1/keys", {"tenant": tenant, "role": "editor"}, API_KEY
            )
            assert made.status == 201, made.body
            key = editors[tenant] = made.body["key"]
            catalog = {"tools": [{"name": t, "description": f"{t} of {tenant}"} for t in tools]}
            assert call(server.url, "PUT", "/v1/tools", catalog, key).status == 200
            turns = [
                {"turn_id": f"{tool}-{i}", "request": f"use {tool}", "used_tool": tool}
                for tool, n in tools.items()
                for i in range(n)
            ]
            assert (
                call(server.url, "POST", "/v1/observe/batch", {"turns": turns}, key).status == 202
            )
        for tenant, key in editors.items():
            _wait_for_turns(server.url, key, CATALOGS[tenant])
        yield server, editors
    finally:
        server.stop()


@pytest.fixture
def recorded(browser: Chrome) -> Iterator[Chrome]:
    """The browser with RECORDER run in each page it opens during the test."""
    added = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORDER})
    try:
        yield browser
    finally:
        browser.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]}
        )


def _sent(driver: Chrome) -> list[dict[str, Any]]:
    """The requests recorded since the page was opened (or since the last call), then forgets
    them."""
    sent: list[dict[str, Any]] = driver.execute_script(
        "return window.__sent.splice(0, window.__sent.length)"
    )
    return sent


def _use_key(driver: Chrome, url: str, key: str) -> None:
    """Open the page with nothing stored for its origin (cleared from another page of it, so
    no load with an earlier key is under way) and type `key` at the prompt."""
    open_page(driver, f"{url}/healthz", 1280, 900)
    driver.execute_script("sessionStorage.clear()")
    driver.get(f"{url}/ui")
    wait_for(driver, "!document.querySelector('#key-prompt').hidden")
    _set(driver, "#api-key", key)
    driver.find_element(By.CSS_SELECTOR, "#key-form button").click()
    wait_for(driver, LOADED)


def _pick(driver: Chrome, tenant: str) -> None:
    """Type `tenant` into the picker, submit, and wait for the panels to re-load."""
    _set(driver, "#tenant", tenant)
    driver.find_element(By.CSS_SELECTOR, "#tenant-form button[type=submit]").click()
    wait_for(
        driver, f"{LOADED} && document.querySelector('#tenant-name').textContent === '{tenant}'"
    )


def _turns(driver: Chrome) -> dict[str, str]:
    """Turns per used tool as the mis-routes panel's table shows them (none: "no rows")."""
    rows = _rows(driver, "misroute_rate")
    return {} if rows == [["no rows"]] else {row[0]: row[1] for row in rows}


def _shows(driver: Chrome, tenant: str) -> None:
    """The catalog and the mis-routes panel hold `tenant`'s tools and turns, and nothing else."""
    tools = CATALOGS[tenant]
    assert set(_counts(driver)) == set(tools)
    assert _turns(driver) == {tool: str(n) for tool, n in tools.items()}


def test_an_editor_sees_its_own_tenant_and_no_picker(
    recorded: Chrome, tenants: tuple[LiveServer, dict[str, str]]
) -> None:
    """An editor key of team-a reads team-a's catalog and turns only; the header names team-a
    (`GET /v1/whoami`), it gets no picker, never asks the admins' `/v1/keys`, and none of its
    requests names a tenant."""
    server, editors = tenants
    _use_key(recorded, server.url, editors["team-a"])
    _shows(recorded, "team-a")
    assert not recorded.find_element(By.ID, "tenant-form").is_displayed()
    assert recorded.find_element(By.ID, "tenant-shown").text == "tenant: team-a"
    assert recorded.execute_script("return sessionStorage.getItem('toolselect.tenant')") is None
    sent = _sent(recorded)
    assert "/v1/whoami" in [r["path"] for r in sent]
    assert "/v1/keys" not in [r["path"] for r in sent]
    assert [r["path"] for r in sent if HEADER in r["headers"]] == []
    assert console_errors(recorded, expected=REFUSED) == []


def test_an_admin_picks_a_tenant(
    recorded: Chrome, tenants: tuple[LiveServer, dict[str, str]]
) -> None:
    """The admin starts on its own tenant (`default`), picks team-b then team-a from the
    tenants of the keys, sees each one's data with every request naming it, keeps the choice
    over a reload, is told off for a malformed id (never sent), and loses the choice with the
    key."""
    server, editors = tenants
    _use_key(recorded, server.url, API_KEY)
    picker = recorded.find_element(By.ID, "tenant")
    assert picker.is_displayed()
    label = recorded.find_element(By.CSS_SELECTOR, "label[for=tenant]")
    assert label.text == "Tenant"
    assert recorded.find_element(By.ID, "tenant-shown").text == "tenant: default"
    assert picker.get_attribute("value") == "default"
    options = recorded.execute_script(
        "return [...document.querySelectorAll('#tenant-names option')].map(o => o.value)"
    )
    assert options == ["default", "team-a", "team-b"]
    assert set(_counts(recorded)) == {t.name for t in HAND_CATALOG}
    assert _turns(recorded) == {}
    assert [r["path"] for r in _sent(recorded) if HEADER in r["headers"]] == []

    _pick(recorded, "team-b")
    _shows(recorded, "team-b")
    assert recorded.find_element(By.ID, "tenant-shown").text == "tenant: team-b"
    sent = _sent(recorded)
    assert {"/v1/tools", "/v1/analytics/misroute_rate", "/v1/keys"} <= {r["path"] for r in sent}
    # Every request names team-b, but whoami, which asks as the key itself.
    named = [r["headers"].get(HEADER) for r in sent if r["path"] != "/v1/whoami"]
    assert named == ["team-b"] * (len(sent) - 1)
    screenshot(recorded, "tenant-team-b-1280")
    # At a phone's width the picker and the tenant line wrap instead of widening the page.
    recorded.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": False},
    )
    assert recorded.execute_script("return document.documentElement.scrollWidth") <= 390
    assert recorded.find_element(By.ID, "tenant").is_displayed()
    screenshot(recorded, "tenant-team-b-390")
    recorded.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
    )

    _pick(recorded, "team-a")
    _shows(recorded, "team-a")
    assert recorded.find_element(By.ID, "tenant-shown").text == "tenant: team-a"
    sent = _sent(recorded)
    named = [r["headers"].get(HEADER) for r in sent if r["path"] != "/v1/whoami"]
    assert named and named == ["team-a"] * len(named)

    # Kept like the key (the tab's session storage): a reload shows team-a again.
    recorded.refresh()
    wait_for(recorded, f"{LOADED} && document.querySelector('#tenant-name').textContent")
    assert recorded.find_element(By.ID, "tenant-shown").text == "tenant: team-a"
    _shows(recorded, "team-a")

    # A malformed id is reported, not sent: the page still shows team-a, and asked nothing.
    _sent(recorded)
    _set(recorded, "#tenant", "Team B")
    recorded.find_element(By.CSS_SELECTOR, "#tenant-form button[type=submit]").click()
    error = wait_for(recorded, "document.querySelector('#tenant-error').textContent")
    assert error.startswith("“Team B” is not a tenant id")
    assert recorded.find_element(By.ID, "tenant-error").is_displayed()
    invalid = recorded.find_element(By.ID, "tenant").get_attribute("aria-invalid")
    assert invalid == "true"
    assert _sent(recorded) == []
    assert recorded.find_element(By.ID, "tenant-shown").text == "tenant: team-a"
    _pick(recorded, "team-b")  # a good id clears the error
    assert not recorded.find_element(By.ID, "tenant-error").is_displayed()

    # Another key forgets the choice: team-b's editor reads team-b without naming it.
    recorded.find_element(By.ID, "forget-key").click()
    wait_for(recorded, "!document.querySelector('#key-prompt').hidden")
    assert recorded.execute_script("return sessionStorage.getItem('toolselect.tenant')") is None
    _sent(recorded)
    _set(recorded, "#api-key", editors["team-b"])
    recorded.find_element(By.CSS_SELECTOR, "#key-form button").click()
    wait_for(recorded, LOADED)
    _shows(recorded, "team-b")
    assert not recorded.find_element(By.ID, "tenant-form").is_displayed()
    assert recorded.find_element(By.ID, "tenant-shown").text == "tenant: team-b"
    assert [r["path"] for r in _sent(recorded) if HEADER in r["headers"]] == []
    assert console_errors(recorded, expected=REFUSED) == []
