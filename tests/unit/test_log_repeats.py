"""Lines that repeat for as long as an outage lasts (the Neo4j driver's retry warnings, a 503 a
request) are logged once, then at most once a `REPEAT_S` with how many were left out."""

from __future__ import annotations

import json
import subprocess
import sys

from toolselect.logs import REPEAT_S, Repeats


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_is_logged_then_one_a_window_with_the_count_left_out() -> None:
    """The first of a kind passes; the rest within the window are left out and counted; the
    first after it passes with that count, and the window starts again from it."""
    ticks = Ticks()
    repeats = Repeats(60.0, now=ticks)
    assert repeats.admit("a") == 0
    assert [repeats.admit("a") for _ in range(5)] == [None] * 5
    ticks.now += 59.9
    assert repeats.admit("a") is None
    ticks.now += 0.2
    assert repeats.admit("a") == 6
    assert repeats.admit("a") is None
    ticks.now += 60.0
    assert repeats.admit("a") == 1


def test_kinds_are_counted_apart_and_bounded() -> None:
    """Each key has its own window, so a new kind of line is never hidden by another; past
    `limit` keys the oldest is forgotten (its next line is a first again), so memory stays
    bounded whatever the keys."""
    ticks = Ticks()
    repeats = Repeats(60.0, now=ticks, limit=3)
    assert [repeats.admit(k) for k in "abc"] == [0, 0, 0]
    assert [repeats.admit(k) for k in "abc"] == [None, None, None]
    assert repeats.admit("d") == 0  # "a" forgotten
    assert repeats.admit("a") == 0
    assert repeats.admit("d") is None


RETRIES = """
import logging
from toolselect.logs import configure_logging
configure_logging("info", "json")
session = logging.getLogger("neo4j.session")
for i in range(50):
    session.warning("Transaction failed and will be retried in %ss (%s)", 1.5, "refused")
session.warning("Failed to consume outstanding auto-commit result: %s", "gone")
logging.getLogger("neo4j.pool").warning("Unable to retrieve routing information")
for i in range(3):
    logging.getLogger("other").warning("not the driver's: %s", i)
"""


def test_the_driver_logs_a_retry_once_not_for_every_attempt() -> None:
    """During an outage the Neo4j driver warns on every retry of every query (about 2 lines a
    second): its first warning of each kind is logged, the rest within `REPEAT_S` are left out
    (the count goes with the next one logged); other loggers are left as they are."""
    done = subprocess.run(
        [sys.executable, "-c", RETRIES], capture_output=True, text=True, timeout=60, check=True
    )
    events = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["logger"], e["event"]) for e in events] == [
        ("neo4j.session", "Transaction failed and will be retried in 1.5s (refused)"),
        ("neo4j.session", "Failed to consume outstanding auto-commit result: gone"),
        ("neo4j.pool", "Unable to retrieve routing information"),
        ("other", "not the driver's: 0"),
        ("other", "not the driver's: 1"),
        ("other", "not the driver's: 2"),
    ]
    assert REPEAT_S >= 10.0  # a window that actually thins a flood out
