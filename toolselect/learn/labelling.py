"""The labelling of turns: the agent's own successful choice, the ratchet and the ranker inline,
the teacher as tasks.

The agent is the first oracle: a turn whose used tool is in the catalog (not a fallback tool)
and that worked (`outcome: ok`; without an outcome, as `usage_without_outcome` says) labels its
request with that tool, tier `usage`, weaker than a teacher's or a human's label. `commit` takes
a prepared batch and, for its flagged turns, looks up the ratchet labels in one store call and
plans each turn's tier (`oracle.tiers.plan`). Ratchet and ranker labels are
decided inline; every turn is recorded in one call (flagged or not, so analytics have
denominators), the batch's labels are saved in one call and folded once. Teacher escalations run
as separate tasks (bounded by `teacher_concurrency`) so a slow teacher never stalls intake; the
turns they finish meanwhile are recorded together. When no paid call can happen (kill switch, or
no teacher) an escalation is declined inline and its turn recorded once, with its batch.
A save's result is handed to `on_saved`, which folds its exemplars into the ranker at once.
Labels are stamped with the injected clock, so a test or a replay decides their time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import timedelta

import numpy as np
import structlog

from toolselect.clock import Clock
from toolselect.embed import Embedder
from toolselect.errors import SpoolError, ToolselectError
from toolselect.learn.batch import Prepared
from toolselect.learn.candidates import teacher_candidates
from toolselect.learn.detect import is_fallback
from toolselect.learn.finished import FinishedTurns
from toolselect.learn.records import LearnerConfig, LearnerStats, Observation, plain_turn
from toolselect.learn.refused import Refused, RefusedTurn, labelled_meanwhile
from toolselect.learn.tuning import Tuner
from toolselect.metrics import Metrics
from toolselect.names import catalog_names, is_blank, normalise_query
from toolselect.oracle.base import Candidate
from toolselect.oracle.oracle import SHUTDOWN, InFlight, Oracle
from toolselect.oracle.tiers import plan
from toolselect.ranker import CentroidRanker, Ranking, Snapshot
from toolselect.records import Exemplar, SaveResult, Tier, Turn
from toolselect.store.port import LearnerStore

log = structlog.get_logger("toolselect.learn")

# A teacher-tier turn still without a result this long after it was observed was left by a
# process that stopped without closing it (SIGKILL, a lost host; a stop by signal closes its
# own). Closed `error` by any replica; a process still teaching it (a long queue) overwrites
# that with its answer when it finishes, so closing early loses nothing.
ABANDONED_AFTER = timedelta(hours=1)
ABANDONED = "abandoned: no process finished it within an hour"
_ABANDONED_BATCH = 1_000


class Labeller:
    """Labels, records and saves the turns of prepared batches; owns the teacher tasks.

    `teaching` holds the teacher calls in progress, for the learner to wait on or cancel.
    """

    def __init__(
        self,
        *,
        store: LearnerStore,
        embedder: Embedder,
        ranker: CentroidRanker,
        oracle: Oracle,
        on_saved: Callable[[SaveResult], Awaitable[None]],
        describe: Callable[[str], str],
        config: LearnerConfig,
        tuner: Tuner | None,
        metrics: Metrics,
        stats: LearnerStats,
        clock: Clock,
        refused: Refused | None = None,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._ranker = ranker
        self._oracle = oracle
        self._on_saved = on_saved
        self._describe = describe
        self._config = config
        self._tuner = tuner
        self._metrics = metrics
        self._stats = stats
        self._clock = clock
        self.teaching: set[asyncio.Task[None]] = set()
        self._teaching_ids: set[str] = set()
        # For `ask_again`; a tenant's outlives its service, as its budget does.
        self.refused = refused if refused is not None else Refused(config.queue_size)
        # Set by `stop`: turns still drained are not escalated to the teacher.
        self.stopping = False
        # The turns of the batch being committed until the store (or the spool) has them: what
        # a commit cancelled by a stopping service leaves unrecorded (`Learner.close`).
        self.unrecorded: tuple[Observation, ...] = ()
        self._teacher_slots = asyncio.Semaphore(config.teacher_concurrency)
        self._in_flight = InFlight()
        self._finished = FinishedTurns(store)
        # For the snapshot of that version: its packs' members.
        self._packs: tuple[int, dict[str, frozenset[str]]] = (-1, {})

    def stop(self) -> None:
        """A stopping service: no turn is escalated and no teacher attempt starts any more."""
        self.stopping = True
        self._oracle.stop()

    async def commit(self, prepared: Prepared) -> None:
        """Label the flagged turns of a prepared batch, record every turn, save and fold."""
        try:
            await self._commit(prepared)
        except Exception:  # not a cancel: the intake retries or counts the batch itself
            self.unrecorded = ()
            raise

    async def _commit(self, prepared: Prepared) -> None:
        batch, floor, tuner = prepared.batch, prepared.floor, self._tuner
        self.unrecorded = tuple(batch)
        fresh = await self._fresh(batch)
        self.unrecorded = tuple(obs for obs, new in zip(batch, fresh, strict=True) if new)
        # A blank request is recorded but teaches nothing: no label, no teacher call.
        flags = [
            flag if new and not is_blank(obs.request) else None
            for obs, flag, new in zip(batch, prepared.flags, fresh, strict=True)
        ]
        # The ratchet: one lookup for every flagged turn of the batch.
        flagged = [obs.request for obs, flag in zip(batch, flags, strict=True) if flag is not None]
        labels = await self._store.exemplars_for_queries(flagged) if flagged else {}
        turns: list[Turn] = []
        escalations: list[tuple[Turn, np.ndarray, tuple[str, ...]]] = []
        saves: list[tuple[Turn, np.ndarray, str, Tier, float]] = []
        for obs, vector, ranking, signal, flag, new, used_tool in zip(
            batch,
            prepared.vectors,
            prepared.rankings,
            prepared.signals,
            flags,
            fresh,
            prepared.used,
            strict=True,
        ):
            if not new:
                continue
            turn = replace(
                plain_turn(obs),
                top1=signal.top1 if signal else None,
                margin=signal.margin if signal else None,
            )
            used = self._usage_label(obs, prepared.snapshot)
            if used is not None:
                saves.append((turn, vector, used, "usage", 1.0))
            if flag is None:
                if used is not None:
                    turn = replace(turn, tier="usage", label=used, result="labeled")
                    self._decided(turn)
                turns.append(turn)
                continue
            self._metrics.flags.labels(flag.reason).inc()
            existing = labels.get(normalise_query(obs.request))
            probability = self._confidence(ranking) if signal is not None else 0.0
            # The teacher share rations disagreements on turns that worked; turns where the
            # agent could not find its tool (fallback, failed) are always worth a call.
            rationed = flag.reason == "disagreement"
            if tuner is not None and signal is not None and rationed:
                tuner.flagged(probability)
            decision = plan(
                flag,
                obs.outcome,
                signal,
                margin_floor=floor,
                ratchet_label=existing.tool if existing else None,
                ratchet_tier=existing.tier if existing else None,
                tiers=self._config.tiers,
                used_tool=used_tool,
                teacher_worth=tuner is None or not rationed or tuner.worth_teaching(probability),
                shown=obs.shown,
            )
            # A stopping service drains its queue without paying for calls it would cut short.
            teach = decision.escalate and self._oracle.active and not self.stopping
            # Escalations wait for a teacher slot as tasks; while the teacher is slow or down
            # they would pile up without end (memory), so past a queue's worth they are refused.
            backlog = teach and len(self.teaching) + len(escalations) >= self._config.queue_size
            teach = teach and not backlog
            labelled = not decision.escalate and decision.label is not None
            # An escalation no paid call can answer (kill switch, or no teacher) is declined
            # now, so its turn is recorded once, finished, with its batch.
            result: str | None = None
            if not teach:
                result = "limit_reached" if backlog else "labeled" if labelled else "declined"
            label = decision.label if labelled else None
            # One copy of the turn with every decision field (dataclasses.replace per field
            # was a visible share of a flagged batch's CPU).
            turn = replace(
                turn,
                flagged=True,
                flag_reason=flag.reason,
                tier=decision.tier,
                result=result,
                label=label,
                reason=decision.reason,
            )
            if decision.escalate and tuner is not None and rationed:
                tuner.escalated()
            if teach:
                # The tools a fallback's search showed and the agent passed over go last in
                # the teacher's listing: its budget buys deeper candidates first.
                passed = obs.shown if obs.search_status == "not_shown" else ()
                escalations.append((turn, vector, passed))
            else:
                self._decided(turn)
                if backlog:
                    self._metrics.teacher_budget_spent.labels("backlog").inc()
                    turn = self._logged(turn, f"{len(self.teaching)} turns wait for the teacher")
                elif decision.escalate:
                    turn = self._logged(turn, SHUTDOWN if self.stopping else "teacher off")
                elif label is not None and decision.tier == "ranker":
                    saves.append((turn, vector, label, "ranker", probability))
            turns.append(turn)
        try:
            await self._store.record_turns(turns)
        except SpoolError:  # neither the store nor the spool could keep them (a full disk)
            self._metrics.dropped.labels("unwritable").inc(len(turns))
            raise
        finally:
            self.unrecorded = ()
        saved = await self._save(saves)
        if saved.changed:  # one fold per batch: a fold swaps the ranker's matrix
            await self._on_saved(saved)
        for turn, vector, passed in escalations:
            self._escalate(turn, vector, passed)

    async def _fresh(self, batch: Sequence[Observation]) -> list[bool]:
        """Per turn, whether it is new: a turn id already stored, or met earlier in the batch,
        is the same turn sent again (a retry after a lost answer), whatever came between. It
        was recorded, labelled and taught when it first came, so it is none of these again."""
        seen = await self._store.recorded_turn_ids([obs.turn_id for obs in batch])
        fresh: list[bool] = []
        for obs in batch:
            fresh.append(obs.turn_id not in seen)
            seen.add(obs.turn_id)
        if resent := fresh.count(False):
            self._metrics.resent.inc(resent)
        return fresh

    def _usage_label(self, obs: Observation, snapshot: Snapshot) -> str | None:
        """The catalog tool the agent's turn labels (tier `usage`), or None.

        Only a turn that worked labels: `ok`, or no outcome as `usage_without_outcome` says
        (`shown`: only when its search showed the tool). `error` and `corrected` never do, nor
        a blank request."""
        if is_blank(obs.request):
            return None
        outcome = (obs.outcome or "").strip().lower()
        if outcome != "ok":
            rule = self._config.usage_without_outcome
            if outcome or rule == "never" or (rule == "shown" and obs.search_status != "shown"):
                return None
        used = obs.used_tool
        if not used.strip() or is_fallback(used, self._config.fallback_tools):
            return None
        return self._catalog_tool(used, obs.pack, snapshot)

    def _catalog_tool(self, name: str, pack: str | None, snapshot: Snapshot) -> str | None:
        """The catalog tool a used name denotes: the exact name, else the one tool of that bare
        name (`mcp__fs__read` is `read`); within the turn's pack when that pack has tools."""
        version, packs = self._packs
        if version != snapshot.version:
            packs = {}
            self._packs = (snapshot.version, packs)
        members: frozenset[str] | None = None
        if pack and pack in snapshot.packs:
            members = packs.get(pack)
            if members is None:
                members = packs[pack] = frozenset(
                    snapshot.names[i] for i in snapshot.packs[pack].tolist()
                )
        found = catalog_names(snapshot.names).matches(name)
        if members:
            found = [tool for tool in found if tool in members]
        return found[0] if len(found) == 1 else None

    def _decided(self, turn: Turn) -> None:
        self._metrics.decisions.labels(turn.tier or "none", turn.result or "none").inc()

    async def _save(
        self, labels: Sequence[tuple[Turn, np.ndarray, str, Tier, float]]
    ) -> SaveResult:
        """Save labels in one store call."""
        if not labels:
            return SaveResult()
        now = self._clock()
        exemplars = [
            Exemplar(
                id=uuid.uuid4().hex,
                query=turn.request,
                tool=label,
                tier=tier,
                embedder=self._embedder.id,
                embedding=tuple(vector.tolist()),
                created_at=now,
                confidence=float(confidence),
                turn_id=turn.id,
            )
            for turn, vector, label, tier, confidence in labels
        ]
        result = await self._store.save_exemplars(exemplars)
        for unknown in result.unknown_tool:
            log.info("label_for_unknown_tool", tool=unknown.tool, turn_id=unknown.turn_id)
        self._stats.saved += len(result.changed)
        return result

    # -- the teacher tier --------------------------------------------------------------------

    def _confidence(self, ranking: Ranking) -> float:
        """The calibrated probability that the ranker's top-1 is right (the margin without a
        tuner)."""
        if self._tuner is None:
            return ranking.margin
        return self._tuner.current.calibration.probability(ranking.margin)

    def _escalate(self, turn: Turn, vector: np.ndarray, passed: tuple[str, ...]) -> None:
        task = asyncio.create_task(self._teach(turn, vector, passed), name=f"teach-{turn.id}")
        self.teaching.add(task)
        self._teaching_ids.add(turn.id)
        task.add_done_callback(self.teaching.discard)
        task.add_done_callback(lambda _: self._teaching_ids.discard(turn.id))

    async def _teach(self, turn: Turn, vector: np.ndarray, passed: tuple[str, ...]) -> None:
        key = normalise_query(turn.request)
        if not self._in_flight.reserve(key):
            await self._finish(replace(turn, result="declined"), "query already being labelled")
            return
        try:
            async with self._teacher_slots:
                # A listing can hold a thousand candidates, built on the loop that serves
                # rankings: not for a call the kill switch or the budget refuses anyway.
                answer = self._oracle.refusal(turn.id)
                candidates: list[Candidate] = []
                if answer is None:
                    candidates = teacher_candidates(
                        self._ranker,
                        vector,
                        turn.pack,
                        passed,
                        depth=self._tuner.current.teacher_depth
                        if self._tuner
                        else self._config.teacher_candidates,
                        full_catalog=self._config.teacher_full_catalog,
                        max_tokens=self._config.teacher_max_input_tokens,
                        describe=self._describe,
                    )
                    self._metrics.teacher_candidates.observe(len(candidates))
                    answer = await self._oracle.teach(
                        turn.request,
                        turn.used_tool,
                        candidates,
                        turn_id=turn.id,
                        keep=lambda label: self._keep(turn, vector, label),
                    )
            done = replace(turn, result=answer.result, label=answer.label)
            if answer.result == "limit_reached":  # asked again once the hour frees a slot
                self.refused.add(RefusedTurn(turn, vector, passed))
            called = answer.attempts > 0  # not the kill switch, the budget or an error
            if self._tuner is not None and called and answer.result in ("labeled", "declined"):
                names = [c.name for c in candidates]
                position = names.index(answer.label) if answer.label in names else None
                self._tuner.teacher_answered(len(candidates), position)
            await self._finish(done, answer.reason or answer.error)
        except ToolselectError as exc:
            await self._finish(replace(turn, result="error"), str(exc))
        except asyncio.CancelledError:
            # Shutdown: the turn ends `error` in the store rather than stay undecided for good.
            await self._finish(replace(turn, result="error"), SHUTDOWN)
            raise
        finally:
            self._in_flight.release(key)

    async def _keep(self, turn: Turn, vector: np.ndarray, label: str) -> str | None:
        """Save and fold the teacher's label of `turn`; why it was not kept, or None."""
        saved = await self._save([(turn, vector, label, "teacher", 1.0)])
        if saved.changed:
            await self._on_saved(saved)
        if saved.unknown_tool:  # removed from the catalog while the teacher answered
            return f"{label} left the catalog before its label was saved"
        return None

    async def _finish(self, turn: Turn, why: str | None) -> None:
        self._decided(turn)
        await self._finished.record([self._logged(turn, why)])

    async def ask_again(self) -> int:
        """Escalate turns the spent budget refused, newest first, as far as it has room beyond
        the calls in progress: a burst that spent the hour is labelled as the rolling hour
        frees slots, not only the turns that came first. A query labelled meanwhile is left."""
        room = self._oracle.budget.remaining() - len(self.teaching)
        if not self.refused or room <= 0 or self.stopping or not self._oracle.active:
            return 0
        picked = self.refused.take(room)
        labelled = await labelled_meanwhile(self._store, [(p.turn, p.passed) for p in picked])
        again = [p for p in picked if p.turn.id not in labelled]
        for p in again:
            self._escalate(replace(p.turn, result=None), p.vector, p.passed)
        self._metrics.teacher_asked_again.inc(len(again))
        return len(again)

    async def close_abandoned(self) -> int:
        """Close `error` the teacher-tier turns observed over `ABANDONED_AFTER` ago that no
        process finished, but those this one is teaching; how many were closed."""
        before = self._clock() - ABANDONED_AFTER
        left = await self._store.undecided_turns(before, _ABANDONED_BATCH)
        closed = [replace(t, result="error") for t in left if t.id not in self._teaching_ids]
        for turn in closed:
            self._decided(turn)
        closed = [self._logged(turn, ABANDONED) for turn in closed]
        if closed:
            self._metrics.teacher_abandoned.inc(len(closed))
            await self._finished.record(closed)
        return len(closed)

    def _logged(self, turn: Turn, why: str | None) -> Turn:
        """`turn` with `why` as its stored reason, once logged."""
        log.info(
            "turn_labelled",
            turn_id=turn.id,
            tier=turn.tier,
            result=turn.result,
            label=turn.label,
            why=why,
        )
        return replace(turn, reason=why)
