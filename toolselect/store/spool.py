"""A durable, append-only local spool for writes the store cannot take yet.

While the store is unreachable, `BufferedStore` appends turns, labels and oracle calls here and
answers its caller only once the append is on disk; when the store returns (or the process
starts again after a crash) the spool is replayed in append order and each record is removed
only after the store acknowledged it. The stores upsert turns and oracle calls by id and keep
one label per normalised query, so a turn, a teacher call or a label of a tier above usage
replayed twice (a crash or a write deadline between the store's ack and the removal) changes
nothing the second time; a usage sighting does, unless it is its label's last turn (the only
one the store recognises): such a replay counts a request's sightings again.

The spool is one SQLite file in WAL mode. Every method is synchronous and meant to run on one
dedicated thread (the caller's executor), which also keeps appends in the order they were
submitted. Several processes (`serve --workers`) may share the file: SQLite serialises their
writes, ids are never reused (AUTOINCREMENT), and one process replays it at a time
(`FileLock`): a usage label's sighting replayed twice would count twice.

Bounds: past `max_bytes` of records, the oldest records of the least valuable kind go first:
turns, then oracle calls, then labels by tier (ranker, usage, teacher, feedback). Each drop is
returned to the caller (`Dropped`), who counts and logs it, and lets the live ranker go of the
human labels among them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from toolselect.errors import SpoolError
from toolselect.file_lock import FileLock
from toolselect.records import Exemplar, OracleCall, Turn
from toolselect.sqlite_wal import use_wal
from toolselect.store.port import TIER_STRENGTH
from toolselect.store.rules import StoredLabel, check_tier, stored_label_of, supersedes

Kind = Literal["turn", "oracle_call", "exemplar"]
KINDS: tuple[Kind, ...] = ("turn", "oracle_call", "exemplar")
Record = Turn | Exemplar | OracleCall

# Lower goes first when the spool is full: a turn is evidence the learner can do without, a
# paid call's trace is bookkeeping, a label (above all a human one) is the thing to keep.
_PRIORITY = {"turn": 0, "oracle_call": 1, **{tier: 1 + s for tier, s in TIER_STRENGTH.items()}}
_TIMES = frozenset({"at", "created_at"})
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    priority INTEGER NOT NULL,
    query_norm TEXT,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS spool_query ON spool (query_norm) WHERE query_norm IS NOT NULL;
CREATE INDEX IF NOT EXISTS spool_drop ON spool (priority, id);
CREATE TABLE IF NOT EXISTS spool_counts (
    kind TEXT PRIMARY KEY,
    records INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS spool_counted AFTER INSERT ON spool BEGIN
    INSERT INTO spool_counts VALUES (NEW.kind, 1, length(NEW.body)) ON CONFLICT (kind)
    DO UPDATE SET records = records + 1, bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER IF NOT EXISTS spool_uncounted AFTER DELETE ON spool BEGIN
    UPDATE spool_counts SET records = records - 1, bytes = bytes - length(OLD.body)
    WHERE kind = OLD.kind;
END;
"""
# A file an earlier version wrote has records and no counts yet: counted once, at its open.
_SEED_COUNTS = (
    "INSERT INTO spool_counts SELECT kind, count(*), sum(length(body)) FROM spool"
    " WHERE NOT EXISTS (SELECT 1 FROM spool_counts) GROUP BY kind"
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One spooled record and its place in the replay order."""

    id: int
    kind: Kind
    record: Record
    size: int


@dataclass(frozen=True, slots=True)
class Dropped:
    """What the bound dropped in one append: records by kind, and the normalised queries of the
    human labels among them (the live ranker folded those when they were spooled)."""

    counts: dict[Kind, int] = field(default_factory=dict)
    human: frozenset[str] = frozenset()


def kind_of(record: Record) -> Kind:
    if isinstance(record, Turn):
        return "turn"
    if isinstance(record, Exemplar):
        return "exemplar"
    return "oracle_call"


def encode(record: Record) -> str:
    """A record as JSON text; ASCII-escaped, so even a lone surrogate survives the round trip."""
    values: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        values[f.name] = value.isoformat() if isinstance(value, datetime) else value
    return json.dumps(values, separators=(",", ":"))


def decode(kind: str, body: str) -> Record:
    values: dict[str, Any] = json.loads(body)
    for name in _TIMES & values.keys():
        values[name] = datetime.fromisoformat(values[name])
    if kind == "turn":
        values["used_tools"] = tuple(values.get("used_tools") or ())
        return Turn(**values)
    if kind == "exemplar":
        values["embedding"] = tuple(values["embedding"])
        return Exemplar(**values)
    if kind == "oracle_call":
        return OracleCall(**values)
    raise SpoolError(f"expected a spool record kind in {', '.join(KINDS)}, got {kind!r}")


class Spool:
    """The spool file; open it with `Spool.open`. Not thread-safe: use it from one thread."""

    def __init__(self, conn: sqlite3.Connection, path: str, max_bytes: int) -> None:
        self._conn = conn
        self.path = path
        self.max_bytes = max_bytes
        self.depth: dict[Kind, int] = dict.fromkeys(KINDS, 0)
        self._bytes = 0
        self.appended = 0  # records this process wrote (committed), what an outage spooled
        # Other processes of the data folder replay the file too: one replay at a time.
        self.replay_lock = FileLock(None if path == ":memory:" else f"{path}.replay-lock")

    @classmethod
    def open(cls, path: Path | str, *, max_bytes: int) -> Spool:
        """Open (or create) the spool; `SpoolError` names the file when it cannot be used.

        A file that is not a spool, is damaged or cannot be written stops the start rather than
        being ignored: ignoring it would silently lose the acknowledged writes it may hold.
        """
        if max_bytes < 1:
            raise SpoolError(f"expected a spool limit of at least 1 byte, got {max_bytes}")
        where = str(path)
        try:
            if where != ":memory:":
                Path(where).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(where, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise SpoolError(f"cannot open the write spool {where}: {exc}") from exc
        try:
            spool = cls(conn, where, max_bytes)
        except OSError as exc:  # the replay lock's file beside it
            conn.close()
            raise SpoolError(f"cannot use the write spool {where}: {exc}") from exc
        try:
            spool._prepare()
        except sqlite3.Error as exc:
            spool.close()
            raise SpoolError(f"cannot use the write spool {where}: {exc}") from exc
        return spool

    def _prepare(self) -> None:
        conn = self._conn
        conn.execute("PRAGMA busy_timeout = 10000")  # other workers may be appending
        mode = use_wal(conn)
        if mode != "wal" and self.path != ":memory:":
            raise sqlite3.OperationalError(f"expected journal mode wal, got {mode}")
        # In WAL mode, NORMAL syncs only at checkpoints, so the last commits can vanish with
        # the power; FULL syncs the WAL at every commit, so a commit that returned is on disk
        # and the caller may be told its write is kept.
        conn.execute("PRAGMA synchronous = FULL")
        conn.executescript(_SCHEMA)
        check = conn.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {check}")
        # A write now, so an unwritable file fails the start and not the first outage.
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_SEED_COUNTS)
        conn.execute("COMMIT")
        self.recount()

    def recount(self) -> int:
        """Read what the file holds (other processes of one data folder write it too: its
        triggers keep the counts of every writer's records); how many records there are.
        Every write counts again, so `depth` is the file's, not this process's share."""
        self.depth = dict.fromkeys(KINDS, 0)
        rows = self._conn.execute("SELECT kind, records, bytes FROM spool_counts").fetchall()
        total = 0
        for kind, count, size in rows:
            if kind in self.depth:
                self.depth[kind] = int(count)
            total += int(size)
        self._bytes = total
        return sum(self.depth.values())

    @property
    def size(self) -> int:
        """Bytes of spooled records (the quantity `max_bytes` bounds)."""
        return self._bytes

    def _run(self, what: str, work: Callable[[], T]) -> T:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                result = work()
                self.recount()
                self._conn.execute("COMMIT")
            except BaseException:
                # A full disk or an I/O error ends the transaction itself: a ROLLBACK then
                # raised "no transaction is active", hiding the cause and skipping the count
                # (the backlog gauge kept the records that never reached the file).
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                self.recount()
                raise
        except sqlite3.Error as exc:
            raise SpoolError(f"write spool {self.path}: cannot {what}: {exc}") from exc
        return result

    def append(self, records: Sequence[Record]) -> Dropped:
        """Append records in order, durably; returns what the bound dropped."""
        rows = [self._row(r) for r in records]
        dropped = self._run("append", lambda: self._append(rows))
        self.appended += len(rows)
        return dropped

    def append_labels(self, exemplars: Sequence[Exemplar]) -> tuple[list[Exemplar], Dropped]:
        """Append the labels that change what is pending under the store's rules (never a
        downgrade; the same tool and tier again is no change), checked and written in one
        transaction; returns (appended, what the bound dropped)."""
        for exemplar in exemplars:
            check_tier(exemplar)

        def work() -> tuple[list[Exemplar], Dropped]:
            labels: dict[str, StoredLabel] = {
                k: stored_label_of(e)
                for k, e in self._pending({e.query_norm for e in exemplars}).items()
            }
            changed: list[Exemplar] = []
            for exemplar in exemplars:
                if supersedes(exemplar, labels.get(exemplar.query_norm)):
                    labels[exemplar.query_norm] = stored_label_of(exemplar)
                    changed.append(exemplar)
            return changed, self._append([self._row(e) for e in changed])

        changed, dropped = self._run("append labels", work)
        self.appended += len(changed)
        return changed, dropped

    @staticmethod
    def _row(record: Record) -> tuple[Kind, int, str | None, str]:
        kind = kind_of(record)
        if isinstance(record, Exemplar):
            check_tier(record)
            return kind, _PRIORITY[record.tier], record.query_norm, encode(record)
        return kind, _PRIORITY[kind], None, encode(record)

    def _append(self, rows: list[tuple[Kind, int, str | None, str]]) -> Dropped:
        self._conn.executemany(
            "INSERT INTO spool (kind, priority, query_norm, body) VALUES (?, ?, ?, ?)", rows
        )
        self.recount()
        return self._trim() if self._bytes > self.max_bytes else Dropped()

    def _trim(self) -> Dropped:
        """Drop the least valuable, oldest records until the spool fits its bound."""
        excess = self._bytes - self.max_bytes  # counted in this transaction
        dropped: dict[Kind, int] = {}
        human: set[str] = set()
        while excess > 0:
            victims = self._conn.execute(
                "SELECT id, kind, length(body), priority, query_norm FROM spool"
                " ORDER BY priority, id LIMIT 256"
            ).fetchall()
            if not victims:
                break
            ids: list[tuple[int]] = []
            for row_id, kind, length, priority, query_norm in victims:
                if excess <= 0:
                    break
                ids.append((row_id,))
                dropped[kind] = dropped.get(kind, 0) + 1
                if priority == _PRIORITY["feedback"]:
                    human.add(query_norm)
                excess -= int(length)
            self._conn.executemany("DELETE FROM spool WHERE id = ?", ids)
        return Dropped(dropped, frozenset(human))

    def head(self, limit: int) -> list[Entry]:
        """The oldest `limit` records, in append order."""
        try:
            rows = self._conn.execute(
                "SELECT id, kind, body FROM spool ORDER BY id LIMIT ?", (limit,)
            ).fetchall()
        except sqlite3.Error as exc:
            raise SpoolError(f"write spool {self.path}: cannot read: {exc}") from exc
        if not rows:
            self.recount()
        return [Entry(int(i), kind, decode(kind, body), len(body)) for i, kind, body in rows]

    def remove(self, entries: Collection[Entry]) -> None:
        """Forget records the store has acknowledged."""
        self._run("remove", lambda: self._conn.executemany(
            "DELETE FROM spool WHERE id = ?", [(e.id,) for e in entries]
        ))  # fmt: skip

    def pending_labels(self, keys: Collection[str]) -> dict[str, Exemplar]:
        """The label each normalised query would have once the spool is replayed."""
        try:
            return self._pending(keys)
        except sqlite3.Error as exc:
            raise SpoolError(f"write spool {self.path}: cannot read: {exc}") from exc

    def _pending(self, keys: Collection[str]) -> dict[str, Exemplar]:
        # Only labels that changed the pending one are appended, so the newest row of a query
        # is its pending label.
        found: dict[str, Exemplar] = {}
        for key in keys:
            row = self._conn.execute(
                "SELECT body FROM spool WHERE query_norm = ? ORDER BY id DESC LIMIT 1", (key,)
            ).fetchone()
            if row is not None:
                record = decode("exemplar", row[0])
                assert isinstance(record, Exemplar)
                found[key] = record
        return found

    def pending_oracle_calls(self) -> list[OracleCall]:
        """The teacher calls waiting to be replayed, oldest first."""
        try:
            rows = self._conn.execute(
                "SELECT body FROM spool WHERE priority = ? AND kind = 'oracle_call' ORDER BY id",
                (_PRIORITY["oracle_call"],),
            ).fetchall()
        except sqlite3.Error as exc:
            raise SpoolError(f"write spool {self.path}: cannot read: {exc}") from exc
        return [
            call for (body,) in rows if isinstance(call := decode("oracle_call", body), OracleCall)
        ]

    def close(self) -> None:
        self._conn.close()
        self.replay_lock.close()


# The order a window of the spool is written in, by kind: a label or a teacher call names its
# turn, which must be there first; a turn names neither. Within a kind the order is kept (a
# turn's later version wins, labels count sightings in order).
_REPLAY_ORDER = ("turn", "oracle_call", "exemplar")


def replay_runs(entries: list[Entry]) -> list[list[Entry]]:
    """The records of each kind, in order, turns first: each run is one write to the store.
    Runs of consecutive records of one kind were one write each, and the learner spools a turn
    then its label, so a backlog replayed one or two records a transaction (45 a second on
    Neo4j), while a restart waits for it to end before it serves."""
    by_kind: dict[str, list[Entry]] = {kind: [] for kind in _REPLAY_ORDER}
    for entry in entries:
        by_kind[entry.kind].append(entry)
    return [run for run in by_kind.values() if run]
