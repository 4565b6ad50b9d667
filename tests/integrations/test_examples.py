"""The README's client and Claude tool search examples: the files in examples/ are the README's
code blocks verbatim, and each runs as written against a real server."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from tests.live import LiveServer, wait_for_turn
from tests.services import free_port
from tests.stubs import Stub, claude_with_tool_search
from toolselect.integrations.anthropic import SEARCH_TOOL

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["python_client.py", "claude_tool_search.py"]


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without toolselect or Anthropic settings, plus `extra`."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLSELECT_", "ANTHROPIC_"))}
    return {**keep, **extra}


async def run_example(name: str, env: dict[str, str]) -> str:
    """Runs examples/`name` in a fresh interpreter without blocking this loop; its stdout."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / name),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.parametrize("name", EXAMPLES)
def test_readme_shows_the_example_verbatim(name: str) -> None:
    """Each example file is one of the README's python blocks, character for character."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert (ROOT / "examples" / name).read_text() in blocks


async def test_python_client_example_runs(server: LiveServer) -> None:
    """The client example ranks, reports a turn that the server then stores, and shows a 422."""
    out = await run_example("python_client.py", environment(TOOLSELECT_URL=server.url))
    lines = out.splitlines()
    assert lines[0].startswith("[('crypto_price', ")
    assert lines[1] == "422 invalid_request k"
    assert "sent=1" in lines[2]


async def test_claude_tool_search_example_runs(server: LiveServer, anthropic_stub: Stub) -> None:
    """The Claude example completes a search-then-call turn and the server stores that turn."""
    anthropic_stub.responder = claude_with_tool_search(SEARCH_TOOL, "rain forecast in a city")
    env = environment(
        TOOLSELECT_URL=server.url, ANTHROPIC_BASE_URL=anthropic_stub.url, ANTHROPIC_API_KEY="test"
    )
    out = await run_example("claude_tool_search.py", env)
    found = re.fullmatch(r"Claude used get_weather; reported as turn (\w+)\n", out)
    assert found is not None, out
    stored = await asyncio.to_thread(wait_for_turn, server, found.group(1))
    assert (stored.used_tool, stored.pack) == ("get_weather", "claude")
    assert len(anthropic_stub.received) == 3


async def test_claude_tool_search_example_runs_with_toolselect_down(anthropic_stub: Stub) -> None:
    """With nothing listening at `TOOLSELECT_URL` the example's upload degrades (it exited 1 on
    `Unreachable`) and Claude's search reveals the whole catalog: the turn still completes."""
    anthropic_stub.responder = claude_with_tool_search(SEARCH_TOOL, "rain forecast in a city")
    env = environment(
        TOOLSELECT_URL=f"http://127.0.0.1:{free_port()}",
        ANTHROPIC_BASE_URL=anthropic_stub.url,
        ANTHROPIC_API_KEY="test",
    )
    out = await run_example("claude_tool_search.py", env)
    assert re.fullmatch(r"Claude used get_weather; reported as turn \w+\n", out), out
    revealed = anthropic_stub.received[1].body["messages"][-1]["content"][0]["content"]
    assert [r["tool_name"] for r in revealed] == ["get_weather", "send_email"]
