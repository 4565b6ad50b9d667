"""Loopback HTTP load generator, run as its own process so it never shares a GIL with the server.

`python -m bench.loadgen SPEC.json` reads a spec, drives `url` and prints one JSON object of
results on stdout. Two modes:

- `closed`: `concurrency` clients, each sending its next request when the previous one answered
  (keep-alive connections, one per client). Measures throughput at a given concurrency.
- `open`: requests are scheduled at a fixed `rate` whatever the server does. Latency counts from
  the scheduled send time, so a stalled server shows up as latency instead of silently slowing
  the generator down (no coordinated omission). In-flight requests are capped at `max_inflight`;
  a request that would exceed the cap is counted as `overrun` and not sent.

Spec keys: `url`, `mode`, `duration_s`, `warmup_s`, `concurrency` (closed), `rate` (open),
`max_inflight` (open, default 1000), `timeout_s` (per request, default 10), `max_requests`
(a bound on everything sent, default 2,000,000), and `mix`: a list of `{"path", "weight",
"bodies"}` (POST JSON bodies, used round-robin). Only loopback URLs are accepted.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from bench.stats import percentile

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class _Route:
    path: str
    weight: float
    bodies: list[bytes]
    next: int = 0

    def body(self) -> bytes:
        body = self.bodies[self.next % len(self.bodies)]
        self.next += 1
        return body


@dataclass
class _Tally:
    """Latencies (seconds) and outcomes of requests completed inside the measured window."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    sent: int = 0

    def ok(self, path: str, seconds: float) -> None:
        self.latencies.setdefault(path, []).append(seconds)

    def fail(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50_ms": 0.0, "p90_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0, "mean_ms": 0.0}
    return {
        "p50_ms": round(percentile(values, 0.50) * 1e3, 3),
        "p90_ms": round(percentile(values, 0.90) * 1e3, 3),
        "p99_ms": round(percentile(values, 0.99) * 1e3, 3),
        "max_ms": round(max(values) * 1e3, 3),
        "mean_ms": round(sum(values) / len(values) * 1e3, 3),
    }


def _pick(routes: list[_Route], counter: int) -> _Route:
    """Deterministic weighted interleave: route i gets weight_i of every 1000 requests."""
    if len(routes) == 1:
        return routes[0]
    slot = (counter * 7919) % 1000 / 1000.0  # a prime stride spreads each route evenly
    edge = 0.0
    for route in routes:
        edge += route.weight
        if slot < edge:
            return route
    return routes[-1]


async def _send(
    session: aiohttp.ClientSession, url: str, route: _Route, tally: _Tally, measure: bool
) -> tuple[bool, str]:
    """POST one body; returns (ok, error kind). Reads the whole answer (keep-alive reuse)."""
    try:
        async with session.post(
            url + route.path, data=route.body(), headers={"Content-Type": "application/json"}
        ) as resp:
            await resp.read()
            if measure:
                key = f"{route.path} {resp.status}"
                tally.statuses[key] = tally.statuses.get(key, 0) + 1
            if resp.status >= 400:
                return False, f"http_{resp.status}"
            return True, ""
    except TimeoutError:
        return False, "timeout"
    except aiohttp.ClientError as exc:
        return False, type(exc).__name__


async def _closed(spec: dict[str, Any], routes: list[_Route], tally: _Tally) -> float:
    url, clients = spec["url"], int(spec["concurrency"])
    warmup, duration = float(spec.get("warmup_s", 2.0)), float(spec["duration_s"])
    cap = int(spec.get("max_requests", 2_000_000))
    timeout = aiohttp.ClientTimeout(total=float(spec.get("timeout_s", 10.0)))
    connector = aiohttp.TCPConnector(limit=clients, force_close=False)
    start = time.perf_counter()
    begin, end = start + warmup, start + warmup + duration
    counter = 0

    async def client() -> None:
        nonlocal counter
        while True:
            now = time.perf_counter()
            if now >= end or tally.sent >= cap:
                return
            counter += 1
            route = _pick(routes, counter)
            measure = now >= begin
            if measure:
                tally.sent += 1
            ok, kind = await _send(session, url, route, tally, measure)
            done = time.perf_counter()
            if measure and done <= end:
                if ok:
                    tally.ok(route.path, done - now)
                else:
                    tally.fail(kind)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(client() for _ in range(clients)))
    return duration


async def _open(spec: dict[str, Any], routes: list[_Route], tally: _Tally) -> float:
    url, rate = spec["url"], float(spec["rate"])
    warmup, duration = float(spec.get("warmup_s", 2.0)), float(spec["duration_s"])
    cap = int(spec.get("max_requests", 2_000_000))
    max_inflight = int(spec.get("max_inflight", 1000))
    timeout = aiohttp.ClientTimeout(total=float(spec.get("timeout_s", 10.0)))
    connector = aiohttp.TCPConnector(limit=max_inflight)
    inflight: set[asyncio.Task[None]] = set()
    interval = 1.0 / rate

    async def one(route: _Route, due: float, measure: bool) -> None:
        ok, kind = await _send(session, url, route, tally, measure)
        if measure:
            if ok:
                tally.ok(route.path, time.perf_counter() - due)
            else:
                tally.fail(kind)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        begin, end = start + warmup, start + warmup + duration
        n = 0
        while True:
            due = start + n * interval
            if due >= end or tally.sent >= cap:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            measure = due >= begin
            n += 1
            if len(inflight) >= max_inflight:
                if measure:
                    tally.fail("overrun")
                continue
            if measure:
                tally.sent += 1
            task = asyncio.create_task(one(_pick(routes, n), due, measure))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if inflight:
            await asyncio.wait(inflight)
    return duration


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Drive the server as the spec says; the result counts only the measured window."""
    host = urlsplit(spec["url"]).hostname or ""
    if host not in _LOOPBACK:
        raise SystemExit(f"loadgen: refusing a non-loopback target {host!r}")
    routes = [
        _Route(m["path"], float(m["weight"]), [json.dumps(b).encode() for b in m["bodies"]])
        for m in spec["mix"]
    ]
    total = sum(r.weight for r in routes)
    for route in routes:
        route.weight /= total
    tally = _Tally()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    mode = spec["mode"]
    driver = _closed if mode == "closed" else _open
    duration = asyncio.run(driver(spec, routes, tally))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.perf_counter() - wall0
    everything = [x for values in tally.latencies.values() for x in values]
    completed = len(everything)
    return {
        "mode": mode,
        "concurrency": spec.get("concurrency"),
        "rate": spec.get("rate"),
        "duration_s": duration,
        "sent": tally.sent,
        "completed_ok": completed,
        "errors": sum(tally.errors.values()),
        "error_kinds": tally.errors,
        "statuses": tally.statuses,
        "throughput_rps": round(completed / duration, 1),
        "latency": _percentiles(everything),
        "by_path": {path: _percentiles(values) for path, values in tally.latencies.items()},
        # Over the whole run (warm-up included): how much of the 2 cores the client took.
        "client_cpu_s": round((cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime), 2),
        "client_wall_s": round(wall, 2),
    }


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python -m bench.loadgen SPEC.json", file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    json.dump(run(spec), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
