"""RNNoise inside the engine and the worker, on the real parts (``STREAMSCRIBE_DENOISE``).

``tests/integration/test_denoise_real.py`` checks :class:`StreamDenoiser` alone; here the
denoiser runs where production runs it, inside the sessions of the streaming engine (silero VAD,
Whisper tiny.en) and of real worker processes on the real broker:

- the noisy fixtures through ``build_engine(AsrSettings(denoise=True))``: WER under a bound from
  ``bench/results/denoise.md``, no words on the non-speech fixtures, the raw stream's clock kept;
- a kill -9 of the worker that owns a call mid-call, with denoising on in both workers: such a
  session is never snapshotted (RNNoise's state lives in C), so its partition's committed offset
  stays at the call's first record and the survivor replays the whole call; every final must
  come out exactly once and equal the embedded engine's finals with denoising on.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from pipeline.asr.engine import EngineOutput, SessionEnded, StreamingEngine
from pipeline.asr.factory import build_engine
from pipeline.asr.session import SessionKey
from pipeline.clock import ManualClock
from pipeline.evaluation import WordErrors, word_errors
from pipeline.settings import AsrSettings, KafkaSettings
from tests.integration.test_engine_real import (
    CHUNK_MS,
    EMIT_MS,
    ended_audio_ms,
    finals_of,
    load,
    records,
    stream,
    timing_view,
)
from tests.integration.worker_harness import (
    Publisher,
    WorkerProcess,
    calls_on,
    committed_offsets,
    embedded_finals,
    kafka_partition,
    read_topic,
    sessions_ended,
    wait_for_owners,
    worker_env,
)

pytestmark = pytest.mark.integration

# bench/results/denoise.md (engine, CPU, 2 threads): 44 words, raw 6 errors (13.6 %), denoised 3
# errors (6.8 %: "will charge" for "was charged", "with I move" for "Could I move"). Measured
# here with denoising inside the engine: the same 3 errors, 6.8 %. The bound allows 2 more
# errors (one error is 2.3 points) and stays under the raw 13.6 %, so it also fails if the
# setting were silently ignored.
MAX_WER_NOISY_DENOISED = 0.12
# Word timings against the fixture's speech span (manifest ``speech_start_ms``/``speech_end_ms``).
# Measured: within 32 ms. The denoiser compensates its own ≈ 32 ms latency; Whisper's word edges
# are coarser than that, so this catches a clock that drifts, not one shifted by a frame.
WORD_EDGE_TOLERANCE_MS = 100
PARTITIONS = 12  # of audio.chunks (topics/)
CALLS = ["calls/call01_billing.flac", "calls/call03_outage.flac"]
KILLED, SURVIVOR = "w-dn-a", "w-dn-b"


# -- the engine ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[StreamingEngine]:
    loaded = build_engine(
        AsrSettings(threads=2, partials=False, denoise=True), ManualClock(EMIT_MS)
    )
    assert loaded.engine.config.denoise
    yield loaded.engine
    assert not loaded.engine.sessions


NOISY_WATCHED = "noisy01_billing_white"


@dataclass(frozen=True, slots=True)
class Corpus:
    outputs: list[EngineOutput]
    # Positions at which NOISY_WATCHED's session offered a snapshot (``stream``'s ``watch``).
    snapshot_positions: list[int]


@pytest.fixture(scope="module")
def corpus(engine: StreamingEngine) -> Corpus:
    """The noisy and non-speech fixtures streamed together in 100 ms chunks, denoised."""
    corpus_records = records("noisy", "nonspeech")
    assert Counter(r["kind"] for r in corpus_records) == {"noisy": 4, "nonspeech": 7}
    calls = [load(r, call_id=r["id"]) for r in corpus_records]
    outputs, snapshots = stream(engine, calls, watch=SessionKey(NOISY_WATCHED, "mono"))
    return Corpus(outputs, [position for position, _ in snapshots])


def test_a_denoised_session_never_offers_a_snapshot(corpus: Corpus) -> None:
    """RNNoise's C state cannot be snapshotted: the session is never quiescent, not even in the
    silence before its first word (the raw engine offers snapshots there: measured, at 100 and
    200 ms of this file), so a takeover must replay it from its first chunk."""
    assert finals_of(corpus.outputs, NOISY_WATCHED)
    assert corpus.snapshot_positions == []


def _text(corpus: Corpus, call_id: str) -> str:
    return " ".join(final.text for final in finals_of(corpus.outputs, call_id))


def _ended(corpus: Corpus, call_id: str) -> list[SessionEnded]:
    return [o for o in corpus.outputs if isinstance(o, SessionEnded) and o.key.call_id == call_id]


def test_denoised_noisy_fixtures_wer_is_under_the_bound(corpus: Corpus) -> None:
    noisy = records("noisy")
    total = WordErrors()
    for record in noisy:
        total += word_errors(record["text"], _text(corpus, record["id"]))
    detail = {r["id"]: _text(corpus, r["id"]) for r in noisy}
    assert total.reference_words == 44  # the corpus bench/results/denoise.md measured
    assert total.wer <= MAX_WER_NOISY_DENOISED, f"WER {total.wer:.3f} ({total}): {detail}"


@pytest.mark.parametrize("record", records("nonspeech"), ids=lambda r: r["id"])
def test_denoised_non_speech_gives_no_words(corpus: Corpus, record: dict[str, Any]) -> None:
    assert finals_of(corpus.outputs, record["id"]) == []
    ended = _ended(corpus, record["id"])
    assert len(ended) == 1
    assert ended[0].utterances == 0
    # The whole file went through the denoiser (its held-back tail drained at the end).
    assert ended[0].audio_ms == ended_audio_ms(record)


@pytest.mark.parametrize("record", records("noisy"), ids=lambda r: r["id"])
def test_denoised_finals_keep_the_raw_streams_clock(corpus: Corpus, record: dict[str, Any]) -> None:
    finals = finals_of(corpus.outputs, record["id"])
    assert len(finals) == 1, [f.text for f in finals]
    [final] = finals
    words = final.words
    assert words
    assert abs(words[0].start_ms - record["speech_start_ms"]) <= WORD_EDGE_TOLERANCE_MS, final
    assert abs(words[-1].end_ms - record["speech_end_ms"]) <= WORD_EDGE_TOLERANCE_MS, final
    assert final.start_ms <= words[0].start_ms <= words[-1].end_ms <= final.end_ms
    [ended] = _ended(corpus, record["id"])
    assert ended.audio_ms == ended_audio_ms(record)
    assert 0 < ended.speech_ms <= ended.audio_ms


def test_denoised_finals_do_not_depend_on_the_chunking(
    corpus: Corpus, engine: StreamingEngine
) -> None:
    """Producers send 20 ms chunks, the corpus ran in 100 ms ones: the denoiser works in whole
    10 ms blocks whatever the chunking, so the finals are the same (what the worker test below
    relies on: the embedded engine steps at another cadence than a worker)."""
    noisy = records("noisy")
    assert CHUNK_MS != 20
    outputs, _ = stream(engine, [load(r, call_id="again-" + r["id"]) for r in noisy], chunk_ms=20)
    for record in noisy:
        again = finals_of(outputs, "again-" + record["id"])
        assert again
        assert [timing_view(f) for f in again] == [
            timing_view(f) for f in finals_of(corpus.outputs, record["id"])
        ]


# -- the worker ------------------------------------------------------------------------------


def _topic(settings: KafkaSettings, role: str) -> str:
    return f"{settings.topic_prefix}{role}"


def _high_watermarks(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in partitions
        }
    finally:
        consumer.close()


def test_kill_9_mid_call_with_denoise_replays_the_call_exactly_once(
    topics: KafkaSettings, redis_url: str, tmp_path: Path
) -> None:
    group_id = f"{topics.topic_prefix}asr"
    bootstrap = topics.bootstrap_servers
    events_topic, chunks_topic = _topic(topics, "asr.events"), _topic(topics, "audio.chunks")
    finals_topic = _topic(topics, "asr.finals")

    def worker(worker_id: str) -> WorkerProcess:
        # Workers read hotword lists from Redis: the real one, as in test_worker.py.
        env = worker_env(
            topics, group_id, STREAMSCRIBE_DENOISE="true", STREAMSCRIBE_REDIS_URL=redis_url
        )
        return WorkerProcess(worker_id, env, tmp_path / f"{worker_id}.log").start()

    killed, survivor = worker(KILLED), worker(SURVIVOR)
    try:
        owners = wait_for_owners(bootstrap, events_topic, (KILLED, SURVIVOR), PARTITIONS, 180)
        # Call ids chosen so that each worker owns one of the two calls.
        calls = calls_on(CALLS, [owners[KILLED], owners[SURVIVOR]], PARTITIONS, topics.topic_prefix)
        placed = {c.call_id: kafka_partition(c.call_id, PARTITIONS) for c in calls}
        [victim] = [cid for cid, p in placed.items() if p in owners[KILLED]]
        victim_partition = placed[victim]
        assert len(set(placed.values())) == 2  # the victim's partition carries only its records
        publisher = Publisher(topics, calls, speed=2.0).start()
        # Mid-call: the worker to be killed has committed at least one of the victim's finals.
        before = read_topic(
            bootstrap, finals_topic, lambda fs: any(f["call_id"] == victim for f in fs), 120
        )
        victim_before = [f for f in before if f["call_id"] == victim]
        assert victim_before, killed.log()
        # With finals published, a raw session would have been snapshotted between utterances
        # and its offset moved on; a denoised one holds the committed offset at its first record.
        held = committed_offsets(bootstrap, group_id, chunks_topic, PARTITIONS)[victim_partition]
        assert held == 0, killed.log()
        killed.kill()
        publisher.join()
        events = read_topic(bootstrap, events_topic, sessions_ended(2 * len(calls)), 300)
        assert sum(e["type"] == "session_ended" for e in events) == 2 * len(calls), survivor.log()
    finally:
        killed.stop_quietly()
        survivor.stop_quietly()
    finals = read_topic(bootstrap, finals_topic, lambda r: False, 5)
    checkpoints = read_topic(bootstrap, _topic(topics, "asr.checkpoints"), lambda r: False, 3)
    ended_offsets = committed_offsets(bootstrap, group_id, chunks_topic, PARTITIONS)
    ends = _high_watermarks(bootstrap, chunks_topic, sorted(placed.values()))

    counts = Counter(f["utterance_id"] for f in finals)
    texts = {f["utterance_id"]: f["text"] for f in finals}
    # The embedded engine with the workers' settings (TORCH_THREADS=1, DENOISE=true), computed
    # after the workers are gone so that it does not compete with them for the CPU.
    expected = embedded_finals(calls, AsrSettings(threads=1, denoise=True))
    assert {uid: n for uid, n in counts.items() if n > 1} == {}
    assert sorted(set(expected) - set(texts)) == []
    assert texts == expected
    # The killed worker's committed finals were kept, and the survivor finished the call.
    assert {f["utterance_id"] for f in victim_before} <= set(texts)
    victim_ended = [e for e in events if e["type"] == "session_ended" and e["call_id"] == victim]
    assert {e["source"] for e in victim_ended} == {SURVIVOR}
    assert len([uid for uid in texts if uid.startswith(f"{victim}:")]) > len(victim_before)
    # Each session ended once, announcing the finals published for it by both owners.
    published = Counter((f["call_id"], f["channel"]) for f in finals)
    announced = Counter(
        (e["call_id"], e["channel"]) for e in events if e["type"] == "session_ended"
    )
    assert set(announced.values()) == {1}
    assert {
        (e["call_id"], e["channel"]): e["detail"]["utterances"]
        for e in events
        if e["type"] == "session_ended"
    } == {key: published[key] for key in announced}
    # No session checkpoint ever carried a snapshot; once the calls ended, their offsets moved on.
    sessions = [c for c in checkpoints if "call_id" in c]
    assert {c["call_id"] for c in sessions} == set(placed)
    assert [c for c in sessions if c["snapshot"] is not None] == []
    assert {p: ended_offsets[p] for p in ends} == ends
