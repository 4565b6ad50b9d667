"""Oracle test helpers: candidates, recorded sleeps and traced calls.

The teacher stubs themselves (`anthropic_stub`, `openai_stub`) are in tests/stubs.py.
"""

from __future__ import annotations

from toolselect.metrics import Metrics
from toolselect.oracle.base import Candidate
from toolselect.records import OracleCall

CANDIDATES = (
    Candidate("whatsapp__send_message", "Send a WhatsApp message to a contact."),
    Candidate("email__send_email", "Send an email."),
    Candidate("web_search", "Search the web."),
)
CANDIDATE_NAMES = [c.name for c in CANDIDATES]
REQUEST = "tell Ana on whatsapp that I'm running late"
USED = "mcp__shell_exec"


class Sleeps:
    """An injected `sleep` that records the delays asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Calls:
    """An injected `record_call` that keeps every traced attempt."""

    def __init__(self) -> None:
        self.calls: list[OracleCall] = []

    async def __call__(self, call: OracleCall) -> None:
        self.calls.append(call)

    @property
    def results(self) -> list[str]:
        return [c.result for c in self.calls]


def sample(metrics: Metrics, counter: str, **labels: str) -> float:
    """The current value of a toolselect counter (0 when never incremented)."""
    value = metrics.value(f"toolselect_{counter}_total", labels)
    return value or 0.0
