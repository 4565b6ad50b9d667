"""How the benches read vegeta's results: the measured window, and an open loop's latency from
each request's scheduled send time, so a stalled server cannot hide behind a late send."""

from __future__ import annotations

from bench.vegeta import _summary

MS = 1_000_000  # ns
URL = "http://127.0.0.1:8080"


def _row(
    sent_ms: float,
    latency_ms: float,
    seq: int,
    status: int = 200,
    error: str = "",
    path: str = "/v1/rank",
) -> tuple[int, int, int, str, int, str]:
    return (int(sent_ms * MS), status, int(latency_ms * MS), error, seq, URL + path)


def test_an_open_loop_counts_latency_from_the_schedule_not_the_late_send() -> None:
    # 10 a second for 1 s after a 1 s warm-up: request n is due at n * 100 ms. Requests 13 and
    # 14 left 250 ms late (the sender was held up) and took 1 ms once sent.
    rows = [_row(n * 100, 1, n) for n in range(20) if n not in (13, 14)]
    rows += [_row(1300 + 250, 1, 13), _row(1400 + 250, 1, 14)]
    got = _summary(rows, duration=1.0, warmup=1.0, rate=10.0)
    assert got["sent"] == 10  # due at 1.0 .. 1.9 s
    assert got["latency"]["p99_ms"] == 251.0  # 2 of 10 waited 251 ms for their answer
    assert got["latency"]["p50_ms"] == 1.0


def test_a_send_a_little_early_counts_its_own_latency_not_less() -> None:
    # One request in three (the observes) leaves 0.3 ms before its tick (a sleep's jitter);
    # every one takes 1 ms.
    rows = [
        _row(n * 100 - 0.3, 1, n, path="/v1/observe") if n % 3 == 1 else _row(n * 100, 1, n)
        for n in range(20)
    ]
    got = _summary(rows, duration=1.0, warmup=1.0, rate=10.0)
    assert got["sent"] == 10
    assert got["by_path"]["/v1/observe"]["p50_ms"] == 1.0
    assert got["by_path"]["/v1/rank"]["p50_ms"] == 1.0


def test_a_closed_loop_counts_what_was_sent_and_answered_inside_the_window() -> None:
    rows = [_row(n * 100, 50, n) for n in range(20)]
    rows.append(_row(1950, 80, 20))  # sent inside, answered after the end: sent, not timed
    rows.append(_row(1500, 3, 21, status=503))
    rows.append(_row(1600, 10_000, 22, status=0, error="(Client.Timeout exceeded while ...)"))
    got = _summary(rows, duration=1.0, warmup=1.0, rate=None)
    assert got["sent"] == 13
    assert got["completed_ok"] == 10
    assert got["error_kinds"] == {"http_503": 1, "timeout": 1}
    assert got["statuses"] == {"/v1/rank 200": 11, "/v1/rank 503": 1}
