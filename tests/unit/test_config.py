"""Settings: environment and TOML parsing, validation messages, and derived choices."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolselect.config import (
    FIELDS,
    Settings,
    ignored_variables,
    load_settings,
    settings_table,
)
from toolselect.errors import ConfigError
from toolselect.settings_fields import Field


def test_defaults_without_environment(tmp_path: Path) -> None:
    """No variables: the embedded store under XDG_DATA_HOME, the hybrid embedder, limits of API.md."""
    s = load_settings({"XDG_DATA_HOME": str(tmp_path)}, toml_path=None)
    assert s.store_kind == "sqlite"
    assert s.sqlite_path == tmp_path / "toolselect" / "toolselect.db"
    assert (s.embedder, s.max_k, s.max_body_bytes, s.max_query_bytes) == (
        "hybrid", 100, 1 << 20, 8 << 10,
    )  # fmt: skip
    assert (s.embedder_kind, s.embed_threads) == ("hybrid", 1)
    assert load_settings({"TOOLSELECT_EMBEDDER": "auto"}).embedder_kind == "hybrid"
    hashing = load_settings({"TOOLSELECT_EMBEDDER": "hashing"})
    assert (hashing.embedder_kind, hashing.centroid_description_weight) == ("hashing", 8.0)
    hybrid = load_settings({"TOOLSELECT_EMBEDDER": "hybrid"})
    assert hybrid.centroid_description_weight == 16.0
    pinned = load_settings({"TOOLSELECT_EMBEDDER": "hybrid", "TOOLSELECT_DESCRIPTION_WEIGHT": "2"})
    assert pinned.centroid_description_weight == 2.0
    assert s.teacher_kind == "none"


def test_neo4j_uri_selects_neo4j() -> None:
    """Unset TOOLSELECT_STORE means Neo4j when NEO4J_URI is set."""
    s = load_settings({"NEO4J_URI": "bolt://db:7687"})
    assert s.store_kind == "neo4j" and s.neo4j_uri == "bolt://db:7687"
    forced = load_settings({"NEO4J_URI": "bolt://db:7687", "TOOLSELECT_STORE": "sqlite:/x.db"})
    assert forced.store_kind == "sqlite" and forced.sqlite_path == Path("/x.db")


def test_anthropic_key_selects_the_anthropic_teacher() -> None:
    """ANTHROPIC_API_KEY alone makes Anthropic the teacher; TOOLSELECT_TEACHER overrides it."""
    assert load_settings({"ANTHROPIC_API_KEY": "k"}).teacher_kind == "anthropic"
    off = load_settings({"ANTHROPIC_API_KEY": "k", "TOOLSELECT_TEACHER": "none"})
    assert off.teacher_kind == "none"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TOOLSELECT_MAX_K": "zero"}, "TOOLSELECT_MAX_K: expected a whole number, got 'zero'"),
        ({"TOOLSELECT_PORT": "70000"}, "TOOLSELECT_PORT: expected a number in 0..65535, got 70000"),
        ({"TOOLSELECT_EMBEDDER": "bert"}, "TOOLSELECT_EMBEDDER: expected one of auto, hashing, minilm, http, hybrid, got 'bert'"),
        ({"TOOLSELECT_ORACLE": "maybe"}, "TOOLSELECT_ORACLE: expected one of on, off, got 'maybe'"),
        ({"TOOLSELECT_STORE": "postgres"}, "TOOLSELECT_STORE: expected 'neo4j' or 'sqlite:PATH', got 'postgres'"),
        ({"TOOLSELECT_STORE": "neo4j"}, "TOOLSELECT_STORE=neo4j needs NEO4J_URI (e.g. bolt://host:7687)"),
        ({"TOOLSELECT_ORACLE_TIERS": "ratchet,oracle"}, "TOOLSELECT_ORACLE_TIERS: expected a comma list of ratchet, ranker, teacher, got 'ratchet,oracle'"),
        ({"TOOLSELECT_HYBRID_WEIGHT": "1.5"}, "TOOLSELECT_HYBRID_WEIGHT: expected a number in 0.0..1.0, got 1.5"),
        ({"TOOLSELECT_LOAD_DEMO": "perhaps"}, "TOOLSELECT_LOAD_DEMO: expected true/false, got 'perhaps'"),
    ],
)  # fmt: skip
def test_bad_values_name_the_variable_and_rule(env: dict[str, str], message: str) -> None:
    """Each malformed value raises ConfigError with the variable, the rule and the value."""
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    assert str(info.value) == message


def test_toml_file_and_environment_precedence(tmp_path: Path) -> None:
    """toolselect.toml sets values; the environment wins over it; unknown keys are refused."""
    path = tmp_path / "toolselect.toml"
    path.write_text('[toolselect]\nembedder = "hybrid"\nmax_k = 50\nfallback_tools = ["a", "b"]\n')
    s = load_settings({"TOOLSELECT_MAX_K": "20"}, toml_path=path)
    assert (s.embedder, s.max_k, s.fallback_tools) == ("hybrid", 20, ("a", "b"))
    path.write_text("emedder = 'x'\n")
    with pytest.raises(ConfigError, match="unknown setting 'emedder'"):
        load_settings({}, toml_path=path)
    with pytest.raises(ConfigError, match="settings file not found"):
        load_settings({"TOOLSELECT_CONFIG": str(tmp_path / "missing.toml")})


def test_api_keys_from_a_file(tmp_path: Path) -> None:
    """TOOLSELECT_API_KEYS=@FILE reads one key a line, skipping blanks and comments."""
    keys = tmp_path / "keys"
    keys.write_text("# ops\nalpha\n\n beta \n")
    assert load_settings({"TOOLSELECT_API_KEYS": f"@{keys}"}).api_keys == ("alpha", "beta")
    assert load_settings({"TOOLSELECT_API_KEYS": "a, b"}).api_keys == ("a", "b")


def test_api_keys_mix_literal_keys_and_files(tmp_path: Path) -> None:
    """Each `@FILE` piece of a comma list is read as a file, so a rotation can list an old key
    with a file, or two files; no piece starting with `@` is ever a key itself."""
    new, other = tmp_path / "new", tmp_path / "other"
    new.write_text("tsk_new\n  # the next one\n")
    other.write_text("tsk_other\n")
    mixed = load_settings({"TOOLSELECT_API_KEYS": f"tsk_old, @{new}"}).api_keys
    assert mixed == ("tsk_old", "tsk_new")
    both = load_settings({"TOOLSELECT_API_KEYS": f"@{new},@{other}"}).api_keys
    assert both == ("tsk_new", "tsk_other")
    missing = tmp_path / "missing"
    with pytest.raises(ConfigError, match=re.escape(f"TOOLSELECT_API_KEYS: cannot read {missing}")):
        load_settings({"TOOLSELECT_API_KEYS": f"tsk_old,@{missing}"})
    with pytest.raises(ConfigError, match="TOOLSELECT_API_KEYS: expected a file name after '@'"):
        load_settings({"TOOLSELECT_API_KEYS": "tsk_old,@"})
    other.write_text(f"@{new}\n")
    nested = re.escape(f"TOOLSELECT_API_KEYS: {other} line 1: expected a key")
    with pytest.raises(ConfigError, match=nested):
        load_settings({"TOOLSELECT_API_KEYS": f"@{other}"})


@pytest.mark.parametrize("value", [" , ", ",", "@{empty}", "@{comments}", "@{empty}, @{comments}"])
def test_api_keys_set_but_naming_no_key_are_refused(value: str, tmp_path: Path) -> None:
    """A set TOOLSELECT_API_KEYS that yields no key stops the start: read as none, it would
    leave the API open where the operator meant it never to be; unset is still no key."""
    (tmp_path / "empty").write_text("")
    (tmp_path / "comments").write_text("# rotated out\n\n")
    spec = value.format(empty=tmp_path / "empty", comments=tmp_path / "comments")
    with pytest.raises(ConfigError, match=r"^TOOLSELECT_API_KEYS names no key"):
        load_settings({"TOOLSELECT_API_KEYS": spec})
    assert load_settings({}).api_keys == ()


def test_override_ignores_none_and_validates() -> None:
    """CLI overrides replace only given values and are validated like the environment."""
    s = Settings().override(port=None, embedder="minilm")
    assert (s.port, s.embedder) == (8080, "minilm")
    with pytest.raises(ConfigError):
        Settings().override(store="neo4j")


def test_settings_table_lists_every_variable() -> None:
    """The README table names every variable with its default."""
    table = settings_table()
    assert "| `TOOLSELECT_MAX_K` | `100` |" in table
    assert "| `TOOLSELECT_LOAD_DEMO` | `false` |" in table


def test_each_default_reads_back_as_itself() -> None:
    """A setting's parser and default agree: its default, spelt as the table shows it and set in
    its variable, is read as the default (so no default lies outside its own rule)."""
    defaults = Settings()
    for f in FIELDS:
        text = f.default_text()
        if text:  # an empty text is an unset variable: nothing to read back
            assert getattr(load_settings({f.env: text}), f.name) == getattr(defaults, f.name), f.env


SECRETS = [f for f in FIELDS if f.secret]


def test_the_secrets_are_the_passwords_and_keys() -> None:
    assert {f.env for f in SECRETS} == {
        "NEO4J_PASSWORD", "ANTHROPIC_API_KEY", "TOOLSELECT_OPENAI_API_KEY", "TOOLSELECT_EMBED_API_KEY"
    }  # fmt: skip


@pytest.mark.parametrize("secret", SECRETS, ids=lambda f: f.env)
def test_a_secret_is_read_from_the_file_its_FILE_variable_names(
    secret: Field, tmp_path: Path
) -> None:
    path = tmp_path / "secret"
    path.write_text("s3cret value\n")  # as `echo` or an editor leaves it
    settings = load_settings({f"{secret.env}_FILE": str(path)})
    assert getattr(settings, secret.name) == "s3cret value"
    assert "s3cret" not in repr(settings)  # a logged Settings does not show it


def test_configured_api_keys_are_left_out_of_the_repr(tmp_path: Path) -> None:
    """The keys of `TOOLSELECT_API_KEYS` are admin credentials: a logged or printed Settings
    does not show them, given inline or in a file."""
    path = tmp_path / "keys"
    path.write_text("tsk_fromfile_0123456789abcdef\n")
    settings = load_settings({"TOOLSELECT_API_KEYS": f"tsk_inline_0123456789abcdef,@{path}"})
    assert len(settings.api_keys) == 2
    assert "tsk_" not in repr(settings)


def test_a_secret_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text("from-file")
    env = {"NEO4J_PASSWORD": "from-env", "NEO4J_PASSWORD_FILE": str(path)}
    with pytest.raises(ConfigError, match="NEO4J_PASSWORD_FILE: expected NEO4J_PASSWORD or"):
        load_settings(env)


def test_an_unreadable_secret_file_names_its_variable(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match=f"ANTHROPIC_API_KEY_FILE: cannot read {missing}"):
        load_settings({"ANTHROPIC_API_KEY_FILE": str(missing)})


def test_only_secrets_have_a_FILE_form(tmp_path: Path) -> None:
    path = tmp_path / "port"
    path.write_text("9999")
    assert load_settings({"TOOLSELECT_PORT_FILE": str(path)}).port == Settings().port


def test_readme_table_is_the_generated_one() -> None:
    """README's "Configuration" table is `toolselect config`'s output as printed, row for row."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert settings_table() in readme


def test_a_variable_that_names_no_setting_is_reported_with_the_nearest_one() -> None:
    """A misspelt `TOOLSELECT_*` variable was ignored in silence (the settings file refuses an
    unknown key): it is named, with the setting it is closest to; settings, their `_FILE`
    forms, other programs' variables and the variables toolselect reads that are no setting
    are not."""
    env = {
        "TOOLSELECT_POLL_INTERVAL_S": "1",
        "TOOLSELECT_ZZZ": "1",
        "TOOLSELECT_PORT": "9000",
        "TOOLSELECT_OPENAI_API_KEY_FILE": "/run/secrets/key",
        "TOOLSELECT_CONFIG": "toolselect.toml",
        "TOOLSELECT_SELECT_API_KEY": "tsk_x",
        "NEO4J_URI": "bolt://db:7687",
        "PATH": "/usr/bin",
    }
    assert ignored_variables(env) == [
        "TOOLSELECT_POLL_INTERVAL_S: no such setting, ignored "
        "(did you mean TOOLSELECT_POLL_INTERVAL?)",
        "TOOLSELECT_ZZZ: no such setting, ignored",
    ]
    assert ignored_variables({}) == []
