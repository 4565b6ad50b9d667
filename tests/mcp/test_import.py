"""`toolselect tools import --mcp COMMAND`: a catalog read from a live MCP server's tools/list."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

from tests.mcp.conftest import run_cli
from tests.services import cli_env
from toolselect.config import Settings
from toolselect.records import Tool
from toolselect.store.factory import open_store

TINY_SERVER = Path(__file__).with_name("tiny_server.py")
TINY_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(TINY_SERVER))}"


def stored_tools(db: Path) -> dict[str, Tool]:
    async def read() -> dict[str, Tool]:
        store = await open_store(Settings(store=f"sqlite:{db}", data_dir=str(db.parent)))
        try:
            await store.migrate()  # a failed import never opened the store: no schema yet
            return {t.name: t for t in await store.list_tools()}
        finally:
            await store.close()

    return asyncio.run(read())


def test_imports_every_tool_with_its_schema(tmp_path: Path) -> None:
    """The server's three tools are stored in the pack with description and inputSchema."""
    db = tmp_path / "s.db"
    done = run_cli(["tools", "import", "--mcp", TINY_COMMAND, "--pack", "tiny"], cli_env(db))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"upserted": 3, "unchanged": 0}
    tools = stored_tools(db)
    assert set(tools) == {"lookup_invoice", "translate_text", "roll_dice"}
    translate = tools["translate_text"]
    assert translate.description == "Translate text into another language."
    assert translate.packs == ("tiny",)
    props = translate.input_schema["properties"]
    assert props["target_language"]["description"] == "ISO 639-1 code of the language."
    assert set(translate.input_schema["required"]) == {"text", "target_language"}
    again = run_cli(["tools", "import", "--mcp", TINY_COMMAND, "--pack", "tiny"], cli_env(db))
    assert json.loads(again.stdout) == {"upserted": 0, "unchanged": 3}


def test_imported_tools_rank(tmp_path: Path) -> None:
    """Tools imported from an MCP server rank like any other: an invoice question finds its tool."""
    env = cli_env(tmp_path / "s.db")
    assert run_cli(["tools", "import", "--mcp", TINY_COMMAND], env).returncode == 0
    done = run_cli(["rank", "what is the status of invoice INV-1024?", "--json", "-k", "1"], env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["tool"] == "lookup_invoice"


def test_a_command_that_cannot_start_fails_in_one_line(tmp_path: Path) -> None:
    """A missing executable exits 1 with one line naming the command, and imports nothing."""
    db = tmp_path / "s.db"
    done = run_cli(["tools", "import", "--mcp", "no-such-mcp-server --flag"], cli_env(db))
    assert done.returncode == 1
    assert done.stderr.startswith("toolselect tools: MCP server 'no-such-mcp-server --flag' failed")
    assert len(done.stderr.strip().splitlines()) == 1
    assert stored_tools(db) == {}


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    """A command that speaks no MCP is given up after --timeout seconds, exit 1."""
    command = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(60)'"
    done = run_cli(
        ["tools", "import", "--mcp", command, "--timeout", "0.5"], cli_env(tmp_path / "s.db")
    )
    assert done.returncode == 1
    assert "did not list its tools within 0.5 s" in done.stderr


def test_file_and_mcp_are_exclusive(tmp_path: Path) -> None:
    """Exactly one source: a FILE or --mcp; both or neither is a usage error (exit 2)."""
    env = cli_env(tmp_path / "s.db")
    neither = run_cli(["tools", "import"], env)
    assert neither.returncode == 2
    assert "expected a FILE or --mcp COMMAND, got neither" in neither.stderr
    both = run_cli(["tools", "import", "tools.json", "--mcp", TINY_COMMAND], env)
    assert both.returncode == 2
    assert "got both" in both.stderr
    empty = run_cli(["tools", "import", "--mcp", "  "], env)
    assert empty.returncode == 2
    assert "expected a command line for --mcp, got nothing" in empty.stderr
