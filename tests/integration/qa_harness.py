"""Helpers for tests that run the QA app (`python -m pipeline qa`) against the real broker."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.runtime.admin import TopicAdmin
from pipeline.settings import KafkaSettings
from tests.conftest import REPO

APP_ID = "streamscribe-qa"
WAIT_S = 90.0
QA_PARTITIONS = 3


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class QaProcess:
    """One `python -m pipeline qa` subprocess with its log file and web port.

    ``env`` overrides the test defaults (a 3 s idle timeout, a 1 s end grace); the partition
    count stays ``QA_PARTITIONS``, which ``committed_everything`` relies on.
    """

    def __init__(self, settings: KafkaSettings, port: int, log: Path, **env: str) -> None:
        self.port = port
        self.log = log
        self._env = {
            **os.environ,
            "STREAMSCRIBE_KAFKA_BOOTSTRAP": settings.bootstrap_servers,
            "STREAMSCRIBE_TOPIC_PREFIX": settings.topic_prefix,
            "STREAMSCRIBE_QA_WEB_PORT": str(port),
            "STREAMSCRIBE_QA_WEB_BIND": "127.0.0.1",
            "STREAMSCRIBE_QA_PARTITIONS": str(QA_PARTITIONS),
            "STREAMSCRIBE_QA_IDLE_TIMEOUT_MS": "3000",
            "STREAMSCRIBE_QA_END_GRACE_MS": "1000",
            "TMPDIR": str(log.parent),  # faust's (empty) data folder
        }
        self._env.update(env)
        self._env.pop("STREAMSCRIBE_CONFIG", None)
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "qa"],
                cwd=REPO,
                env=self._env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for("the QA app to be ready", self._ready)

    def _ready(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            raise AssertionError(f"the QA app exited early:\n{self.tail()}")
        try:
            return self.get("/readyz")[0] == 200
        except OSError:
            return False

    def get(self, path: str) -> tuple[int, bytes]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), bytes(error.read())

    def stop(self, sig: signal.Signals) -> int:
        assert self._process is not None
        self._process.send_signal(sig)
        return self._process.wait(timeout=60)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-60:])

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=30)


def delete_internal_topics(settings: KafkaSettings) -> None:
    """Delete the topics the QA app created for itself (input topic, table changelogs)."""
    internal = f"{settings.topic_prefix}{APP_ID}-"
    existing = AdminClient({"bootstrap.servers": settings.bootstrap_servers}).list_topics(
        timeout=10
    )
    TopicAdmin(settings).delete([name for name in existing.topics if name.startswith(internal)])


Keyed = tuple[str | None, dict[str, Any]]


class Reader:
    """A read_committed consumer of one topic that keeps everything it has read."""

    def __init__(self, settings: KafkaSettings, role: str) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "group.id": f"test-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self._consumer.subscribe([f"{settings.topic_prefix}{role}"])
        self.records: list[Keyed] = []

    def poll(self) -> None:
        for message in self._consumer.consume(num_messages=100, timeout=0.5):
            assert message.error() is None, message.error()
            key = message.key().decode() if message.key() is not None else None
            self.records.append((key, orjson.loads(message.value())))

    def wait(
        self, count: int, timeout_s: float = WAIT_S
    ) -> list[tuple[str | None, dict[str, Any]]]:
        def enough() -> bool:
            self.poll()
            return len(self.records) >= count

        wait_for(f"{count} records", enough, timeout_s)
        return self.records

    def close(self) -> None:
        self._consumer.close()


def committed_everything(settings: KafkaSettings) -> bool:
    """Whether the app's group has committed every offset of its input topic."""
    topic = f"{settings.topic_prefix}{APP_ID}-input"
    probe = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"{settings.topic_prefix}{APP_ID}",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = [TopicPartition(topic, p) for p in range(QA_PARTITIONS)]
        committed = probe.committed(partitions, timeout=10)
        for tp in committed:
            high = probe.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)[1]
            if high > 0 and tp.offset < high:
                return False
        return True
    finally:
        probe.close()
