"""The fixture calls through the whole pipeline: audio → Kafka → ASR worker → QA app → qa.calls.

Real audio is published to ``audio.chunks``, a real ``python -m pipeline worker`` process decodes
it (whisper tiny.en on CPU) and a real ``python -m pipeline qa`` process summarizes the calls.
Every summary is checked against the fixtures' reference timings (``tests/fixtures/manifest.json``):
the speech span of each reference turn, talk time per channel, compliance outcomes with their
evidence, and talk-over.

The calls come in two waves. The QA app is killed with SIGKILL once it has published the first
wave's summaries and committed its input, while the second wave is still being spoken (published
at real time): after the restart it recovers its tables, must not publish the first wave again,
and must finish the second wave's calls it was holding live. Every call ends up with exactly one
summary (revision 1).
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from pipeline.qa.matching import normalize_words
from pipeline.settings import KafkaSettings
from tests.conftest import FIXTURES, validate
from tests.integration.qa_harness import (
    APP_ID,
    QaProcess,
    Reader,
    committed_everything,
    delete_internal_topics,
    free_port,
    wait_for,
)
from tests.integration.worker_harness import (
    CHUNK_MS,
    Publisher,
    WorkerProcess,
    load_calls,
    worker_env,
)

pytestmark = pytest.mark.integration

WAVES = (
    ("call01_billing", "call02_delivery"),
    ("call03_outage", "call04_appointment"),
)
TOLERANCE_MS = 300
"""Speech start, end and duration of each reference turn, talk time of each channel (the sum of
its turns' errors), and the overlap of call04."""
PIPELINE_WAIT_S = 240.0
"""Model load plus decoding a wave on the shared CPUs."""
QUIET_S = 5.0


@pytest.fixture
def qa_topics(topics: KafkaSettings) -> Iterator[KafkaSettings]:
    yield topics
    delete_internal_topics(topics)


def _manifest() -> dict[str, dict[str, Any]]:
    files = json.loads((FIXTURES / "manifest.json").read_text())["files"]
    return {entry["id"]: entry for entry in files if entry["kind"] == "call"}


def _turn_index(reference: dict[str, Any], phrase: str) -> int:
    """The agent turn whose reference text contains ``phrase``."""
    wanted = " ".join(normalize_words(phrase))
    (agent,) = [c for c in reference["channel_map"] if c["label"] == "agent"]
    (index,) = [
        n
        for n, turn in enumerate(agent["turns"])
        if wanted in " ".join(normalize_words(turn["text"]))
    ]
    return index


@dataclass(frozen=True, slots=True)
class TimingError:
    """One measured speech timing minus its reference."""

    call: str
    channel: str
    what: str
    error_ms: int
    limit_ms: int
    text: str = ""

    def __str__(self) -> str:
        return f"{self.call:<20} {self.channel:<9} {self.what:<20} {self.error_ms:+5d}  {self.text}"


def _timing_errors(summary: dict[str, Any], reference: dict[str, Any]) -> list[TimingError]:
    """Each reference turn's speech start, end and talk time, and each channel's talk time.

    A turn is matched with the summary's transcript line of the same channel and order.
    """
    errors = []
    stats = {c["channel"]: c for c in summary["channels"]}
    for channel in reference["channel_map"]:
        label, turns = channel["label"], channel["turns"]
        lines = [line for line in summary["transcript"] if line["speaker"] == label]
        assert len(lines) == len(turns), f"{label}: {[line['text'] for line in lines]}"
        assert stats[label]["utterances"] == len(turns)
        for n, (turn, line) in enumerate(zip(turns, lines, strict=True)):
            start_ms = line["start_ms"] - turn["speech_start_ms"]
            end_ms = line["end_ms"] - turn["speech_end_ms"]
            row = partial(TimingError, reference["id"], label, limit_ms=TOLERANCE_MS)
            errors += [
                row(f"turn {n} start", start_ms, text=repr(line["text"])),
                row(f"turn {n} end", end_ms),
                row(f"turn {n} talk", end_ms - start_ms),
            ]
        reference_ms = sum(t["speech_end_ms"] - t["speech_start_ms"] for t in turns)
        errors.append(
            TimingError(
                reference["id"],
                label,
                "channel talk",
                stats[label]["talk_ms"] - reference_ms,
                TOLERANCE_MS,
                f"talk_ms {stats[label]['talk_ms']}, reference {reference_ms}",
            )
        )
    return errors


def _check_compliance(summary: dict[str, Any], reference: dict[str, Any]) -> None:
    results = {result["rule_id"]: result for result in summary["compliance"]}
    agent_ids = [
        line["utterance_id"] for line in summary["transcript"] if line["speaker"] == "agent"
    ]

    disclosure = results["recording_disclosure"]
    if reference["recording_disclosure_in_first_agent_turn"]:
        assert disclosure["outcome"] == "pass", disclosure
        (evidence,) = disclosure["evidence"]
        assert (evidence["channel"], evidence["utterance_id"]) == ("agent", agent_ids[0])
    else:
        assert (disclosure["outcome"], disclosure["evidence"]) == ("fail", []), disclosure

    dismissive = results["no_dismissive_language"]
    forbidden = reference["forbidden_phrases_present"]
    if forbidden:
        assert dismissive["outcome"] == "fail", dismissive
        expected = {agent_ids[_turn_index(reference, phrase)] for phrase in forbidden}
        assert {e["utterance_id"] for e in dismissive["evidence"]} == expected
        assert {e["channel"] for e in dismissive["evidence"]} == {"agent"}
    else:
        assert (dismissive["outcome"], dismissive["evidence"]) == ("pass", []), dismissive
    passed = reference["recording_disclosure_in_first_agent_turn"] and not forbidden
    assert summary["compliance_passed"] is passed


def _check_overlaps(summary: dict[str, Any], reference: dict[str, Any]) -> None:
    expected_ms = sum(overlap["duration_ms"] for overlap in reference["overlaps"])
    if reference["overlaps"]:
        assert abs(summary["overlap_ms"] - expected_ms) <= TOLERANCE_MS, summary["overlaps"]
        for found, expected in zip(summary["overlaps"], reference["overlaps"], strict=True):
            assert abs(found["start_ms"] - expected["start_ms"]) <= TOLERANCE_MS
            assert abs(found["end_ms"] - expected["end_ms"]) <= TOLERANCE_MS
    else:
        assert summary["overlap_ms"] < TOLERANCE_MS, summary["overlaps"]


def _summary_of(records: list[tuple[str | None, dict[str, Any]]], call_id: str) -> dict[str, Any]:
    (summary,) = [value for key, value in records if key == call_id]
    return summary


def _read_all(topic: str, settings: KafkaSettings, isolation: str) -> list[Any]:
    """Every record of ``topic`` (all partitions, from the start), as confluent messages."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"diag-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata.partitions]
        consumer.assign(partitions)
        highs = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in partitions}
        records: list[Any] = []
        deadline = time.monotonic() + 20
        done: set[int] = {p for p, high in highs.items() if high == 0}
        while len(done) < len(highs) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                if message.error() is not None:
                    continue
                records.append(message)
                if message.offset() >= highs[message.partition()] - 1:
                    done.add(message.partition())
            # read_committed may stop short of the high watermark (control records).
            positions = consumer.position(partitions)
            for tp in positions:
                if tp.offset >= 0 and tp.offset >= highs[tp.partition] - 1:
                    done.add(tp.partition)
        return records
    finally:
        consumer.close()


def _diagnose(settings: KafkaSettings, call_ids: list[str]) -> str:
    """Where the finals of ``call_ids`` are (asr.finals, the QA input topic, the finals
    changelog), the input records of those calls, and the app's committed offsets: tells a
    final the worker never wrote from one the QA app lost."""
    lines = ["--- diagnostics"]
    try:
        prefix = settings.topic_prefix
        app = f"{prefix}{APP_ID}"
        for isolation in ("read_committed", "read_uncommitted"):
            for topic in (f"{prefix}asr.finals", f"{app}-input", f"{app}-finals-changelog"):
                found: dict[str, list[str]] = {}
                for message in _read_all(topic, settings, isolation):
                    value = message.value() or b""
                    if topic.endswith("-input"):
                        if value[:1] != b"F":
                            continue
                        value = value[1:]
                    try:
                        final = orjson.loads(value)
                    except orjson.JSONDecodeError:
                        continue
                    if final.get("call_id") in call_ids:
                        found.setdefault(final["call_id"], []).append(
                            f"{final['channel']}:{final['end_ms']}"
                            f"@{message.partition()}/{message.offset()}"
                        )
                for call_id in call_ids:
                    lines.append(
                        f"{isolation} {topic.removeprefix(prefix)} {call_id}: "
                        f"{sorted(found.get(call_id, []))}"
                    )
        for message in _read_all(f"{app}-input", settings, "read_uncommitted"):
            value = message.value() or b""
            key = (message.key() or b"").decode()
            if key in call_ids:
                lines.append(
                    f"input {key} {message.partition()}/{message.offset()} "
                    f"ts={message.timestamp()[1]} {value[:1]!r} {value[1:200]!r}"
                )
        probe = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": app})
        try:
            for topic in (f"{prefix}asr.finals", f"{app}-input"):
                metadata = probe.list_topics(topic, timeout=10).topics[topic]
                tps = [TopicPartition(topic, p) for p in metadata.partitions]
                committed = probe.committed(tps, timeout=10)
                lines.append(
                    f"committed {topic.removeprefix(prefix)}: "
                    f"{[(tp.partition, tp.offset) for tp in committed]}"
                )
        finally:
            probe.close()
    except Exception as error:  # diagnostics must not hide the failure
        lines.append(f"diagnostics failed: {error!r}")
    return "\n".join(lines)


def test_fixture_calls_through_the_pipeline_one_summary_each_across_a_qa_crash(
    qa_topics: KafkaSettings, tmp_path: Path
) -> None:
    settings = qa_topics
    references = _manifest()
    waves = [
        load_calls([f"calls/{name}.flac" for name in wave], settings.topic_prefix) for wave in WAVES
    ]
    first_ids = [call.call_id for call in waves[0]]
    second_ids = [call.call_id for call in waves[1]]
    every_id = [*first_ids, *second_ids]

    worker = WorkerProcess(
        "w-qa", worker_env(settings, f"{settings.topic_prefix}asr"), tmp_path / "worker.log"
    ).start()
    # Idle timeouts are for calls whose sessions never end; these end, and at real time a
    # channel can be quiet for longer than the harness's 3 s default.
    qa = QaProcess(
        settings, free_port(), tmp_path / "qa.log", STREAMSCRIBE_QA_IDLE_TIMEOUT_MS="600000"
    )
    calls = Reader(settings, "qa.calls")
    started_s = time.monotonic()
    try:
        qa.start()
        Publisher(settings, waves[0]).start().join()
        published = list(calls.wait(len(first_ids), PIPELINE_WAIT_S))
        assert sorted(key for key, _ in published if key) == sorted(first_ids)
        first_wave = {key: value for key, value in published if key}

        second = Publisher(settings, waves[1], speed=1.0).start()

        def holds_live_second_wave_call() -> bool:
            status, body = qa.get(f"/calls/{second_ids[0]}")
            return status == 200 and json.loads(body)["utterances"] >= 1

        wait_for("a live call of the second wave", holds_live_second_wave_call, PIPELINE_WAIT_S)
        wait_for("the app to commit its input", lambda: committed_everything(settings))
        calls.poll()
        assert sorted(key for key, _ in calls.records if key) == sorted(first_ids), (
            "the second wave must still be running when the app crashes"
        )
        assert qa.stop(signal.SIGKILL) == -signal.SIGKILL

        qa.start()
        for call_id in first_ids:
            status, body = qa.get(f"/calls/{call_id}")
            assert status == 200
            assert json.loads(body) == first_wave[call_id], "recovered as published"
        calls.wait(len(every_id), PIPELINE_WAIT_S)
        second.join()

        # Nothing more arrives once the app has read everything: one summary per call.
        wait_for("the app to commit its input", lambda: committed_everything(settings))
        time.sleep(QUIET_S)
        calls.poll()
        summaries = calls.records
        assert sorted(key for key, _ in summaries if key) == sorted(every_id), [
            (key, value["revision"]) for key, value in summaries
        ]
        for call_id in first_ids:
            assert _summary_of(summaries, call_id) == first_wave[call_id]

        timings: list[TimingError] = []
        for call_id in every_id:
            summary = _summary_of(summaries, call_id)
            validate("qa_call", summary)
            reference = references[call_id.removeprefix(settings.topic_prefix)]
            assert (summary["revision"], summary["status"], summary["end_reason"]) == (
                1,
                "ended",
                "sessions_ended",
            )
            assert abs(summary["duration_ms"] - reference["duration_ms"]) <= CHUNK_MS
            timings += _timing_errors(summary, reference)
            _check_compliance(summary, reference)
            _check_overlaps(summary, reference)
        print("\nspeech timing errors (ms, measured - reference):", *timings, sep="\n")
        print(f"wall time {time.monotonic() - started_s:.0f} s")
        assert [str(t) for t in timings if abs(t.error_ms) > t.limit_ms] == []
    except BaseException:
        print(f"--- QA app log\n{qa.tail()}\n--- worker log\n{worker.log()}")
        print(_diagnose(settings, second_ids))
        raise
    finally:
        calls.close()
        qa.close()
        worker.stop_quietly()
