"""The producer side on the real broker: ``publish``, the SDK and ``simulate`` write records
that decode, count and concatenate back exactly; delivery failures reach the caller."""

from __future__ import annotations

import itertools
import json
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from confluent_kafka import Consumer

from pipeline.cli import main
from pipeline.contracts import AudioChunk, decode_chunk
from pipeline.contracts.g711 import mulaw_encode
from pipeline.errors import ChunkRejectedError, PublishError
from pipeline.producer import STEREO, AudioPublisher
from pipeline.settings import KafkaSettings, PublisherSettings, Settings
from tests.conftest import FIXTURES

pytestmark = pytest.mark.integration

QUIET_S = 1.0
"""After the expected count arrived, how long to keep listening for records that should not."""


def _consume(settings: KafkaSettings, count: int) -> list[Any]:
    """Every record of the test's audio.chunks: ``count`` of them, and no more."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([f"{settings.topic_prefix}audio.chunks"])
    records: list[Any] = []
    try:
        for _ in range(120):
            batch = consumer.consume(num_messages=1000, timeout=0.5)
            for message in batch:
                assert message.error() is None, message.error()
            records += batch
            if len(records) >= count:
                break
        records += consumer.consume(num_messages=1000, timeout=QUIET_S)
    finally:
        consumer.close()
    assert len(records) == count
    return records


def _by_channel(records: list[Any]) -> dict[tuple[str, str], list[AudioChunk]]:
    """Decoded chunks per (call, channel) in sequence order; asserts one partition per call."""
    chunks: dict[tuple[str, str], list[AudioChunk]] = defaultdict(list)
    partitions: dict[str, set[int]] = defaultdict(set)
    for message in records:
        chunk = decode_chunk(message.key(), message.value(), message.headers())
        chunks[(chunk.call_id, chunk.channel)].append(chunk)
        partitions[chunk.call_id].add(message.partition())
    assert all(len(p) == 1 for p in partitions.values()), partitions
    for channel_chunks in chunks.values():
        channel_chunks.sort(key=lambda c: c.seq)
        assert [c.seq for c in channel_chunks] == list(range(len(channel_chunks)))
        assert [c.end_of_stream for c in channel_chunks] == [False] * (len(channel_chunks) - 1) + [
            True
        ]
    return chunks


def _audio(chunks: list[AudioChunk]) -> bytes:
    return b"".join(bytes(c.payload) for c in chunks)


def _cli(settings: KafkaSettings, *argv: str) -> int:
    return main(
        ["--bootstrap", settings.bootstrap_servers, "--topic-prefix", settings.topic_prefix, *argv]
    )


def test_publish_stereo_wav_round_trips_exactly(
    topics: KafkaSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    frames = np.random.default_rng(1).integers(-30000, 30000, (8104, 2), dtype=np.int16)
    path = tmp_path / "call.wav"
    soundfile.write(str(path), frames, 8000, subtype="PCM_16")
    call_id = f"cli-{uuid.uuid4().hex[:8]}"
    argv = ["publish", str(path), "--call-id", call_id, "--tenant", "acme", "--flush-at-end"]
    assert _cli(topics, *argv) == 0
    out = capsys.readouterr().out
    assert f"published call {call_id} to {topics.topic_prefix}audio.chunks partition" in out

    # 8104 samples = 50 chunks of 160 + 104: a flush record with the rest, then end-of-stream.
    chunks = _by_channel(_consume(topics, 2 * 52))
    for index, label in enumerate(STEREO):
        mine = chunks[(call_id, label)]
        assert _audio(mine) == frames[:, index].astype("<i2").tobytes()
        assert [c.num_samples for c in mine[-3:]] == [160, 104, 0]
        assert [c.flush for c in mine[-3:]] == [False, True, False]
        assert {(c.tenant, c.sample_rate_hz) for c in mine} == {("acme", 8000)}
        times = [c.capture_ms or 0 for c in mine]
        assert times[1] - times[0] == 20
        assert times == sorted(times)
        assert f"{label:<10}     52 records      1.01 s" in out


def test_publish_fixture_flac_as_mulaw(
    topics: KafkaSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    path = FIXTURES / "telephone" / "tel_utt09_payment.flac"
    samples, rate = soundfile.read(str(path), dtype="int16")
    call_id = f"mulaw-{uuid.uuid4().hex[:8]}"
    argv = ["publish", str(path), "--call-id", call_id, "--encoding", "mulaw", "--chunk-ms", "40"]
    assert _cli(topics, *argv) == 0
    capsys.readouterr()
    expected_records = len(samples) // (rate * 40 // 1000) + 1
    mine = _by_channel(_consume(topics, expected_records))[(call_id, "mono")]
    assert _audio(mine) == mulaw_encode(samples).tobytes()
    assert {(c.encoding.value, c.sample_rate_hz) for c in mine} == {("mulaw", 8000)}


def test_sdk_round_trip_with_irregular_pushes_and_capture_times(topics: KafkaSettings) -> None:
    samples = np.random.default_rng(2).integers(-32768, 32767, 16000 * 2 + 77, dtype=np.int16)
    cuts = [0, 1, 500, 501, 4000, 20_000, len(samples)]
    call_id = f"sdk-{uuid.uuid4().hex[:8]}"
    start_ms = 1_790_000_000_000
    with AudioPublisher.connect(Settings(kafka=topics)) as publisher:
        with publisher.open_call(call_id, tenant="t1", sample_rate_hz=16000) as call:
            call.push("mono", samples[: cuts[1]], capture_ms=start_ms)
            for a, b in itertools.pairwise(cuts[1:]):
                call.push("mono", samples[a:b])
        publisher.flush(timeout_s=30)
    summary = call.summary()
    assert summary.delivered_records == summary.records == len(samples) // 320 + 1
    mine = _by_channel(_consume(topics, summary.records))[(call_id, "mono")]
    assert _audio(mine) == samples.tobytes()
    assert [c.capture_ms for c in mine] == [start_ms + 20 * i for i in range(len(mine))]
    assert len(summary.partitions) == 1


def test_simulate_bad_records_match_its_summary(
    topics: KafkaSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audio_dir = tmp_path / "audio"
    audio_dir.mkdir()
    for name in ("utterances/utt05_password.flac", "calls/call04_appointment_8k.flac"):
        (audio_dir / Path(name).name).symlink_to(FIXTURES / name)
    argv = [
        "simulate",
        "--audio-dir",
        str(audio_dir),
        "--calls",
        "3",
        "--duration-s",
        "2",
        "--no-realtime",
        "--bad-rate",
        "0.2",
        "--seed",
        "11",
        "--json",
    ]
    assert _cli(topics, *argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["bad_records"] > 0
    assert summary["calls_started"] == 3

    records = _consume(topics, summary["good_records"] + summary["bad_records"])
    good = []
    rejected: Counter[str] = Counter()
    for message in records:
        try:
            decode_chunk(message.key(), message.value(), message.headers())
        except ChunkRejectedError as error:
            rejected[error.reason] += 1
        else:
            good.append(message)
    assert dict(rejected) == summary["bad_by_reason"]
    assert len(good) == summary["good_records"]
    calls = _by_channel(good)  # the good calls stay whole: contiguous, each ends
    assert len({call_id for call_id, _ in calls}) == 3


def test_delivery_to_a_missing_topic_raises_on_the_next_push(kafka_settings: KafkaSettings) -> None:
    # No `topics` fixture: this prefix's audio.chunks does not exist, and the broker does not
    # create topics on demand.
    settings = Settings(kafka=kafka_settings, publisher=PublisherSettings(delivery_timeout_ms=2000))
    publisher = AudioPublisher.connect(settings)
    call = publisher.open_call(f"lost-{uuid.uuid4().hex[:8]}", sample_rate_hz=8000)
    call.push("mono", np.zeros(1600, dtype=np.int16))
    assert publisher.transport.flush(30) == 0  # every report is in (all of them failures)
    with pytest.raises(PublishError, match="not delivered") as raised:
        call.push("mono", np.zeros(160, dtype=np.int16))
    assert len(raised.value.failures) == 10
    assert call.summary().failed_records == 10
    call.end()  # the end-of-stream record fails too, and closing says so
    with pytest.raises(PublishError, match="seq 10"):
        publisher.close(timeout_s=30)


def test_publish_to_an_unreachable_broker_fails_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.wav"
    soundfile.write(str(path), np.zeros(1600, dtype=np.int16), 8000, subtype="PCM_16")
    monkeypatch.setenv("STREAMSCRIBE_PUBLISH_DELIVERY_TIMEOUT_MS", "1500")
    argv = ["--bootstrap", "127.0.0.1:9", "--topic-prefix", "", "publish", str(path)]
    argv += ["--call-id", "nowhere"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("streamscribe: error: 11 record(s) not delivered to audio.chunks")


def test_settings_reach_the_producer(topics: KafkaSettings) -> None:
    # Test-honesty review: this only checked the topic name it had set itself. The publisher's
    # chunk length and tenant are read back from the broker; the prefix is the topic written.
    settings = Settings(kafka=topics, publisher=PublisherSettings(chunk_ms=40, tenant="t9"))
    samples = np.arange(16000 * 40 // 1000 * 3, dtype=np.int16)  # three 40 ms chunks at 16 kHz
    call_id = f"settings-{uuid.uuid4().hex[:8]}"
    with AudioPublisher.connect(settings) as publisher:
        assert publisher.topic == f"{topics.topic_prefix}audio.chunks"
        with publisher.open_call(call_id, sample_rate_hz=16000) as call:
            call.push("mono", samples)
        publisher.flush(timeout_s=30)
    mine = _by_channel(_consume(topics, call.summary().records))[(call_id, "mono")]
    assert [len(c.payload) // 2 for c in mine] == [640, 640, 640, 0]  # 40 ms, then the end
    assert {c.tenant for c in mine} == {"t9"}
    assert _audio(mine) == samples.tobytes()
