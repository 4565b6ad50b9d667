"""`toolselect keys create|list|revoke` as a user runs them (real subprocesses, a real store),
and a running `toolselect serve` taking their changes within its poll interval."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli import run, serving
from tests.mcp.test_readme import command_lines
from tests.services import cli_env
from toolselect.api.server import check_bind
from toolselect.config import Settings
from toolselect.errors import ConfigError
from toolselect.keys import key_hash


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A clean environment on a fresh embedded store, polled every 0.2 s by a server."""
    return cli_env(tmp_path / "keys.db", TOOLSELECT_POLL_INTERVAL="0.2")


def create(env: dict[str, str], *args: str) -> dict[str, str]:
    done = run(["keys", "create", *args], env)
    assert done.returncode == 0, done.stderr
    made: dict[str, str] = json.loads(done.stdout)
    assert "shown only this once" in done.stderr
    return made


def test_create_list_revoke(env: dict[str, str], tmp_path: Path) -> None:
    """`create` prints the key once with its record; `list` shows ids, prefixes, tenants and
    roles (never a key or hash), by tenant; `revoke` marks it; an unknown id exits 1."""
    made = create(env, "--tenant", "team-a", "--role", "agent", "--name", "ci")
    other = create(env, "--tenant", "team-b", "--role", "admin")
    key = made["key"]
    assert key.startswith("tsk_") and made["prefix"] == key[:12]
    assert (made["tenant"], made["role"], made["name"]) == ("team-a", "agent", "ci")

    listed = run(["keys", "list", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    assert [k["id"] for k in json.loads(listed.stdout)["keys"]] == [made["id"], other["id"]]
    table = run(["keys", "list", "--tenant", "team-a"], env)
    assert table.returncode == 0 and made["id"] in table.stdout and other["id"] not in table.stdout
    assert "team-a  agent" in table.stdout and "active" in table.stdout
    for text in (listed.stdout, table.stdout):
        assert key not in text and key_hash(key) not in text

    revoked = run(["keys", "revoke", made["id"]], env)
    assert revoked.returncode == 0 and json.loads(revoked.stdout) == {
        "id": made["id"],
        "revoked": True,
    }
    [row] = json.loads(run(["keys", "list", "--json", "--tenant", "team-a"], env).stdout)["keys"]
    assert "revoked_at" in row
    unknown = run(["keys", "revoke", "000000000000"], env)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "toolselect keys: no API key with id '000000000000'"


def test_revoking_a_key_pasted_for_its_id_does_not_print_it(env: dict[str, str]) -> None:
    """`keys revoke <the key itself>` exits 1 without the key on stderr or stdout."""
    key = create(env, "--tenant", "team-a", "--role", "agent")["key"]
    done = run(["keys", "revoke", key], env)
    assert done.returncode == 1
    assert key not in done.stderr and key not in done.stdout
    assert done.stderr.strip() == (
        "toolselect keys: no API key with id what looks like an API key (not shown)"
    )


def test_serve_reads_every_key_file_of_the_list(env: dict[str, str], tmp_path: Path) -> None:
    """Rotating as the README says (the old key listed beside a file of the new one): both
    keys work, and the text `@FILE` is no key at all."""
    new = tmp_path / "new-key"
    new.write_text("tsk_new-key-in-a-file\n")
    keyed = {**env, "TOOLSELECT_API_KEYS": f"tsk_old-literal-key,@{new}"}
    with serving(keyed) as url:
        assert _status(url, "tsk_old-literal-key") == 200
        assert _status(url, "tsk_new-key-in-a-file") == 200
        assert _status(url, f"@{new}") == 401


def test_serve_refuses_to_start_on_a_key_source_naming_no_key(
    env: dict[str, str], tmp_path: Path
) -> None:
    """TOOLSELECT_API_KEYS set to a file without keys (or to blanks) stops `serve` with one
    line naming the variable, rather than serving without the keys it was meant to require."""
    empty = tmp_path / "keys"
    empty.write_text("# none yet\n")
    for value in (f"@{empty}", " , "):
        done = run(["serve", "--port", "0"], {**env, "TOOLSELECT_API_KEYS": value})
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("toolselect serve: TOOLSELECT_API_KEYS names no key")


def test_bad_arguments_are_one_line(env: dict[str, str]) -> None:
    """A bad tenant is one line naming the rule (exit 2); a bad role is argparse's (exit 2)."""
    bad = run(["keys", "create", "--tenant", "Team A", "--role", "agent"], env)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "toolselect keys: expected a tenant id matching ^[a-z0-9][a-z0-9_-]{0,62}$, got 'Team A'"
    )
    assert run(["keys", "create", "--tenant", "a", "--role", "root"], env).returncode == 2


def _status(url: str, key: str) -> int:
    request = urllib.request.Request(
        url + "/v1/analytics", headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def server(env: dict[str, str]) -> Iterator[str]:
    """`toolselect serve` on a free loopback port of the keys' store, ready."""
    with serving(env) as url:
        yield url


def _becomes(url: str, key: str, status: int) -> None:
    deadline = time.monotonic() + 10
    while _status(url, key) != status:
        assert time.monotonic() < deadline, f"no {status} within 10 s"
        time.sleep(0.05)


def test_a_running_server_takes_keys_from_the_cli(env: dict[str, str], server: str) -> None:
    """A key created with the CLI works on a running server (and turns authentication on),
    and once revoked with the CLI it is refused, each within the server's poll interval."""
    assert _status(server, "anything") == 200  # no key anywhere: open
    made = create(env, "--tenant", "default", "--role", "editor")
    _becomes(server, "anything", 401)
    _becomes(server, made["key"], 200)
    assert run(["keys", "revoke", made["id"]], env).returncode == 0
    _becomes(server, made["key"], 401)


def test_a_public_bind_accepts_stored_keys(tmp_path: Path) -> None:
    """`serve` beyond loopback is refused without keys, and allowed once the store holds an
    active key (or with TOOLSELECT_API_KEYS)."""
    db = tmp_path / "bind.db"
    settings = Settings(host="0.0.0.0", store=f"sqlite:{db}", data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="TOOLSELECT_API_KEYS"):
        check_bind(settings, insecure=False)
    check_bind(settings.override(api_keys=("k",)), insecure=False)
    create(cli_env(db), "--tenant", "default", "--role", "admin")
    check_bind(settings, insecure=False)


README_ID = "3f9c0d12ab47"  # the key id the README's examples show


def test_the_readme_key_commands_run_as_written(env: dict[str, str], server: str) -> None:
    """Every `toolselect keys` and `curl` command of README's "Operating for several teams",
    as written (comments dropped; its example id, `$ADMIN_KEY` and `localhost:8080` standing
    for this run's), against a store and a running server: each exits 0 and answers what the
    README says it does."""
    section = "Operating for several teams"
    admin = create(env, "--tenant", "default", "--role", "admin")["key"]
    _becomes(server, admin, 200)
    shell = {**env, "ADMIN_KEY": admin}
    made: dict[str, str] = {}  # the last key a command created: the one the next revokes

    def as_written(line: str) -> str:
        line = re.sub(r"\s+#.*$", "", line)  # the README's comments
        line = line.replace("localhost:8080", server.removeprefix("http://"))
        return line.replace(README_ID, made["id"]) if made else line

    keys = command_lines(section, "toolselect")
    assert [line.split()[:3] for line in keys] == [["toolselect", "keys", word] for word in
                                                   ("create", "list", "list", "revoke")]  # fmt: skip
    for line in keys:
        done = run(shlex.split(as_written(line))[1:], env)
        assert done.returncode == 0, (line, done.stderr)
        if line.split()[2] == "create":
            made = json.loads(done.stdout)
            assert (made["tenant"], made["role"], made["name"]) == ("team-a", "agent", "ci")
        if line.split()[2] == "revoke":
            assert json.loads(done.stdout) == {"id": made["id"], "revoked": True}
    first = made["id"]
    curls = command_lines(section, "curl")
    assert len(curls) == 3 and curls[0].split()[1:3] == ["-X", "POST"]
    answers = []
    for line in curls:
        done = subprocess.run(
            ["bash", "-c", as_written(line) + " --fail-with-body --silent --show-error"],
            env=shell, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        answers.append(json.loads(done.stdout))
        if "key" in answers[-1]:
            made = answers[-1]
    created, listed, revoked = answers
    assert created["key"].startswith("tsk_") and created["tenant"] == "team-a"
    assert {k["id"] for k in listed["keys"]} == {first, created["id"]}
    assert revoked == {"id": created["id"], "revoked": True}
    _becomes(server, created["key"], 401)
