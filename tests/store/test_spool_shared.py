"""One spool file replayed by several processes: the workers of `serve --workers` share the data
folder's `spool.db`, and after an outage every one of them replays it. A record must reach the
store once: a usage label's sighting replayed twice counts twice (only a label's last turn is
recognised as seen), so two workers replaying the same records at once doubled the counts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.store.test_spool_removals import two_workers, write_locked
from toolselect.records import Exemplar, Tool, Turn
from toolselect.store.port import lookup_one
from toolselect.store.spool import Spool, encode

NOW = datetime(2026, 11, 27, 6, 0, tzinfo=UTC)
TOOLS = [Tool("get_weather", "Weather and forecast for a city."), Tool("send_email", "Mail.")]
QUERY = "forecast for paris"
SIGHTINGS = 20


def sighting(i: int) -> Exemplar:
    """The usage label of the `i`th turn that used get_weather for `QUERY`."""
    return Exemplar(
        id=f"e{i}", query=QUERY, tool="get_weather", tier="usage", embedder="hashing-v1",
        embedding=(1.0, 0.0), created_at=NOW + timedelta(seconds=i), turn_id=f"t{i}",
    )  # fmt: skip


async def test_workers_replaying_one_spool_at_once_write_each_record_once(tmp_path: Path) -> None:
    """Two buffered stores over one spool file, as two workers hold them: one spools twenty
    sightings of one request while the store is locked; once it answers, both replay at the
    same moment, as both workers' upkeep does when the store returns. The label counts twenty
    sightings, not up to forty, and the spool ends empty for both."""
    async with two_workers(tmp_path, TOOLS) as (writer, other):
        with write_locked(tmp_path / "toolselect.db"):
            for i in range(SIGHTINGS):  # one save a turn, as the learner's batches make them
                await writer.save_exemplars([sighting(i)])
            assert writer.down and writer.backlog == SIGHTINGS
        written = await asyncio.gather(writer.flush(), other.flush())
        assert sum(written) == SIGHTINGS, written
        stored = await lookup_one(other, QUERY)
        assert stored is not None and stored.count == SIGHTINGS, stored
        assert (writer.backlog, other.backlog) == (0, 0)


def test_each_process_counts_what_the_whole_file_holds(tmp_path: Path) -> None:
    """Two spools over one file, as two workers hold them: after each one's write its depth is
    the file's, whoever wrote the rest. Each used to count its own appends on top of what it
    last counted, so `toolselect_spool_depth` (the latest worker's count) showed one worker's
    share of an outage's writes, and `toolselect_store_backlog` (summed over workers) twice the
    file once both had counted it (a group started on a spool an outage left)."""
    path = tmp_path / "spool.db"
    one, two = (Spool.open(path, max_bytes=1 << 20) for _ in range(2))
    try:
        one.append([turn(f"t{i}") for i in range(3)])
        two.append([turn(f"u{i}") for i in range(2)])
        assert two.depth == {"turn": 5, "oracle_call": 0, "exemplar": 0}
        one.append_labels([sighting(0)])
        assert one.depth == {"turn": 5, "oracle_call": 0, "exemplar": 1}
        assert one.size == two.size + len(encode(sighting(0)))
        two.remove(two.head(4))
        assert two.depth == {"turn": 1, "oracle_call": 0, "exemplar": 1}
        again = Spool.open(path, max_bytes=1 << 20)  # a start counts it from the file too
        assert (again.depth, again.size) == (two.depth, two.size)
        again.close()
    finally:
        one.close()
        two.close()


def turn(turn_id: str) -> Turn:
    return Turn(id=turn_id, request=f"forecast {turn_id}", used_tool="get_weather", at=NOW)
