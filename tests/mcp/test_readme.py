"""The README's "MCP server" examples, run as written: the host config blocks and command lines."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.mcp.conftest import CATALOG, run_cli, stop, wait_for_port
from tests.services import cli_env

README = Path(__file__).parents[2] / "README.md"
BIN = str(Path(sys.executable).parent)  # where `toolselect` and `python` of this install live
TINY_SERVER = Path(__file__).with_name("tiny_server.py")


def block(marker: str) -> str:
    """The fenced block right after `<!-- marker -->` in the README."""
    found = re.search(rf"<!-- {marker} -->\n```\w*\n(.*?)```", README.read_text(), re.S)
    assert found, f"README has no block after <!-- {marker} -->"
    return found.group(1)


def command_lines(section: str, program: str) -> list[str]:
    """Every `program ...` command inside ```sh blocks of the README section titled `section`
    (a command continued with a trailing backslash joined into one line)."""
    text = README.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    lines = (line for b in blocks for line in b.replace("\\\n", " ").splitlines())
    return [line for line in lines if line.startswith(program + " ")]


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """`toolselect` and `python` of this install first on PATH, as after `pip install`."""
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    monkeypatch.setenv("PATH", path)
    assert shutil.which("toolselect") == str(Path(BIN) / "toolselect")
    return {"PATH": path}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store with the small catalog the examples rank."""
    catalog = tmp_path / "tools.json"
    catalog.write_text(json.dumps(CATALOG))
    path = tmp_path / "store.db"
    assert run_cli(["tools", "import", str(catalog)], cli_env(path)).returncode == 0
    return path


async def test_stdio_config_block_runs_as_written(db: Path, on_path: dict[str, str]) -> None:
    """The `mcpServers` block starts a working server (its store path swapped for a temp one)."""
    entry: dict[str, Any] = json.loads(block("mcp-stdio-config"))["mcpServers"]["toolselect"]
    assert set(entry["env"]) == {"TOOLSELECT_STORE"}
    env = {**entry["env"], "TOOLSELECT_STORE": f"sqlite:{db}", "TOOLSELECT_EMBEDDER": "hashing"}
    # The default data folder (the spool, the vector cache) under the test's, not the user's.
    env["XDG_DATA_HOME"] = str(db.parent)
    # A host merges `env` over the SDK's default environment, which carries PATH and HOME.
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)
    async with Client(params, read_timeout_seconds=60) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        found = await client.call_tool("search_tools", {"query": "weather in Turin", "k": 1})
    assert names == {"search_tools", "report_turn", "label_turn"}
    assert found.structured_content is not None
    assert found.structured_content["tools"][0]["name"] == "get_weather"


@pytest.fixture
def readme_http(db: Path, on_path: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """The README's HTTP command line, run as written; yields the URL of its `mcpServers` block."""
    argv = shlex.split(block("mcp-http-command").strip())
    port = int(argv[argv.index("--port") + 1])
    log = tmp_path / "mcp.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            argv,
            env={**cli_env(db), **on_path},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    try:
        wait_for_port(port, proc, log)
        yield json.loads(block("mcp-http-config"))["mcpServers"]["toolselect"]["url"]
    finally:
        stop(proc, log)


async def test_http_command_and_config_run_as_written(readme_http: str) -> None:
    """The README's HTTP command line serves at the URL its `mcpServers` block names."""
    async with Client(readme_http, read_timeout_seconds=60) as client:
        found = await client.call_tool("search_tools", {"query": "weather in Turin", "k": 1})
    assert found.structured_content is not None
    assert found.structured_content["tools"][0]["name"] == "get_weather"


def test_import_command_runs_as_written(tmp_path: Path, on_path: dict[str, str]) -> None:
    """`tools import --mcp "python -m my_mcp_server"` imports a server module found from cwd."""
    (lines,) = [line for line in command_lines("MCP server", "toolselect") if "--mcp" in line]
    module = re.search(r"python -m (\w+)", lines)
    assert module, lines
    shutil.copy(TINY_SERVER, tmp_path / f"{module.group(1)}.py")
    done = subprocess.run(
        shlex.split(lines),
        cwd=tmp_path,
        env={**cli_env(tmp_path / "s.db"), **on_path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"upserted": 3, "unchanged": 0}
