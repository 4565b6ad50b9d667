"""The conversation signals' fit (`learn/session_fit.py`) on sessions made to hold, or not to
hold, what each signal uses: a weight is above zero only when held-out sessions show it helps."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np

from toolselect.learn.session_fit import SessionFit, fit_sessions, sessions_of
from toolselect.records import Turn

DIM = 48
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class World:
    """A catalog of random unit vectors and requests built from them."""

    def __init__(self, tools: int = 40, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.names = [f"t{i:02d}" for i in range(tools)]
        m = self.rng.normal(size=(tools, DIM)).astype(np.float32)
        self.matrix = m / np.linalg.norm(m, axis=1, keepdims=True)
        self.turns: list[Turn] = []
        self.vectors: list[np.ndarray] = []

    def request(self, *weights: tuple[int, float], noise: float = 0.3) -> np.ndarray:
        v = self.rng.normal(size=DIM).astype(np.float32) * noise
        for tool, w in weights:
            v += w * self.matrix[tool]
        return v / np.linalg.norm(v)

    def turn(self, session: str, step: int, vector: np.ndarray, *tools: int) -> None:
        names = tuple(self.names[t] for t in tools)
        self.turns.append(
            Turn(
                id=f"{session}-{step}",
                request=f"{session} {step}",
                used_tool=names[0],
                at=T0 + timedelta(minutes=step),
                session_id=session,
                used_tools=names if len(names) > 1 else (),
            )
        )
        self.vectors.append(vector)

    def fit(self, idle_s: float = 0.0) -> SessionFit:
        vectors = np.vstack(self.vectors) if self.vectors else np.zeros((0, DIM), np.float32)
        return fit_sessions(self.turns, vectors, self.matrix, self.names, idle_s=idle_s)


def test_no_sessions_no_weights() -> None:
    w = World()
    fit = w.fit()
    assert fit.reason == "no sessions"
    assert (fit.weights.prior, fit.weights.context, fit.weights.companion_share) == (0, 0, None)


def test_too_few_follow_ups_leave_every_weight_at_zero() -> None:
    w = World()
    for s in range(5):
        w.turn(f"s{s}", 0, w.request((0, 1.0)), 0)
        w.turn(f"s{s}", 1, w.request((1, 1.0)), 1)
    fit = w.fit()
    assert fit.follow_ups == 5 and "follow-up" in fit.reason
    assert fit.weights.prior == 0 and fit.weights.companion_share is None


def workflow(second_at: int) -> World:
    """120 sessions where after tool i comes tool i+20, the second request as close to a decoy
    as to it; each session's second turn `second_at` minutes after its first."""
    w = World()
    rng = random.Random(3)
    for s in range(120):
        i = rng.randrange(20)
        decoy = (i + 1) % 20 + 20
        w.turn(f"s{s}", 0, w.request((i, 1.0)), i)
        w.turn(f"s{s}", second_at, w.request((i + 20, 1.0), (decoy, 1.0), noise=0.1), i + 20)
    return w


def test_a_workflow_makes_the_session_prior_pay() -> None:
    """After tool i comes tool i+20; the second request is as close to a decoy as to it, so
    only what followed i in other sessions tells them apart."""
    fit = workflow(second_at=1).fit()
    assert fit.weights.prior > 0
    assert fit.share_fitted is not None and fit.share_alone is not None
    assert fit.share_fitted > fit.share_alone


def test_a_step_across_an_idle_gap_is_no_follow_up() -> None:
    """The workflow above with each session's second turn 90 minutes after its first: under an
    hour's idle limit no turn follows another (each session expired before its second turn), so
    neither the held-out relations nor the follow-ups see a step, and the prior stays 0; without
    a limit the same turns fit it."""
    w = workflow(second_at=90)
    expired = w.fit(idle_s=3600.0)
    assert (expired.follow_ups, expired.result, expired.weights.prior) == (
        0,
        "too_few_follow_ups",
        0,
    )
    kept = w.fit(idle_s=90 * 60.0)  # 90 minutes is not more than the limit: still a step
    assert kept.follow_ups == 120 and kept.weights.prior > 0


def test_tools_used_together_become_companions() -> None:
    """Every turn that uses tool i also uses tool i+20, whose vector the request ignores."""
    w = World()
    rng = random.Random(4)
    for s in range(100):
        for step in range(2):
            i = rng.randrange(20)
            w.turn(f"s{s}", step, w.request((i, 1.0)), i, i + 20)
    fit = w.fit()
    assert fit.weights.companion_share is not None
    assert fit.companion_precision is not None and fit.next_precision is not None
    assert fit.companion_precision > fit.next_precision
    assert fit.all_with_companions is not None and fit.all_alone is not None
    assert fit.all_with_companions > fit.all_alone + 0.2


def test_the_previous_message_pays_when_the_message_alone_says_nothing() -> None:
    """Follow-ups that only supply a detail ("the file is report.pdf"): the tool is the one
    the previous message asked for, and nothing else predicts it (no workflow: the next tool
    is drawn anew for each session)."""
    w = World()
    rng = random.Random(5)
    for s in range(150):
        i = rng.randrange(40)
        w.turn(f"s{s}", 0, w.request((i, 1.0)), i)
        w.turn(f"s{s}", 1, w.request((i, 0.15), noise=1.0), i)
    fit = w.fit()
    assert fit.weights.context > 0


def test_structureless_sessions_fit_nothing() -> None:
    w = World()
    rng = random.Random(6)
    for s in range(150):
        for step in range(3):
            tools = rng.sample(range(40), 2)
            w.turn(f"s{s}", step, w.request((tools[0], 1.0), (tools[1], 1.0)), *tools)
    fit = w.fit()
    assert fit.reason == "fitted"
    assert fit.weights.prior == 0 and fit.weights.context == 0
    assert fit.weights.companion_share is None


def test_sessions_are_chained_by_time_then_id() -> None:
    w = World()
    v = w.request((0, 1.0))
    w.turn("s", 2, v, 0)
    w.turn("s", 0, v, 0)
    w.turn("r", 1, v, 0)
    assert sessions_of(w.turns) == {"s": [1, 0], "r": [2]}
