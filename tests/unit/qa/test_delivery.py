"""The QA app never drops or commits past a record an agent has not processed (issue #7).

Two faust-streaming 0.15.3 behaviours, each of which lost a final right after a restart:

- ``FlowControlEvent.resume()`` clears every agent's input buffer, also when the flow is already
  running; faust's table recovery does exactly that after it has resumed the stream partitions,
  so records fetched in between were cleared unprocessed and never fetched again. The app's
  ``_FlowControl`` clears only on a real resume (after a suspension, i.e. a rebalance).
- ``Consumer._add_gap`` counted the record just fetched as part of the offset gap before it (a
  gap counts as acknowledged when offsets are committed), so a commit could pass it while it
  was still in flight. ``_ReadCommittedConsumer._add_gap`` ends the gap before that record.
- ``perform_seek`` (faust's rewind after table recovery, and after it dropped a fetched batch)
  left a partition without a committed offset where it was: after a restart before the first
  commit, a batch dropped at the end of table recovery was never fetched again.
  ``_ReadCommittedConsumerThread`` seeks such a partition to its beginning.

The whole path (a SIGKILL, a restart with finals arriving meanwhile) runs against the broker in
tests/integration/test_qa_pipeline.py.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from faust.types import TP
from intervaltree import IntervalTree
from mode.utils.queues import FlowControlQueue

from pipeline.qa import faust_compat
from pipeline.qa.app import QaApp
from pipeline.qa.rules import DEFAULT_RULES
from pipeline.settings import KafkaSettings, QaSettings, Settings

TOPIC_PARTITION = TP("asr.finals", 7)


def _buffered(flow: faust_compat.FlowControl) -> FlowControlQueue[str]:
    queue: FlowControlQueue[str] = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    queue.put_nowait("final 9")
    return queue


def test_resuming_a_running_flow_keeps_what_the_agents_have_not_read() -> None:
    async def scenario() -> int:
        flow = faust_compat.FlowControl()
        flow.resume()  # recovery resumes the flow (it starts suspended)
        queue = _buffered(flow)  # a record fetched once the stream partitions are resumed
        flow.resume()  # recovery is complete: faust resumes again
        return queue.qsize()

    assert asyncio.run(scenario()) == 1


def test_resuming_after_a_suspension_still_drops_what_was_read_before() -> None:
    async def scenario() -> tuple[bool, int]:
        flow = faust_compat.FlowControl()
        flow.resume()
        queue = _buffered(flow)
        flow.suspend()  # a rebalance
        suspended = not flow.is_active()
        flow.resume()
        return suspended, queue.qsize()

    assert asyncio.run(scenario()) == (True, 0)


def test_the_app_uses_this_flow_control() -> None:
    settings = Settings(kafka=KafkaSettings(topic_prefix="env1."), qa=QaSettings(web_port=16098))
    app = QaApp(settings, DEFAULT_RULES)
    assert isinstance(app.app.flow_control, faust_compat.FlowControl)
    assert not app.app.flow_control.is_active()


def _consumer(committed: int | None) -> Any:
    """The consumer's offset bookkeeping, without a transport or a broker."""
    consumer: Any = object.__new__(faust_compat.ReadCommittedConsumer)
    consumer._committed_offset = defaultdict(lambda: None, {TOPIC_PARTITION: committed})
    consumer._gap = defaultdict(IntervalTree)
    consumer._acked = defaultdict(list)
    consumer._acked_index = defaultdict(set)
    return consumer


def _gap(consumer: Any) -> list[tuple[int, int]]:
    return sorted((i.begin, i.end) for i in consumer._gap[TOPIC_PARTITION])


def _commit_all(consumer: Any) -> int | None:
    """Commit as far as faust would, one commit interval after another."""
    committed: int | None = consumer._committed_offset[TOPIC_PARTITION]
    for _ in range(100):
        offset = consumer._new_offset(TOPIC_PARTITION)
        if offset is None or (committed is not None and offset <= committed):
            break
        committed = consumer._committed_offset[TOPIC_PARTITION] = offset
    return committed


def test_a_gap_ends_before_the_record_that_revealed_it() -> None:
    consumer = _consumer(committed=None)
    # read 2, then 4 (3 is a transaction marker)
    asyncio.run(consumer._add_gap(TOPIC_PARTITION, 3, 4))
    assert _gap(consumer) == [(3, 4)]
    # a jump by one offset is no gap at all
    asyncio.run(consumer._add_gap(TOPIC_PARTITION, 5, 5))
    assert _gap(consumer) == [(3, 4)]


def test_a_commit_never_passes_a_record_in_flight_after_a_seek() -> None:
    # Records 2..18 (every other offset: markers between) were processed before a seek reset
    # the read position to the committed offset 1; then record 20 is fetched: faust sees a gap
    # 2..19. Until 20 is processed the commit must stop before it.
    consumer = _consumer(committed=1)
    consumer._acked[TOPIC_PARTITION] = list(range(2, 19, 2))
    consumer._acked_index[TOPIC_PARTITION] = set(range(2, 19, 2))
    asyncio.run(consumer._add_gap(TOPIC_PARTITION, 2, 20))
    assert _commit_all(consumer) == 20
    consumer._acked[TOPIC_PARTITION].append(20)
    assert _commit_all(consumer) == 21


def test_markers_between_processed_records_still_commit() -> None:
    consumer = _consumer(committed=1)
    for previous, offset in ((2, 4), (4, 6)):
        asyncio.run(consumer._add_gap(TOPIC_PARTITION, previous + 1, offset))
    consumer._acked[TOPIC_PARTITION] = [2, 4, 6]
    assert _commit_all(consumer) == 7


class _FakeAiokafkaConsumer:
    """The aiokafka consumer calls ``_seek_to_committed_or_beginning`` makes."""

    def __init__(self, committed: dict[TP, int | None], assigned: set[TP]) -> None:
        self.committed = committed
        self.assigned = assigned
        self.to_beginning: list[TP] = []

    async def seek_to_committed(self) -> dict[TP, int | None]:
        return dict(self.committed)  # aiokafka seeks only to offsets > 0

    def assignment(self) -> set[TP]:
        return self.assigned

    async def seek_to_beginning(self, *partitions: TP) -> bool:
        self.to_beginning.extend(partitions)
        return True


class _FakeParent:
    def _is_changelog_tp(self, tp: TP) -> bool:
        return tp.topic.endswith("-changelog")


def test_a_partition_without_a_committed_offset_is_fetched_again_from_its_beginning() -> None:
    # A restart before the first commit: faust dropped a batch fetched while the stream
    # partitions were paused (table recovery), and rewinds to the committed offsets. A partition
    # without one must go back to its beginning, not stay at the end of the dropped batch.
    never = TP("asr.finals", 4)
    at_zero = TP("asr.finals", 5)
    committed = TP("asr.finals", 6)
    changelog = TP("qa-calls-changelog", 0)
    revoked = TP("asr.events", 1)
    fake = _FakeAiokafkaConsumer(
        {never: None, at_zero: 0, committed: 53, changelog: None, revoked: None},
        {never, at_zero, committed, changelog},
    )
    thread: Any = object.__new__(faust_compat.ReadCommittedConsumerThread)
    thread._consumer = fake
    thread.consumer = _FakeParent()

    result = asyncio.run(thread._seek_to_committed_or_beginning())

    assert sorted(fake.to_beginning) == [never, at_zero]
    assert result == fake.committed  # faust's read offsets follow the committed ones


def test_nothing_to_rewind_when_every_partition_has_a_commit() -> None:
    fake = _FakeAiokafkaConsumer({TOPIC_PARTITION: 12}, {TOPIC_PARTITION})
    thread: Any = object.__new__(faust_compat.ReadCommittedConsumerThread)
    thread._consumer = fake
    thread.consumer = _FakeParent()
    asyncio.run(thread._seek_to_committed_or_beginning())
    assert fake.to_beginning == []
