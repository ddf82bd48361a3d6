"""Exactly-once finals through the windows a kill from outside never reaches, on the real broker:
a restore while the previous owner's transaction resolves, and real workers failing on purpose at
their named fault points (``pipeline.worker.faults``): killed after ``send_offsets_to_transaction``,
frozen there past the session timeout and woken before the broker's abort sweep, and crashed
between two recognizer batches of one step."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.chaos import process_stopped
from pipeline.runtime.checkpoint_reader import read_checkpoints
from pipeline.worker.checkpoint import PARTITION_KEY, PartitionCheckpoint, encode_key
from tests.integration.worker_harness import (
    Publisher,
    WorkerProcess,
    calls_on,
    embedded_finals,
    kafka_partition,
    read_topic,
    sessions_ended,
    wait_for_owners,
    worker_env,
)

pytestmark = pytest.mark.integration

CALLS = ["calls/call01_billing.flac", "calls/call03_outage.flac", "calls/call02_delivery.flac"]
PARTITIONS = 12  # of audio.chunks (topics/)


def _topic(settings: Any, role: str) -> str:
    return f"{settings.topic_prefix}{role}"


@pytest.fixture(autouse=True)
def _redis(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSCRIBE_REDIS_URL", redis_url)


def _open_transaction(bootstrap: str) -> Any:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": uuid.uuid4().hex})
    producer.init_transactions(30)
    producer.begin_transaction()
    return producer


def _commit_later(producer: Any, after_s: float) -> threading.Thread:
    def commit() -> None:
        time.sleep(after_s)
        producer.commit_transaction(30)

    thread = threading.Thread(target=commit, daemon=True)
    thread.start()
    return thread


def test_a_checkpoint_read_waits_for_a_transaction_still_resolving(topics: Any) -> None:
    # Review finding: the read ended at the last stable offset, so a restore begun while the
    # previous owner's last transaction was open (or committed, markers not yet written) read
    # the checkpoints without it, then assigned the offsets that transaction committed.
    checkpoints = _topic(topics, "asr.checkpoints")
    producer = _open_transaction(topics.bootstrap_servers)
    record = PartitionCheckpoint(handled_through=41, committed_offset=42)
    producer.produce(checkpoints, key=encode_key(PARTITION_KEY), value=record.encode(), partition=0)
    producer.flush(30)
    committer = _commit_later(producer, after_s=3.0)
    found = read_checkpoints(topics, checkpoints, [0], worker_id="test")
    committer.join(30)
    assert found == {0: [record]}


def test_stable_committed_offsets_wait_for_the_pending_transactional_offsets(topics: Any) -> None:
    # The premise of the restore order (KIP-447): a read_committed consumer's committed() is
    # answered only once no transaction holds pending offsets for the partition.
    audio, group = _topic(topics, "audio.chunks"), f"{topics.topic_prefix}asr"
    config = {"bootstrap.servers": topics.bootstrap_servers, "group.id": group}
    member = Consumer({**config, "isolation.level": "read_committed"})
    producer = _open_transaction(topics.bootstrap_servers)
    producer.produce(_topic(topics, "asr.events"), value=b"{}")
    producer.send_offsets_to_transaction(
        [TopicPartition(audio, 3, 1234)], member.consumer_group_metadata(), 30
    )
    committer = _commit_later(producer, after_s=3.0)
    try:
        [offset] = member.committed([TopicPartition(audio, 3)], timeout=30)
    finally:
        committer.join(30)
        member.close()
    assert offset.offset == 1234


@dataclass
class _Run:
    faulty: WorkerProcess
    healthy: WorkerProcess
    finals: list[dict[str, Any]]
    expected: dict[str, str]
    events: list[dict[str, Any]]

    def story(self) -> str:
        """The hand-overs and the finals, for a failure's message."""
        lines = [
            f"{e['source']} {e['type']} {e['detail'].get('partitions', '')}"
            for e in self.events
            if e["type"].startswith(("partitions_", "worker_", "restore_"))
        ]
        lines += [f"final {f['utterance_id']} {f['text']!r}" for f in self.finals]
        return "\n".join([*lines, self.faulty.log(), self.healthy.log()])


def _run_with_fault(
    topics: Any, tmp_path: Path, faults: str, *, freeze_s: float = 0.0, **env: str
) -> _Run:
    """Calls through two workers, ``w-a`` armed with ``faults``: the finals published, and the
    finals the embedded engine makes of the same calls. ``freeze_s``: the fault stops ``w-a``
    (``stop``), which is woken (``SIGCONT``) that long after it froze."""
    group = f"{topics.topic_prefix}asr"
    events = _topic(topics, "asr.events")
    faulty = WorkerProcess(
        "w-a",
        worker_env(topics, group, STREAMSCRIBE_FAULTS=faults, **env),
        tmp_path / "w-a.log",
    ).start()
    healthy = WorkerProcess("w-b", worker_env(topics, group, **env), tmp_path / "w-b.log").start()
    try:
        owners = wait_for_owners(topics.bootstrap_servers, events, ("w-a", "w-b"), PARTITIONS, 180)
        calls = calls_on(CALLS, [owners["w-a"], owners["w-b"]], PARTITIONS, topics.topic_prefix)
        assert any(kafka_partition(c.call_id, PARTITIONS) in owners["w-a"] for c in calls)
        publisher = Publisher(topics, calls, speed=2.0).start()
        assert faulty.process is not None
        if freeze_s:
            _wait_frozen(faulty, 120)
            time.sleep(freeze_s)
            faulty.process.send_signal(signal.SIGCONT)
        else:
            faulty.process.wait(120)  # the fault ends it
        publisher.join()
        ended = read_topic(topics.bootstrap_servers, events, sessions_ended(2 * len(calls)), 300)
        assert sum(e["type"] == "session_ended" for e in ended) >= 2 * len(calls), healthy.log()
    finally:
        faulty.stop_quietly()
        healthy.stop_quietly()
    finals = read_topic(topics.bootstrap_servers, _topic(topics, "asr.finals"), lambda r: False, 5)
    every_event = read_topic(topics.bootstrap_servers, events, lambda r: False, 3)
    return _Run(faulty, healthy, finals, embedded_finals(calls), every_event)


def _wait_frozen(worker: WorkerProcess, timeout_s: float) -> None:
    """Until the process is stopped (state T in /proc), as the ``stop`` fault leaves it."""
    assert worker.process is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process_stopped(worker.process.pid):
            return
        time.sleep(0.1)
    raise AssertionError(f"the fault never froze the worker: {worker.log()}")


def _assert_exactly_once(run: _Run) -> None:
    counts = Counter(f["utterance_id"] for f in run.finals)
    texts = {f["utterance_id"]: f["text"] for f in run.finals}
    story = run.story()
    assert {uid: n for uid, n in counts.items() if n > 1} == {}, story  # duplicated
    assert sorted(set(run.expected) - set(texts)) == [], story  # lost
    assert sorted(set(texts) - set(run.expected)) == [], story  # renumbered
    assert texts == run.expected, story  # identical to the fault-free decode


@pytest.mark.parametrize(
    ("faults", "exit_code"),
    [
        # kill -9 with the offsets in the open transaction: the next owner's offsets read
        # waits for the broker to abort it.
        ("after_send_offsets=kill@6", -signal.SIGKILL),
        # A crash between two recognizer batches: nothing more is committed (exit 1).
        ("recognizer_batch=raise@8", 1),
    ],
)
def test_a_worker_failing_at_a_fault_point_loses_and_duplicates_no_final(
    topics: Any, tmp_path: Path, faults: str, exit_code: int
) -> None:
    run = _run_with_fault(topics, tmp_path, faults)
    assert run.faulty.process is not None
    assert run.faulty.process.returncode == exit_code, run.faulty.log()
    assert f"fault point {faults.split('=')[0]}" in run.faulty.log()
    _assert_exactly_once(run)


def test_an_owner_frozen_after_send_offsets_and_woken_before_the_abort_duplicates_nothing(
    topics: Any, tmp_path: Path
) -> None:
    # The interleaving of the review: w-a freezes (SIGSTOP: its heartbeats stop too) with its
    # offsets in the open transaction; after the session timeout (6 s) w-b is assigned its
    # partitions; w-a wakes before the broker would abort the transaction (30 s here) and its
    # commit lands. w-b must restore from that transaction's checkpoints and offsets together.
    run = _run_with_fault(
        topics,
        tmp_path,
        "after_send_offsets=stop@6",
        freeze_s=12.0,
        STREAMSCRIBE_TRANSACTION_TIMEOUT_MS="30000",
    )
    assert "fault point after_send_offsets" in run.faulty.log()
    _assert_exactly_once(run)
