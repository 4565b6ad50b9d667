"""The shipped fakes (`toolselect.testing`): each behaves as its docstring promises, and they
plug into the real parts that take a clock, a teacher, an embedder or a store."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import re
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

import toolselect.testing
from toolselect.embed import Embedder, LocalEmbedder
from toolselect.errors import EmbedderUnavailable, StoreError, TeacherError, TeacherUnavailable
from toolselect.oracle.base import Candidate, RawAnswer, RetryLater, Teacher
from toolselect.oracle.budget import Budget, RetryPolicy
from toolselect.oracle.oracle import Oracle
from toolselect.records import Tool
from toolselect.store.port import Store
from toolselect.testing import (
    EPOCH,
    FakeClock,
    FakeEmbedder,
    ScriptedTeacher,
    TeacherCall,
    memory_store,
)

CANDIDATES = (
    Candidate("crypto_price", "Current price of a cryptocurrency such as bitcoin."),
    Candidate("whatsapp__send_message", "Send a WhatsApp message to a contact."),
    Candidate("web_search", "Search the web."),
)
NAMES = [c.name for c in CANDIDATES]
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "test_with_fakes.py"


class NoSleep:
    """An injected `sleep` that records the delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def oracle_over(teacher: Teacher, clock: FakeClock, *, retries: int = 0) -> Oracle:
    async def record(_call: object) -> None:
        return None

    return Oracle(
        teacher,
        enabled=True,
        budget=Budget(60, clock=clock.timestamp),
        retry=RetryPolicy(retries=retries),
        timeout_s=5.0,
        record_call=record,
        clock=clock.timestamp,
        sleep=NoSleep(),
    )


# ---- FakeClock -------------------------------------------------------------------------------


def test_clock_stands_still_at_a_fixed_aware_utc_instant() -> None:
    """A new clock reads the same fixed UTC instant on every call until the test moves it."""
    clock = FakeClock()
    assert clock() == clock() == EPOCH
    assert clock().tzinfo is UTC


def test_clock_advances_by_delta_and_keywords() -> None:
    """`advance` adds a timedelta and the keyword amounts and returns the new time."""
    clock = FakeClock(datetime(2026, 3, 1, tzinfo=UTC))
    assert clock.advance(seconds=90) == datetime(2026, 3, 1, 0, 1, 30, tzinfo=UTC)
    assert clock.advance(timedelta(days=1), hours=2) == datetime(2026, 3, 2, 2, 1, 30, tzinfo=UTC)
    assert clock() == datetime(2026, 3, 2, 2, 1, 30, tzinfo=UTC)


def test_clock_refuses_to_step_back_but_may_be_set_anywhere() -> None:
    """A negative step is refused; `set` jumps anywhere, converting the zone to UTC."""
    clock = FakeClock()
    with pytest.raises(ValueError, match="expected a step >= 0"):
        clock.advance(seconds=-1)
    rome = timezone(timedelta(hours=1))
    assert clock.set(datetime(2025, 6, 1, 13, tzinfo=rome)) == datetime(2025, 6, 1, 12, tzinfo=UTC)
    assert clock().tzinfo is UTC


def test_clock_refuses_naive_datetimes() -> None:
    """Naive datetimes are refused at construction and in `set`: a Clock is aware UTC."""
    with pytest.raises(ValueError, match="expected an aware datetime"):
        FakeClock(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="expected an aware datetime"):
        FakeClock().set(datetime(2026, 1, 1))


def test_clock_timestamp_drives_float_clocks() -> None:
    """`timestamp` is the same time in epoch seconds, so it moves the budget's rolling hour."""
    clock = FakeClock()
    assert clock.timestamp() == EPOCH.timestamp()
    budget = Budget(1, clock=clock.timestamp)
    assert budget.reserve() is not None and budget.remaining() == 0
    clock.advance(minutes=59, seconds=59)
    assert budget.remaining() == 0
    clock.advance(seconds=1)
    assert budget.remaining() == 1


# ---- ScriptedTeacher -------------------------------------------------------------------------


async def test_teacher_answers_a_mapping_by_normalised_query() -> None:
    """A scripted request answers its tool whatever its case and spacing; others get none."""
    teacher = ScriptedTeacher({"quanto costa il bitcoin?": "crypto_price"})
    raw = await teacher.ask("  Quanto  costa il BITCOIN? ", "shell_exec", CANDIDATES)
    assert (raw.choice, raw.label) == ("crypto_price", "crypto_price")
    other = await teacher.ask("what's new?", "shell_exec", CANDIDATES)
    assert (other.choice, other.label) == (None, None)


async def test_teacher_resolves_choices_like_a_real_teacher() -> None:
    """A bare name finds its namespaced candidate; a name outside the candidates has no label."""
    teacher = ScriptedTeacher({"tell Ana": "send_message", "look it up": "google_search"})
    bare = await teacher.ask("tell Ana", "shell_exec", CANDIDATES)
    assert (bare.choice, bare.label) == ("send_message", "whatsapp__send_message")
    outside = await teacher.ask("look it up", "shell_exec", CANDIDATES)
    assert (outside.choice, outside.label) == ("google_search", None)


async def test_teacher_records_every_call_with_the_candidates_shown() -> None:
    """Each ask is recorded with its request, used tool, candidates and answer, in order."""
    teacher = ScriptedTeacher({"price of btc": "crypto_price"}, unscripted="none")
    await teacher.ask("price of btc", "shell_exec", list(CANDIDATES))
    await teacher.ask("anything", "fs_read", CANDIDATES[:1])
    assert teacher.requests == ["price of btc", "anything"]
    first, second = teacher.calls
    assert first.candidate_names == NAMES and first.used_tool == "shell_exec"
    assert first.answer is not None and first.answer.label == "crypto_price"
    assert first.error is None
    assert second.candidate_names == ["crypto_price"] and second.used_tool == "fs_read"
    assert second.answer is not None and second.answer.choice is None


async def test_teacher_runs_a_sync_or_async_function_script() -> None:
    """A function script gets (request, used tool, candidates); an async one is awaited."""
    seen: list[tuple[str, str, int]] = []

    def first_candidate(request: str, used: str, candidates: Sequence[Candidate]) -> str:
        seen.append((request, used, len(candidates)))
        return candidates[0].name

    async def slow_last(request: str, used: str, candidates: Sequence[Candidate]) -> str:
        await asyncio.sleep(0)
        return candidates[-1].name

    assert (await ScriptedTeacher(first_candidate).ask("q", "u", CANDIDATES)).label == NAMES[0]
    assert seen == [("q", "u", 3)]
    assert (await ScriptedTeacher(slow_last).ask("q", "u", CANDIDATES)).label == NAMES[-1]


async def test_teacher_queue_comes_first_and_raises_exceptions_in_order() -> None:
    """Queued answers are used one per call before the script; exceptions are raised and recorded."""
    outage = TeacherUnavailable("overloaded")
    teacher = ScriptedTeacher(lambda *_: "web_search").then(outage, "crypto_price")
    with pytest.raises(TeacherUnavailable) as caught:
        await teacher.ask("q", "u", CANDIDATES)
    assert caught.value is outage
    assert (await teacher.ask("q", "u", CANDIDATES)).label == "crypto_price"
    assert (await teacher.ask("q", "u", CANDIDATES)).label == "web_search"
    assert [c.error for c in teacher.calls] == [outage, None, None]
    assert teacher.calls[0].answer is None


async def test_teacher_returns_a_given_raw_answer_as_is() -> None:
    """A `RawAnswer` in the script is returned untouched, tokens included."""
    given = RawAnswer("web_search", "web_search", input_tokens=7, output_tokens=3)
    assert await ScriptedTeacher().then(given).ask("q", "u", CANDIDATES) is given


async def test_teacher_token_figures_grow_with_the_prompt() -> None:
    """Input tokens are estimated from the prompt a real teacher gets: more candidates cost more."""
    teacher = ScriptedTeacher(lambda *_: "crypto_price")
    one = await teacher.ask("price of btc", "shell_exec", CANDIDATES[:1])
    three = await teacher.ask("price of btc", "shell_exec", CANDIDATES)
    assert 100 < one.input_tokens < three.input_tokens < 1000
    assert 10 < one.output_tokens < 64


async def test_teacher_behind_the_oracle_retries_an_outage_and_is_priced() -> None:
    """Through the real oracle: a transient failure is retried, the answer labels, cost > 0."""
    clock = FakeClock()
    teacher = ScriptedTeacher({"quanto costa il bitcoin?": "crypto_price"})
    teacher.then(RetryLater("429", retry_after=2.0))
    answer = await oracle_over(teacher, clock, retries=1).teach(
        "Quanto costa il Bitcoin?", "shell_exec", CANDIDATES
    )
    assert (answer.result, answer.label, answer.attempts) == ("labeled", "crypto_price", 2)
    assert len(teacher.calls) == 2
    second = teacher.calls[1].answer
    assert second is not None and answer.input_tokens == second.input_tokens
    assert answer.cost_usd > 0


async def test_teacher_refuses_calls_once_closed() -> None:
    """After `aclose` the teacher is marked closed and every ask raises `TeacherError`."""
    teacher: Teacher = ScriptedTeacher(lambda *_: "crypto_price")
    await teacher.aclose()
    with pytest.raises(TeacherError, match="closed"):
        await teacher.ask("q", "u", CANDIDATES)
    assert isinstance(teacher, ScriptedTeacher) and teacher.closed
    assert isinstance(teacher.calls[0], TeacherCall) and teacher.calls[0].answer is None


# ---- FakeEmbedder ----------------------------------------------------------------------------


async def test_embedder_gives_unit_float32_rows_and_zero_for_no_words() -> None:
    """Rows are float32 of shape (n, dim) and unit length; a text with no words is all zeros."""
    embedder: Embedder = FakeEmbedder(dim=32)
    vectors = await embedder.embed(["weather in Turin", "send an email", "", "?!"])
    assert vectors.dtype == np.float32 and vectors.shape == (4, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, rtol=1e-6)
    assert not vectors[2:].any()
    assert isinstance(embedder, LocalEmbedder) and embedder.dim == 32


def test_embedder_shared_words_are_similar_and_disjoint_texts_are_not() -> None:
    """Texts sharing words score above 0.5 here; texts sharing none score exactly 0."""
    a, b, c = FakeEmbedder().embed_now(
        ["weather in Turin", "Turin weather tomorrow", "send_email to Marco"]
    )
    assert float(a @ b) > 0.5
    assert float(a @ c) == 0.0


def test_embedder_is_deterministic_across_instances_and_processes() -> None:
    """The same text gives the same bytes in another instance and in another process."""
    texts = ["weather in Turin", "get_weather"]
    here = FakeEmbedder().embed_now(texts)
    assert here.tobytes() == FakeEmbedder().embed_now(texts).tobytes()
    code = (
        "import sys; from toolselect.testing import FakeEmbedder; "
        f"sys.stdout.write(FakeEmbedder().embed_now({texts!r}).tobytes().hex())"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert there == here.tobytes().hex()


def test_embedder_pinned_vectors_are_normalised_and_change_the_id() -> None:
    """Pinned texts get their given vector (normalised) and a different id than the plain one."""
    plain = FakeEmbedder(dim=3)
    pinned = FakeEmbedder(dim=3, vectors={"north": [0.0, 2.0, 0.0]})
    np.testing.assert_array_equal(pinned.embed_now(["north"]), [[0.0, 1.0, 0.0]])
    assert plain.id == "fake-d3" and pinned.id.startswith("fake-d3-") and pinned.id != plain.id
    assert FakeEmbedder(dim=3, vectors={"north": [0.0, 1.0, 0.0]}).id == pinned.id
    with pytest.raises(ValueError, match="expected 3 values for 'south', got 2"):
        FakeEmbedder(dim=3, vectors={"south": [1.0, 0.0]})


async def test_embedder_records_batches_and_fails_on_demand() -> None:
    """Every batch is recorded; `fail_next` raises once per queued error, then it embeds again."""
    embedder = FakeEmbedder().fail_next(EmbedderUnavailable("down"))
    with pytest.raises(EmbedderUnavailable):
        await embedder.embed(["a"])
    assert (await embedder.embed(["b", "c"])).shape[0] == 2
    assert embedder.calls == [("a",), ("b", "c")]
    await embedder.close()
    assert embedder.closed


# ---- memory_store ----------------------------------------------------------------------------


async def test_memory_store_is_migrated_and_holds_the_given_tools() -> None:
    """The store opens migrated, with the given tools upserted into the given pack."""
    tools = [Tool("crypto_price", "Price of a cryptocurrency."), Tool("web_search", "Search.")]
    async with memory_store(tools, pack="assistant") as store:
        assert [t.name for t in await store.list_tools("assistant")] == NAMES[::2]
        assert (await store.state()).catalog_version == 1
        assert store.uri == "sqlite::memory:"


async def test_memory_stores_are_private_and_closed_on_exit() -> None:
    """Two stores share nothing, and a store is unusable once its block is left."""
    async with memory_store([Tool("a")]) as first, memory_store() as second:
        assert await second.list_tools() == []
        assert [t.name for t in await first.list_tools()] == ["a"]
    kept: Store = first
    with pytest.raises(StoreError, match="closed"):
        await kept.list_tools()


def test_testing_module_does_not_import_pytest() -> None:
    """Users import `toolselect.testing` from any test runner: it must not need pytest."""
    tree = ast.parse(Path(toolselect.testing.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert "pytest" not in imported and "_pytest" not in imported


# ---- the README's example --------------------------------------------------------------------


def test_readme_shows_the_fakes_example_verbatim() -> None:
    """examples/test_with_fakes.py is the README's block under "Testing code that uses toolselect"."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Testing code that uses toolselect\n", 1)[1].split("\n## ", 1)[0]
    assert EXAMPLE.read_text() in re.findall(r"```python\n(.*?)```", section, re.S)


async def test_readme_fakes_example_passes() -> None:
    """The README's test, run as written: a service on the four fakes learns a mis-routed turn."""
    spec = importlib.util.spec_from_file_location("readme_fakes_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    await module.test_a_misrouted_turn_is_labelled_and_learned()
