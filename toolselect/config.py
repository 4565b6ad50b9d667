"""Settings: one typed object read once at start-up (environment, then an optional TOML file).

Every setting is declared once, in `Settings`, with its type, default, environment name, parser
and meaning; the README's configuration table is generated from them (`toolselect config`).
Precedence: explicit overrides (CLI flags) > `TOOLSELECT_*` environment > `toolselect.toml` > default.
Nothing else in toolselect reads `os.environ`.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, cast

from toolselect.errors import ConfigError
from toolselect.names import DEFAULT_FALLBACK_TOOLS
from toolselect.settings_fields import (
    Field,
    auto_or,
    boolean,
    comma_list,
    float_in,
    int_in,
    one_of,
    parse_workers,
    setting,
    stripped,
)

# The k of a search that names none (`/v1/rank`, MCP `search_tools`), or `max_k` when lower.
DEFAULT_K = 5
# The conversation a search may carry (`/v1/rank`, `/v1/select`, MCP `search_tools`).
MAX_PREVIOUS_TOOLS = 64
MAX_CONTEXT_MESSAGES = 50
MAX_COMPANIONS = 10
# The largest request body by default (`max_body_bytes`): what a client splits its uploads by.
DEFAULT_MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True)
class Settings:
    """Everything configurable, each setting declared once with `setting`."""

    # fmt: off
    store: str = setting("", "TOOLSELECT_STORE", stripped, "`neo4j` or `sqlite:PATH`; unset: Neo4j when `NEO4J_URI` is set, else the embedded store")
    data_dir: str = setting("", "TOOLSELECT_DATA_DIR", stripped, "folder of the embedded store and of `vectors.db`, where `toolselect select` keeps the dense vectors of the texts it embedded (by embedder id and SHA-256 of the text) between spawns and a service those of its tools and labels (`TOOLSELECT_VECTOR_CACHE`), of `models/`, where it keeps MiniLM's optimised graph, and of `fold.json`, the fold weights a service's tuner fitted, which `toolselect select` folds labels with (default `$XDG_DATA_HOME/toolselect`)")
    neo4j_uri: str = setting("", "NEO4J_URI", stripped, "Bolt or Neo4j URI of the production store")
    neo4j_username: str = setting("neo4j", "NEO4J_USERNAME", stripped, "Neo4j user")
    neo4j_password: str = setting("", "NEO4J_PASSWORD", stripped, "Neo4j password (empty: no authentication)", secret=True)
    neo4j_database: str = setting("neo4j", "NEO4J_DATABASE", stripped, "Neo4j database name")
    host: str = setting("127.0.0.1", "TOOLSELECT_HOST", stripped, "address `serve` binds")
    port: int = setting(8080, "TOOLSELECT_PORT", int_in(0, 65535), "port `serve` binds")
    workers: int = setting(1, "TOOLSELECT_WORKERS", parse_workers, "server processes `serve` runs on the one port (`SO_REUSEPORT`), each a full service over the same store; `auto` (or 0): one per core (README, Operations)")
    embedder: str = setting("hybrid", "TOOLSELECT_EMBEDDER", one_of("auto", "hashing", "minilm", "http", "hybrid"), "query and tool embedder: `hybrid` is MiniLM (ONNX, dense) fused with `hashing` (lexical), the most accurate measured (BENCHMARKS.md); `auto` is an alias of `hybrid`")
    embed_url: str = setting("", "TOOLSELECT_EMBED_URL", stripped, "base URL of an OpenAI-compatible `/v1/embeddings` endpoint (`http` embedder)")
    embed_model: str = setting("", "TOOLSELECT_EMBED_MODEL", stripped, "model name sent to the `http` embedder")
    embed_api_key: str = setting("", "TOOLSELECT_EMBED_API_KEY", stripped, "bearer key for the `http` embedder", secret=True)
    embed_threads: int = setting(1, "TOOLSELECT_EMBED_THREADS", int_in(1, 64), "onnxruntime intra-op threads of the MiniLM model (`minilm`, `hybrid`)")
    query_cache: int = setting(2048, "TOOLSELECT_QUERY_CACHE", int_in(0, 1_000_000), "query vectors a service keeps in memory, least recently used dropped first, so a turn reported after its `/v1/rank` (and a repeated query) is not embedded again; about 10 KB each with `hybrid`; 0 turns it off")
    vector_cache: int = setting(50_000, "TOOLSELECT_VECTOR_CACHE", int_in(0, 10_000_000), "tool and label vectors kept on disk (`vectors.db` in `TOOLSELECT_DATA_DIR`, oldest dropped first), so a start, a tenant's first request or a worker does not run the model again on a catalog it embedded before; about 10 KB each with `hybrid`; not used with `hashing`, which computes faster than it reads; 0 turns it off")
    hybrid_weight: float = setting(0.5, "TOOLSELECT_HYBRID_WEIGHT", float_in(0.0, 1.0), "weight of the dense scores in `hybrid` (lexical gets the rest)")
    description_weight: float | None = setting(None, "TOOLSELECT_DESCRIPTION_WEIGHT", auto_or(float_in(0.0, 1000.0)), "weight of a tool's description vector in its centroid, against 1 per exemplar; `auto`: chosen with the exemplar shrink by leave-one-out on the teacher's and humans' labels, starting from 16 for `hybrid`/`minilm` and 8 for `hashing` (BENCHMARKS.md); a number pins it")
    self_label_weight: float | None = setting(None, "TOOLSELECT_SELF_LABEL_WEIGHT", auto_or(float_in(0.0, 1.0)), "weight of the ranker's own (free-tier) labels in the centroids against 1 for a teacher's or human's; `auto`: 0 (kept for the ratchet, not folded) until leave-one-out on trusted labels shows 0.5 or 1 does better; a number pins the fold")
    usage_label_weight: float | None = setting(None, "TOOLSELECT_USAGE_LABEL_WEIGHT", auto_or(float_in(0.0, 1.0)), "weight of a usage label (a tool an agent used on a turn reported `ok`) in the centroids against 1 for a teacher's or human's; `auto`: 1 until leave-one-out on the labels (the teacher's and humans', else the usage labels themselves) shows 0.25 or 0.5 does better; a number pins the fold")
    usage_without_outcome: str = setting("shown", "TOOLSELECT_USAGE_WITHOUT_OUTCOME", one_of("shown", "never", "always"), "whether a turn reported without an outcome labels the tool it used (tier `usage`): `shown` only when its `search_id` shows the tool was among those ranked for it, `never`, or `always` (BENCHMARKS.md, agent simulation)")
    search_ttl_s: float = setting(3600.0, "TOOLSELECT_SEARCH_TTL", float_in(1.0, 7 * 86400.0), "seconds a `search_id` is remembered, so a turn reported with it is linked to what was shown")
    searches_kept: int = setting(100_000, "TOOLSELECT_SEARCHES_KEPT", int_in(0, 10_000_000), "search ids remembered at once (oldest forgotten first; about 360 bytes each with 5 tools shown, 540 with 20); 0 turns the linking off, in every process")
    tenant_searches_kept: int = setting(10_000, "TOOLSELECT_TENANT_SEARCHES_KEPT", int_in(0, 10_000_000), "search ids each tenant other than `default` remembers at once (its own log: `TOOLSELECT_SEARCHES_KEPT` is `default`'s), so a process's memory stays bounded with `TOOLSELECT_TENANTS_LIVE` tenants; 10,000 is an hour's worth at about 3 searches a second")
    tenants_live: int = setting(100, "TOOLSELECT_TENANTS_LIVE", int_in(1, 100_000), "tenants other than `default` served at once (each its own ranker, learner and store connection); the least recently used is closed beyond it and started again on its next request")
    tenant_idle_s: float = setting(900.0, "TOOLSELECT_TENANT_IDLE", float_in(1.0, 30 * 86400.0), "seconds a tenant other than `default` may go unused before it is closed (its data stays in the store; its next request starts it again)")
    sessions_kept: int = setting(10_000, "TOOLSELECT_SESSIONS_KEPT", int_in(0, 10_000_000), "sessions whose last turn's tools are remembered in memory, so a ranking given only its `session_id` gets the session prior (oldest forgotten first); 0 turns it off")
    session_fit_turns: int = setting(2_000, "TOOLSELECT_SESSION_FIT_TURNS", int_in(0, 1_000_000), "most recent session turns the conversation signals (session prior, context, companions) are fitted on (their request vectors are kept between fits: about 10 KB a turn with `hybrid`); 0: never fitted, every signal off unless pinned")
    session_refit_s: float = setting(300.0, "TOOLSELECT_SESSION_REFIT_INTERVAL", float_in(1.0, 86400.0), "seconds between refits of the conversation signals while new session turns arrive (this process's, or any replica's, seen through the store)")
    session_idle_s: float = setting(3600.0, "TOOLSELECT_SESSION_IDLE", float_in(0.0, 365 * 86400.0), "seconds a session may go without a turn before it expires: its next turn starts it afresh (no step from the turn before the gap is linked or counted) and a ranking gets no previous tools from it, in memory or from the store; an hour, as long as a `search_id` is remembered (`TOOLSELECT_SEARCH_TTL`): a conversation picked up later is most often a new task, and an id used again (a host numbering its conversations from 1 after each restart) would otherwise continue an old one; 0: never")
    session_prior_weight: float | None = setting(None, "TOOLSELECT_SESSION_PRIOR_WEIGHT", auto_or(float_in(0.0, 10.0)), "weight of the session prior (tools that followed the session's previous tools elsewhere) in a ranking's scores; `auto`: fitted on the store's sessions, 0 until it helps")
    context_weight: float | None = setting(None, "TOOLSELECT_CONTEXT_WEIGHT", auto_or(float_in(0.0, 10.0)), "weight of the previous message (a rank request's `context`) mixed into the query; `auto`: fitted on the store's sessions, 0 until it helps")
    exemplar_weight: float = setting(1.0, "TOOLSELECT_EXEMPLAR_WEIGHT", float_in(0.0, 1000.0), "weight of each learned exemplar vector in its tool's centroid")
    margin_floor: float | None = setting(None, "TOOLSELECT_MARGIN_FLOOR", auto_or(float_in(0.0, 2.0)), "top-1/top-2 margin at which the ranker's own label is trusted; `auto`: where the probability that the ranker's top-1 is right, calibrated on the teacher's and humans' labels, reaches `TOOLSELECT_FREE_TIER_PRECISION`")
    free_tier_precision: float = setting(0.95, "TOOLSELECT_FREE_TIER_PRECISION", float_in(0.5, 1.0), "calibrated probability of being right the free (ranker) tier needs before it labels a turn")
    fallback_tools: tuple[str, ...] = setting(DEFAULT_FALLBACK_TOOLS, "TOOLSELECT_FALLBACK_TOOLS", comma_list, "comma list of tools an agent improvises with when it missed the right one")
    load_demo: bool = setting(False, "TOOLSELECT_LOAD_DEMO", boolean, "load the shipped demo catalog when the store has no tools")
    queue_size: int = setting(1024, "TOOLSELECT_QUEUE_SIZE", int_in(1, 1_000_000), "bounded observe queue (drop on full)")
    oracle: str = setting("on", "TOOLSELECT_ORACLE", one_of("on", "off"), "kill switch: `off` means no paid call, ever")
    oracle_tiers: tuple[str, ...] = setting(("ratchet", "ranker", "teacher"), "TOOLSELECT_ORACLE_TIERS", comma_list, "oracle tiers in order")
    teacher: str = setting("", "TOOLSELECT_TEACHER", one_of("anthropic", "openai", "none"), "LLM teacher; unset: `anthropic` when `ANTHROPIC_API_KEY` is set, else `none`")
    teacher_model: str = setting("", "TOOLSELECT_TEACHER_MODEL", stripped, "teacher model (default `claude-haiku-4-5` for Anthropic)")
    teacher_candidates: int | None = setting(None, "TOOLSELECT_TEACHER_CANDIDATES", auto_or(int_in(2, 1000)), "ranked candidates shown to the teacher; `auto`: as many as `TOOLSELECT_TEACHER_MAX_INPUT_TOKENS` buy until its answers measure how many contain the true tool for `TOOLSELECT_TEACHER_RECALL` of the calls; a number pins it")
    teacher_recall: float = setting(0.95, "TOOLSELECT_TEACHER_RECALL", float_in(0.5, 1.0), "share of escalated turns whose true tool the teacher's candidates should contain (sizes the candidates from the labels)")
    teacher_share: float = setting(0.25, "TOOLSELECT_TEACHER_SHARE", float_in(0.0, 1.0), "share of flagged turns the teacher may be asked about: only the most uncertain (lowest calibrated probability) that share of recent flagged turns escalate, the rest are declined; 1: every turn the free tier cannot label")
    teacher_full_catalog: int = setting(50, "TOOLSELECT_TEACHER_FULL_CATALOG", int_in(0, 10_000), "show the teacher every tool when the catalog (or pack) has at most this many")
    teacher_max_input_tokens: int = setting(6000, "TOOLSELECT_TEACHER_MAX_INPUT_TOKENS", int_in(200, 200_000), "estimated input tokens a teacher call may spend on candidates")
    teacher_budget_per_hour: int = setting(60, "TOOLSELECT_TEACHER_BUDGET_PER_HOUR", int_in(0, 1_000_000), "paid teacher calls allowed per rolling hour, for each tenant, by every process on its store together (each counts the others' at its polls)")
    teacher_global_budget_per_hour: int | None = setting(None, "TOOLSELECT_TEACHER_GLOBAL_BUDGET_PER_HOUR", auto_or(int_in(0, 1_000_000), "off"), "paid teacher calls allowed per rolling hour to all tenants of one process together (a cap over `TOOLSELECT_TEACHER_BUDGET_PER_HOUR`); `off`: no cap", unset="off")
    teacher_retries: int = setting(2, "TOOLSELECT_TEACHER_RETRIES", int_in(0, 10), "retries on 429/5xx/overloaded")
    teacher_timeout_s: float = setting(20.0, "TOOLSELECT_TEACHER_TIMEOUT", float_in(0.1, 600.0), "seconds per teacher attempt")
    anthropic_api_key: str = setting("", "ANTHROPIC_API_KEY", stripped, "Anthropic key (as the SDK reads it)", secret=True)
    anthropic_base_url: str = setting("", "ANTHROPIC_BASE_URL", stripped, "Anthropic base URL (as the SDK reads it)")
    openai_base_url: str = setting("", "TOOLSELECT_OPENAI_BASE_URL", stripped, "OpenAI-compatible teacher base URL (e.g. `http://127.0.0.1:11434/v1`)")
    openai_api_key: str = setting("", "TOOLSELECT_OPENAI_API_KEY", stripped, "key for the OpenAI-compatible teacher", secret=True)
    exemplars_per_tool: int = setting(512, "TOOLSELECT_EXEMPLARS_PER_TOOL", int_in(1, 10_000_000), "labels kept per tool, newest first; a human's neither counted nor evicted")
    exemplars_total: int = setting(10_000, "TOOLSELECT_EXEMPLARS_TOTAL", int_in(1, 100_000_000), "labels kept in all, newest first; a human's neither counted nor evicted")
    exemplar_max_age_days: float = setting(90.0, "TOOLSELECT_EXEMPLAR_MAX_AGE_DAYS", float_in(0.001, 100_000.0), "days a label of the loop is kept (a human's: for ever); checked when a save writes a label, and by every service's upkeep every 10 minutes")
    turn_max_age_days: float | None = setting(cast("float | None", 90.0), "TOOLSELECT_TURN_MAX_AGE_DAYS", auto_or(float_in(0.001, 100_000.0), "off"), "days an observed turn is kept, with the teacher calls traced for it (by their own time): older ones are deleted by every service's upkeep every 10 minutes, a batch at a time, with the sessions whose last turn they were; labels made from a turn stay; the analyses see only what is kept; `off`: kept for ever", unset="off")
    poll_interval_s: float = setting(5.0, "TOOLSELECT_POLL_INTERVAL", float_in(0.05, 3600.0), "seconds between polls for other replicas' exemplars")
    store_write_timeout_s: float = setting(10.0, "TOOLSELECT_STORE_WRITE_TIMEOUT", float_in(0.1, 3600.0), "seconds the learner's writes (turns, labels, oracle calls) and the spool's replay wait for the store before it counts as down and they go to the spool: a store that hangs (a stopped server, a partition dropping packets) never answers with an error")
    spool_max_mb: float = setting(256.0, "TOOLSELECT_SPOOL_MAX_MB", float_in(0.001, 1_000_000.0), "megabytes of writes (turns, labels, oracle calls) the durable spool `spool.db` in the data folder keeps while the store is unreachable; past it turns are dropped first, labels last (counted in `toolselect_store_backlog_dropped_total`)")
    max_body_bytes: int = setting(DEFAULT_MAX_BODY_BYTES, "TOOLSELECT_MAX_BODY_BYTES", int_in(1024, 1 << 30), "largest request body")
    max_query_bytes: int = setting(8 << 10, "TOOLSELECT_MAX_QUERY_BYTES", int_in(16, 1 << 20), "longest query or request text (UTF-8 bytes)")
    max_k: int = setting(100, "TOOLSELECT_MAX_K", int_in(1, 10_000), "largest k (a search that names none gets 5, or this when lower); a `k` above it is `422` on `/v1/rank`, while PromptKit's `K` (`/v1/select`, `toolselect select`: at most K) is served as this many")
    max_batch: int = setting(1000, "TOOLSELECT_MAX_BATCH", int_in(1, 1_000_000), "most turns in one observe batch")
    max_concurrency: int = setting(256, "TOOLSELECT_MAX_CONCURRENCY", int_in(1, 100_000), "concurrent requests before `503 overloaded`")
    request_timeout_s: float = setting(10.0, "TOOLSELECT_REQUEST_TIMEOUT", float_in(0.01, 3600.0), "seconds a request may take (`PUT /v1/tools`: see the next)")
    import_timeout_per_tool_s: float = setting(0.1, "TOOLSELECT_IMPORT_TIMEOUT_PER_TOOL", float_in(0.0, 60.0), "seconds `PUT /v1/tools` may take per tool, on top of `TOOLSELECT_REQUEST_TIMEOUT`; the clock also restarts after every batch of tools embedded, so an import that keeps working is not cut off")
    shutdown_timeout_s: float = setting(10.0, "TOOLSELECT_SHUTDOWN_TIMEOUT", float_in(0.0, 3600.0), "seconds to drain on shutdown")
    api_keys: tuple[str, ...] = setting((), "TOOLSELECT_API_KEYS", comma_list, "comma list of API keys, where a piece `@FILE` stands for the keys of that file (one a line, `#` comments): `admin` keys of tenant `default`, never stored; set but naming no key stops the start; with these or any key made by `toolselect keys create`, `/v1/*` needs `Authorization: Bearer` (README, Operating for several teams)", hidden=True)
    metrics_auth: bool = setting(False, "TOOLSELECT_METRICS_AUTH", boolean, "require a key on `/metrics` too (when keys are on): an `editor` key reads its tenant's series, an `admin` key every tenant's")
    tenant_rps: float = setting(0.0, "TOOLSELECT_TENANT_RPS", float_in(0.0, 1_000_000.0), "`/v1/*` (and MCP over HTTP) requests per second each tenant may send to one process (a token bucket in its memory), beyond them `429 rate_limited` with `Retry-After`; 0: no limit")
    tenant_burst: int = setting(0, "TOOLSELECT_TENANT_BURST", int_in(0, 1_000_000), "requests a tenant may send at once before `TOOLSELECT_TENANT_RPS` paces it (the bucket's size); 0: one second's worth (at least 1)")
    global_rps: float = setting(0.0, "TOOLSELECT_GLOBAL_RPS", float_in(0.0, 1_000_000.0), "`/v1/*` (and MCP over HTTP) requests per second one process takes from all tenants together (one second's worth at once), beyond them `429 rate_limited`; 0: no limit")
    log_level: str = setting("info", "TOOLSELECT_LOG_LEVEL", one_of("debug", "info", "warning", "error"), "log level")
    log_format: str = setting("auto", "TOOLSELECT_LOG_FORMAT", one_of("auto", "json", "console"), "`auto`: JSON unless stdout is a terminal")
    # fmt: on

    @property
    def store_kind(self) -> str:
        """`neo4j` or `sqlite`: explicit `store`, else Neo4j when a URI is configured."""
        if self.store:
            return "neo4j" if self.store == "neo4j" else "sqlite"
        return "neo4j" if self.neo4j_uri else "sqlite"

    @property
    def sqlite_path(self) -> Path:
        if self.store.startswith("sqlite:") and self.store != "sqlite:":
            return Path(self.store.removeprefix("sqlite:")).expanduser()
        return Path(self.data_dir).expanduser() / "toolselect.db"

    @property
    def spool_path(self) -> Path:
        """The durable write spool, beside the embedded store's default place."""
        return Path(self.data_dir).expanduser() / "spool.db"

    @property
    def spool_max_bytes(self) -> int:
        return max(int(self.spool_max_mb * (1 << 20)), 1)

    @property
    def embedder_kind(self) -> str:
        """The embedder to build; `auto` is the old name of the default, `hybrid`.

        `hybrid` (MiniLM + hashing) beat `hashing` by 12 points of top-1 on public tool-retrieval
        data (BENCHMARKS.md); its MiniLM runs on onnxruntime, a base dependency.
        """
        return "hybrid" if self.embedder == "auto" else self.embedder

    @property
    def centroid_description_weight(self) -> float:
        """Explicit, else the best measured for the embedder: dense vectors drift further from
        a tool's description as exemplars pile up, so they need a heavier anchor."""
        if self.description_weight is not None:
            return self.description_weight
        return 8.0 if self.embedder_kind == "hashing" else 16.0

    @property
    def teacher_kind(self) -> str:
        """`anthropic`, `openai` or `none`: explicit, else Anthropic when its key is set."""
        if self.teacher:
            return self.teacher
        return "anthropic" if self.anthropic_api_key else "none"

    @property
    def worker_count(self) -> int:
        """Server processes `serve` runs: `workers`, or with 0 (`auto`) one per usable core."""
        if self.workers:
            return self.workers
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            return os.cpu_count() or 1

    def override(self, **changes: Any) -> Settings:
        """A copy with some values replaced (CLI flags); `None` values are ignored."""
        settings = replace(self, **{k: v for k, v in changes.items() if v is not None})
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.store not in ("", "neo4j") and not self.store.startswith("sqlite:"):
            raise ConfigError(
                f"TOOLSELECT_STORE: expected 'neo4j' or 'sqlite:PATH', got {self.store!r}"
            )
        if self.store_kind == "neo4j" and not self.neo4j_uri:
            raise ConfigError("TOOLSELECT_STORE=neo4j needs NEO4J_URI (e.g. bolt://host:7687)")
        if self.embedder in ("http",) and not self.embed_url:
            raise ConfigError("TOOLSELECT_EMBEDDER=http needs TOOLSELECT_EMBED_URL")
        unknown = [t for t in self.oracle_tiers if t not in ("ratchet", "ranker", "teacher")]
        if unknown or not self.oracle_tiers:
            raise ConfigError(
                "TOOLSELECT_ORACLE_TIERS: expected a comma list of ratchet, ranker, teacher, "
                f"got {','.join(self.oracle_tiers)!r}"
            )
        if self.teacher_kind == "openai" and not self.openai_base_url:
            raise ConfigError("TOOLSELECT_TEACHER=openai needs TOOLSELECT_OPENAI_BASE_URL")
        if self.workers != 1 and self.port == 0:
            raise ConfigError(
                "TOOLSELECT_WORKERS: several workers share one port, so expected a fixed "
                f"TOOLSELECT_PORT, got 0 (workers {self.workers or 'auto'})"
            )


def _default_data_dir(environ: Mapping[str, str]) -> str:
    return str(Path(environ.get("XDG_DATA_HOME") or Path.home() / ".local/share") / "toolselect")


# The declarations in `Settings`' order, which is the table's.
FIELDS: tuple[Field, ...] = tuple(
    Field(f.name, default=f.default, **f.metadata) for f in fields(Settings)
)


def _read_toml(path: Path) -> dict[str, str]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read settings: {exc}") from exc
    table = data.get("toolselect", data)
    known = {f.name for f in FIELDS}
    out: dict[str, str] = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{path}: unknown setting {key!r}")
        if isinstance(value, list):
            out[key] = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


def _read_secret(variable: str, path_text: str) -> str:
    """The text of the file `variable` names (its parser strips the line end, as a variable's)."""
    path = Path(path_text).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{variable}: cannot read {path}: {exc}") from exc


def _read_keys(spec: tuple[str, ...]) -> tuple[str, ...]:
    """The keys `TOOLSELECT_API_KEYS` names: each piece of its comma list is a key, or with `@`
    the keys of a file (one a line; blank lines and `#` comments skipped), so a rotation can
    list an old key beside a file, or two files. A value that names no key is refused: read as
    none, it would leave open the API the operator set it to close."""
    keys: list[str] = []
    files: list[str] = []
    for piece in spec:
        if piece.startswith("@"):
            files.append(piece[1:].strip())
            keys.extend(_keys_in_file(files[-1]))
        else:
            keys.append(piece)
    if not keys:
        held = f" ({', '.join(files)}: no key in {'it' if len(files) == 1 else 'them'})"
        raise ConfigError(
            f"TOOLSELECT_API_KEYS names no key{held if files else ''}: expected a comma list "
            "of keys or @FILE (one key a line); unset it to run without configured keys"
        )
    return tuple(keys)


def _keys_in_file(name: str) -> list[str]:
    if not name:
        raise ConfigError("TOOLSELECT_API_KEYS: expected a file name after '@'")
    path = Path(name).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"TOOLSELECT_API_KEYS: cannot read {path}: {exc}") from exc
    keys: list[str] = []
    for number, line in enumerate(lines, 1):
        key = line.strip()
        if key.startswith("@"):
            # Not read in turn, nor a key: a mistyped nesting must not make a file name an admin key
            raise ConfigError(
                f"TOOLSELECT_API_KEYS: {path} line {number}: expected a key, got a file name"
            )
        if key and not key.startswith("#"):
            keys.append(key)
    return keys


def load_settings(
    environ: Mapping[str, str] | None = None, toml_path: Path | None = None
) -> Settings:
    """Read settings once; raise `ConfigError` with the variable name and the rule it breaks."""
    env = dict(os.environ if environ is None else environ)
    raw: dict[str, str] = {}
    path = toml_path or Path(env.get("TOOLSELECT_CONFIG", "toolselect.toml"))
    if path.is_file():
        raw.update(_read_toml(path))
    elif toml_path is not None or "TOOLSELECT_CONFIG" in env:
        raise ConfigError(f"{path}: settings file not found")
    for f in FIELDS:
        if env.get(f.env):
            raw[f.name] = env[f.env]
        if f.secret and env.get(f"{f.env}_FILE"):
            if env.get(f.env):
                raise ConfigError(f"{f.env}_FILE: expected {f.env} or {f.env}_FILE, not both")
            raw[f.name] = _read_secret(f"{f.env}_FILE", env[f"{f.env}_FILE"])
    values: dict[str, Any] = {}
    for f in FIELDS:
        if f.name in raw:
            try:
                values[f.name] = f.parse(raw[f.name])
            except ValueError as exc:
                raise ConfigError(f"{f.env}: {exc}") from None
    if not values.get("data_dir"):
        values["data_dir"] = _default_data_dir(env)
    if "api_keys" in values:
        values["api_keys"] = _read_keys(values["api_keys"])
    settings = Settings(**values)
    settings.validate()
    return settings


# Read, but no setting: the settings file, the thin selector's key, the examples' URL, CI's switch.
_NOT_SETTINGS = {f"TOOLSELECT_{n}" for n in ("CONFIG", "SELECT_API_KEY", "URL", "REQUIRE_NEO4J")}


def ignored_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """A line for each `TOOLSELECT_*` variable naming no setting (a typo is otherwise silent)."""
    known = _NOT_SETTINGS | {f.env for f in FIELDS} | {f"{f.env}_FILE" for f in FIELDS if f.secret}
    bare = {name.removeprefix("TOOLSELECT_"): name for name in known}  # the prefix is no likeness
    env = os.environ if environ is None else environ
    return [f"{n}: no such setting, ignored" + "".join(f" (did you mean {bare[m]}?)" for m in
            difflib.get_close_matches(n.removeprefix("TOOLSELECT_"), bare, n=1))
            for n in sorted(env) if n.startswith("TOOLSELECT_") and n not in known]  # fmt: skip


def settings_table() -> str:
    """The README's configuration table, from the declarations above."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for f in FIELDS:
        text = f.default_text()
        doc = f"{f.doc}; or `{f.env}_FILE`: a file holding it" if f.secret else f.doc
        rows.append(f"| `{f.env}` | {f'`{text}`' if text else ''} | {doc} |")
    return "\n".join(rows)
