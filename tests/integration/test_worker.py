"""The ASR worker on the real broker with the real model: transcripts, exactly-once finals
across kill -9 and rebalances, dead letters, and SIGTERM."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from pipeline.contracts.audio_chunk import Header
from tests.conftest import validate
from tests.integration.worker_harness import (
    Publisher,
    WorkerProcess,
    calls_on,
    committed_offsets,
    embedded_finals,
    kafka_partition,
    load_calls,
    read_topic,
    sessions_ended,
    wait_for_owners,
    worker_env,
)

pytestmark = pytest.mark.integration

CALLS = ["calls/call01_billing.flac", "calls/call03_outage.flac"]


def _topic(settings: Any, role: str) -> str:
    return f"{settings.topic_prefix}{role}"


def _finals_by_id(finals: list[dict[str, Any]]) -> tuple[dict[str, str], Counter[str]]:
    counts = Counter(f["utterance_id"] for f in finals)
    return {f["utterance_id"]: f["text"] for f in finals}, counts


@pytest.fixture(autouse=True)
def _redis(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers read hotword lists from Redis: a real one is up for every test here."""
    monkeypatch.setenv("STREAMSCRIBE_REDIS_URL", redis_url)


@pytest.fixture
def group_id(topics: Any) -> str:
    return f"{topics.topic_prefix}asr"


def _worker(
    topics: Any, group_id: str, worker_id: str, tmp_path: Path, **env: str
) -> WorkerProcess:
    return WorkerProcess(
        worker_id, worker_env(topics, group_id, **env), tmp_path / f"{worker_id}.log"
    ).start()


def test_calls_through_kafka_equal_the_embedded_engine(
    topics: Any, group_id: str, tmp_path: Path
) -> None:
    calls = load_calls(CALLS, prefix=topics.topic_prefix)
    worker = _worker(topics, group_id, "w-equal", tmp_path)
    try:
        Publisher(topics, calls).start().join()
        events = read_topic(
            topics.bootstrap_servers, _topic(topics, "asr.events"), sessions_ended(4), 240
        )
        assert sum(e["type"] == "session_ended" for e in events) == 4, worker.log()
    finally:
        worker.stop_quietly()
    finals = read_topic(topics.bootstrap_servers, _topic(topics, "asr.finals"), lambda r: False, 5)
    partials = read_topic(
        topics.bootstrap_servers, _topic(topics, "asr.partials"), lambda r: False, 3
    )
    texts, counts = _finals_by_id(finals)
    assert max(counts.values()) == 1
    assert texts == embedded_finals(calls)
    for final in finals:
        validate("final", final)
    assert partials, "partials are published while utterances are open"
    for partial in partials:
        validate("partial", partial)
    for event in events:
        validate("event", event)
    kinds = Counter(e["type"] for e in events)
    assert kinds["session_started"] == 4
    assert kinds["model_loaded"] == 1
    assert kinds["partitions_assigned"] >= 1
    ended = [e for e in events if e["type"] == "session_ended"]
    assert all(e["detail"]["utterances"] >= 2 and e["detail"]["speech_ms"] > 0 for e in ended)
    _assert_ended_sessions_count_their_finals(events, finals)


def test_kill_9_mid_call_loses_and_duplicates_no_final(
    topics: Any, group_id: str, tmp_path: Path
) -> None:
    first = _worker(topics, group_id, "w-a", tmp_path)
    second = _worker(topics, group_id, "w-b", tmp_path)
    events_topic = _topic(topics, "asr.events")
    try:
        owners = wait_for_owners(topics.bootstrap_servers, events_topic, ("w-a", "w-b"), 12, 180)
        # Call ids chosen so that the worker killed owns calls, and so does the survivor.
        calls = calls_on(
            [*CALLS, "calls/call02_delivery.flac"],
            [owners["w-a"], owners["w-b"]],
            12,
            topics.topic_prefix,
        )
        victims = {c.call_id for c in calls if kafka_partition(c.call_id, 12) in owners["w-a"]}
        publisher = Publisher(topics, calls, speed=2.0).start()
        started = read_topic(
            topics.bootstrap_servers,
            events_topic,
            lambda ev: any(
                e["type"] == "session_started" and e["source"] == "w-a" and e["call_id"] in victims
                for e in ev
            ),
            60,
        )
        assert any(e["source"] == "w-a" for e in started), first.log()
        time.sleep(3)  # mid-call: its sessions are open, some utterances finalized
        first.kill()
        publisher.join()
        events = read_topic(
            topics.bootstrap_servers, _topic(topics, "asr.events"), sessions_ended(6), 300
        )
        assert sum(e["type"] == "session_ended" for e in events) >= 6, second.log()
    finally:
        first.stop_quietly()
        second.stop_quietly()
    finals = read_topic(topics.bootstrap_servers, _topic(topics, "asr.finals"), lambda r: False, 5)
    texts, counts = _finals_by_id(finals)
    expected = embedded_finals(calls)
    duplicates = {uid: n for uid, n in counts.items() if n > 1}
    lost = sorted(set(expected) - set(texts))
    assert duplicates == {}
    assert lost == []
    assert texts == expected
    # The QA app waits for as many finals as session_ended announces: after the takeover the
    # count must still be the finals published, not the utterances the survivor replayed.
    _assert_ended_sessions_count_their_finals(events, finals)


def _assert_ended_sessions_count_their_finals(
    events: list[dict[str, Any]], finals: list[dict[str, Any]]
) -> None:
    published = Counter((f["call_id"], f["channel"]) for f in finals)
    announced = {
        (e["call_id"], e["channel"]): e["detail"]["utterances"]
        for e in events
        if e["type"] == "session_ended"
    }
    assert announced == {key: published[key] for key in announced}
    assert set(published) <= set(announced)


def test_worker_joining_and_leaving_mid_call_keeps_finals_exactly_once(
    topics: Any, group_id: str, tmp_path: Path
) -> None:
    calls = load_calls(CALLS, prefix=topics.topic_prefix)
    first = _worker(topics, group_id, "w-first", tmp_path)
    second: WorkerProcess | None = None
    events_topic = _topic(topics, "asr.events")
    try:
        wait_for_owners(topics.bootstrap_servers, events_topic, ("w-first",), 12, 180)
        publisher = Publisher(topics, calls, speed=2.0).start()
        time.sleep(4)
        second = _worker(topics, group_id, "w-second", tmp_path)
        # The joiner takes partitions mid-call, then the first worker leaves mid-call.
        wait_for_owners(topics.bootstrap_servers, events_topic, ("w-first", "w-second"), 12, 180)
        time.sleep(2)
        exit_s = first.terminate()
        publisher.join()
        events = read_topic(
            topics.bootstrap_servers, _topic(topics, "asr.events"), sessions_ended(4), 300
        )
        assert sum(e["type"] == "session_ended" for e in events) >= 4, second.log()
    finally:
        first.stop_quietly()
        if second is not None:
            second.stop_quietly()
    assert exit_s < 15
    finals = read_topic(topics.bootstrap_servers, _topic(topics, "asr.finals"), lambda r: False, 5)
    texts, counts = _finals_by_id(finals)
    assert max(counts.values()) == 1
    assert texts == embedded_finals(calls)
    revoked_by = {e["source"] for e in events if e["type"] == "partitions_revoked"}
    assert "w-first" in revoked_by  # at the rebalance, the leave, or both


def _bad_records(call_id: str) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]], str]]:
    def headers(seq: int, **override: str) -> list[tuple[str, bytes]]:
        values = {
            Header.VERSION: "1",
            Header.CHANNEL: "mono",
            Header.SEQ: str(seq),
            Header.SAMPLE_RATE_HZ: "16000",
            Header.ENCODING: "pcm_s16le",
        }
        values.update({Header(k.replace("_", "-")): v for k, v in override.items()})
        return [(name.value, value.encode()) for name, value in values.items()]

    key = call_id.encode()
    return [
        (key, b"\x01" * 321, headers(900001), "odd_byte_count"),
        (key, b"\x02" * 320, headers(900002, ss_version="9"), "unknown_version"),
        (key, b"\x03" * 320, headers(900003, ss_sample_rate_hz="44100"), "unsupported_sample_rate"),
        (key, b"\x04" * 320, headers(900004, ss_encoding="opus"), "unsupported_encoding"),
        (key, b"\x05" * 70000, headers(900005), "oversize_payload"),
        # 1.5 MB, past the default producer limit (1 MB), accepted by audio.chunks compressed:
        # its dead letter must fit through the worker's transaction whole.
        (key, b"\x08" * 1_500_000, headers(900008), "oversize_payload"),
        (None, b"\x06" * 320, headers(900006), "missing_key"),
        (key, b"\x07" * 320, headers(900007, ss_seq="x"), "bad_sequence"),
    ]


def test_bad_input_goes_to_the_dead_letter_topic_and_the_partition_keeps_flowing(
    topics: Any, group_id: str, tmp_path: Path
) -> None:
    calls = load_calls(["utterances/utt01_account.flac"], prefix=topics.topic_prefix)
    call_id = calls[0].call_id
    bad = _bad_records(call_id)
    # The publisher's partitioner, so the bad records share the good call's partition.
    producer = Producer(
        {
            "bootstrap.servers": topics.bootstrap_servers,
            "partitioner": "murmur2_random",
            "compression.type": "lz4",
            "message.max.bytes": 4_000_000,
        }
    )
    for key, value, headers, _ in bad:
        producer.produce(_topic(topics, "audio.chunks"), key=key, value=value, headers=headers)
    assert producer.flush(30) == 0
    worker = _worker(topics, group_id, "w-dlq", tmp_path)
    try:
        Publisher(topics, calls).start().join()
        # After the call ended: more audio for it, a replayed (duplicate) chunk.
        late = [
            (
                call_id.encode(),
                b"\x00" * 640,
                [
                    (Header.VERSION.value, b"1"),
                    (Header.CHANNEL.value, b"mono"),
                    (Header.SEQ.value, b"5000"),
                    (Header.SAMPLE_RATE_HZ.value, b"16000"),
                    (Header.ENCODING.value, b"pcm_s16le"),
                ],
            )
        ]
        for key, value, headers in late:
            producer.produce(_topic(topics, "audio.chunks"), key=key, value=value, headers=headers)
        assert producer.flush(30) == 0
        events = read_topic(
            topics.bootstrap_servers,
            _topic(topics, "asr.events"),
            lambda ev: (
                sum(e["type"] == "chunk_rejected" for e in ev) >= len(bad) + 1
                and sessions_ended(1)(ev)
            ),
            240,
        )
    finally:
        worker.stop_quietly()
    rejected = [e for e in events if e["type"] == "chunk_rejected"]
    reasons = Counter(e["detail"]["reason"] for e in rejected)
    expected_reasons = Counter(reason for *_, reason in bad) + Counter(["call_already_ended"])
    assert reasons == expected_reasons, worker.log()
    for event in rejected:
        validate("event", event)
        validate("dead_letter", event["detail"])
    consumer = Consumer(
        {
            "bootstrap.servers": topics.bootstrap_servers,
            "group.id": f"{group_id}-dlq",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([_topic(topics, "audio.dlq")])
    dead: list[Any] = []
    for _ in range(30):
        dead.extend(m for m in consumer.consume(100, 1.0) if m.error() is None)
        if len(dead) >= len(bad) + 1:
            break
    consumer.close()
    assert len(dead) == len(bad) + 1
    assert any(message.value() == b"\x08" * 1_500_000 for message in dead)
    originals = {value: headers for _, value, headers, _ in bad}
    for message in dead:
        headers = dict(message.headers())
        assert headers["dlq-reason"].decode() in expected_reasons
        assert headers["dlq-topic"].decode() == _topic(topics, "audio.chunks")
        int(headers["dlq-offset"])
        if message.value() in originals:
            # Original bytes and headers are kept, the dlq-* headers are appended.
            assert (
                message.headers()[: len(originals[message.value()])] == originals[message.value()]
            )
    finals = read_topic(topics.bootstrap_servers, _topic(topics, "asr.finals"), lambda r: False, 5)
    assert [f["text"] for f in finals] == list(embedded_finals(calls).values())


def test_sigterm_while_the_model_loads_exits_at_once(
    topics: Any, group_id: str, tmp_path: Path
) -> None:
    worker = _worker(topics, group_id, "w-early", tmp_path)
    try:
        deadline = time.monotonic() + 60
        while "loading the model" not in worker.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.process is not None
        assert worker.process.poll() is None, worker.log()  # no worker loop yet
        exit_s = worker.terminate()
    finally:
        worker.stop_quietly()
    assert worker.process.returncode == 0, worker.log()
    assert exit_s < 5


def test_sigterm_exits_within_its_bound_with_offsets_committed(
    topics: Any, group_id: str, tmp_path: Path
) -> None:
    calls = load_calls(["calls/call01_billing.flac"], prefix=topics.topic_prefix)
    worker = _worker(topics, group_id, "w-term", tmp_path)
    events_topic = _topic(topics, "asr.events")
    try:
        wait_for_owners(topics.bootstrap_servers, events_topic, ("w-term",), 12, 180)
        publisher = Publisher(topics, calls, speed=2.0).start()
        read_topic(  # mid-call: it has handled and committed some of the call
            topics.bootstrap_servers,
            events_topic,
            lambda ev: any(e["type"] == "session_started" for e in ev),
            60,
        )
        time.sleep(3)
        exit_s = worker.terminate()
        publisher.join()
    finally:
        worker.stop_quietly()
    assert worker.process is not None
    assert worker.process.returncode == 0, worker.log()
    assert exit_s < 10 + 2
    offsets = committed_offsets(
        topics.bootstrap_servers, group_id, _topic(topics, "audio.chunks"), 12
    )
    assert any(offset > 0 for offset in offsets), worker.log()
    events = read_topic(
        topics.bootstrap_servers,
        _topic(topics, "asr.events"),
        lambda ev: any(e["type"] == "worker_stopped" for e in ev),
        30,
    )
    kinds = [e["type"] for e in events if e["source"] == "w-term"]
    # A graceful leave announces the partitions it hands back, then the stop.
    assert "partitions_revoked" in kinds
    assert kinds.index("partitions_revoked") < kinds.index("worker_stopped")
    revoked = next(e for e in events if e["type"] == "partitions_revoked")
    assert revoked["detail"]["partitions"] == list(range(12))


@pytest.fixture
def own_broker(tmp_path: Path) -> Any:
    """A broker of this test's own (it gets stopped and started), on its own port and data."""
    import os
    import shutil
    import subprocess

    from pipeline.runtime.admin import TopicAdmin
    from pipeline.settings import KafkaSettings
    from pipeline.topics import load_topic_specs

    # Same jar cache as the session's broker; the data folder is per port and wiped here.
    env = {**os.environ, "KAFKA_PORT": "19192"}
    cache = Path(env.get("STREAMSCRIBE_CACHE", Path.home() / ".cache" / "streamscribe"))
    script = Path(__file__).resolve().parents[2] / "deploy" / "local" / "kafka.sh"

    def broker(action: str) -> None:
        result = subprocess.run(
            ["bash", str(script), action], env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr

    broker("down")  # one left running by an interrupted run, before its folder goes
    shutil.rmtree(cache / "run" / "kafka-19192", ignore_errors=True)
    broker("up")
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:19192", topic_prefix="restart-test.")
    TopicAdmin(settings).apply(load_topic_specs(prefix=settings.topic_prefix))
    try:
        yield settings, broker
    finally:
        broker("down")


def test_broker_restart_mid_call_loses_nothing(own_broker: Any, tmp_path: Path) -> None:
    """The only broker goes away for a few seconds while calls stream; the worker rides it out:
    every final exactly once, equal to the embedded engine's."""
    settings, broker = own_broker
    group_id = "restart-test.asr"
    calls = load_calls(CALLS, prefix="restart-")
    worker = _worker(settings, group_id, "w-restart", tmp_path)
    try:
        read_topic(
            settings.bootstrap_servers,
            _topic(settings, "asr.events"),
            lambda records: any(r["type"] == "partitions_assigned" for r in records),
            120,
        )
        publisher = Publisher(settings, calls, speed=2.0).start()
        time.sleep(5)
        broker("down")
        time.sleep(3)
        broker("up")
        publisher.join()
        events = read_topic(
            settings.bootstrap_servers, _topic(settings, "asr.events"), sessions_ended(4), 300
        )
        assert sum(e["type"] == "session_ended" for e in events) >= 4, worker.log()
    finally:
        worker.stop_quietly()
    finals = read_topic(
        settings.bootstrap_servers, _topic(settings, "asr.finals"), lambda r: False, 5
    )
    texts, counts = _finals_by_id(finals)
    assert max(counts.values()) == 1, worker.log()
    assert texts == embedded_finals(calls)


def test_flush_forces_a_final_and_an_idle_session_is_closed_with_one(
    topics: Any, group_id: str, tmp_path: Path
) -> None:
    from pipeline.producer import AudioPublisher
    from pipeline.settings import Settings

    first, second = load_calls(
        ["utterances/utt01_account.flac", "utterances/utt02_billing.flac"], prefix=""
    )
    call_id = f"{topics.topic_prefix}flush"
    worker = _worker(topics, group_id, "w-flush", tmp_path, STREAMSCRIBE_IDLE_TIMEOUT_MS="4000")
    publisher = AudioPublisher.connect(Settings(kafka=topics))
    try:
        call = publisher.open_call(call_id)
        call.push("mono", first.channels["mono"])
        call.flush("mono")
        call.push("mono", second.channels["mono"])
        publisher.flush(30)  # delivered, but the stream never ends: the idle timeout closes it
        events = read_topic(
            topics.bootstrap_servers, _topic(topics, "asr.events"), sessions_ended(1), 240
        )
        assert sessions_ended(1)(events), worker.log()
    finally:
        worker.stop_quietly()
        publisher.close(10)
    finals = read_topic(topics.bootstrap_servers, _topic(topics, "asr.finals"), lambda r: False, 5)
    finals.sort(key=lambda f: f["utterance_index"])
    assert [f["endpoint_reason"] for f in finals] == ["forced", "end_of_stream"]
    assert "account" in finals[0]["text"].lower()
    assert "charged twice" in finals[1]["text"].lower()
    assert finals[0]["end_ms"] <= finals[1]["start_ms"]


def test_each_tenant_gets_its_own_endpoint_rules(
    topics: Any, group_id: str, tmp_path: Path
) -> None:
    # One recording with a 1 s pause, published for two tenants: the default 800 ms silence
    # rule splits it, the "patient" tenant's 1.5 s rule does not.
    worker = _worker(
        topics, group_id, "w-tenant", tmp_path, STREAMSCRIBE_TENANT_ENDPOINTS="patient:1500"
    )
    try:
        for tenant in ("default", "patient"):
            calls = load_calls(["pauses/pause_1000ms_split.flac"], prefix=f"{tenant}-")
            Publisher(topics, calls, tenant=tenant).start().join()
        events = read_topic(
            topics.bootstrap_servers, _topic(topics, "asr.events"), sessions_ended(2), 240
        )
        assert sessions_ended(2)(events), worker.log()
    finally:
        worker.stop_quietly()
    finals = read_topic(topics.bootstrap_servers, _topic(topics, "asr.finals"), lambda r: False, 5)
    by_tenant: dict[str, list[dict[str, Any]]] = {"default": [], "patient": []}
    for final in sorted(finals, key=lambda f: f["utterance_index"]):
        by_tenant[final["tenant"]].append(final)
    assert len(by_tenant["default"]) == 2
    assert by_tenant["default"][0]["endpoint_reason"] == "silence"
    [patient] = by_tenant["patient"]
    assert patient["start_ms"] == by_tenant["default"][0]["start_ms"]
    assert patient["end_ms"] == by_tenant["default"][1]["end_ms"]


def _http(url: str) -> tuple[int, str]:
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


def _wait_for_status(url: str, status: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _http(url)[0] == status:
            return True
        time.sleep(1)
    return False


def test_a_loading_worker_answers_alive_and_not_ready(
    topics: Any, group_id: str, tmp_path: Path
) -> None:
    # A liveness probe must not restart a worker whose model load is slow: the health server
    # answers from before the load. Redis is unreachable here, so the start also waits out the
    # hotword registry's first load (5 s) before the loop runs: a window that cannot be missed.
    import socket

    import orjson

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    worker = _worker(
        topics,
        group_id,
        "w-loading",
        tmp_path,
        STREAMSCRIBE_METRICS_PORT=str(port),
        STREAMSCRIBE_METRICS_HOST="127.0.0.1",
        STREAMSCRIBE_REDIS_URL=f"redis://127.0.0.1:{port}/0",  # nothing speaks Redis there
    )
    try:
        deadline = time.monotonic() + 60
        while "loading the model" not in worker.log() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _http(base + "/healthz")[0] == 200, worker.log()
        status, body = _http(base + "/readyz")
        assert status == 503, body
        assert "model_loaded" in orjson.loads(body)["not_ready"]
        assert _wait_for_status(base + "/readyz", 200, 120), worker.log()
    finally:
        worker.stop_quietly()


def test_worker_metrics_cover_the_catalogue_and_readiness_follows_the_broker(
    own_broker: Any, tmp_path: Path
) -> None:
    import socket

    import torch

    from pipeline.runtime.metrics import CATALOGUE

    settings, broker = own_broker
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    calls = load_calls(["utterances/utt01_account.flac"], prefix="metrics-")
    worker = _worker(
        settings,
        "restart-test.metrics",
        "w-metrics",
        tmp_path,
        STREAMSCRIBE_METRICS_PORT=str(port),
        STREAMSCRIBE_METRICS_HOST="127.0.0.1",
    )
    try:
        assert _wait_for_status(base + "/readyz", 200, 120), worker.log()
        assert _http(base + "/healthz")[0] == 200
        Publisher(settings, calls).start().join()
        events = read_topic(
            settings.bootstrap_servers, _topic(settings, "asr.events"), sessions_ended(1), 180
        )
        assert sessions_ended(1)(events), worker.log()
        time.sleep(2)  # one more commit: lag and commit durations observed
        status, text = _http(base + "/metrics")
        assert status == 200
        exposed = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line}
        gpu_only = {"streamscribe_gpu_"}
        for spec in CATALOGUE:
            if not torch.cuda.is_available() and spec.name.startswith(tuple(gpu_only)):
                continue
            names = spec.series_names
            assert any(name in exposed for name in names), f"{spec.name} not exposed"
        assert 'asr_request_total{outcome="ok"}' in text
        assert 'asr_duration_seconds_count{kind="endpoint_to_final"}' in text

        broker("down")
        assert _wait_for_status(base + "/readyz", 503, 60), "readiness stays true without Kafka"
        assert "kafka" in _http(base + "/readyz")[1]
        broker("up")
        assert _wait_for_status(base + "/readyz", 200, 120), worker.log()
    finally:
        worker.stop_quietly()
