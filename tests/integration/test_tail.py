"""``streamscribe tail`` on the real broker: partials at once, committed finals only, filters.

Schema-valid partial and final records are produced here the way the worker produces them:
partials with a plain idempotent producer, finals in transactions (one of them aborted).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from pipeline.cli import main
from pipeline.contracts import EndpointReason, Final, Partial, Word, to_json, utterance_id
from pipeline.settings import KafkaSettings
from tests.conftest import validate

pytestmark = pytest.mark.integration

SAFETY_IDLE_EXIT_S = "60"
"""Only ends a run whose expected records never come (``--max-records`` ends the others)."""


def _partial(call_id: str, index: int, committed: str, tentative: str) -> Partial:
    return Partial(
        call_id=call_id,
        channel="agent",
        utterance_index=index,
        revision=0,
        committed_text=committed,
        tentative_text=tentative,
        start_ms=0,
        end_ms=900,
        model_id="whisper-tiny.en",
        emit_ms=1_700_000_000_000,
        capture_ms=1_700_000_000_000,
    )


def _final(call_id: str, index: int, text: str) -> Final:
    return Final(
        call_id=call_id,
        channel="agent",
        utterance_index=index,
        utterance_id=utterance_id(call_id, "agent", index),
        text=text,
        words=tuple(Word(w, 0, 900, 0.9) for w in text.split()),
        start_ms=0,
        end_ms=900,
        endpoint_reason=EndpointReason.SILENCE,
        model_id="whisper-tiny.en",
        emit_ms=1_700_000_001_000,
        latency_ms=250,
        capture_ms=1_700_000_000_750,
    )


def _produce(kafka: KafkaSettings) -> None:
    base = {"bootstrap.servers": kafka.bootstrap_servers}
    partials = Producer({**base, "enable.idempotence": True})
    for record in (
        _partial("c1", 0, "hello", "there"),
        _partial("c1", 0, "hello there", "how"),
        _partial("c2", 0, "", "good"),
    ):
        validate("partial", orjson.loads(to_json(record)))
        partials.produce(
            f"{kafka.topic_prefix}asr.partials", key=record.call_id, value=to_json(record)
        )
    assert partials.flush(30) == 0
    finals = Producer({**base, "transactional.id": f"test-tail-{uuid.uuid4().hex}"})
    finals.init_transactions(30)
    topic = f"{kafka.topic_prefix}asr.finals"
    # Same key, same partition: the aborted final sits between two committed ones, so a reader
    # that saw it would see it before "bye".
    for record, commit in (
        (_final("c1", 0, "Hello there, how can I help?"), True),
        (_final("c1", 1, "ABORTED"), False),
        (_final("c1", 1, "Bye."), True),
        (_final("c2", 0, "Good morning."), True),
    ):
        validate("final", orjson.loads(to_json(record)))
        finals.begin_transaction()
        finals.produce(topic, key=record.call_id, value=to_json(record))
        if commit:
            finals.commit_transaction(30)
        else:
            finals.abort_transaction(30)


def _tail(
    kafka: KafkaSettings, capsys: pytest.CaptureFixture[str], *args: str
) -> list[dict[str, Any]]:
    argv = ["--bootstrap", kafka.bootstrap_servers, "--topic-prefix", kafka.topic_prefix]
    assert main([*argv, "tail", "--json", "--from-beginning", *args]) == 0
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_tail_shows_partials_and_committed_finals(
    topics: KafkaSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    _produce(topics)
    shown = _tail(topics, capsys, "--max-records", "6", "--idle-exit-s", SAFETY_IDLE_EXIT_S)
    assert len(shown) == 6
    partials = [r for r in shown if r["type"] == "partial"]
    finals = [r for r in shown if r["type"] == "final"]
    assert [p["committed_text"] for p in partials if p["call_id"] == "c1"] == [
        "hello",
        "hello there",
    ]
    assert [f["text"] for f in finals if f["call_id"] == "c1"] == [
        "Hello there, how can I help?",
        "Bye.",
    ]
    assert "ABORTED" not in {f["text"] for f in finals}
    for record in shown:
        validate(record.pop("type"), record)


def test_tail_filters_one_call_and_exits_when_idle(
    topics: KafkaSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    _produce(topics)
    shown = _tail(
        topics, capsys, "--call", "c2", "--max-records", "2", "--idle-exit-s", SAFETY_IDLE_EXIT_S
    )
    # Partials and finals are different topics: their relative order is not defined.
    assert sorted((r["type"], r["call_id"]) for r in shown) == [("final", "c2"), ("partial", "c2")]
    assert _tail(topics, capsys, "--call", "nobody", "--idle-exit-s", "2") == []
