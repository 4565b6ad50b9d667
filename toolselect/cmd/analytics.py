"""`toolselect analytics`: the arguments checked before anything opens, and the store analyses.

The analyses only read: a mistyped name, store, flag or chart folder is the caller's mistake
(exit 2, one line), refused before anything is written, so no file or folder is left behind.
`learning` (the fit the service holds, not rows of the store) is run by `cmd/main.py` on a
started service.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from toolselect.cmd.remote import UsageError

if TYPE_CHECKING:
    from toolselect.config import Settings


def _check_name(name: str | None) -> None:
    from toolselect.analytics.registry import LEARNING, NAMES

    if name is not None and name != LEARNING and name not in NAMES:
        known = ", ".join((*NAMES, LEARNING))
        raise UsageError(f"no analysis named {name!r}; known: {known}")


def _check_learning(args: argparse.Namespace) -> None:
    """The fit is one nested object, not rows in time: it prints as JSON (indented unless
    `--format json` asks for one line), over every stored label, and draws no chart."""
    if args.format in ("table", "csv"):
        raise UsageError(
            f"learning prints JSON: expected --format json or none, got {args.format!r}"
        )
    if args.since is not None:
        raise UsageError("learning takes no --since: the fit covers every stored label")
    if args.plot is not None:
        raise UsageError("learning takes no --plot: the fit has no chart")


def check_store_exists(settings: Settings) -> None:
    """Refuse an embedded store file that is not there: opening it would create it (and its
    folders) only to report that an empty store has no rows."""
    if settings.store_kind != "sqlite":
        return
    path = settings.sqlite_path
    if str(path) != ":memory:" and not path.is_file():
        raise UsageError(
            f"expected an existing SQLite store file, got {path}: analytics only reads"
        )


def check_analytics(args: argparse.Namespace, settings: Settings) -> None:
    """Every refusal of `toolselect analytics` that needs no store, as a `UsageError` (exit 2)."""
    from toolselect.analytics.registry import LEARNING
    from toolselect.analytics.surfaces import parse_since

    _check_name(args.name)
    if args.name == LEARNING:
        _check_learning(args)
    else:
        parse_since(args.since)  # InvalidInput: exit 2
    check_store_exists(settings)


async def run_analyses(args: argparse.Namespace, settings: Settings) -> int:
    """Print the named analysis (every one without a name) from the store alone: no embedder or
    ranker is built. The store is migrated first, so a file of an older version reads."""
    from toolselect.analytics.surfaces import cli_analytics, parse_since
    from toolselect.logs import configure_logging
    from toolselect.store.factory import open_store

    configure_logging("warning", settings.log_format)
    plot = Path(args.plot) if args.plot else None
    store = await open_store(settings)
    try:
        await store.migrate()
        since = parse_since(args.since)
        print(await cli_analytics(store, args.name, since, args.format or "table", plot))
    finally:
        await store.close()
    return 0
