"""The worker loop across hand-overs (takeovers, rebalances while paused, idle closes), with the
fake Kafka clients of ``test_worker_loop``: what a new owner repeats, refuses and resumes."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from confluent_kafka import TopicPartition

from pipeline.asr.recognizer import Recognition
from pipeline.asr.session import SessionKey
from pipeline.asr.vad import EnergyVad
from pipeline.clock import ManualClock
from pipeline.errors import InfrastructureError
from pipeline.worker.loop import AsrWorker
from tests.unit.worker.test_worker_loop import (
    _chunk,
    _Consumer,
    _Message,
    _Producer,
    _run,
    _Speech,
    _takeover,
    _types,
    _worker,
)


class _Says:
    """A recognizer that hears the same words in every window."""

    model_id = "says"

    def recognize(self, requests: Any) -> list[Recognition]:
        return [Recognition((), "hello there", -0.1, 0.0, 1.0) for _ in requests]


def _finals(producer: _Producer) -> list[int]:
    return [
        orjson.loads(value)["utterance_index"]
        for topic, _, value, _ in producer.committed
        if "finals" in topic and value is not None
    ]


def _dead_letters(producer: _Producer) -> int:
    return sum("dlq" in topic for topic, *_ in producer.committed)


def _bad(offset: int) -> _Message:
    return _Message(b"c2", b"\x00\x01\x02", [("ss-version", b"99")], offset)


def test_a_replay_read_over_several_commits_repeats_no_dead_letter_or_event() -> None:
    # The dead owner dead-lettered three records behind an open call, which keeps the committed
    # offset at 0. The survivor replays it all, 20 records a poll, committing between polls:
    # its commits must not lower handled_through and take the rest of the replay for new input.
    clock = ManualClock(1_000_000)
    log = [*(_chunk("A", seq, seq, loud=True) for seq in range(50)), *map(_bad, range(50, 53))]
    first, committed = _worker(clock, _Speech())
    first._clients.consumer.queue = list(log)
    first._iteration()
    first._commit()
    assert (_dead_letters(committed), first._streams.book.partitions[0].handled_through) == (3, 52)
    survivor, producer = _takeover(clock, committed, _Speech())
    survivor._worker = dataclasses.replace(survivor._worker, poll_batch=20)
    survivor._clients.consumer.queue = list(log)
    for _ in range(4):
        survivor._iteration()
        clock.advance(1_000)  # a commit is due at every iteration
    survivor._commit()
    assert survivor._streams.book.partitions[0].handled_through == 52
    assert _dead_letters(producer) == 0
    assert "chunk_rejected" not in _types(producer)


@pytest.mark.parametrize("survivor_limit", [1, 10])
def test_a_takeover_does_not_admit_a_call_the_dead_owner_refused_at_its_limit(
    survivor_limit: int,
) -> None:
    # B was refused at the dead owner's session limit (dead-lettered there). Whether or not the
    # survivor has room for it, admitting it on the replay would transcribe audio that is on
    # the DLQ, with no session_started ever published.
    clock = ManualClock(1_000_000)
    first, committed = _worker(clock, max_open_sessions=1)
    first._clients.consumer.queue = [_chunk("A", 0, 0), _chunk("B", 0, 1), _chunk("A", 1, 2)]
    first._iteration()
    first._commit()
    assert first.status.dead_letters == 1
    survivor, producer = _takeover(clock, committed, max_open_sessions=survivor_limit)
    survivor._clients.consumer.queue = [_chunk("A", 0, 0), _chunk("B", 0, 1), _chunk("A", 1, 2)]
    survivor._iteration()
    survivor._commit()
    assert SessionKey("B", "mono") not in survivor._engine.sessions
    assert survivor._streams.admission.state(("B", "mono")) is None
    assert _dead_letters(producer) == 0  # refused once, already


def test_past_the_replay_a_call_refused_by_the_dead_owner_is_decided_afresh() -> None:
    clock = ManualClock(1_000_000)
    first, committed = _worker(clock, max_open_sessions=1)
    first._clients.consumer.queue = [_chunk("A", 0, 0), _chunk("B", 0, 1)]
    first._iteration()
    first._commit()
    survivor, producer = _takeover(clock, committed, max_open_sessions=10)
    survivor._clients.consumer.queue = [_chunk("A", 0, 0), _chunk("B", 0, 1), _chunk("B", 1, 2)]
    survivor._iteration()
    survivor._commit()
    assert SessionKey("B", "mono") in survivor._engine.sessions  # there is room now
    assert _types(producer) == ["session_started", "sequence_gap"]


def test_an_unusable_snapshot_resumes_cold_with_the_numbering_and_times_continued() -> None:
    # The snapshot released the records before it, so the replay starts mid-call: its new
    # utterances must continue the dead owner's numbering, not restart at 0 (where
    # finals_through would take them for finals already published), and their times must
    # count from the call's start. The control: the same takeover with a usable snapshot.
    clock = ManualClock(1_000_000)
    first, committed = _worker(clock, EnergyVad())
    first._engine._recognizer = _Says()  # type: ignore[assignment]
    seq = 0

    def speech_then_quiet(call: str, loud: int, quiet: int) -> list[_Message]:
        nonlocal seq
        out = [_chunk(call, s, s, loud=s < seq + loud) for s in range(seq, seq + loud + quiet)]
        seq += loud + quiet
        return out

    for _ in range(3):  # three utterances, a snapshot in the quiet after each
        _run(first, speech_then_quiet("c1", 50, 60))
        clock.advance(10_000)
        _run(first, [])
    assert _finals(committed) == [0, 1, 2]
    more = speech_then_quiet("c1", 50, 60) + speech_then_quiet("c1", 50, 60)
    spans = {}
    for vad in (EnergyVad(), _RefusingVad()):  # the second cannot import any VAD state
        survivor, producer = _takeover(clock, committed, vad)
        survivor._engine._recognizer = _Says()  # type: ignore[assignment]
        _run(survivor, more)
        spans[type(vad)] = [
            (record["utterance_index"], record["start_ms"], record["end_ms"])
            for record in (
                orjson.loads(value)
                for topic, _, value, _ in producer.committed
                if "finals" in topic
            )
        ]
    assert [index for index, *_ in spans[_RefusingVad]] == [3, 4]
    for (_, start, end), (_, cold_start, cold_end) in zip(
        spans[EnergyVad], spans[_RefusingVad], strict=True
    ):
        assert abs(cold_start - start) <= 100  # a few VAD frames of a cold start, at most
        assert abs(cold_end - end) <= 100


class _RefusingVad(EnergyVad):
    """An energy VAD that cannot import any state (as a corrupt checkpoint would make it)."""

    def import_state(self, data: Any) -> Any:
        raise RuntimeError("corrupt VAD state")


class _StickyPauseConsumer(_Consumer):
    """librdkafka's rule: a partition's pause survives its revoke and a later re-assignment;
    only ``resume`` clears it. Hands out ``queues[p]`` of the assigned, unpaused partitions."""

    def __init__(self) -> None:
        super().__init__()
        self.assigned: set[int] = set()
        self.app_paused: set[int] = set()
        self.queues: dict[int, list[_Message]] = {}

    def pause(self, partitions: Any) -> None:
        self.app_paused |= {tp.partition for tp in partitions}
        self.pauses += 1

    def resume(self, partitions: Any) -> None:
        self.app_paused -= {tp.partition for tp in partitions}

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[_Message]:
        out: list[_Message] = []
        for partition in sorted(self.assigned - self.app_paused):
            queue = self.queues.get(partition, [])
            out += queue[:num_messages]
            self.queues[partition] = queue[num_messages:]
        return out


class _OnPartition(_Message):
    def __init__(self, message: _Message, partition: int) -> None:
        super().__init__(message.key(), message.value(), message.headers(), message.offset())
        self._partition = partition

    def partition(self) -> int:
        return self._partition


def _rebalance(
    worker: AsrWorker, consumer: _StickyPauseConsumer, revoke: set[int], assign: set[int]
) -> None:
    if revoke:
        worker._handover.on_revoke(
            consumer, [TopicPartition("audio.chunks", p) for p in sorted(revoke)]
        )
        consumer.assigned -= revoke
    if assign:  # the Python client assigns after the callback returns
        worker._handover.on_assign(
            consumer, [TopicPartition("audio.chunks", p) for p in sorted(assign)]
        )
        consumer.assigned |= assign


def test_a_partition_revoked_while_paused_is_fetched_when_it_comes_back() -> None:
    clock = ManualClock(1_000_000)
    worker, _ = _worker(clock)
    consumer = worker._clients.consumer = _StickyPauseConsumer()
    worker._handover.read_checkpoints = lambda partitions: {}  # type: ignore[method-assign]
    worker._streams.forget([0])
    worker.status.assigned = frozenset()
    _rebalance(worker, consumer, set(), {0, 1})
    worker._handover.catch_up_partitions = frozenset()  # no backlog: caught up at once
    engine = worker._engine
    engine.pending_finals = lambda: 1_000  # type: ignore[method-assign]  # finals pile up
    worker._iteration()
    assert worker.status.paused
    assert consumer.app_paused == {0, 1}
    _rebalance(worker, consumer, {1}, set())  # a peer joins, p1 moves while paused
    del engine.pending_finals  # the finals drain: fetching resumes (p0)
    worker._iteration()
    assert not worker.status.paused
    _rebalance(worker, consumer, {0}, {1})  # the peer leaves; p1 comes back
    consumer.queues[1] = [_OnPartition(_chunk("c1", seq, seq), 1) for seq in range(50)]
    for _ in range(5):
        worker._iteration()
    assert consumer.queues[1] == []
    assert SessionKey("c1", "mono") in worker._engine.sessions


def test_catching_up_on_a_backlog_is_not_stopped_by_its_own_queued_finals(monkeypatch: Any) -> None:
    # Catch-up runs the VAD only, so a backlog with many utterances queues finals by design;
    # pausing the fetch for them would stop the very reading that ends the catch-up.
    now = [1_000.0]
    monkeypatch.setattr("pipeline.worker.loop.time.monotonic", lambda: now[0])
    clock = ManualClock(1_000_000)
    worker, _ = _worker(clock, EnergyVad(), max_pending_jobs=4)
    worker._worker = dataclasses.replace(worker._worker, poll_batch=50)
    consumer = worker._clients.consumer
    worker._handover.read_checkpoints = lambda partitions: {}  # type: ignore[method-assign]
    worker._streams.forget([0])
    worker.status.assigned = frozenset()
    worker._handover.on_assign(consumer, [TopicPartition("audio.chunks", 0)])
    backlog = [  # 8 calls: 1 s of speech then 1.2 s of quiet each (one final each)
        _chunk(f"call-{n}", seq, 8 * seq + n, loud=seq < 50) for seq in range(110) for n in range(8)
    ]
    consumer.queue = list(backlog)
    high = len(backlog) + 2_000  # more is still to come while the backlog is read
    consumer.get_watermark_offsets = lambda *_, **__: (0, high)  # type: ignore[method-assign]
    for _ in range(40):  # 2 s of loop time
        worker._iteration()
        now[0] += 0.05
        clock.advance(50)
    assert consumer.queue == []
    assert not worker.status.paused


def test_a_chunk_after_an_idle_close_is_dead_lettered_not_fed_to_the_closed_stream() -> None:
    clock = ManualClock(1_000_000)
    worker, producer = _worker(clock, EnergyVad())
    worker._engine._recognizer = _Says()  # type: ignore[assignment]
    key = SessionKey("c1", "mono")
    for seq in range(50):  # 1 s of speech, the utterance open
        worker._handle(_chunk("c1", seq, seq, loud=True))
    worker._engine.segment()
    worker._tick_fetch_clock()
    # No record at all (a lone call): closed after the quiet-partition timeout.
    for _ in range(worker._worker.quiet_idle_timeout_ms // 500 + 2):
        clock.advance(500)
        worker._tick_fetch_clock()
    worker._close_idle_sessions()
    worker._engine.segment()  # the stream is closed; its final not decoded yet
    assert worker._engine.sessions[key].ended
    worker._handle(_chunk("c1", 50, 50, loud=True))  # the caller was not gone after all
    for _ in range(3):
        for output in worker._engine.step().outputs:
            worker._router.route(output)
    worker._commit()
    assert _finals(producer) == [0]
    assert _dead_letters(producer) == 1
    dead = [value for topic, _, value, _ in producer.committed if "dlq" in topic]
    assert dead  # the original record, with its reason in the headers
    assert "session_ended" in _types(producer)


class _OffsetsProducer(_Producer):
    def __init__(self) -> None:
        super().__init__()
        self.sent_offsets: list[TopicPartition] = []

    def send_offsets_to_transaction(self, offsets: Any, *_: Any) -> None:
        self.sent_offsets += offsets
        super().send_offsets_to_transaction(offsets)


class _HeldBackCheckpoints:
    """A checkpoint reader whose end is held back (a dead owner's open transaction); ``during``
    runs at its first fetch (a SIGTERM arriving meanwhile)."""

    def __init__(self, during: Any) -> None:
        self.during, self.fetches, self.closed = during, 0, False

    def get_watermark_offsets(self, *_: Any, **__: Any) -> tuple[int, int]:
        return 0, 5

    def assign(self, partitions: Any) -> None:
        pass

    def consume(self, *_: Any, **__: Any) -> list[Any]:
        self.fetches += 1
        if self.fetches == 1:
            self.during()
        return []

    def position(self, partitions: Any) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 0) for tp in partitions]

    def close(self) -> None:
        self.closed = True


def test_a_shutdown_during_a_new_partition_s_checkpoint_read_leaves_it_unowned_and_unread(
    monkeypatch: Any,
) -> None:
    # The read may wait 30 s for a dead owner's transaction; a SIGTERM meanwhile must not wait
    # for it, nor own, fetch or commit the partition it was restoring (the next owner does).
    clock = ManualClock(1_000_000)
    worker, _ = _worker(clock)
    worker._clients.transactional = producer = _OffsetsProducer()
    consumer = worker._clients.consumer = _StickyPauseConsumer()
    consumer.close = lambda: None  # type: ignore[attr-defined]
    consumer.assigned = {0}
    consumer.queues[1] = [_OnPartition(_chunk("c1", seq, seq), 1) for seq in range(5)]
    reader = _HeldBackCheckpoints(during=worker.stop)
    monkeypatch.setattr("pipeline.runtime.checkpoint_reader.new_consumer", lambda config: reader)
    _rebalance(worker, consumer, set(), {1})
    assert (reader.fetches, reader.closed) == (1, True)
    assert consumer.app_paused == {1}
    assert worker.status.assigned == {0}
    assert set(worker._streams.book.partitions) == {0}
    worker._iteration()
    assert len(consumer.queues[1]) == 5  # nothing of it fetched
    worker._shutdown()
    assert {tp.partition for tp in producer.sent_offsets} <= {0}
    assert "partitions_assigned" not in _types(producer)
    # The leave revokes both; only the owned one is news.
    worker._handover.on_revoke(consumer, [TopicPartition("audio.chunks", p) for p in (0, 1)])
    worker._commit()
    revoked = [
        orjson.loads(value)["detail"]["partitions"]
        for topic, _, value, _ in producer.committed
        if "events" in topic and orjson.loads(value)["type"] == "partitions_revoked"
    ]
    assert revoked == [[0]]


def _metadata(**partitions: int) -> Any:
    return SimpleNamespace(
        topics={
            name.replace("_", "."): SimpleNamespace(partitions=dict.fromkeys(range(n)), error=None)
            for name, n in partitions.items()
        }
    )


def test_a_worker_refuses_to_start_when_asr_checkpoints_has_fewer_partitions() -> None:
    worker, _ = _worker(ManualClock(1_000_000))
    worker._clients.consumer.list_topics = lambda **_: _metadata(
        audio_chunks=24, asr_checkpoints=12
    )  # type: ignore[attr-defined]
    with pytest.raises(InfrastructureError, match=r"asr\.checkpoints has 12 partitions but audio"):
        worker._handover.check_checkpoint_partitions()
    worker._clients.consumer.list_topics = lambda **_: _metadata(
        audio_chunks=12, asr_checkpoints=12
    )  # type: ignore[attr-defined]
    worker._handover.check_checkpoint_partitions()


def test_a_worker_started_before_asr_checkpoints_existed_checks_at_its_first_assignment() -> None:
    # Review finding: the check at start found no asr.checkpoints (the topics Job still
    # running) and was never made again, so partitions beyond the count were taken.
    worker, _ = _worker(ManualClock(1_000_000))
    consumer = worker._clients.consumer = _StickyPauseConsumer()
    consumer.list_topics = lambda **_: _metadata(audio_chunks=24)  # type: ignore[attr-defined]
    worker._handover.check_checkpoint_partitions()  # at start: nothing to compare yet
    worker._handover.read_checkpoints = lambda partitions: {}  # type: ignore[method-assign]
    consumer.list_topics = lambda **_: _metadata(audio_chunks=24, asr_checkpoints=12)  # type: ignore[attr-defined]
    with pytest.raises(InfrastructureError, match=r"has 12 partitions but audio\.chunks has 24"):
        worker._handover.on_assign(consumer, [TopicPartition("audio.chunks", 3)])


def test_the_transactional_producer_is_served_at_every_iteration() -> None:
    # Review finding: with a logger, its librdkafka lines queue until served, and a worker with
    # nothing to commit (a standby) never opened a transaction that would serve them.
    worker, producer = _worker(ManualClock(1_000_000))
    worker._iteration()
    worker._iteration()
    assert producer.polls == 2  # type: ignore[attr-defined]


def test_a_partition_beyond_the_checkpoint_partitions_stops_the_worker_before_it_is_owned() -> None:
    # audio.chunks raised to 16 while running, asr.checkpoints left at 12: partition 13 could
    # never be checkpointed (nor restored by a takeover).
    worker, _ = _worker(ManualClock(1_000_000))
    consumer = worker._clients.consumer = _StickyPauseConsumer()
    consumer.list_topics = lambda **_: _metadata(audio_chunks=12, asr_checkpoints=12)  # type: ignore[attr-defined]
    worker._handover.check_checkpoint_partitions()
    worker._handover.read_checkpoints = lambda partitions: {}  # type: ignore[method-assign]
    consumer.list_topics = lambda **_: _metadata(audio_chunks=16, asr_checkpoints=12)  # type: ignore[attr-defined]
    with pytest.raises(InfrastructureError, match=r"has 12 partitions but audio\.chunks has 16"):
        worker._handover.on_assign(consumer, [TopicPartition("audio.chunks", 13)])
    assert 13 not in worker._streams.book.partitions
    consumer.list_topics = lambda **_: _metadata(audio_chunks=16, asr_checkpoints=16)  # type: ignore[attr-defined]
    worker._handover.on_assign(
        consumer, [TopicPartition("audio.chunks", 13)]
    )  # raised together: fine
    assert 13 in worker._streams.book.partitions
