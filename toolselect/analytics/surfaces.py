"""The analyses as the service shows them: HTTP/MCP payloads and the `toolselect analytics` CLI.

Both list and run whatever the registry holds, so a new analysis appears here without changes.
Wired in `api/routes.py`, `mcp_server.py` and `cmd/main.py`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolselect.analytics.charts import plot as draw_png
from toolselect.analytics.charts import require_matplotlib
from toolselect.analytics.registry import NAMES, get_analysis
from toolselect.analytics.render import FORMATS, RENDERERS, to_payload
from toolselect.errors import InvalidInput
from toolselect.keys import shown
from toolselect.records import AnalyticsResult
from toolselect.store.port import AnalyticsStore

_SPACED_OFFSET = re.compile(r"(?<=\d) (\d{2}(?::?\d{2})?)$")


def parse_since(text: str | None) -> datetime | None:
    """An ISO-8601 date or datetime as aware UTC (naive means UTC); None or blank is all time.

    A query string decodes `+00:00` to ` 00:00`; that space is read back as `+`.
    """
    if text is None or not text.strip():
        return None
    cleaned = _SPACED_OFFSET.sub(r"+\1", text.strip())
    try:
        value = datetime.fromisoformat(cleaned)
    except ValueError:
        raise InvalidInput(
            f"expected since as an ISO-8601 date or datetime, got {shown(text)}", "since"
        ) from None
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:  # an offset that moves year 1 or 9999 past either end in UTC
        raise InvalidInput(
            f"expected since within the years 1 to 9999 in UTC, got {shown(text)}", "since"
        ) from None


def refuse_learning_since(since: str | None) -> None:
    """The learning fit has no time window: a `since` given for it (any, even blank) is refused
    (InvalidInput on `since`), by HTTP and MCP alike, rather than ignored."""
    if since is not None:
        raise InvalidInput("learning takes no since: the fit covers every stored label", "since")


def analyses_payload() -> dict[str, Any]:
    """The body of `GET /v1/analytics`."""
    return {"analyses": list(NAMES)}


async def analysis_payload(store: AnalyticsStore, name: str, since: str | None) -> dict[str, Any]:
    """The body of `GET /v1/analytics/{name}?since=`; NotFound (404) or InvalidInput (422)."""
    get_analysis(name)
    result = await store.analytics(name, parse_since(since))
    return to_payload(result)


def _check_plot(plot: Path, every: bool) -> None:
    """Refuse, before any query, a chart path whose folder is missing: a read-only command does
    not make the folders of a mistyped path. With every analysis `plot` is the folder itself, made
    when its parent exists."""
    folder = plot if every and plot.is_dir() else plot.parent
    if not folder.is_dir():
        raise InvalidInput(f"cannot write {plot}: no folder {folder}", "plot")
    if every and plot.exists() and not plot.is_dir():
        raise InvalidInput(f"cannot write {plot}: not a folder", "plot")


def _write_charts(results: list[AnalyticsResult], plot: Path, every: bool) -> None:
    path = plot
    try:
        if every:
            plot.mkdir(exist_ok=True)  # its parent exists: `_check_plot`
        for result in results:
            path = plot / f"{result.name}.png" if every else plot
            draw_png(result, path)
    except OSError as exc:  # a folder where the file goes, a file where the folder does
        raise InvalidInput(f"cannot write {path}: {exc.strerror or exc}", "plot") from None


async def cli_analytics(
    store: AnalyticsStore, name: str | None, since: datetime | None, fmt: str, plot: Path | None
) -> str:
    """The output of `toolselect analytics [NAME] [--since] [--format] [--plot PATH]`.

    Without a name every analysis runs, one after another: `table` gives each a `== name ==`
    title line, `csv` a `# name` line, `json` one JSON object per line (JSON Lines). `--plot`
    writes the PNG to PATH for one analysis, or `PATH/<name>.png` for each when all run; PATH's
    parent folder must exist.
    """
    if fmt not in RENDERERS:
        raise InvalidInput(f"expected format in {', '.join(FORMATS)}, got {fmt!r}", "format")
    names = NAMES if name is None else (get_analysis(name).name,)
    if plot is not None:
        require_matplotlib()  # before any query: fail fast
        _check_plot(plot, every=name is None)
    results = [await store.analytics(n, since) for n in names]
    if plot is not None:
        _write_charts(results, plot, every=name is None)
    render = RENDERERS[fmt]
    if name is not None:
        # The caller prints it with a newline: CSV's own last one would make a blank record.
        return render(results[0]).removesuffix("\n")
    if fmt == "json":
        return "\n".join(render(r) for r in results)
    title = "== {} ==" if fmt == "table" else "# {}"
    return "\n\n".join(f"{title.format(r.name)}\n{render(r).rstrip()}" for r in results)
