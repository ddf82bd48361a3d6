"""Helpers for tests that run real ASR worker processes against the real broker."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from bench.embedded import embedded_finals as engine_finals
from pipeline.audio.files import CallAudio, read_call_audio
from pipeline.producer import AudioPublisher
from pipeline.settings import AsrSettings, KafkaSettings, Settings

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
CHUNK_MS = 20


def worker_env(kafka: KafkaSettings, group_id: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "STREAMSCRIBE_KAFKA_BOOTSTRAP": kafka.bootstrap_servers,
        "STREAMSCRIBE_TOPIC_PREFIX": kafka.topic_prefix,
        "STREAMSCRIBE_GROUP_ID": group_id,
        "STREAMSCRIBE_METRICS_PORT": "0",
        "STREAMSCRIBE_TORCH_THREADS": "1",
        "STREAMSCRIBE_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "STREAMSCRIBE_TRANSACTION_TIMEOUT_MS": "10000",
        "STREAMSCRIBE_CHECKPOINT_INTERVAL_MS": "1000",
        "STREAMSCRIBE_IDLE_TIMEOUT_MS": "60000",
    }
    env.update(extra)
    return env


@dataclass
class WorkerProcess:
    """A `streamscribe worker` subprocess; its output goes to a log file for post-mortems."""

    worker_id: str
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        with self.log_path.open("wb") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "worker", "--worker-id", self.worker_id],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def terminate(self) -> float:
        """SIGTERM; returns seconds until exit."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)
        return time.monotonic() - started

    def stop_quietly(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def free_port() -> int:
    """A local TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET; status 0 when nothing answers."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of a Prometheus text exposition: (series name, sorted labels) → value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of the series ``name{labels}`` (exactly those labels), None when absent."""
    return metric_samples(text).get((name, tuple(sorted(labels.items()))))


def poll_metrics(url: str, until: Callable[[str], bool], timeout_s: float) -> str:
    """Scrape ``url`` until ``until(text)`` or the deadline; returns the last exposition."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while True:
        status, body = http_get(url)
        if status == 200:
            text = body
            if until(text):
                return text
        if time.monotonic() >= deadline:
            return text
        time.sleep(0.5)


def load_calls(names: Iterable[str], prefix: str = "") -> list[CallAudio]:
    calls = []
    for name in names:
        audio = read_call_audio(FIXTURES / name)
        calls.append(CallAudio(prefix + audio.call_id, audio.sample_rate_hz, audio.channels))
    return calls


@dataclass
class Publisher:
    """Publishes calls chunk by chunk, interleaved, optionally paced, in a thread."""

    kafka: KafkaSettings
    calls: list[CallAudio]
    speed: float = 0.0  # 0 = as fast as possible; 1.0 = real time; 2.0 = twice as fast
    tenant: str = "default"
    thread: threading.Thread | None = None
    error: list[BaseException] = field(default_factory=list)

    def run(self) -> None:
        settings = Settings(kafka=self.kafka)
        publisher = AudioPublisher.connect(settings)
        try:
            streams = [
                publisher.open_call(
                    call.call_id,
                    tenant=self.tenant,
                    channels=tuple(call.channels),
                    sample_rate_hz=call.sample_rate_hz,
                )
                for call in self.calls
            ]
            longest_ms = max(call.duration_ms for call in self.calls)
            started = time.monotonic()
            for position_ms in range(0, longest_ms, CHUNK_MS):
                for call, stream in zip(self.calls, streams, strict=True):
                    rate = call.sample_rate_hz
                    first = position_ms * rate // 1000
                    last = (position_ms + CHUNK_MS) * rate // 1000
                    for channel, samples in call.channels.items():
                        if first < len(samples):
                            stream.push(channel, samples[first:last])
                if self.speed:
                    ahead_s = (position_ms + CHUNK_MS) / 1000 / self.speed - (
                        time.monotonic() - started
                    )
                    if ahead_s > 0:
                        time.sleep(ahead_s)
            for stream in streams:
                stream.end()
            publisher.flush(60)
        except BaseException as error:  # surfaced by join()
            self.error.append(error)
        finally:
            publisher.close(60)

    def start(self) -> Publisher:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def join(self, timeout_s: float = 300) -> None:
        assert self.thread is not None
        self.thread.join(timeout_s)
        if self.error:
            raise self.error[0]


def read_topic(
    bootstrap: str,
    topic: str,
    until: Callable[[list[dict[str, Any]]], bool],
    timeout_s: float,
) -> list[dict[str, Any]]:
    """Every JSON record of ``topic`` (read_committed), read until ``until(records)`` or timeout."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                if message.error() is None and message.value() is not None:
                    records.append(orjson.loads(message.value()))
            if until(records):
                # Read a little longer: anything still arriving would be a duplicate.
                for message in consumer.consume(num_messages=500, timeout=2.0):
                    if message.error() is None and message.value() is not None:
                        records.append(orjson.loads(message.value()))
                break
    finally:
        consumer.close()
    return records


def sessions_ended(expected: int) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: sum(e["type"] == "session_ended" for e in events) >= expected


def chunk_records(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds (high minus low watermarks, all partitions)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        total = 0
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 30)
            total += high - low
    finally:
        consumer.close()
    return total


def committed_offsets(bootstrap: str, group_id: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        result = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    finally:
        consumer.close()
    return [tp.offset for tp in result]


def embedded_finals(calls: list[CallAudio], asr: AsrSettings | None = None) -> dict[str, str]:
    """utterance_id → text from the engine fed the same 20 ms chunks, without Kafka."""
    return engine_finals({call.call_id: call for call in calls}, asr)


def kafka_partition(key: str, partitions: int) -> int:
    """The partition Kafka's Java partitioner (and librdkafka's ``murmur2_random``) gives a
    non-empty key: ``toPositive(murmur2(key)) % partitions``."""
    data = key.encode("utf-8")
    seed, m, r = 0x9747B28C, 0x5BD1E995, 24
    mask = 0xFFFFFFFF
    h = (seed ^ len(data)) & mask
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def owned_partitions(events: list[dict[str, Any]], source: str) -> set[int]:
    """The partitions a worker owns after the assignment events it published, in order."""
    owned: set[int] = set()
    for event in events:
        if event.get("source") != source:
            continue
        if event["type"] == "partitions_assigned":
            owned |= set(event["detail"]["partitions"])
        elif event["type"] == "partitions_revoked":
            owned -= set(event["detail"]["partitions"])
    return owned


def wait_for_owners(
    bootstrap: str, events_topic: str, sources: Iterable[str], partitions: int, timeout_s: float
) -> dict[str, set[int]]:
    """Wait until the workers ``sources`` together own all ``partitions``, each some of them;
    returns who owns what."""
    names = list(sources)

    def settled(events: list[dict[str, Any]]) -> bool:
        owned = [owned_partitions(events, name) for name in names]
        return all(owned) and set().union(*owned) == set(range(partitions))

    events = read_topic(bootstrap, events_topic, settled, timeout_s)
    assert settled(events), f"{names} did not split the {partitions} partitions"
    return {name: owned_partitions(events, name) for name in names}


def calls_on(
    names: list[str], owners: list[set[int]], partitions: int, prefix: str
) -> list[CallAudio]:
    """The fixture calls ``names`` with call ids (``prefix`` + a counter + the name) chosen so
    that every set of partitions in ``owners`` gets at least one of them."""
    for attempt in range(1000):
        calls = load_calls(names, prefix=f"{prefix}{attempt}-")
        placed = {kafka_partition(call.call_id, partitions) for call in calls}
        if all(placed & owned for owned in owners):
            return calls
    raise AssertionError("no call ids found that reach every owner")
