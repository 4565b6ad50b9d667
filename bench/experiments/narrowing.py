"""What narrowing an agent's tools costs over the rank request it makes, measured side by side.

`python -m bench.experiments.narrowing [--embedder hashing|hybrid] [--rounds N] [--out PATH]`
starts a real `toolselect serve` (SQLite in a temporary folder) on a loopback port, puts the demo
catalog (68 tools) under one agent's pack, then runs `--rounds` rounds; each round times, in
turn, for the same user question:

- `rank`: `AsyncClient.rank(question, k, tools=names)`, the request itself;
- `narrow`: `ToolNarrower.narrow(question, specs)` (catalog hash, upload check, query, rank,
  filtering);
- `langchain`: `ToolselectMiddleware.awrap_model_call` on a `ModelRequest` holding the 68 tools
  as LangChain `StructuredTool`s and a short conversation, with a handler that returns at once
  (the hook's whole cost but the model);
- `llamaindex`: `ToolselectToolRetriever.aretrieve(question)` over the 68 tools as LlamaIndex
  `FunctionTool`s.

The ten questions repeat, so after the warm-up the server answers every variant from its query
vector cache: the figures isolate what the client side adds, whatever the embedder. Each
variant's overhead is the median of its per-round difference with that round's `rank`
(pairs taken within a round cancel most of the server's drift), next to the p50s. The numbers
printed are the ones to quote; `--out` also writes them as JSON (bench/out/ by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from bench.stats import percentile
from toolselect.client import AsyncClient
from toolselect.integrations.narrowing import ToolNarrower, ToolSpec

K = 5
AGENT = "bench-narrowing"
QUESTIONS = [
    "Will it rain in Turin tomorrow?",
    "what is the bitcoin price right now",
    "send an email to Ann about the meeting",
    "translate this paragraph into German",
    "find recent news about the elections",
    "book a table for two tonight",
    "how many steps did I walk yesterday",
    "convert 100 dollars to euros",
    "remind me to call mum at 6pm",
    "show me the open pull requests",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(folder: Path, embedder: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLSELECT_", "NEO4J_"))}
    env.update(TOOLSELECT_DATA_DIR=str(folder), TOOLSELECT_LOG_LEVEL="warning")
    command = [
        *(sys.executable, "-m", "toolselect.cmd.main", "serve"),
        *("--store", f"sqlite:{folder / 'toolselect.db'}", "--embedder", embedder),
        *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
    ]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as answer:
                if answer.status == 200:
                    return server, url
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("toolselect serve did not become ready in 120 s")


def catalog() -> list[dict[str, Any]]:
    text = files("toolselect.data").joinpath("demo_tools.json").read_text()
    tools: list[dict[str, Any]] = json.loads(text)["tools"]
    return tools


async def measure(url: str, rounds: int) -> dict[str, Any]:
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
    from langchain_core.tools import StructuredTool
    from llama_index.core.tools import FunctionTool, ToolMetadata

    from toolselect.integrations.langchain import ToolselectMiddleware
    from toolselect.integrations.llamaindex import ToolselectToolRetriever

    tools = catalog()
    specs = [ToolSpec(t["name"], t["description"], t.get("inputSchema")) for t in tools]
    names = [s.name for s in specs]

    def run(**_: Any) -> str:
        return ""

    lc_tools = [
        StructuredTool.from_function(
            run, name=t["name"], description=t["description"], args_schema=t["inputSchema"]
        )
        for t in tools
    ]
    li_tools = [
        FunctionTool.from_defaults(
            run, tool_metadata=ToolMetadata(name=t["name"], description=t["description"])
        )
        for t in tools
    ]
    model = GenericFakeChatModel(messages=iter([]))
    answer = ModelResponse(result=[AIMessage("ok")])

    async def handler(request: Any) -> Any:
        return answer

    async with AsyncClient(url) as ts:
        narrower = ToolNarrower(ts, agent=AGENT, k=K)
        middleware = ToolselectMiddleware(ts, agent=AGENT, k=K)
        retriever = ToolselectToolRetriever(ts, li_tools, agent=AGENT, k=K)
        assert await narrower.upload(specs)

        def lc_request(question: str) -> Any:
            history: list[AnyMessage] = [HumanMessage("hi"), AIMessage("Hello! How can I help?")]
            return ModelRequest(
                model=model, messages=[*history, HumanMessage(question)], tools=[*lc_tools]
            )

        variants: dict[str, Callable[[str], Awaitable[Any]]] = {
            "rank": lambda q: ts.rank(q, K, tools=names),
            "narrow": lambda q: narrower.narrow(q, specs),
            "langchain": lambda q: middleware.awrap_model_call(lc_request(q), handler),
            "llamaindex": lambda q: retriever.aretrieve(q),
        }
        # Warm-up: connections, the LangChain and LlamaIndex schema caches, the first upload
        # check of each integration's own catalog content (LlamaIndex describes tools with
        # their signature, so its catalog is another content and is uploaded once here).
        for question in QUESTIONS:
            for call in variants.values():
                await call(question)
        timings: dict[str, list[float]] = {name: [] for name in variants}
        for i in range(rounds):
            question = QUESTIONS[i % len(QUESTIONS)]
            for name, call in variants.items():
                started = time.perf_counter()
                result = await call(question)
                timings[name].append((time.perf_counter() - started) * 1000)
                if name == "narrow":
                    assert result.search_id is not None, "narrowing degraded during the bench"
    rank = timings["rank"]
    summary: dict[str, Any] = {}
    for name, values in timings.items():
        diffs = [v - r for v, r in zip(values, rank, strict=True)]
        summary[name] = {
            "p50_ms": round(percentile(values, 0.5), 3),
            "p90_ms": round(percentile(values, 0.9), 3),
            "overhead_p50_ms": round(percentile(diffs, 0.5), 3),
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "hybrid", "minilm"])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path("bench/out/narrowing.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        server, url = start_server(Path(folder), args.embedder)
        try:
            summary = asyncio.run(measure(url, args.rounds))
        finally:
            server.terminate()
            server.wait(30)
    print(f"embedder={args.embedder} tools={len(catalog())} k={K} rounds={args.rounds}")
    print(f"{'variant':<12}{'p50 ms':>10}{'p90 ms':>10}{'over rank, p50 ms':>20}")
    for name, row in summary.items():
        print(
            f"{name:<12}{row['p50_ms']:>10.2f}{row['p90_ms']:>10.2f}{row['overhead_p50_ms']:>20.2f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"embedder": args.embedder, "k": K, "rounds": args.rounds, "variants": summary}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
