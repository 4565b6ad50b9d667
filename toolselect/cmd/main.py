"""`toolselect`: serve, mcp, rank, select, tools, observe, analytics, keys, config.

Imports are deferred to the subcommand that needs them, so `toolselect select --url` (spawned by an
agent runtime for every selection) starts without loading numpy, scikit-learn or the drivers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from toolselect.cmd.keys import add_key_commands
from toolselect.cmd.remote import Deadline, UsageError, read_select_request, select_remote

if TYPE_CHECKING:
    from toolselect.config import Settings
    from toolselect.service import Service


def _settings(args: argparse.Namespace) -> Settings:
    from toolselect.config import load_settings

    return load_settings().override(
        store=getattr(args, "store", None),
        embedder=getattr(args, "embedder", None),
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        workers=getattr(args, "workers", None),
    )


def _run(coro: Coroutine[Any, Any, int]) -> int:
    import asyncio  # not at the top: the `select --url` path never needs it

    return asyncio.run(coro)


def _progress(line: str, *, always: bool = False) -> Callable[[int, int], None] | None:
    """`line` (with `{done}` and `{total}`) on stderr after each batch: rewritten in place on a
    terminal, one line each otherwise (only when `always`: off a terminal nobody watches)."""
    tty = sys.stderr.isatty()
    if not (tty or always):
        return None

    def report(done: int, total: int) -> None:
        text = line.format(done=done, total=total)
        if tty:
            print(f"\r{text}", end="\n" if done == total else "", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)

    return report


async def _with_service(args: argparse.Namespace, body: Callable[[Service], Any]) -> int:
    from toolselect.logs import configure_logging
    from toolselect.service import Service

    settings = _settings(args)
    configure_logging("warning", settings.log_format)
    # A one-shot command: no upkeep, which would run retention or ask the teacher on the side.
    service = await Service.start(
        settings, load_progress=_progress("embedding tools: {done}/{total}"), upkeep=False
    )
    try:
        result = await body(service)
        return int(result or 0)
    finally:
        await service.close()


# -- serve -------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from toolselect.api.server import serve
    from toolselect.api.workers import serve_workers
    from toolselect.logs import configure_logging

    settings = _settings(args)
    configure_logging(settings.log_level, settings.log_format)
    run = serve_workers if settings.worker_count > 1 else serve
    return run(settings, insecure=args.insecure)


# -- mcp ---------------------------------------------------------------------------------


def cmd_mcp(args: argparse.Namespace) -> int:
    from toolselect.api.server import check_bind, check_port_free
    from toolselect.logs import configure_logging
    from toolselect.mcp_server import build_server, run

    settings = _settings(args)
    # stdout carries the stdio protocol: every log line goes to stderr.
    configure_logging(settings.log_level, settings.log_format)
    if args.transport == "http":
        # Keys guard MCP over HTTP as they guard `serve`; a taken port is refused before start.
        check_bind(settings, args.insecure)
        check_port_free(settings)
    run(build_server(settings), settings, args.transport)
    return 0


# -- rank --------------------------------------------------------------------------------


def cmd_rank(args: argparse.Namespace) -> int:
    async def body(service: Service) -> int:
        ranking = await service.ranking.rank(args.text, args.k, pack=args.pack)
        if args.json:
            out = {
                "results": [{"tool": r.tool, "score": r.score} for r in ranking.results],
                "margin": ranking.margin,
                "embedder": service.ranking.embedder_id,
            }
            print(json.dumps(out, ensure_ascii=False))
        else:
            for i, r in enumerate(ranking.results, 1):
                print(f"{i:>3}  {r.score:6.3f}  {r.tool}")
            print(f"margin {ranking.margin:.3f}  ({service.ranking.embedder_id})")
        return 0

    return _run(_with_service(args, body))


# -- tools -------------------------------------------------------------------------------


def _read_catalog(args: argparse.Namespace) -> object:
    """The catalog body from FILE, or from the `tools/list` of the MCP server `--mcp` starts."""
    if (args.file is None) == (args.mcp is None):
        given = "both" if args.file else "neither"
        raise UsageError(f"expected a FILE or --mcp COMMAND, got {given}")
    if args.mcp is not None:
        import asyncio

        from toolselect.mcp_import import list_mcp_tools

        return asyncio.run(list_mcp_tools(args.mcp, timeout_s=args.timeout))
    from pathlib import Path

    from toolselect.json_text import parse_json

    try:
        return parse_json(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{args.file}: cannot read JSON: {exc}") from None


def cmd_tools_import(args: argparse.Namespace) -> int:
    from toolselect.catalog import check_pack, parse_tools

    tools, pack = parse_tools(_read_catalog(args))
    pack = check_pack(args.pack) or pack

    async def body(service: Service) -> int:
        from toolselect.service import IMPORT_BATCH

        # Progress on stderr: asked for, or on a terminal when there is more than one batch.
        line = _progress("embedded {done}/{total} tools", always=args.progress)

        def progress(done: int, total: int) -> None:
            assert line is not None
            line(done, total)
            if done == total:
                print(f"writing {len(tools)} tools in one transaction", file=sys.stderr)

        show = line is not None and (args.progress or len(tools) > IMPORT_BATCH)
        result = await service.catalog.upsert_tools(
            tools, pack, progress=progress if show else None
        )
        print(json.dumps({"upserted": result.upserted, "unchanged": result.unchanged}))
        return 0

    return _run(_with_service(args, body))


def cmd_tools_list(args: argparse.Namespace) -> int:
    async def body(service: Service) -> int:
        for tool in await service.catalog.list_tools(args.pack):
            packs = f"  [{', '.join(tool.packs)}]" if tool.packs else ""
            print(f"{tool.name}{packs}  {tool.description[:80]}")
        return 0

    return _run(_with_service(args, body))


# -- select (PromptKit exec selector) ------------------------------------------------------


def cmd_select(args: argparse.Namespace) -> int:
    with Deadline(args.timeout, "toolselect select") as deadline:
        if args.url:
            return select_remote(args.url, read_select_request(), args.timeout, deadline.answer)
        return _select_in_process(args, deadline)


def _select_in_process(args: argparse.Namespace, deadline: Deadline) -> int:
    # Spawned once per agent turn: only what one selection needs is imported (no aiohttp,
    # no scikit-learn, no learner), see toolselect.cmd.select.
    from toolselect.catalog import candidates_to_tools
    from toolselect.cmd.select import read_request, select_once

    settings = _settings(args)
    data = read_select_request(settings.max_body_bytes)
    request = read_request(data)  # InvalidInput: one line on stderr, exit 2
    tools = candidates_to_tools(request.candidates)

    async def body() -> int:
        from toolselect.logs import configure_logging

        # Only critical records: the spawn's outcome is its answer or its one line (a driver's
        # error record, "Unable to retrieve routing information", was a second line before it).
        configure_logging("critical", settings.log_format)
        # `--timeout` is the Deadline's: a hung store or a model load on a worker thread ends
        # the process at it, which a cancellation here could not.
        selection = await select_once(settings, request.text, tools, request.k)
        deadline.answer(json.dumps({"selected": selection.selected, "reason": selection.reason}))
        return 0

    return _run(body())


def cmd_observe(args: argparse.Namespace) -> int:
    """Observe one turn in-process: queue it, let the learner finish it, print what it decided."""

    async def body(service: Service) -> int:
        import uuid

        from toolselect.api.validation import parse
        from toolselect.errors import InvalidInput
        from toolselect.turns import ReportedTurn, turn_problem

        turn_id = args.turn_id or uuid.uuid4().hex
        given = {"request": args.request, "used_tool": args.used_tool, "turn_id": turn_id,
                 "agent_id": args.agent_id, "pack": args.pack, "outcome": args.outcome}  # fmt: skip
        # Held to the rules `POST /v1/observe` holds a turn to, with the same messages.
        reported = parse(ReportedTurn, {k: v for k, v in given.items() if v is not None})
        problem = turn_problem(reported, service.settings.max_query_bytes)
        if problem is not None:
            raise InvalidInput(problem.message, problem.field)
        queued = service.learning.report(reported)
        if not queued:
            print(json.dumps({"queued": False}))
            return 1
        turn = await service.learning.turn_when_done(turn_id, service.settings.shutdown_timeout_s)
        decided = {
            "turn_id": turn_id,
            "top1": turn.top1 if turn else None,
            "margin": turn.margin if turn else None,
            "flagged": turn.flagged if turn else None,
            "flag_reason": turn.flag_reason if turn else None,
            "tier": turn.tier if turn else None,
            "label": turn.label if turn else None,
            "result": turn.result if turn else None,
        }
        print(json.dumps({"queued": True, **decided}, ensure_ascii=False))
        return 0

    return _run(_with_service(args, body))


def cmd_analytics(args: argparse.Namespace) -> int:
    """Run named analyses against the store alone (no embedder or ranker is built); `learning`
    builds the service instead, fits it to the stored labels and prints what it chose."""
    from toolselect.cmd.analytics import check_analytics, run_analyses

    settings = _settings(args)
    check_analytics(args, settings)
    if args.name != "learning":
        return _run(run_analyses(args, settings))

    async def fitted(service: Service) -> int:
        await service.learning.settle()
        payload = service.learning.fit()
        print(json.dumps(payload, indent=None if args.format == "json" else 2))
        return 0

    return _run(_with_service(args, fitted))


def cmd_config(args: argparse.Namespace) -> int:
    from toolselect.config import ignored_variables, settings_table

    print(settings_table())
    for problem in ignored_variables():
        print(problem, file=sys.stderr)
    return 0


# -- parser ------------------------------------------------------------------------------


def _setting_arg(name: str) -> Callable[[str], Any]:
    """An argparse type for a flag that sets a setting: its text read by the setting's own
    parser, so `--port 99999` is refused as `TOOLSELECT_PORT=99999` is."""

    def parse(text: str) -> Any:
        from toolselect.config import FIELDS

        try:
            return next(f for f in FIELDS if f.name == name).parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _seconds_arg(text: str) -> float:
    try:
        seconds = float(text)  # "1e3" too; "nan" and "inf" are refused below
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolselect", description="Decide which tools an LLM agent should see for a turn."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def with_store(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--store", help="neo4j or sqlite:PATH (default: from settings)")
        p.add_argument("--embedder", choices=["auto", "hashing", "minilm", "http", "hybrid"])
        return p

    serve = with_store(sub.add_parser("serve", help="run the HTTP API"))
    serve.add_argument("--host")
    serve.add_argument("--port", type=_setting_arg("port"))
    serve.add_argument(
        "--workers",
        type=_setting_arg("workers"),
        help="server processes on the one port, or auto: one per core (default: from settings)",
    )
    serve.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback bind without API keys"
    )
    serve.set_defaults(func=cmd_serve)

    mcp = with_store(sub.add_parser("mcp", help="run the MCP server (stdio or streamable HTTP)"))
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    mcp.add_argument("--host", help="with --transport http (default: from settings)")
    mcp.add_argument(
        "--port", type=_setting_arg("port"), help="with --transport http (default: from settings)"
    )
    mcp.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback bind without API keys"
    )
    mcp.set_defaults(func=cmd_mcp)

    rank = with_store(sub.add_parser("rank", help="rank the catalog for TEXT"))
    rank.add_argument("text")
    rank.add_argument("-k", type=int, default=5)
    rank.add_argument("--pack")
    rank.add_argument("--json", action="store_true")
    rank.set_defaults(func=cmd_rank)

    tools = sub.add_parser("tools", help="manage the catalog").add_subparsers(
        dest="tools_command", required=True
    )
    imp = with_store(
        tools.add_parser(
            "import", help="import MCP, OpenAI or native JSON, or an MCP server's tools"
        )
    )
    imp.add_argument("file", nargs="?", help="a JSON file (or use --mcp)")
    imp.add_argument(
        "--mcp",
        metavar="COMMAND",
        help='start this MCP server over stdio and import its tools/list, e.g. "python -m srv"',
    )
    imp.add_argument(
        "--timeout", type=_seconds_arg, default=60.0, help="seconds for --mcp to list its tools"
    )
    imp.add_argument("--pack")
    imp.add_argument(
        "--progress",
        action="store_true",
        help="report embedding progress on stderr (default: on a terminal, for long imports)",
    )
    imp.set_defaults(func=cmd_tools_import)
    lst = with_store(tools.add_parser("list", help="list tools"))
    lst.add_argument("--pack")
    lst.set_defaults(func=cmd_tools_list)

    sel = with_store(sub.add_parser("select", help="PromptKit exec selector: stdin -> stdout"))
    sel.add_argument("--url", help="thin client of a running server (fast per-call spawn)")
    sel.add_argument(
        "--timeout", type=_seconds_arg, default=10.0, help="seconds for the whole selection"
    )
    sel.set_defaults(func=cmd_select)

    obs = with_store(sub.add_parser("observe", help="report one turn (request, used tool)"))
    obs.add_argument("request")
    obs.add_argument("used_tool")
    obs.add_argument("--outcome", choices=["ok", "error", "corrected"])
    obs.add_argument("--turn-id")
    obs.add_argument("--agent-id")
    obs.add_argument("--pack")
    obs.set_defaults(func=cmd_observe)

    an = with_store(sub.add_parser("analytics", help="run named analyses (all when no NAME)"))
    an.add_argument("name", nargs="?")
    an.add_argument("--since", help="ISO-8601 date or time; only data at or after it")
    # analytics.render.FORMATS, spelled out: importing it (and the store records it renders)
    # would cost every command's start, `select` included (tests/cli pins the two equal).
    an.add_argument("--format", choices=["table", "csv", "json"], help="default: table")
    an.add_argument(
        "--plot",
        help="PNG file in an existing folder (without NAME: a folder, made if its parent "
        "exists); needs matplotlib",
    )
    an.set_defaults(func=cmd_analytics)

    add_key_commands(sub)  # keys create|list|revoke (toolselect/cmd/keys.py)

    cfg = sub.add_parser("config", help="print the configuration table")
    cfg.set_defaults(func=cmd_config)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UsageError as exc:
        print(f"toolselect {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from toolselect.errors import ConfigError, InvalidInput, ToolselectError

        if not isinstance(exc, ToolselectError):
            raise
        # One line, whatever the cause's own formatting (driver messages span lines).
        print(f"toolselect {args.command}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError | InvalidInput) else 1


if __name__ == "__main__":
    sys.exit(main())
