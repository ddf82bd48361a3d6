"""The redaction stage in the worker's output path: what a commit publishes under a redacting
policy, and a held final as stream state (not checkpointed past, forgotten with its stream)."""

from __future__ import annotations

from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from pipeline.asr.engine import EngineConfig, StreamingEngine
from pipeline.asr.session import SessionKey
from pipeline.clock import ManualClock
from pipeline.contracts.messages import Partial
from pipeline.redaction import Redactor, RedactorConfig, TenantPolicies, parse_policy
from pipeline.runtime.metrics import WorkerMetrics
from pipeline.settings import RedactionSettings, Settings
from pipeline.topics import TopicRole
from pipeline.worker.admission import AdmissionLimits
from pipeline.worker.checkpointing import stage_checkpoints
from pipeline.worker.loop import AsrWorker
from pipeline.worker.outbox import Outbox
from pipeline.worker.progress import PartitionProgress
from pipeline.worker.staging import Staging
from pipeline.worker.streams import Streams
from tests.unit.redaction.test_stage import final
from tests.unit.worker.test_streams import _record
from tests.unit.worker.test_worker_loop import (
    _chunk,
    _Consumer,
    _Hears,
    _Producer,
    _Silence,
)

KEY = SessionKey("call-1", "mono")


class _Partials:
    """The partials producer, keeping what it sent."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def produce(self, topic: str, key: bytes | None = None, value: bytes = b"", **_: Any) -> None:
        self.values.append(value)

    def poll(self, *_: Any) -> int:
        return 0

    def flush(self, *_: Any) -> int:
        return 0


def _worker(policy: str) -> tuple[AsrWorker, _Producer, _Partials]:
    clock = ManualClock(1_000_000)
    settings = Settings(redaction=RedactionSettings(policy=policy))
    engine = StreamingEngine(_Hears(), _Silence(), EngineConfig(), clock)
    asr = AsrWorker(settings, engine, metrics=WorkerMetrics(CollectorRegistry()), clock=clock)
    producer, partials = _Producer(), _Partials()
    asr._clients.transactional, asr._clients.consumer, asr._clients.partials = (
        producer,
        _Consumer(),
        partials,
    )
    asr._streams.book.add(PartitionProgress(0))
    asr.status.assigned = frozenset({0})
    asr._handle(_chunk("call-1", 0, 0))  # the stream exists, as the finals' would
    return asr, producer, partials


def _published_finals(producer: _Producer) -> list[dict[str, Any]]:
    return [
        orjson.loads(value)
        for topic, _, value, _ in producer.committed
        if topic.endswith(TopicRole.FINALS) and value is not None
    ]


def test_a_card_number_split_over_two_finals_is_published_redacted_in_one_commit() -> None:
    asr, producer, _ = _worker("pci")
    first = final("My card number is 4111 1111", 0, 0, channel="mono")
    asr._router.route_step([first], asr._engine.sessions)
    asr._commit()
    assert _published_finals(producer) == []  # held: not published, not finished
    assert asr._streams.book.session(KEY).finals_through == -1  # type: ignore[union-attr]

    second = final("1111 1111 thank you.", first.end_ms + 1200, 1, channel="mono")
    asr._router.route_step([second], asr._engine.sessions)
    asr._commit()
    published = _published_finals(producer)
    assert [f["text"] for f in published] == [
        "My card number is [CARD_NUMBER]",
        "[CARD_NUMBER] thank you.",
    ]
    assert [r["entity"] for f in published for r in f["redactions"]] == ["card_number"] * 2
    assert not any(b"4111" in (value or b"") for _, _, value, _ in producer.committed)
    assert asr._streams.book.session(KEY).finals_through == 1  # type: ignore[union-attr]


def test_partials_go_out_masked_and_off_changes_nothing() -> None:
    record = Partial("call-1", "mono", 0, 0, "my card is", "4111 1111", 0, 1000, "m", 0)
    for policy, shown in (("pci", "[CARD_NUMBER]"), ("off", "4111 1111")):
        asr, _, partials = _worker(policy)
        asr._router.route_step([record], asr._engine.sessions)
        assert orjson.loads(partials.values[-1])["tentative_text"] == shown


def _streams(policy: str) -> tuple[Streams, StreamingEngine, Staging]:
    clock = ManualClock(1_000_000)
    engine = StreamingEngine(_Hears(), _Silence(), EngineConfig(), clock)
    redactor = Redactor(RedactorConfig(TenantPolicies(parse_policy(policy))))
    streams = Streams(
        engine, AdmissionLimits(), max_chunk_bytes=65536, max_pending_jobs=8, redactor=redactor
    )
    topics = {role: role.value for role in TopicRole}
    streams.add(PartitionProgress(0))
    staging = Staging(Outbox(), topics, "w-1", clock)
    streams.receive(_record("call-1", 0, 0, 0), staging, 0)
    return streams, engine, staging


def test_a_stream_holding_a_final_is_not_snapshotted_past_it() -> None:
    streams, engine, staging = _streams("pci")
    assert streams.redactor.final(final("My card number is 4111 1111", channel="mono")) == []
    session = streams.book.session(KEY)
    assert session is not None
    assert session.needed_offsets
    watermarks = stage_checkpoints(
        streams, engine, staging, now_ms=10_000, checkpoint_interval_ms=0, ended_retention_ms=0
    )
    # No snapshot: the records of the held final's audio stay needed (a new owner decodes it).
    assert session.snapshot is None
    assert watermarks[0] == 0
    streams.redactor.flush("call-1", "mono")
    watermarks = stage_checkpoints(
        streams, engine, staging, now_ms=20_000, checkpoint_interval_ms=0, ended_retention_ms=0
    )
    assert session.snapshot is not None
    assert watermarks[0] == 1


def test_forgetting_a_partition_forgets_the_finals_held_for_its_streams() -> None:
    streams, _, _ = _streams("pci")
    assert streams.redactor.final(final("My card number is 4111 1111", channel="mono")) == []
    streams.forget([0])
    assert streams.redactor.held("call-1", "mono") == ()


def test_a_hold_dropped_with_its_partition_leaves_no_timer_behind() -> None:
    asr, _, _ = _worker("pci")
    asr._router.route_step(
        [final("My card number is 4111 1111", channel="mono")], asr._engine.sessions
    )
    assert asr._streams.redactor.held("call-1", "mono")
    asr._streams.forget([0])  # revoked between two steps: the held final goes with the stream
    asr._router.route_step([], asr._engine.sessions)
    assert asr._router._held_since == {}
