"""Fakes of toolselect's ports for your own tests (and ours): no network, no model, no Neo4j.

- `FakeClock`: a `toolselect.clock.Clock` that moves only when the test moves it.
- `ScriptedTeacher`: a `Teacher` that answers from a script and records every question.
- `FakeEmbedder`: a deterministic `Embedder`; texts sharing words get similar vectors.
- `memory_store()`: the real SQLite `Store` on a private in-memory database.

They are real implementations of the ports, not mocks: hand them to the constructors that take
a clock, a teacher, an embedder or a store (`Oracle`, `Learner`, `CentroidRanker.set_catalog`,
`toolselect.service.parts.compose`) and assert on what they recorded. Nothing here imports pytest.
"""

from __future__ import annotations

import hashlib
import inspect
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from toolselect.clock import Clock, utc_now
from toolselect.embed.base import Vectors, normalise_rows
from toolselect.embed.hashing import prepare
from toolselect.errors import TeacherError
from toolselect.names import normalise_query
from toolselect.oracle.base import (
    NONE_CHOICE,
    SYSTEM_PROMPT,
    Candidate,
    RawAnswer,
    choice_schema,
    match_candidate,
    user_prompt,
)
from toolselect.records import Retention, Tool, canonical_json
from toolselect.store.sqlite.store import SqliteStore

__all__ = [
    "Answer",
    "FakeClock",
    "FakeEmbedder",
    "ScriptedTeacher",
    "TeacherCall",
    "memory_store",
]

# A fixed default instant: tests that never set the clock still see the same times every run.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# Priced like the default Claude teacher, so the oracle's cost figures are not all zero (and
# spelled out: importing the Anthropic adapter would load its SDK into every test).
DEFAULT_MODEL = "claude-haiku-4-5"


class FakeClock:
    """A `Clock` (aware UTC datetimes) that only moves when the test says so.

    `timestamp` is the same time as epoch seconds, for the parts that take a float clock
    (`Oracle(clock=...)`, `Budget(clock=...)`), so one fake drives them all::

        clock = FakeClock(datetime(2026, 3, 1, tzinfo=UTC))
        budget = Budget(1, clock=clock.timestamp)
        budget.reserve()
        clock.advance(hours=1)          # the slot has left the rolling hour
        assert budget.remaining() == 1
    """

    def __init__(self, start: datetime = EPOCH) -> None:
        self._now = _aware(start)

    def __call__(self) -> datetime:
        return self._now

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()})"

    def timestamp(self) -> float:
        """The current time in seconds since the Unix epoch."""
        return self._now.timestamp()

    def set(self, when: datetime) -> datetime:
        """Jump to `when` (aware; backwards too, as a wall clock may) and return it."""
        self._now = _aware(when)
        return self._now

    def advance(
        self,
        delta: timedelta | None = None,
        *,
        days: float = 0,
        hours: float = 0,
        minutes: float = 0,
        seconds: float = 0,
    ) -> datetime:
        """Move forward by `delta` plus the keyword amounts and return the new time."""
        step = (delta or timedelta()) + timedelta(
            days=days, hours=hours, minutes=minutes, seconds=seconds
        )
        if step < timedelta():
            raise ValueError(f"expected a step >= 0 (use set() to go back), got {step}")
        self._now += step
        return self._now


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got naive {when.isoformat()}")
    return when.astimezone(UTC)


# ---- teacher ---------------------------------------------------------------------------------

# What a script may give for one call: a tool name (resolved against the candidates like a
# real answer), None or "none" (the teacher picked none), a ready `RawAnswer`, or an exception
# to raise (`TeacherUnavailable`, `RetryLater` and `TeacherError` are what real teachers raise).
Answer = str | RawAnswer | BaseException | None
Script = Callable[[str, str, Sequence[Candidate]], Answer | Awaitable[Answer]]
# A forced tool call costs a few dozen output tokens on the hosted models.
_OUTPUT_TOKENS = 24


@dataclass(frozen=True, slots=True)
class TeacherCall:
    """One `ask` a `ScriptedTeacher` received, with what it answered or raised."""

    request: str
    used_tool: str
    candidates: tuple[Candidate, ...]
    answer: RawAnswer | None
    error: BaseException | None

    @property
    def candidate_names(self) -> list[str]:
        return [c.name for c in self.candidates]


class ScriptedTeacher:
    """A `Teacher` that answers from a script and records every call.

    `script` is a mapping from request (compared by normalised query) to answer, or a function
    `(request, used_tool, candidates) -> answer` (it may be async, to make a call slow). A request
    the mapping does not hold gets `unscripted` (default: the teacher picks none). Answers given
    to `then` are used first, one per call, in order: the way to script an outage. An answer is a
    tool name, None/"none", a `RawAnswer`, or an exception to raise. Token counts are estimated
    from the prompt a real teacher would be sent, so the oracle's cost figures are plausible::

        teacher = ScriptedTeacher({"quanto costa il bitcoin?": "crypto_price"})
        teacher.then(TeacherUnavailable("overloaded"))   # the first call fails, the retry answers
        oracle = Oracle(teacher, enabled=True, budget=Budget(60), retry=RetryPolicy(retries=1),
                        timeout_s=5.0, record_call=store.record_oracle_call, sleep=no_sleep)
        answer = await oracle.teach("Quanto costa il Bitcoin?", "shell_exec", candidates)
        assert answer.label == "crypto_price" and len(teacher.calls) == 2
        assert teacher.calls[0].candidate_names == [c.name for c in candidates]
    """

    def __init__(
        self,
        script: Mapping[str, Answer] | Script | None = None,
        *,
        unscripted: Answer = None,
        provider: str = "scripted",
        model: str = DEFAULT_MODEL,
    ) -> None:
        self._script = script
        self._table = (
            {normalise_query(query): answer for query, answer in script.items()}
            if isinstance(script, Mapping)
            else None
        )
        self._unscripted = unscripted
        self._provider = provider
        self._model = model
        self._queue: deque[Answer] = deque()
        self.calls: list[TeacherCall] = []
        self.closed = False

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def model(self) -> str:
        return self._model

    @property
    def requests(self) -> list[str]:
        """The requests asked about, in order (one per attempt, retries included)."""
        return [call.request for call in self.calls]

    def then(self, *answers: Answer) -> ScriptedTeacher:
        """Queue answers for the next calls, before the script; returns the teacher."""
        self._queue.extend(answers)
        return self

    async def ask(self, request: str, used_tool: str, candidates: Sequence[Candidate]) -> RawAnswer:
        shown = tuple(candidates)
        answer: Answer
        if self.closed:
            answer = TeacherError("the scripted teacher was closed")
        elif self._queue:
            answer = self._queue.popleft()
        else:
            answer = await self._scripted(request, used_tool, shown)
        if isinstance(answer, BaseException):
            self.calls.append(TeacherCall(request, used_tool, shown, None, answer))
            raise answer
        raw = answer if isinstance(answer, RawAnswer) else _raw(answer, request, used_tool, shown)
        self.calls.append(TeacherCall(request, used_tool, shown, raw, None))
        return raw

    async def _scripted(self, request: str, used_tool: str, shown: Sequence[Candidate]) -> Answer:
        if self._table is not None:
            return self._table.get(normalise_query(request), self._unscripted)
        if self._script is None or isinstance(self._script, Mapping):
            return self._unscripted
        answer = self._script(request, used_tool, shown)
        if inspect.isawaitable(answer):
            return await answer
        return answer

    async def aclose(self) -> None:
        self.closed = True


def _raw(
    choice: str | None, request: str, used_tool: str, candidates: Sequence[Candidate]
) -> RawAnswer:
    """What a real teacher returns for `choice`, with tokens estimated at ~4 characters each."""
    picked = None if choice in (None, NONE_CHOICE) else choice
    prompt = SYSTEM_PROMPT + user_prompt(request, used_tool, candidates)
    prompt += canonical_json(choice_schema(candidates))
    return RawAnswer(
        choice=picked,
        label=match_candidate(picked, candidates),
        input_tokens=len(prompt) // 4 + 1,
        output_tokens=_OUTPUT_TOKENS + len(picked or NONE_CHOICE) // 4,
    )


# ---- embedder --------------------------------------------------------------------------------


class FakeEmbedder:
    """A deterministic `Embedder` (and `LocalEmbedder`): a bag of words hashed into `dim` axes.

    The same text always gives the same unit vector, in every process; texts sharing words get
    a cosine above 0, texts sharing none get 0 (unless two words hash to one axis: rare at the
    default 1024). Words are the hashing embedder's (`toolselect.embed.hashing.prepare`):
    lower-cased, names split (`get_weather` is `get weather`), function words dropped. `vectors` pins exact
    texts to given vectors, for a geometry the test controls. `calls` records each batch;
    `fail_next` makes the next calls raise (e.g. `EmbedderUnavailable`)::

        embedder = FakeEmbedder()
        a, b, c = embedder.embed_now(["weather in Turin", "Turin weather tomorrow", "send email"])
        assert a @ b > 0.5 and a @ c == 0.0

        ranker = CentroidRanker()
        ranker.set_catalog(tools, await embedder.embed([tool_text(t) for t in tools]))
    """

    def __init__(
        self, dim: int = 1024, vectors: Mapping[str, Sequence[float]] | None = None
    ) -> None:
        if dim < 1:
            raise ValueError(f"expected dim >= 1, got {dim}")
        self._dim = dim
        self._pinned: dict[str, Vectors] = {}
        for text, values in (vectors or {}).items():
            if len(values) != dim:
                raise ValueError(f"expected {dim} values for {text!r}, got {len(values)}")
            self._pinned[text] = normalise_rows(np.asarray([values], dtype=np.float32))[0]
        digest = hashlib.blake2b(digest_size=4)
        for text in sorted(self._pinned):
            digest.update(text.encode() + b"\0" + self._pinned[text].tobytes())
        # Pinned vectors move vectors, so they are part of the id (see `Embedder.id`).
        self._id = f"fake-d{dim}" + (f"-{digest.hexdigest()}" if self._pinned else "")
        self._failures: deque[BaseException] = deque()
        self.calls: list[tuple[str, ...]] = []
        self.closed = False

    @property
    def id(self) -> str:
        return self._id

    @property
    def dim(self) -> int:
        return self._dim

    def fail_next(self, *errors: BaseException) -> FakeEmbedder:
        """Make the next calls raise these, one each, in order; returns the embedder."""
        self._failures.extend(errors)
        return self

    async def embed(self, texts: Sequence[str]) -> Vectors:
        return self.embed_now(texts)

    def embed_now(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(tuple(texts))
        if self._failures:
            raise self._failures.popleft()
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            pinned = self._pinned.get(text)
            if pinned is not None:
                out[row] = pinned
                continue
            # The hashing embedder's words: names split, function words dropped.
            for word in prepare(text).split():
                out[row, _axis(word, self._dim)] += 1.0
        return normalise_rows(out)

    async def close(self) -> None:
        self.closed = True


def _axis(word: str, dim: int) -> int:
    # blake2b, not hash(): str hashes are salted per process, and vectors must not be.
    digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % dim


# ---- store -----------------------------------------------------------------------------------


@asynccontextmanager
async def memory_store(
    tools: Sequence[Tool] = (),
    *,
    pack: str | None = None,
    retention: Retention | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[SqliteStore]:
    """A migrated `Store` on a private in-memory SQLite database, closed (and gone) on exit.

    It is the embedded store itself (`SqliteStore`), so versions, the save rules, retention and
    analytics behave as in production; only the data does not outlive the block. `tools` are
    upserted first (into `pack`, if given); `clock` stamps tools and drives retention::

        async with memory_store([Tool("crypto_price", "Price of a cryptocurrency")]) as store:
            parts = compose(settings, store, FakeEmbedder(), teacher=ScriptedTeacher())
            ...
    """
    # ":memory:" on the store's single connection (one worker thread owns it for the store's
    # life), so the database lives exactly as long as the store.
    store = SqliteStore(Path(":memory:"), retention=retention, clock=clock or utc_now)
    try:
        await store.migrate()
        if tools:
            await store.upsert_tools(tools, pack=pack)
        yield store
    finally:
        await store.close()
