"""The worker's run loop when something fails inside it (a recognizer error mid-step, a fault
point, a fatal consumer error, lost partitions), with the fake Kafka clients of
``test_worker_loop``: only a requested stop commits, and the next owner loses nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry

from pipeline.asr.engine import EngineConfig, StreamingEngine
from pipeline.asr.recognizer import Recognition
from pipeline.asr.vad import EnergyVad
from pipeline.clock import ManualClock
from pipeline.errors import ConfigError, InfrastructureError
from pipeline.runtime.metrics import WorkerMetrics
from pipeline.settings import Settings, WorkerSettings
from pipeline.worker import clients as clients_module
from pipeline.worker.faults import FaultPoint, Faults, InjectedFaultError, parse_faults
from pipeline.worker.loop import AsrWorker
from tests.unit.worker.test_worker_loop import (
    _chunk,
    _Consumer,
    _Message,
    _Partials,
    _Producer,
    _run,
    _takeover,
)


class _Says:
    """Hears the same words in every window; raises on its ``failing``-th call (as a CUDA
    out-of-memory error would), once."""

    model_id = "says"

    def __init__(self, failing: int = 0) -> None:
        self.failing, self.calls = failing, 0

    def recognize(self, requests: Any) -> list[Recognition]:
        self.calls += 1
        if self.calls == self.failing:
            raise RuntimeError("CUDA out of memory")
        return [Recognition((), "hello there", -0.1, 0.0, 1.0) for _ in requests]


class _LoopConsumer(_Consumer):
    """Subscribing assigns partition 0 at once (the group's first rebalance)."""

    def subscribe(self, topics: Any, *, on_assign: Any, on_revoke: Any, on_lost: Any) -> None:
        self.on_revoke, self.on_lost = on_revoke, on_lost
        on_assign(self, [TopicPartition("audio.chunks", 0)])

    def close(self) -> None:
        self.closed = True
        if hasattr(self, "on_revoke"):
            self.on_revoke(self, [TopicPartition("audio.chunks", 0)])


class _LoopProducer(_Producer):
    def init_transactions(self, *_: Any) -> None:
        pass

    def flush(self, *_: Any) -> int:
        return 0


def _utterances(calls: list[str]) -> list[_Message]:
    """One utterance per call (1 s of level, 1.2 s of silence), the calls interleaved."""
    out, offset = [], 0
    for seq in range(110):
        for call in calls:
            out.append(_chunk(call, seq, offset, loud=seq < 50))
            offset += 1
    return out


def _looping(
    monkeypatch: Any, recognizer: Any, records: list[_Message], **worker: Any
) -> tuple[AsrWorker, _LoopProducer, _LoopConsumer]:
    """A worker whose ``run`` drives fake clients: partition 0 holds ``records``."""
    clock = ManualClock(1_000_000)
    settings = Settings(worker=dataclasses.replace(WorkerSettings(), **worker))
    engine = StreamingEngine(recognizer, EnergyVad(), EngineConfig(max_batch=1), clock)
    asr = AsrWorker(settings, engine, metrics=WorkerMetrics(CollectorRegistry()), clock=clock)
    producer, consumer = _LoopProducer(), _LoopConsumer()
    consumer.queue = list(records)

    def new_producer(config: dict[str, Any]) -> Any:
        return producer if "transactional.id" in config else _Partials()

    monkeypatch.setattr(clients_module, "new_producer", new_producer)
    monkeypatch.setattr(clients_module, "new_consumer", lambda config: consumer)
    asr._handover.read_checkpoints = lambda partitions: {}  # type: ignore[method-assign]
    return asr, producer, consumer


def _final_calls(producer: _Producer) -> list[str]:
    return sorted(
        orjson.loads(value)["call_id"]
        for topic, _, value, _ in producer.committed
        if "finals" in topic and value is not None
    )


def test_a_recognizer_failure_mid_step_commits_nothing_and_the_next_owner_loses_no_final(
    monkeypatch: Any,
) -> None:
    # Both calls' finals are due in one step, decoded a batch each; the second batch fails.
    # The old loop committed at its end however it ended: A's session, its final taken from the
    # engine but never staged, was snapshotted as quiet and its records released, so A's final
    # was lost for good. Now nothing is committed and the next owner replays both.
    records = _utterances(["A", "B"])
    worker, producer, consumer = _looping(monkeypatch, _Says(failing=2), records)
    with pytest.raises(RuntimeError, match="out of memory"):
        worker.run()
    assert producer.committed == []
    assert producer.offsets == {}
    assert consumer.closed  # left the group at once: the partitions move without waiting
    survivor, published = _takeover(ManualClock(2_000_000), producer, EnergyVad())
    survivor._engine._recognizer = _Says()  # type: ignore[assignment]
    _run(survivor, records)
    assert _final_calls(published) == ["A", "B"]


def test_a_fault_after_send_offsets_aborts_the_transaction_and_commits_no_offset(
    monkeypatch: Any,
) -> None:
    records = _utterances(["A"])
    worker, producer, _ = _looping(monkeypatch, _Says(), records, faults="after_send_offsets=raise")
    with pytest.raises(InjectedFaultError, match="after_send_offsets"):
        worker.run()
    assert producer.aborts == 1  # the next owner need not wait for the broker's timeout
    assert (producer.committed, producer.offsets) == ([], {})
    survivor, published = _takeover(ManualClock(2_000_000), producer, EnergyVad())
    survivor._engine._recognizer = _Says()  # type: ignore[assignment]
    _run(survivor, records)
    assert _final_calls(published) == ["A"]


def test_a_fault_before_the_commit_aborts_what_the_transaction_holds(monkeypatch: Any) -> None:
    worker, producer, _ = _looping(
        monkeypatch, _Says(), _utterances(["A"]), faults="before_commit=raise"
    )
    with pytest.raises(InjectedFaultError, match="before_commit"):
        worker.run()
    assert producer.aborts == 1
    assert (producer.committed, producer.offsets) == ([], {})


def test_a_fault_at_the_end_of_a_restore_stops_before_the_partitions_are_assigned(
    monkeypatch: Any,
) -> None:
    worker, producer, consumer = _looping(
        monkeypatch, _Says(), _utterances(["A"]), faults="restore_before_assign=raise"
    )
    with pytest.raises(InjectedFaultError, match="restore_before_assign"):
        worker.run()
    assert consumer.assigned_offsets == []
    assert producer.committed == []


def test_the_recognizer_fault_point_fires_at_the_armed_batch(monkeypatch: Any) -> None:
    worker, producer, _ = _looping(
        monkeypatch, _Says(), _utterances(["A", "B"]), faults="recognizer_batch=raise@2"
    )
    with pytest.raises(InjectedFaultError, match=r"recognizer_batch \(pass 2\)"):
        worker.run()
    assert producer.committed == []


def test_a_fault_inside_a_restore_leaves_nothing_owned(monkeypatch: Any) -> None:
    worker, producer, _ = _looping(
        monkeypatch, _Says(), _utterances(["A"]), faults="restore_after_offsets=raise"
    )
    with pytest.raises(InjectedFaultError, match="restore_after_offsets"):
        worker.run()
    assert not worker._streams.book.partitions
    assert producer.committed == []


def test_a_requested_stop_still_commits_what_is_done(monkeypatch: Any) -> None:
    records = _utterances(["A"])
    worker, producer, _ = _looping(monkeypatch, _Says(), records)
    original = worker._iteration

    def once() -> None:
        original()
        original()
        worker.stop()

    worker._iteration = once  # type: ignore[method-assign]
    worker.run()
    assert _final_calls(producer) == ["A"]
    assert producer.offsets == {0: len(records)}


class _FatalRecord(_Message):
    def __init__(self) -> None:
        super().__init__(b"", b"", [], 0)

    def error(self) -> Any:
        return KafkaError(KafkaError._FENCED, "static member fenced", fatal=True)


def test_a_fatal_consumer_error_stops_the_worker_without_committing(monkeypatch: Any) -> None:
    # It used to be logged and skipped: the worker went on polling a consumer that is dead.
    worker, producer, _ = _looping(monkeypatch, _Says(), [_chunk("A", 0, 0), _FatalRecord()])
    with pytest.raises(InfrastructureError, match="fatal Kafka consumer error"):
        worker.run()
    assert producer.committed == []


def test_partitions_lost_rewind_the_partitions_kept(monkeypatch: Any) -> None:
    # Losing partition 1 drops everything staged, partition 0's final included; partition 0's
    # session went on regardless, so without a rewind its final was never published.
    records = _utterances(["A"])
    worker, producer, consumer = _looping(monkeypatch, _Says(), records)
    worker._clients.transactional, worker._clients.consumer, worker._clients.partials = (
        producer,
        consumer,
        _Partials(),
    )
    worker._handover.restore([0, 1])
    worker.status.assigned = frozenset({0, 1})
    for record in records:
        worker._handle(record)
    for output in worker._engine.step().outputs:
        worker._router.route(output)
    assert worker._staging.outbox.records  # A's final is staged
    worker._handover.on_lost(consumer, [TopicPartition("audio.chunks", 1)])
    consumer.queue = list(records)  # the client hands out what follows the position
    worker._iteration()  # the rewind: the sessions of partition 0 start again
    assert consumer.sought == [(0, -2)]  # from the beginning: nothing was committed
    consumer.queue = list(records)  # what the seek fetches again
    for _ in range(3):
        worker._iteration()
    worker._commit()
    assert _final_calls(producer) == ["A"]


def test_fault_rules_are_read_and_a_bad_one_is_refused() -> None:
    rules = parse_faults("after_send_offsets=kill@3, recognizer_batch=sleep:250")
    assert [(r.point, r.action.value, r.hit, r.sleep_ms) for r in rules] == [
        (FaultPoint.AFTER_SEND_OFFSETS, "kill", 3, 0),
        (FaultPoint.RECOGNIZER_BATCH, "sleep", 1, 250),
    ]
    for bad in ("nowhere=raise", "before_commit=explode", "before_commit=sleep", "x"):
        with pytest.raises(ConfigError, match="STREAMSCRIBE_FAULTS"):
            parse_faults(bad)


def test_kill_and_stop_signal_the_process_itself_at_the_armed_pass() -> None:
    sent: list[int] = []
    slept: list[float] = []
    faults = Faults(
        parse_faults("before_commit=kill@2,after_send_offsets=stop,restore_before_assign=sleep:5"),
        send_signal=sent.append,
        sleep=slept.append,
    )
    faults.hit(FaultPoint.BEFORE_COMMIT)
    assert sent == []
    faults.hit(FaultPoint.BEFORE_COMMIT)
    faults.hit(FaultPoint.BEFORE_COMMIT)  # fires once
    faults.hit(FaultPoint.AFTER_SEND_OFFSETS)
    faults.hit(FaultPoint.RESTORE_BEFORE_ASSIGN)
    assert sent == [9, 19]  # SIGKILL, SIGSTOP
    assert slept == [0.005]
    assert not Faults()
    assert not Faults().armed(FaultPoint.BEFORE_COMMIT)


class _CoordinatorMoving(_Consumer):
    """``committed()`` fails as right after a broker restart, then answers."""

    def __init__(self, failures: list[int]) -> None:
        super().__init__({0: 17})
        self.failures = failures

    def committed(self, partitions: Any, timeout: float = 0) -> list[TopicPartition]:
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0), "moving"))
        return super().committed(partitions, timeout)


def test_the_committed_offsets_read_rides_out_a_coordinator_moving(monkeypatch: Any) -> None:
    # Found by bench/chaos.py: after a broker restart the read answered NOT_COORDINATOR, which
    # librdkafka does not flag retriable, and every worker taking partitions then exited.
    monkeypatch.setattr("pipeline.runtime.transactions.time.sleep", lambda s: None)
    worker, _, _ = _looping(monkeypatch, _Says(), [])
    worker._clients.consumer = _CoordinatorMoving(
        [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._TIMED_OUT]
    )
    assert worker._handover.read_committed_offsets([0, 1]) == {0: 17, 1: None}


class _CommitFails(_LoopProducer):
    attempts = 0

    def commit_transaction(self, *_: Any) -> None:
        self.attempts += 1
        raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "lost"))


def test_a_failed_shutdown_commit_is_aborted(monkeypatch: Any) -> None:
    # It was left open: the next owner's checkpoint read then waited for the broker to time
    # it out (transaction.timeout.ms plus its abort sweep: 10-20 s) before it could restore.
    worker, _, consumer = _looping(monkeypatch, _Says(), [])
    producer = worker._clients.transactional = _CommitFails()
    worker._clients.consumer, worker._clients.partials = consumer, _Partials()
    worker._handover.restore([0])
    worker.status.assigned = frozenset({0})
    for record in _utterances(["A"])[:20]:
        worker._handle(record)
    worker.stop()
    worker._shutdown()
    # The last commit, then the leaving events' transaction: each failed, each aborted.
    assert producer.attempts >= 1
    assert producer.aborts == producer.attempts
    assert producer.committed == []


class _CoordinatorLoading(_LoopProducer):
    """``init_transactions`` answers as a broker that has just restarted, then works."""

    def __init__(self) -> None:
        super().__init__()
        self.refusals = [KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR]

    def init_transactions(self, *_: Any) -> None:
        if self.refusals:
            raise KafkaException(KafkaError(self.refusals.pop(0), "loading"))


def test_a_worker_starting_while_the_coordinator_loads_waits_for_it(monkeypatch: Any) -> None:
    # Found by bench/chaos.py: a worker started right after a broker restart exited with
    # "cannot start Kafka transactions: COORDINATOR_LOAD_IN_PROGRESS".
    monkeypatch.setattr("pipeline.runtime.transactions.time.sleep", lambda s: None)
    producer = _CoordinatorLoading()
    worker, _, _ = _looping(monkeypatch, _Says(), [])
    monkeypatch.setattr(
        clients_module,
        "new_producer",
        lambda config: producer if "transactional.id" in config else _Partials(),
    )
    worker._iteration = worker.stop  # type: ignore[method-assign,assignment]
    worker.run()
    assert producer.refusals == []


class _CommitGoesOn(_LoopProducer):
    """A commit that timed out and goes on in the background: the abort is refused with
    librdkafka's (retriable) _CONFLICT for as long as it lasts."""

    aborts_tried = 0

    def commit_transaction(self, *_: Any) -> None:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "flush timed out"))

    def abort_transaction(self, *_: Any) -> None:
        self.aborts_tried += 1
        raise KafkaException(KafkaError(KafkaError._CONFLICT, "commit in progress", retriable=True))


def test_an_abort_refused_for_a_commit_in_progress_replaces_the_producer_at_once(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr("pipeline.runtime.transactions.time.sleep", lambda s: None)
    worker, _, consumer = _looping(monkeypatch, _Says(), [])
    worker._clients.transactional = stuck = _CommitGoesOn()
    fresh = _LoopProducer()
    worker._clients.new_transactional = lambda: fresh  # type: ignore[method-assign]
    worker._clients.consumer, worker._clients.partials = consumer, _Partials()
    worker._handover.restore([0])
    for record in _utterances(["A"])[:20]:
        worker._handle(record)
    worker._commit()
    assert stuck.aborts_tried == 1  # not retried for the abort's whole budget
    assert worker._clients.transactional is fresh
