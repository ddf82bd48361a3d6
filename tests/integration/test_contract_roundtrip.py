"""Audio chunks and JSON records survive a real Kafka round trip and match schemas/."""

from __future__ import annotations

import uuid

import numpy as np
import orjson
import pytest
from confluent_kafka import Consumer, Producer

from pipeline.contracts import (
    AudioChunk,
    DeadLetterInfo,
    Encoding,
    EndpointReason,
    Event,
    EventType,
    Final,
    Partial,
    Word,
    decode_chunk,
    encode_chunk,
    to_json,
    utterance_id,
)
from pipeline.contracts.g711 import alaw_encode
from pipeline.settings import KafkaSettings
from tests.conftest import validate

pytestmark = pytest.mark.integration


def _consume_all(settings: KafkaSettings, topic: str, count: int) -> list[object]:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    records = []
    try:
        for _ in range(60):
            for message in consumer.consume(num_messages=count, timeout=1.0):
                assert message.error() is None, message.error()
                records.append(message)
            if len(records) >= count:
                break
    finally:
        consumer.close()
    return records


def test_audio_chunk_round_trip_is_byte_for_byte(topics: KafkaSettings) -> None:
    topic = f"{topics.topic_prefix}audio.chunks"
    tone = (10000 * np.sin(np.arange(320) / 7)).astype("<i2")
    chunks = [
        AudioChunk(
            "call-α",
            "agent",
            0,
            16000,
            Encoding.PCM_S16LE,
            memoryview(tone.tobytes()),
            1_790_000_000_000,
            tenant="acme",
        ),
        AudioChunk(
            "call-α",
            "customer",
            0,
            8000,
            Encoding.ALAW,
            memoryview(alaw_encode(tone[:160]).tobytes()),
            1_790_000_000_020,
        ),
        AudioChunk(
            "call-α",
            "agent",
            1,
            16000,
            Encoding.PCM_S16LE,
            memoryview(b""),
            None,
            end_of_stream=True,
            flush=True,
        ),
    ]
    producer = Producer({"bootstrap.servers": topics.bootstrap_servers, "enable.idempotence": True})
    sent = [encode_chunk(chunk) for chunk in chunks]
    for key, value, headers in sent:
        producer.produce(topic, key=key, value=value, headers=headers)
    assert producer.flush(30) == 0

    received = _consume_all(topics, topic, len(sent))
    assert len(received) == len(sent)
    by_seq = {(m.headers()[1][1], m.headers()[2][1]): m for m in received}  # type: ignore[attr-defined]
    assert len({m.partition() for m in received}) == 1, "one call → one partition"  # type: ignore[attr-defined]
    for (key, value, headers), chunk in zip(sent, chunks, strict=True):
        message = by_seq[(chunk.channel.encode(), str(chunk.seq).encode())]
        assert message.key() == key  # type: ignore[attr-defined]
        assert (message.value() or b"") == value  # type: ignore[attr-defined]
        assert message.headers() == headers  # type: ignore[attr-defined]
        decoded = decode_chunk(message.key(), message.value(), message.headers())  # type: ignore[attr-defined]
        assert decoded == chunk


def test_output_records_validate_against_schemas() -> None:
    words = (Word("hello", 120, 480, 0.93), Word("world", 500, 900, 0.88))
    final = Final(
        call_id="c1",
        channel="agent",
        utterance_index=3,
        utterance_id=utterance_id("c1", "agent", 3),
        text="hello world",
        words=words,
        start_ms=100,
        end_ms=950,
        endpoint_reason=EndpointReason.SILENCE,
        model_id="whisper-tiny.en",
        emit_ms=1,
        latency_ms=420,
    )
    partial = Partial("c1", "agent", 3, 2, "hello", "world", 100, 900, "whisper-tiny.en", 1)
    info = DeadLetterInfo("odd_byte_count", "3 bytes", "audio.chunks", 4, 17, "worker-1")
    event = Event(
        EventType.CHUNK_REJECTED, 1, "worker-1", "c1", "agent", orjson.loads(to_json(info))
    )
    validate("final", orjson.loads(to_json(final)))
    validate("partial", orjson.loads(to_json(partial)))
    validate("dead_letter", orjson.loads(to_json(info)))
    validate("event", orjson.loads(to_json(event)))
    validate("dead_letter", event.detail)
    assert final.utterance_id == "c1:agent:3"
