"""Kafka plumbing of the broker benchmarks: local services, per-run topics, a topic reader.

Every broker benchmark creates the declared topics under its own prefix
(``bench-<name>-<random>.``) and deletes them when it ends, so runs never see each other's
records and leave nothing behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, TopicPartition

from bench.common import REPO
from pipeline.runtime.admin import TopicAdmin
from pipeline.settings import KafkaSettings, load_settings
from pipeline.topics import load_topic_specs, topic_name

__all__ = [
    "ReceivedRecord",
    "TopicReader",
    "broker_reachable",
    "committed_lag",
    "declared_topics",
    "free_port",
    "kafka_settings",
    "local_service",
    "new_prefix",
    "recreate_topics",
]


def kafka_settings(prefix: str = "") -> KafkaSettings:
    """The configured broker (file + environment, default 127.0.0.1:19092) with ``prefix``."""
    return dataclasses.replace(load_settings().kafka, topic_prefix=prefix)


def new_prefix(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:8]}."


def broker_reachable(settings: KafkaSettings, timeout_s: float = 5.0) -> bool:
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "probe"})
    try:
        consumer.list_topics(timeout=timeout_s)
        return True
    except KafkaException:
        return False
    finally:
        consumer.close()


def local_service(script: str, action: str) -> bool:
    """Run ``deploy/local/<script> <action>``; True on success."""
    result = subprocess.run(
        ["bash", str(REPO / "deploy" / "local" / script), action],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode == 0


@contextlib.contextmanager
def declared_topics(prefix: str) -> Iterator[KafkaSettings]:
    """Every declared topic created under ``prefix``; all deleted on exit."""
    settings = kafka_settings(prefix)
    specs = load_topic_specs(prefix=prefix)
    admin = TopicAdmin(settings)
    admin.apply(specs)
    try:
        yield settings
    finally:
        admin.delete([spec.name for spec in specs])


def recreate_topics(settings: KafkaSettings, roles: Sequence[str], timeout_s: float = 60) -> None:
    """Delete and re-create some declared topics (empty again), waiting for the deletion."""
    names = {topic_name(role, settings.topic_prefix) for role in roles}
    specs = [s for s in load_topic_specs(prefix=settings.topic_prefix) if s.name in names]
    admin = TopicAdmin(settings)
    admin.delete(sorted(names))
    deadline = time.monotonic() + timeout_s
    while admin.observe(sorted(names)) and time.monotonic() < deadline:
        time.sleep(0.2)
    admin.apply(specs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def committed_lag(bootstrap: str, group_id: str, topic: str) -> dict[str, int] | None:
    """Records between each partition's high watermark and the group's committed offset,
    summed (``lag``), and how many partitions have a commit. None when the broker is busy."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        metadata = consumer.list_topics(topic, timeout=5)
        partitions = [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
        committed = consumer.committed(partitions, timeout=5)
        lag = 0
        with_commit = 0
        for tp in committed:
            _, high = consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            if tp.offset >= 0:
                with_commit += 1
                lag += max(0, high - tp.offset)
            else:
                lag += high
        return {"lag": lag, "partitions_committed": with_commit}
    except KafkaException:
        return None
    finally:
        consumer.close()


@dataclass(frozen=True, slots=True)
class ReceivedRecord:
    """One JSON record as a reader saw it: topic, partition, wall time received, content, and
    its offset (-1: not known). A client may deliver a record again after a broker restart
    (its fetch position reset): the offset tells a re-read from a record produced twice."""

    topic: str
    partition: int
    received_ms: int
    value: dict[str, Any]
    offset: int = -1


@dataclass
class TopicReader:
    """Reads JSON records of some topics (``read_committed``, from the beginning) in a thread,
    stamping each with the wall time it was received."""

    bootstrap: str
    topics: Sequence[str]
    records: list[ReceivedRecord] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    errors: list[BaseException] = field(default_factory=list)

    def start(self) -> TopicReader:
        self._thread = threading.Thread(target=self._run, daemon=True, name="topic-reader")
        self._thread.start()
        return self

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"bench-reader-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        try:
            consumer.subscribe(list(self.topics))
            while not self._stop.is_set():
                batch = consumer.consume(num_messages=500, timeout=0.05)
                received_ms = time.time_ns() // 1_000_000
                parsed = [
                    ReceivedRecord(
                        m.topic(), m.partition(), received_ms, orjson.loads(m.value()), m.offset()
                    )
                    for m in batch
                    if m.error() is None and m.value() is not None
                ]
                if parsed:
                    with self._lock:
                        self.records.extend(parsed)
        except BaseException as error:  # surfaced by stop()
            self.errors.append(error)
        finally:
            consumer.close()

    def snapshot(self, topic: str | None = None) -> list[ReceivedRecord]:
        with self._lock:
            return [r for r in self.records if topic is None or r.topic == topic]

    def wait_for(self, predicate: Any, timeout_s: float, poll_s: float = 0.2) -> bool:
        """Wait until ``predicate(self)`` is true; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(poll_s)
        return bool(predicate(self))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.errors:
            raise self.errors[0]
