"""Replay and compare on the real broker with the real model.

Fixture speech is published with ``AudioPublisher``: a stereo call ``duo`` (agent and customer
are two fixture utterances) and the mono ``pause_300ms_nosplit`` (two sentences, 300 ms apart).
Three replays share one module of topics: the default settings twice (by time range), and a
deliberately worse config (200 ms endpoint silence, 1.5 s utterances) by call ids, which also
writes shadow topics. The tests then check the files, the comparison and the gate.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.audio.files import read_call_audio
from pipeline.cli import main
from pipeline.contracts import Final
from pipeline.contracts.reading import parse_final
from pipeline.evaluation import word_errors
from pipeline.hotwords import HotwordKeys, HotwordStore, ListRef, connect
from pipeline.producer import AudioPublisher
from pipeline.replay import kafka as replay_kafka
from pipeline.replay.results import PartitionRange, load_run
from pipeline.runtime.admin import TopicAdmin
from pipeline.runtime.kafka import new_consumer
from pipeline.settings import KafkaSettings, Settings, WorkerSettings
from pipeline.topics import load_topic_specs
from tests.conftest import FIXTURES, validate

pytestmark = pytest.mark.integration

AGENT_ID, CUSTOMER_ID = "utt01_account", "utt05_password"
PAUSE_ID = "pause_300ms_nosplit"
CALL_IDS = ("duo", PAUSE_ID)
WORSE_ENV = {"STREAMSCRIBE_ENDPOINT_SILENCE_MS": "200", "STREAMSCRIBE_MAX_UTTERANCE_MS": "1500"}
LOOSE_WER = 0.2


@dataclass(frozen=True, slots=True)
class Replays:
    kafka: KafkaSettings
    shadow_prefix: str
    refs: Path
    baseline: Path
    again: Path
    worse: Path
    # The group.id of every Kafka consumer the replays created (each a throwaway name).
    consumer_groups: tuple[str, ...]


def _fixture(file_id: str) -> Path:
    for path in FIXTURES.rglob(f"{file_id}.flac"):
        return path
    raise FileNotFoundError(file_id)


def _publish(kafka: KafkaSettings) -> None:
    agent = read_call_audio(_fixture(AGENT_ID)).channels["mono"]
    customer = read_call_audio(_fixture(CUSTOMER_ID)).channels["mono"]
    pause = read_call_audio(_fixture(PAUSE_ID)).channels["mono"]
    with AudioPublisher.connect(Settings(kafka=kafka)) as publisher:
        with publisher.open_call("duo", channels=("agent", "customer")) as call:
            call.push("agent", agent)
            call.push("customer", customer)
        with publisher.open_call(PAUSE_ID) as call:
            call.push("mono", pause)


def _refs(path: Path) -> Path:
    fixture_refs = (FIXTURES / "refs.tsv").read_text()
    texts = dict(line.split("\t", 1) for line in fixture_refs.splitlines())
    path.write_text(
        fixture_refs + f"duo:agent\t{texts[AGENT_ID]}\nduo:customer\t{texts[CUSTOMER_ID]}\n"
    )
    return path


def _replay(kafka: KafkaSettings, *args: str) -> None:
    argv = ["--bootstrap", kafka.bootstrap_servers, "--topic-prefix", kafka.topic_prefix]
    assert main([*argv, "replay", *args]) == 0


@pytest.fixture(scope="module")
def replays(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replays]:
    """Publish the calls once, replay three times; the topics are deleted afterwards."""
    run_id = uuid.uuid4().hex[:10]
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=f"test-{run_id}.")
    shadow_prefix = f"test-{run_id}-shadow."
    specs = load_topic_specs(prefix=kafka.topic_prefix) + load_topic_specs(prefix=shadow_prefix)
    admin = TopicAdmin(kafka)
    admin.apply(specs)
    folder = tmp_path_factory.mktemp("replay")
    consumer_groups: list[str] = []

    def recording_consumer(config: dict[str, Any]) -> Consumer:
        consumer_groups.append(str(config["group.id"]))
        return new_consumer(config)

    try:
        with pytest.MonkeyPatch.context() as patch:
            # One torch thread: per-frame VAD calls crawl when threads fight over shared cores.
            patch.setenv("STREAMSCRIBE_TORCH_THREADS", "1")
            # Every consumer the replay makes (its Kafka shell is its only Kafka reader), so the
            # test can check that none of them left a group behind, whatever its name.
            patch.setattr(replay_kafka, "new_consumer", recording_consumer)
            from_ms = int(time.time() * 1000) - 1000
            _publish(kafka)
            to_ms = int(time.time() * 1000) + 60_000
            window = ["--from", str(from_ms), "--to", str(to_ms)]
            _replay(kafka, *window, "--output", str(folder / "baseline.jsonl"))
            _replay(kafka, *window, "--output", str(folder / "again.jsonl"))
            for name, value in WORSE_ENV.items():
                patch.setenv(name, value)
            _replay(
                kafka,
                "--calls",
                ",".join(CALL_IDS),
                "--output",
                str(folder / "worse.jsonl"),
                "--shadow-prefix",
                shadow_prefix,
            )
        yield Replays(
            kafka,
            shadow_prefix,
            _refs(folder / "refs.tsv"),
            folder / "baseline.jsonl",
            folder / "again.jsonl",
            folder / "worse.jsonl",
            tuple(consumer_groups),
        )
    finally:
        admin.delete([spec.name for spec in specs])


def _lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_replaying_the_same_range_twice_writes_identical_bytes(replays: Replays) -> None:
    assert replays.baseline.read_bytes() == replays.again.read_bytes()
    lines = _lines(replays.baseline)
    assert lines[0]["type"] == "header"
    assert lines[-1]["type"] == "totals"
    finals = [line for line in lines if line["type"] == "final"]
    assert finals, "no finals"
    for line in finals:
        validate("final", {k: v for k, v in line.items() if k != "type"})
    keys = [(f["call_id"], f["channel"], f["utterance_index"]) for f in finals]
    assert keys == sorted(keys)
    calls = {line["call_id"]: line for line in lines if line["type"] == "call"}
    assert sorted(calls) == sorted(CALL_IDS)
    for call in calls.values():
        for channel in call["channels"]:  # type: ignore[attr-defined]
            assert channel["ended_by"] == "end_of_stream"
            assert channel["first_seq"] == 0
            assert channel["rejected"] == {}
    assert lines[-1]["invalid"] == {}
    assert lines[-1]["skipped"] == 0


def test_replayed_text_matches_the_references(replays: Replays) -> None:
    run = load_run(replays.baseline)
    texts: dict[tuple[str, str], list[Final]] = {}
    for final in run.finals:
        texts.setdefault((final.call_id, final.channel), []).append(final)
    refs = dict(line.split("\t", 1) for line in replays.refs.read_text().splitlines())
    expected = {("duo", "agent"), ("duo", "customer"), (PAUSE_ID, "mono")}
    assert set(texts) == expected
    for (call_id, channel), finals in texts.items():
        ref = refs[f"{call_id}:{channel}" if call_id == "duo" else call_id]
        errors = word_errors(ref, " ".join(f.text for f in finals))
        assert errors.wer <= LOOSE_WER, (call_id, channel, [f.text for f in finals])
    # The 300 ms pause does not end the utterance at the default 800 ms endpoint.
    assert len(texts[(PAUSE_ID, "mono")]) == 1


def test_replay_touches_no_consumer_group(replays: Replays) -> None:
    kafka = replays.kafka
    topic = f"{kafka.topic_prefix}audio.chunks"
    partitions = [TopicPartition(topic, p) for p in range(12)]
    # The production group never saw this module's topic.
    production = Consumer(
        {"bootstrap.servers": kafka.bootstrap_servers, "group.id": WorkerSettings().group_id}
    )
    try:
        committed = production.committed(partitions, timeout=15)
    finally:
        production.close()
    assert all(tp.offset < 0 for tp in committed)
    # The replays' own readers (one per run at least) assigned partitions by hand: no group of
    # theirs exists on the broker, and none committed an offset. (Other tests share the broker:
    # only this run's names are looked up.)
    assert len(replays.consumer_groups) >= 3
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    listed = {g.group_id for g in admin.list_consumer_groups().result(timeout=15).valid}
    assert listed.isdisjoint(replays.consumer_groups)
    for group_id in replays.consumer_groups:
        probe = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group_id})
        try:
            committed = probe.committed(partitions, timeout=15)
        finally:
            probe.close()
        assert all(tp.offset < 0 for tp in committed), group_id


def _compare(*args: str) -> int:
    return main(["compare", *args])


def test_a_run_compared_with_itself_passes_a_zero_gate(
    replays: Replays, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "same.json"
    base, again, refs = str(replays.baseline), str(replays.again), str(replays.refs)
    assert _compare(base, again, "--max-wer-increase", "0", "--json", str(report)) == 0
    data = orjson.loads(report.read_bytes())
    assert data["gate"]["metric"] == "divergence"
    assert data["gate"]["candidate"] == 0.0
    assert all(count == 0 for count in data["endpoint_changes"].values())
    assert data["config_changes"] == []
    assert _compare(base, base, "--refs", refs, "--max-wer-increase", "0") == 0
    assert capsys.readouterr().err.splitlines()[-1].startswith("compare: PASS")


def test_a_worse_config_is_flagged_and_fails_the_gate(
    replays: Replays, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "worse.json"
    base, worse, refs = str(replays.baseline), str(replays.worse), str(replays.refs)
    argv = [base, worse, "--refs", refs, "--max-wer-increase", "0", "--json", str(report)]
    assert _compare(*argv) == 1
    markdown = capsys.readouterr().out
    data = orjson.loads(report.read_bytes())
    assert data["gate"]["metric"] == "wer"
    assert data["gate"]["increase"] > 0
    settings = {change["setting"]: change for change in data["config_changes"]}
    assert settings["asr.endpoint_silence_ms"]["candidate"] == 200
    assert settings["asr.max_utterance_ms"]["candidate"] == 1500
    # The pause call: one utterance in the baseline, cut into several by the worse config.
    assert data["endpoint_changes"]["split"] >= 1
    assert data["text_changes"] >= 1
    assert "| split |" in markdown
    assert "## Changed utterances" in markdown
    # Without references the divergence between the runs fails the same gate.
    assert _compare(base, worse, "--max-wer-increase", "0") == 1


def test_shadow_topics_receive_the_replays_finals(replays: Replays) -> None:
    expected = list(load_run(replays.worse).finals)
    consumer = Consumer(
        {
            "bootstrap.servers": replays.kafka.bootstrap_servers,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([f"{replays.shadow_prefix}asr.finals", f"{replays.shadow_prefix}asr.events"])
    finals: list[Final] = []
    events: list[dict[str, object]] = []
    try:
        for _ in range(120):
            for record in consumer.consume(num_messages=500, timeout=0.5):
                assert record.error() is None, record.error()
                if record.topic().endswith("asr.finals"):
                    finals.append(parse_final(record.value()))
                else:
                    events.append(orjson.loads(record.value()))
            if len(finals) >= len(expected) and len(events) >= 3:
                break
    finally:
        consumer.close()
    key = lambda f: f.utterance_id  # noqa: E731
    assert sorted(finals, key=key) == sorted(expected, key=key)
    for event in events:
        validate("event", event)
    assert {(e["call_id"], e["channel"]) for e in events} == {
        ("duo", "agent"),
        ("duo", "customer"),
        (PAUSE_ID, "mono"),
    }


def test_the_range_is_cut_by_record_timestamps_and_the_watermarks(replays: Replays) -> None:
    from pipeline.replay.kafka import ChunkSource

    source = ChunkSource(replays.kafka, f"{replays.kafka.topic_prefix}audio.chunks")
    try:
        everything = source.plan(None, None)
        totals = _lines(replays.baseline)[-1]
        assert sum(span.records for span in everything) == totals["records"]
        assert source.plan(int(time.time() * 1000) + 3_600_000, None) == []
        span = everything[0]
        records = list(source.read(span))
        assert [r.offset for r in records] == list(range(span.start_offset, span.end_offset))
        cut_ms = records[len(records) // 2].timestamp_ms
        first_at_cut = next(r.offset for r in records if r.timestamp_ms >= cut_ms)
        # Empty ranges are left out of a plan (the publisher may stamp many records alike).
        before = {s.partition: s for s in source.plan(None, cut_ms)}.get(span.partition)
        expected_before = (span.start_offset, first_at_cut)
        assert before == (
            PartitionRange(span.partition, *expected_before)
            if first_at_cut > span.start_offset
            else None
        )
        after = {s.partition: s for s in source.plan(cut_ms, None)}[span.partition]
        assert (after.start_offset, after.end_offset) == (first_at_cut, span.end_offset)
    finally:
        source.close()


def test_a_replay_decodes_with_the_hotword_lists_in_redis_only_when_asked(
    kafka_bootstrap: str,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = uuid.uuid4().hex[:10]
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=f"test-{run_id}.")
    specs = load_topic_specs(prefix=kafka.topic_prefix)
    admin = TopicAdmin(kafka)
    admin.apply(specs)
    key_prefix = f"test-{run_id}:hw"
    for name, value in {
        "STREAMSCRIBE_TORCH_THREADS": "1",
        "STREAMSCRIBE_REDIS_URL": redis_url,
        "STREAMSCRIBE_HOTWORDS_KEY_PREFIX": key_prefix,
    }.items():
        monkeypatch.setenv(name, value)
    client = connect(redis_url)
    plain, biased = tmp_path / "plain.jsonl", tmp_path / "biased.jsonl"
    try:
        # The name the unbiased model mishears (bench/results/hotwords.md), for the call's tenant.
        HotwordStore(client, HotwordKeys(key_prefix)).add(ListRef("default"), ["Niamh"])
        speech = read_call_audio(_fixture("hot01_niamh")).channels["mono"]
        with (
            AudioPublisher.connect(Settings(kafka=kafka)) as publisher,
            publisher.open_call("hot") as call,
        ):
            call.push("mono", speech)
        _replay(kafka, "--calls", "hot", "--output", str(plain))
        _replay(kafka, "--calls", "hot", "--hotwords", "--output", str(biased))
    finally:
        keys = list(client.scan_iter(match=f"{key_prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()
        admin.delete([spec.name for spec in specs])
    plain_text = " ".join(final.text for final in load_run(plain).finals)
    biased_text = " ".join(final.text for final in load_run(biased).finals)
    assert "Niamh" not in plain_text
    assert "Niamh" in biased_text, biased_text
    plain_header, biased_header = _lines(plain)[0], _lines(biased)[0]
    assert isinstance(plain_header["replay"], dict)
    assert plain_header["replay"]["hotwords"] is None
    assert isinstance(biased_header["replay"], dict)
    recorded = biased_header["replay"]["hotwords"]
    assert recorded["lists"] == 1
    assert recorded["version"] >= 1
    assert recorded["key_prefix"] == key_prefix
