"""`streamscribe monitor` on the real broker, fed by hand: what it reads and what it skips.

Finals come in Kafka transactions like the worker's (one committed, one aborted, which
``read_committed`` must hide), plus a malformed record that must be skipped and counted. The
monitor is restarted and must refill its window from the topics. Partials are read live only.
A missing topic is a one-line user error.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from pipeline.contracts.messages import Event, EventType, Partial, to_json
from pipeline.qa.summary import to_json as summary_json
from pipeline.settings import KafkaSettings
from tests.conftest import REPO
from tests.unit.monitor.builders import said, summary_of

pytestmark = pytest.mark.integration

CALL = "reader-call-1"
WAIT_S = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for(what: str, condition: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read())
    except OSError:
        return 0, None


def _env(settings: KafkaSettings) -> dict[str, str]:
    env = {
        **os.environ,
        "STREAMSCRIBE_KAFKA_BOOTSTRAP": settings.bootstrap_servers,
        "STREAMSCRIBE_TOPIC_PREFIX": settings.topic_prefix,
    }
    env.pop("STREAMSCRIBE_CONFIG", None)
    return env


class Monitor:
    def __init__(self, settings: KafkaSettings, log: Path) -> None:
        self.port = _free_port()
        self._log = log
        with log.open("ab") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "monitor", "--bind", "127.0.0.1"],
                cwd=REPO,
                env={**_env(settings), "STREAMSCRIBE_MONITOR_PORT": str(self.port)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_for("the monitor to be ready", self._ready)

    def _ready(self) -> bool:
        if self._process.poll() is not None:
            raise AssertionError(f"the monitor exited:\n{self._log.read_text()}")
        return self.get("/readyz")[0] == 200

    def get(self, path: str) -> tuple[int, Any]:
        return _get(self.port, path)

    def stop(self) -> int:
        if self._process.poll() is None:
            self._process.terminate()
        return self._process.wait(30)


@pytest.fixture
def monitors(topics: KafkaSettings, tmp_path: Path) -> Iterator[list[Monitor]]:
    started: list[Monitor] = []
    try:
        yield started
    finally:
        for monitor in started:
            monitor.stop()


def _produce(settings: KafkaSettings, topic: str, values: list[bytes], key: str = CALL) -> None:
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    for value in values:
        producer.produce(f"{settings.topic_prefix}{topic}", key=key.encode(), value=value)
    assert producer.flush(30) == 0


def _transaction(settings: KafkaSettings, values: list[bytes], *, commit: bool) -> None:
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "transactional.id": f"monitor-test-{uuid.uuid4().hex}",
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(f"{settings.topic_prefix}asr.finals", key=CALL.encode(), value=value)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)


def _summarized(monitor: Monitor) -> dict[str, Any] | None:
    status, detail = monitor.get(f"/api/calls/{CALL}")
    return detail if status == 200 and detail["qa"] else None


def _live_row(monitor: Monitor, call_id: str) -> dict[str, Any] | None:
    status, live = monitor.get("/api/live")
    rows = [row for row in live["calls"] if row["call_id"] == call_id] if status == 200 else []
    return rows[0] if rows else None


def test_the_monitor_reads_committed_finals_skips_bad_records_and_refills_after_a_restart(
    topics: KafkaSettings, tmp_path: Path, monitors: list[Monitor]
) -> None:
    now_ms = int(time.time() * 1000)
    kept = [
        said(CALL, "agent", 0, "this call may be recorded", 500),
        said(CALL, "customer", 0, "I want a refund", 4000),
    ]
    aborted = said(CALL, "agent", 1, "this final was aborted", 8000)
    events = [
        Event(kind, now_ms - 5000, "w1", CALL, channel, {"tenant": "acme", "duration_ms": 9000})
        for kind in (EventType.SESSION_STARTED, EventType.SESSION_ENDED)
        for channel in ("agent", "customer")
    ]
    _produce(topics, "asr.events", [to_json(event) for event in events])
    _transaction(topics, [to_json(final) for final in kept], commit=True)
    _transaction(topics, [to_json(aborted)], commit=False)
    _produce(topics, "asr.finals", [b'{"schema": "final/1", "call_id": 7}'])
    _produce(topics, "qa.calls", [summary_json(summary_of(CALL, kept))])

    monitors.append(Monitor(topics, tmp_path / "monitor.log"))
    for attempt in range(2):
        monitor = monitors[-1]
        detail = _wait_for("the call with its QA summary", lambda m=monitor: _summarized(m))
        assert [u["utterance_id"] for u in detail["utterances"]] == [
            final.utterance_id for final in kept
        ], f"attempt {attempt}"
        assert detail["call"]["status"] == "ended"
        assert detail["call"]["tenant"] == "acme"
        assert detail["call"]["audio_ms"] == 9000
        assert detail["qa"]["compliance_passed"] is True
        assert monitor.get("/api/health")[1]["monitor"]["rejected"] == 1
        found = monitor.get("/api/calls?q=want%20a%20refund")[1]
        assert [row["call_id"] for row in found["calls"]] == [CALL]
        if attempt == 0:
            assert monitor.stop() == 0  # SIGTERM: a clean exit
            monitors.append(Monitor(topics, tmp_path / "monitor.log"))

    live = Partial("live-1", "mono", 0, 1, "hello", "there", 0, 1000, "m", int(time.time() * 1000))
    _produce(topics, "asr.partials", [to_json(live)], key="live-1")
    row = _wait_for("the live partial", lambda: _live_row(monitors[-1], "live-1"))
    assert row["status"] == "live"
    assert (row["channels"][0]["committed_text"], row["channels"][0]["tentative_text"]) == (
        "hello",
        "there",
    )


def test_a_missing_topic_is_one_line_and_exit_2(kafka_bootstrap: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "--bootstrap",
            kafka_bootstrap,
            "--topic-prefix",
            f"absent-{uuid.uuid4().hex[:8]}.",
            "monitor",
            "--port",
            str(_free_port()),
        ],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != "STREAMSCRIBE_CONFIG"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("streamscribe: error: topic absent-")
    assert "does not exist" in result.stderr
    assert result.stderr.count("\n") == 1
