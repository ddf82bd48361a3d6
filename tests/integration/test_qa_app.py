"""`streamscribe qa` on the real broker: summaries on qa.calls, web views, crash and recovery.

The app runs as a subprocess (``python -m pipeline qa``), as in production. Input is produced the
way ASR workers produce it: finals and session events in Kafka transactions (plus an aborted
transaction, which ``read_committed`` must hide, and malformed records, which must be skipped and
reported). The app is killed with SIGKILL after the first call, restarted, and must recover its
tables from the changelogs: the late final of the first call then yields revision 2 with all of
its finals, and every ended call has exactly one summary per revision.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from pipeline.contracts.messages import EventType, Final, to_json
from pipeline.settings import KafkaSettings
from tests.conftest import validate
from tests.integration.qa_harness import (
    APP_ID,
    QaProcess,
    Reader,
    committed_everything,
    delete_internal_topics,
    free_port,
    wait_for,
)
from tests.qa_builders import final, session

pytestmark = pytest.mark.integration

STARTED, ENDED = EventType.SESSION_STARTED, EventType.SESSION_ENDED


@pytest.fixture
def qa_topics(topics: KafkaSettings) -> Iterator[KafkaSettings]:
    """The declared topics, plus cleanup of the topics the QA app creates for itself."""
    yield topics
    delete_internal_topics(topics)


@pytest.fixture
def qa_app(qa_topics: KafkaSettings, tmp_path: Path) -> Iterator[QaProcess]:
    process = QaProcess(qa_topics, free_port(), tmp_path / "qa.log")
    try:
        yield process
    except BaseException:
        print(process.tail())
        raise
    finally:
        process.close()


def _produce(
    settings: KafkaSettings,
    records: Sequence[tuple[str, str | bytes, bytes]],
    *,
    abort: bool = False,
) -> None:
    """Produce ``(topic role, key, value)`` records in one Kafka transaction (compressed, so
    that a record larger than the topic's limit can be written, as a foreign producer could)."""
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "transactional.id": f"test-qa-{uuid.uuid4().hex}",
            "compression.type": "lz4",
            "message.max.bytes": 4_000_000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for role, key, value in records:
        raw_key = key.encode() if isinstance(key, str) else key
        producer.produce(f"{settings.topic_prefix}{role}", key=raw_key, value=value)
    if abort:
        producer.abort_transaction(30)
    else:
        producer.commit_transaction(30)


def _finals(*items: Final) -> list[tuple[str, str, bytes]]:
    return [("asr.finals", item.call_id, to_json(item)) for item in items]


def _events(
    call_id: str, kind: EventType, **channels: dict[str, int]
) -> list[tuple[str, str, bytes]]:
    return [
        ("asr.events", call_id, to_json(session(kind, channel, call_id=call_id, **detail)))
        for channel, detail in channels.items()
    ]


CALL_A, CALL_B, CALL_C = "qa-call-a", "qa-call-b", "qa-call-c"
A_AGENT = final("agent", 0, "hello this call may be recorded how can I help", 500, call_id=CALL_A)
A_CUSTOMER = final("customer", 0, "I want a refund for my order", 5500, call_id=CALL_A)
A_ABORTED = final("agent", 9, "that's not my problem", 9000, call_id=CALL_A)
A_LATE = final("customer", 1, "thank you", 12_000, call_id=CALL_A)
B_AGENT = final("agent", 0, "good morning how can I help", 400, call_id=CALL_B)
B_CUSTOMER = final("customer", 0, "I need a supervisor", 3500, call_id=CALL_B)
C_AGENT = final("agent", 0, "hello is anyone there", 300, call_id=CALL_C)
# Review findings, each of which crashed a forwarder and lost the record: a key that is not
# UTF-8 (the value, a repeat of A_AGENT, must still count as a duplicate) and a final too large
# for the app's own input topic (rejected, with an event).
NOT_UTF8_KEY = b"\xff\xfe"
A_HUGE = final("customer", 7, "word " * 240_000, 30_000, call_id=CALL_A, with_words=False)


def _by_key(records: Sequence[tuple[str | None, dict[str, Any]]]) -> dict[tuple[str, int], Any]:
    summaries = {}
    for key, value in records:
        assert key is not None
        assert (key, value["revision"]) not in summaries, f"{key} rev {value['revision']} twice"
        summaries[(key, value["revision"])] = value
    return summaries


def test_summaries_web_views_and_recovery_after_a_crash(
    qa_topics: KafkaSettings, qa_app: QaProcess
) -> None:
    settings = qa_topics
    _produce(settings, _finals(A_ABORTED), abort=True)
    _produce(
        settings,
        [
            *_events(CALL_A, STARTED, agent={}, customer={}),
            *_finals(A_AGENT, A_CUSTOMER, A_AGENT),
            ("asr.finals", CALL_A, b"not json"),
            ("asr.finals", CALL_A, b'{"schema": "final/9", "call_id": "qa-call-a"}'),
            ("asr.finals", NOT_UTF8_KEY, to_json(A_AGENT)),
            ("asr.finals", CALL_A, to_json(A_HUGE)),
            *_events(
                CALL_A,
                ENDED,
                agent={"audio_ms": 11_000, "finals": 1},
                customer={"audio_ms": 10_000, "finals": 1},
            ),
        ],
    )
    calls = Reader(settings, "qa.calls")
    events = Reader(settings, "asr.events")
    try:
        qa_app.start()

        (key, first), *_ = calls.wait(1)
        assert key == CALL_A
        validate("qa_call", first)
        assert (first["status"], first["end_reason"], first["revision"]) == (
            "ended",
            "sessions_ended",
            1,
        )
        # Words last 400 ms with 100 ms gaps: agent 500-5400, customer 5500-8900.
        assert first["duration_ms"] == 11_000
        assert [(c["channel"], c["talk_ms"], c["utterances"]) for c in first["channels"]] == [
            ("agent", 4900, 1),
            ("customer", 3400, 1),
        ]
        assert first["utterances"] == 2, "the duplicate counts once, the aborted final not at all"
        assert first["compliance_passed"] is True
        disclosure = first["compliance"][0]["evidence"][0]
        assert (disclosure["utterance_id"], disclosure["start_ms"]) == (f"{CALL_A}:agent:0", 1000)
        assert {k["keyword"]: k["total"] for k in first["keywords"]}["refund"] == 1

        status, body = qa_app.get(f"/calls/{CALL_A}")
        assert status == 200
        assert json.loads(body) == first
        assert qa_app.get("/calls/no-such-call")[0] == 404
        # Security review: faust's own table and router views served the raw tables.
        assert qa_app.get(f"/table/finals/{CALL_A}:agent:0/")[0] == 404
        assert qa_app.get("/router/")[0] == 404
        status, body = qa_app.get("/calls?since=0")
        assert status == 200
        assert [c["call_id"] for c in json.loads(body)["calls"]] == [CALL_A]
        assert qa_app.get("/healthz")[0] == 200

        def metrics() -> str:
            return str(qa_app.get("/metrics")[1].decode())

        # The two records of findings come from other partitions than the call's events, so
        # they may be handled after its summary: waited for.
        wait_for(
            "the records with a bad key and a huge value to be handled",
            lambda: (
                "qa_duplicate_finals_total 2.0" in metrics()
                and 'qa_records_rejected_total{reason="invalid_field"} 1.0' in metrics()
            ),
        )
        assert 'qa_summaries_published_total{publication="first"} 1.0' in metrics()
        assert 'qa_records_rejected_total{reason="not_json"} 1.0' in metrics()
        assert 'qa_records_rejected_total{reason="unknown_schema"} 1.0' in metrics()

        def rejections() -> list[dict[str, Any]]:
            events.poll()
            return [
                e for _, e in events.records if e["source"] == f"{settings.topic_prefix}{APP_ID}"
            ]

        wait_for("three rejection events", lambda: len(rejections()) == 3)
        for event in rejections():
            validate("event", event)
            assert event["detail"]["topic"] == f"{settings.topic_prefix}asr.finals"
        assert {e["detail"]["reason"] for e in rejections()} == {
            "not_json",
            "unknown_schema",
            "invalid_field",
        }

        # Crash once the app has committed what it read (its tables' changelogs are flushed
        # before every commit), then restart: the tables must come back from the changelogs.
        wait_for("the app to commit its input", lambda: committed_everything(settings))
        assert qa_app.stop(signal.SIGKILL) == -signal.SIGKILL

        _produce(
            settings,
            [
                *_events(CALL_B, STARTED, agent={}, customer={}),
                *_finals(B_AGENT, B_CUSTOMER),
                *_events(CALL_B, ENDED, agent={}, customer={}),
                *_events(CALL_C, STARTED, agent={}),
                *_finals(C_AGENT),
                *_finals(A_LATE),
            ],
        )
        qa_app.start()

        summaries = _by_key(calls.wait(4))
        assert set(summaries) == {(CALL_A, 1), (CALL_A, 2), (CALL_B, 1), (CALL_C, 1)}
        revised = summaries[(CALL_A, 2)]
        assert revised["utterances"] == 3, "recovered finals plus the late one"
        assert [line["utterance_id"] for line in revised["transcript"]] == [
            f"{CALL_A}:agent:0",
            f"{CALL_A}:customer:0",
            f"{CALL_A}:customer:1",
        ]
        assert revised["end_reason"] == "sessions_ended"
        assert summaries[(CALL_B, 1)]["end_reason"] == "sessions_ended"
        assert summaries[(CALL_B, 1)]["utterances"] == 2
        idle = summaries[(CALL_C, 1)]
        assert idle["end_reason"] == "idle_timeout"
        assert idle["compliance_passed"] is False
        for value in summaries.values():
            validate("qa_call", value)

        status, body = qa_app.get(f"/calls/{CALL_A}")
        assert status == 200
        assert json.loads(body) == revised
        # Nothing more arrives: one summary per revision of each ended call.
        time.sleep(2)
        calls.poll()
        assert len(calls.records) == 4
        assert qa_app.stop(signal.SIGTERM) == 0
    finally:
        calls.close()
        events.close()
