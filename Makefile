# Two commands: `make run` serves the demo catalog on 127.0.0.1:8080, `make test` is what CI runs.
# Both create .venv when missing and (re)install only when pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The agent-framework extras (LangChain, LlamaIndex, LiteLLM, ...): only what tests and checks
# need, so `make run` stays on the lighter `.[dev]` install.
FULL := $(VENV)/.installed-integrations

.PHONY: run test test-fast lint typecheck pytest browser bench neo4j-start neo4j-stop clean

# -qq for the project: setuptools prints an information notice for every editable install of a
# package mapped from outside its folder (cypher/ -> toolselect.cypher); errors still show.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -qq -e '.[dev]'
	touch $(STAMP)

$(FULL): $(STAMP)
	$(BIN)/python -m pip install -qq -e '.[dev,integrations]'
	touch $(FULL)

run: $(STAMP)
	TOOLSELECT_LOAD_DEMO=$${TOOLSELECT_LOAD_DEMO:-true} $(BIN)/toolselect serve --host 127.0.0.1 --port 8080

lint: $(FULL)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(FULL)
	$(BIN)/mypy --strict toolselect tests bench

# tests/ui drive Debian's Chromium through its chromedriver: installed here when missing and
# apt-get can (root), so a fresh CI machine runs them; otherwise they skip, saying why.
# Only `make test` needs it, so `make run` never installs a browser.
browser:
	@if ! { test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; } \
	    && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing chromium and chromium-driver for tests/ui"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      chromium chromium-driver >/dev/null; } \
	    || echo "warning: could not install chromium; tests/ui will skip"; \
	fi

pytest: $(FULL) browser
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

# The pure and SQLite tiers while you work (CONTRIBUTING.md): no Neo4j (`neo4j` marker), no
# Chromium (tests/ui), no spawned processes (`slow` marker; tests/cli, tests/mcp and the
# framework adapters in tests/integrations). Not a substitute for `make test` before a push.
# The schemathesis module is all `slow`, and importing it (and LangSmith's pytest plugin, which
# the framework extras install) would cost ~5 s of a run that only deselects it.
FAST_TIERS := tests/unit tests/store tests/learn tests/oracle tests/api tests/client tests/e2e \
	tests/faults tests/fuzz
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --maxprocesses=4 -m "not neo4j and not slow" \
	    -p no:langsmith_plugin --ignore=tests/fuzz/test_schemathesis.py $(FAST_TIERS)

# Regenerates BENCHMARKS.md from scratch (about 40 minutes on 2 cores; not part of `make test`).
# bfcl-eval is read for its data only, so it is installed without its pinned dependencies.
# The HTTP and load sections build their load generator, vegeta, into .venv/bin with Go the
# first time (bench/vegeta.py); the throughput benches need Debian's wrk.
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python -m pip install -q --no-deps bfcl-eval
	$(BIN)/python -m bench all

neo4j-start:
	scripts/neo4j-local start

neo4j-stop:
	scripts/neo4j-local stop

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
