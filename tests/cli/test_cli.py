"""The `toolselect` command as a user runs it: real subprocesses, real server, real stores."""

from __future__ import annotations

import http.server
import json
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.services import cli_env, free_port, raw_exchange
from toolselect.catalog import candidates_to_tools, tool_text
from toolselect.embed import VectorCache
from toolselect.embed.cache import text_digest
from toolselect.embed.minilm import MODEL_ID
from toolselect.learn.fit import DEFAULT_TEACHER_DEPTH

EXE = [sys.executable, "-m", "toolselect.cmd.main"]

CATALOG = {
    "tools": [
        {"name": "send_email", "description": "Send an email message to a recipient."},
        {"name": "get_weather", "description": "Current weather and forecast for a city."},
        {"name": "web_search", "description": "Search the web for pages matching a query."},
    ]
}
SELECT: dict[str, Any] = {
    "query": {"Text": "send the report to Marco by email", "Kind": "tool", "PackID": "p1",
              "AgentID": "a1", "K": 2},
    "candidates": [
        {"ID": "send_email", "Name": "send_email", "Description": "Send an email", "Metadata": {}},
        {"ID": "get_weather", "Name": "get_weather", "Description": "Weather", "Metadata": {}},
        {"ID": "fax_it", "Name": "fax_it", "Description": "Send a fax", "Metadata": None},
    ],
}  # fmt: skip


def run(
    args: list[str], env: dict[str, str], stdin: str = "", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXE, *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A clean environment pointing the CLI at a fresh embedded store."""
    return cli_env(tmp_path / "cli.db")


@pytest.fixture
def catalog_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The environment after `toolselect tools import` of a small catalog."""
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(CATALOG))
    done = run(["tools", "import", str(path), "--pack", "assistant"], env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"upserted": 3, "unchanged": 0}
    return env


@contextmanager
def serving(env: dict[str, str], stderr: list[str] | None = None) -> Iterator[str]:
    """`toolselect serve` on a free loopback port, ready; stopped with SIGTERM afterwards, its
    stderr (the log) then appended to `stderr` when given."""
    port = free_port()
    proc = subprocess.Popen(
        [*EXE, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=1) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "server did not become ready"
        time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        if stderr is not None:
            stderr.append(err)
        assert proc.returncode == 0, err


@pytest.fixture
def server(catalog_env: dict[str, str]) -> Iterator[str]:
    """`serving` on the catalog's store."""
    with serving(catalog_env) as url:
        yield url


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",  # TLS to the HTTP port
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",
        b"POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n",
    ],
    ids=["not-http", "header-too-long", "bad-content-length"],
)
def test_requests_the_server_cannot_parse_get_json_errors(
    server: str, request_bytes: bytes
) -> None:
    """Bytes that are not HTTP the server reads are answered before the app, by aiohttp's
    connection handler: in JSON with a stable code as every other error, not its plain text."""
    status, headers, body = raw_exchange(server, request_bytes)
    content_type = headers["content-type"]
    assert status == 400 and content_type.startswith("application/json")
    assert body["error"]["code"] == "bad_request" and body["error"]["field"] == "request"
    assert body["error"]["message"].startswith("the request is not HTTP the server reads: ")


def test_select_in_process_round_trip(catalog_env: dict[str, str]) -> None:
    """`toolselect select` reads a PromptKit request on stdin and writes only candidate IDs."""
    done = run(["select"], catalog_env, stdin=json.dumps(SELECT))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["selected"][0] == "send_email"
    assert len(answer["selected"]) == 2
    assert set(answer["selected"]) <= {"send_email", "get_weather", "fax_it"}
    assert answer["reason"].startswith("centroid ranking")


def test_python_dash_m_toolselect_is_the_command(catalog_env: dict[str, str]) -> None:
    """`python -m toolselect` runs the same command as the entry point (it had no `__main__`)."""
    done = subprocess.run(
        [sys.executable, "-m", "toolselect", "select"],
        input=json.dumps(SELECT),
        capture_output=True,
        text=True,
        env=catalog_env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["selected"][0] == "send_email"


def test_config_names_a_variable_that_is_no_setting(env: dict[str, str]) -> None:
    """`toolselect config` prints the table on stdout and, on stderr, each `TOOLSELECT_*`
    variable that names no setting (a typo is otherwise ignored in silence)."""
    done = run(["config"], {**env, "TOOLSELECT_POLL_INTERVAL_S": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| variable | default | meaning |")
    assert "TOOLSELECT_POLL_INTERVAL_S: no such setting, ignored" in done.stderr
    assert "did you mean TOOLSELECT_POLL_INTERVAL?" in done.stderr


def test_select_thin_client_round_trip(server: str, catalog_env: dict[str, str]) -> None:
    """`toolselect select --url` gives the same answer as the in-process selector."""
    remote = run(["select", "--url", server], catalog_env, stdin=json.dumps(SELECT))
    assert remote.returncode == 0, remote.stderr
    local = run(["select"], catalog_env, stdin=json.dumps(SELECT))
    assert json.loads(remote.stdout)["selected"] == json.loads(local.stdout)["selected"]


def test_thin_client_presents_its_key(catalog_env: dict[str, str]) -> None:
    """Against a server with keys, `select --url` sends TOOLSELECT_SELECT_API_KEY as a bearer
    key; without it the refusal is the server's (exit 1, not the exit 2 of bad stdin)."""
    with serving({**catalog_env, "TOOLSELECT_API_KEYS": "k-select-test"}) as url:
        refused = run(["select", "--url", url], catalog_env, stdin=json.dumps(SELECT))
        keyed = {**catalog_env, "TOOLSELECT_SELECT_API_KEY": "k-select-test"}
        done = run(["select", "--url", url], keyed, stdin=json.dumps(SELECT))
    assert refused.returncode == 1 and "unauthorized" in refused.stderr, refused.stderr
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["selected"][0] == "send_email"


def test_select_in_process_ignores_the_conversation_fields(catalog_env: dict[str, str]) -> None:
    """`/v1/select`'s conversation fields reach the in-process selector, which has no sessions:
    it answers exactly as without them, on the plain path and on the validating one (a float
    K), even when they are malformed."""
    expected = run(["select"], catalog_env, stdin=json.dumps(SELECT))
    assert expected.returncode == 0, expected.stderr
    conversation = {"session_id": "chat-1", "previous_tools": ["get_weather"],
                    "context": ["will it rain?"], "companions": True}  # fmt: skip
    malformed = {"session_id": 7, "previous_tools": "x", "context": [None], "companions": "lots"}
    converted = {**SELECT, "query": {**SELECT["query"], "K": 2.0}}
    for payload in ({**SELECT, **conversation}, {**converted, **malformed}):
        done = run(["select"], catalog_env, stdin=json.dumps(payload))
        assert done.returncode == 0, done.stderr
        assert done.stdout == expected.stdout


def test_thin_client_imports_nothing_heavy(server: str, catalog_env: dict[str, str]) -> None:
    """The --url path never imports numpy, scikit-learn, the drivers or the SDKs."""
    code = (
        "import sys, io, json\n"
        "from toolselect.cmd.main import main\n"
        f"sys.stdin = io.TextIOWrapper(io.BytesIO({json.dumps(SELECT).encode()!r}))\n"
        f"rc = main(['select', '--url', {server!r}])\n"
        "heavy = [m for m in ('numpy', 'sklearn', 'neo4j', 'anthropic', 'aiohttp', 'pydantic')"
        " if m in sys.modules]\n"
        "print(json.dumps({'rc': rc, 'heavy': heavy}), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=catalog_env, timeout=60
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report == {"rc": 0, "heavy": []}


@pytest.mark.parametrize("remote", [False, True])
def test_select_bad_input_fails_loudly(
    remote: bool, server: str, catalog_env: dict[str, str]
) -> None:
    """Bad stdin exits non-zero with a one-line message on stderr and nothing on stdout."""
    args = ["select", "--url", server] if remote else ["select"]
    for stdin, expected in (
        ("", "expected one JSON object on stdin"),
        ("{nope", "stdin is not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"query": {"K": 1}, "candidates": []}), "query.Text"),
    ):
        done = run(args, catalog_env, stdin=stdin)
        assert done.returncode != 0
        assert done.stdout == ""
        assert expected in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("remote", [False, True])
def test_select_stdin_not_utf_8_is_bad_input(
    remote: bool, server: str, catalog_env: dict[str, str]
) -> None:
    """Bytes that are not UTF-8 on stdin exit 2 with one line, whatever the locale's error
    handler (strict, or C.UTF-8's surrogateescape), and nothing on stdout."""
    args = ["select", "--url", server] if remote else ["select"]
    stdin = b'{"query": {"Text": "send \xff email", "K": 1}, "candidates": [{"ID": "a\xfe"}]}'
    for handler in ("strict", "surrogateescape"):
        done = subprocess.run(
            [*EXE, *args], input=stdin, capture_output=True, timeout=120,
            env={**catalog_env, "PYTHONIOENCODING": f"utf-8:{handler}"},
        )  # fmt: skip
        assert done.returncode == 2, (handler, done.stderr)
        assert done.stdout == b""
        assert b"stdin is not UTF-8" in done.stderr and b"Traceback" not in done.stderr


def test_select_thin_client_trusts_only_a_selection(catalog_env: dict[str, str]) -> None:
    """A 200 that is not a selection (a proxy's page, another service on the port) exits 1
    with nothing on stdout: the runtime falls back instead of reading it as an answer."""
    bodies = [b"not json", b'{"selected": "send_email"}', b"[]", b'{"other": 1}']

    class Stray(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = bodies.pop(0)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    stray = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stray)
    threading.Thread(target=stray.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{stray.server_address[1]}"
        while bodies:
            done = run(["select", "--url", url], catalog_env, stdin=json.dumps(SELECT))
            assert (done.returncode, done.stdout) == (1, ""), done.stderr
            assert "answered no selection" in done.stderr
    finally:
        stray.shutdown()
        stray.server_close()


def test_select_keeps_dense_vectors_between_spawns(env: dict[str, str], tmp_path: Path) -> None:
    """A second `select` spawn reads the query's and candidates' MiniLM vectors from the data
    folder's cache; a changed description or vectors stored under another embedder id miss.
    The first spawn that loads the model keeps its optimised graph there for the next."""
    data = tmp_path / "data"
    env = {**env, "TOOLSELECT_EMBEDDER": "hybrid", "TOOLSELECT_DATA_DIR": str(data)}
    path = data / "vectors.db"

    first = run(["select"], env, stdin=json.dumps(SELECT))
    assert first.returncode == 0, first.stderr
    assert VectorCache(path).count(MODEL_ID) == 4  # the query and three candidates
    assert [p.name.startswith(f"{MODEL_ID}-ort") for p in (data / "models").iterdir()] == [True]

    second = run(["select"], env, stdin=json.dumps(SELECT))
    assert second.stdout == first.stdout
    assert VectorCache(path).count(MODEL_ID) == 4

    # Served from the file: give get_weather the query's own dense vector and it wins.
    weather = candidates_to_tools(SELECT["candidates"])[1]
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "UPDATE vectors SET vector = (SELECT vector FROM vectors WHERE digest = ?) "
            "WHERE digest = ?",
            (text_digest(SELECT["query"]["Text"]), text_digest(tool_text(weather))),
        )
    poisoned = run(["select"], env, stdin=json.dumps(SELECT))
    assert json.loads(poisoned.stdout)["selected"][0] == "get_weather"

    changed = json.loads(json.dumps(SELECT))
    changed["candidates"][2]["Description"] = "Send a fax to a phone number"
    assert run(["select"], env, stdin=json.dumps(changed)).returncode == 0
    assert VectorCache(path).count(MODEL_ID) == 5

    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE vectors SET embedder = 'minilm-older-export'")
    third = run(["select"], env, stdin=json.dumps(SELECT))
    assert third.stdout == first.stdout
    assert VectorCache(path).count(MODEL_ID) == 4
    assert VectorCache(path).count("minilm-older-export") == 5


def test_select_unreachable_server_fails(catalog_env: dict[str, str]) -> None:
    """A thin client whose server is down exits 1 naming the URL."""
    url = f"http://127.0.0.1:{free_port()}"
    done = run(["select", "--url", url], catalog_env, stdin=json.dumps(SELECT))
    assert done.returncode == 1
    assert url in done.stderr and done.stdout == ""


def test_rank_json(catalog_env: dict[str, str]) -> None:
    """`toolselect rank --json` prints results, margin and embedder."""
    done = run(["rank", "weather in Turin tomorrow", "-k", "2", "--json"], catalog_env)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["results"][0]["tool"] == "get_weather"
    assert len(body["results"]) == 2 and body["embedder"] == "hashing-v1"


def test_tools_list_and_observe(catalog_env: dict[str, str]) -> None:
    """`tools list` shows the packs; `observe` reports the learner's decision for the turn."""
    listed = run(["tools", "list", "--pack", "assistant"], catalog_env)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "get_weather", "send_email", "web_search",
    ]  # fmt: skip
    done = run(["observe", "send an email message to Marco", "shell_exec", "--turn-id", "t1"],
               catalog_env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    decision = json.loads(done.stdout)
    assert decision["turn_id"] == "t1" and decision["flag_reason"] == "fallback"
    assert (decision["tier"], decision["label"], decision["result"]) == (
        "ranker", "send_email", "labeled",
    )  # fmt: skip


def test_tools_import_reports_progress(env: dict[str, str], tmp_path: Path) -> None:
    """`tools import --progress` reports every embedded batch and the one write on stderr
    (stdout keeps only the counts); without the flag and off a terminal it stays quiet."""
    tools = [{"name": f"lookup_{i}", "description": f"Look up record {i}."} for i in range(150)]
    path = tmp_path / "large.json"
    path.write_text(json.dumps({"tools": tools}))
    done = run(["tools", "import", str(path), "--progress"], env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"upserted": 150, "unchanged": 0}
    progress = [line for line in done.stderr.splitlines() if not line.startswith("{")]
    assert progress == [
        "embedded 64/150 tools",
        "embedded 128/150 tools",
        "embedded 150/150 tools",
        "writing 150 tools in one transaction",
    ]
    quiet = run(["tools", "import", str(path)], env)
    assert quiet.returncode == 0, quiet.stderr
    assert json.loads(quiet.stdout) == {"upserted": 0, "unchanged": 150}
    assert [line for line in quiet.stderr.splitlines() if not line.startswith("{")] == []


def test_unreachable_neo4j_is_one_clear_line(env: dict[str, str]) -> None:
    """A store that cannot be reached: one line naming the URI and the cause, exit non-zero."""
    uri = f"bolt://127.0.0.1:{free_port()}"
    bad = {**env, "TOOLSELECT_STORE": "neo4j", "NEO4J_URI": uri}
    done = run(["rank", "anything"], bad)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert uri in lines[0] and "Traceback" not in done.stderr


def test_bad_setting_is_one_clear_line(env: dict[str, str]) -> None:
    """A malformed setting names the variable and the rule, exit 2."""
    done = run(["rank", "anything"], {**env, "TOOLSELECT_MAX_K": "zero"})
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "toolselect rank: TOOLSELECT_MAX_K: expected a whole number, got 'zero'"
    )


def _deep_catalog(depth: int) -> str:
    schema = '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)
    return '{"tools": [{"name": "deep", "inputSchema": ' + schema + "}]}"


def test_bad_input_is_one_line_and_nothing_kept(
    catalog_env: dict[str, str], tmp_path: Path
) -> None:
    """Each command refuses what the API refuses, with one line, exit 2 and no traceback; a
    refused turn or import leaves the store as it was."""
    (tmp_path / "nested.json").write_text(_deep_catalog(3000))
    (tmp_path / "schema.json").write_text(_deep_catalog(65))
    (tmp_path / "afile").write_text("")
    (tmp_path / "ok.json").write_text(json.dumps(CATALOG))
    # A lone UTF-16 surrogate is no text (each case once crashed with a traceback, and observe
    # answered queued for a turn no store could take).
    (tmp_path / "half.json").write_text('{"tools": [{"name": "a", "description": "\\udc80"}]}')
    half = '{"query": {"Text": "hi \\ud83d"}, "candidates": [{"ID": "a\\udc80", "Name": "a"}]}'
    cases = [
        (["select"], half, "lone UTF-16 surrogate"),
        (["tools", "import", str(tmp_path / "half.json")], "", "lone UTF-16 surrogate"),
        (["observe", "caf\udce9", "get_weather"], "", "request to be Unicode text"),
        (["observe", "r" * 8193, "get_weather"], "", "request of at most 8192 bytes"),
        (["observe", "weather", "g" * 257], "", "used_tool: String should have at most 256"),
        (["tools", "import", str(tmp_path / "nested.json")], "", "nested too deeply"),
        (["tools", "import", str(tmp_path / "schema.json")], "", "nested at most 64 deep"),
        (["tools", "import", str(tmp_path / "ok.json"), "--pack", "p" * 257], "",
         "pack name of at most 256"),
        (["serve", "--port", "99999"], "", "--port: expected a number in 0..65535"),
        (["select", "--url", "notaurl"], json.dumps(SELECT), "--url: expected http://HOST:PORT"),
        (["select", "--url", "localhost:8080"], json.dumps(SELECT),
         "--url: expected http://HOST:PORT"),
        (["select", "--url", "http://[::1"], json.dumps(SELECT), "--url: expected http://HOST"),
        (["select", "--url", "http://127.0.0.1:abc"], json.dumps(SELECT), "--url: expected"),
        (["select", "--url", "http://a b"], json.dumps(SELECT), "--url: expected http://HOST"),
        (["select"], json.dumps({**SELECT, "query": {**SELECT["query"], "PackID": " "}}),
         "expected a pack name that is not blank"),
        (["select", "--timeout", "-1", "--url", "http://x"], "{}", "seconds above 0"),
        (["select"], '{"query": {"Text": "x", "K": NaN}, "candidates": []}', "NaN is not"),
        (["analytics", "misroute_rate", "--plot", str(tmp_path / "afile" / "x.png")], "",
         "cannot write"),
    ]  # fmt: skip
    for args, stdin, expected in cases:
        done = run(args, catalog_env, stdin=stdin)
        assert done.returncode == 2, (args, done.stderr)
        assert expected in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    listed = run(["tools", "list"], catalog_env)
    assert "deep" not in listed.stdout
    with closing(sqlite3.connect(catalog_env["TOOLSELECT_STORE"].removeprefix("sqlite:"))) as db:
        assert db.execute("SELECT count(*) FROM turns").fetchone() == (0,)


def test_select_in_process_is_held_to_its_timeout_and_the_body_limit(env: dict[str, str]) -> None:
    """A store that accepts and never answers held an in-process selection for the driver's
    60 s, past the runtime's own 10 s, and `--timeout` was ignored without `--url`: now it
    bounds the whole selection (exit 1, one line). Stdin past the body limit `--url`'s server
    answers 413 to is exit 2 in-process too (it took 10.7 s and 1.9 GB for 11 MB)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        uri = f"bolt://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        hung = run(
            ["select", "--timeout", "1"],
            {**env, "TOOLSELECT_STORE": "neo4j", "NEO4J_URI": uri},
            stdin=json.dumps(SELECT),
        )
        took = time.monotonic() - started
    assert hung.returncode == 1, hung.stderr
    assert "no selection within --timeout 1 s" in hung.stderr and "Traceback" not in hung.stderr
    assert took < 20  # the timeout, with the interpreter's start and exit
    big = {**SELECT, "candidates": SELECT["candidates"] * 20}
    over = run(["select"], {**env, "TOOLSELECT_MAX_BODY_BYTES": "2048"}, stdin=json.dumps(big))
    assert over.returncode == 2, over.stderr
    assert "expected stdin of at most 2048 bytes" in over.stderr
    fits = run(["select"], {**env, "TOOLSELECT_MAX_BODY_BYTES": "2048"}, stdin=json.dumps(SELECT))
    assert fits.returncode == 0, fits.stderr


def test_serve_on_a_taken_port_is_one_line(env: dict[str, str]) -> None:
    """A port another process holds: one line naming the address, exit 2."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run(["serve", "--port", str(port)], {**env, "TOOLSELECT_EMBEDDER": "hashing"})
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_refuses_public_bind_without_keys(env: dict[str, str]) -> None:
    """Binding beyond loopback without API keys is refused unless --insecure is given."""
    done = run(["serve", "--host", "0.0.0.0", "--port", str(free_port())], env)
    assert done.returncode == 2
    assert "TOOLSELECT_API_KEYS" in done.stderr


def test_analytics_cli_formats(catalog_env: dict[str, str], tmp_path: Path) -> None:
    """`toolselect analytics` prints a table, CSV or JSON, and draws a PNG with --plot."""
    observed = run(["observe", "send an email message to Marco", "shell_exec"], catalog_env)
    assert observed.returncode == 0, observed.stderr
    table = run(["analytics", "misroute_rate"], catalog_env)
    assert table.returncode == 0, table.stderr
    assert "shell_exec" in table.stdout and "used_tool" in table.stdout
    csv_out = run(["analytics", "misroute_rate", "--format", "csv"], catalog_env)
    assert csv_out.stdout.splitlines()[0] == "used_tool,turns,flagged,rate,top_reason"
    as_json = run(["analytics", "cold_tools", "--format", "json"], catalog_env)
    assert json.loads(as_json.stdout)["columns"] == ["tool"]
    png = tmp_path / "drift.png"
    plotted = run(["analytics", "drift", "--plot", str(png)], catalog_env)
    assert plotted.returncode == 0, plotted.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = run(["analytics", "drift", "--since", "yesterday"], catalog_env)
    assert bad.returncode == 2 and "since" in bad.stderr


def test_analytics_cli_prints_the_learning_fit(catalog_env: dict[str, str]) -> None:
    """`toolselect analytics learning` fits the stored labels and prints the fit as JSON."""
    fit = run(["analytics", "learning", "--format", "json"], catalog_env)
    assert fit.returncode == 0, fit.stderr
    payload = json.loads(fit.stdout)
    assert payload["fold"]["source"] in ("prior", "validated")
    assert payload["free_tier"]["target_precision"] == 0.95
    assert payload["teacher"]["depth"] == DEFAULT_TEACHER_DEPTH


def test_analytics_format_choices_are_the_renderers() -> None:
    """`analytics --format` lists its choices by hand (to keep the render module out of every
    command's start); they must be exactly the formats the renderer knows."""
    import argparse

    from toolselect.analytics.render import FORMATS
    from toolselect.cmd.main import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    analytics = commands.choices["analytics"]
    choices = next(a.choices for a in analytics._actions if a.dest == "format")
    assert tuple(choices or ()) == FORMATS
