"""The replay runner with a fake engine: the worker's admission rules, closing, determinism."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pipeline.asr.engine import StepReport
from pipeline.asr.session import SessionKey
from pipeline.contracts import RejectReason
from pipeline.contracts.messages import Final, Word
from pipeline.redaction import Redactor, RedactorConfig, TenantPolicies, parse_policy
from pipeline.replay.runner import (
    ChunkRecord,
    EndedBy,
    ReplayOptions,
    ReplayResult,
    ReplayRunner,
    StreamClock,
)
from pipeline.worker.admission import AdmissionLimits
from tests.unit.replay.fakes import CHUNK_MS, FakeEngine, call_records, chunk_record


def _replay(
    records: list[ChunkRecord], options: ReplayOptions | None = None
) -> tuple[ReplayResult, FakeEngine]:
    clock = StreamClock()
    engine = FakeEngine(clock)
    runner = ReplayRunner(engine, clock, options)
    partition = None
    for record in records:
        if record.partition != partition:
            partition = record.partition
            runner.start_partition(partition)
        runner.feed(record)
    return runner.result(), engine


def test_chunks_reach_the_engine_like_the_worker_feeds_them() -> None:
    records = call_records("c1", 5)
    result, engine = _replay(records)
    assert [a.position for a in engine.accepted] == [0, 1, 2, 3, 4]
    assert [a.end_of_stream for a in engine.accepted] == [False] * 4 + [True]
    assert {a.samples for a in engine.accepted} == {320}
    assert [a.capture_ms for a in engine.accepted] == [1_000_000 + 20 * i for i in range(5)]
    (final,) = result.finals
    assert (final.call_id, final.text, final.start_ms, final.end_ms) == (
        "c1",
        "samples 0 to 1600",
        0,
        100,
    )
    (stream,) = result.streams
    assert stream.ended_by is EndedBy.END_OF_STREAM
    assert (stream.first_seq, stream.last_seq, stream.chunks, stream.finals) == (0, 4, 5, 1)
    assert (stream.first_offset, stream.last_offset, stream.audio_ms) == (0, 4, 100)


def test_invalid_duplicate_and_late_chunks_are_counted_not_fed() -> None:
    good = call_records("c1", 4)
    no_key = replace(good[0], key=None, offset=10)
    odd = replace(good[1], value=b"\x00", offset=11)
    duplicate = replace(good[1], offset=12)
    after_end = chunk_record("c1", 4, 13, capture_ms=2_000_000)
    records = [good[0], good[1], no_key, odd, duplicate, good[3], after_end]
    result, engine = _replay(records)
    assert [a.position for a in engine.accepted] == [0, 1, 3]
    assert result.invalid == ((RejectReason.MISSING_KEY, 1), (RejectReason.ODD_BYTE_COUNT, 1))
    (stream,) = result.streams
    assert stream.duplicates == 1
    assert stream.missing_chunks == 1  # seq 2 never arrived
    assert stream.rejected == ((RejectReason.CALL_ALREADY_ENDED, 1),)
    assert result.records == 7


def test_a_record_with_unreadable_headers_counts_as_the_worker_dead_letters_it() -> None:
    # Self-review finding: replay took such a record for one without headers (missing_header),
    # so its invalid counts disagreed with the worker's dead letters (unreadable_headers).
    good = call_records("c1", 3)
    unreadable = replace(good[1], headers=None, headers_unreadable=True, offset=10)
    result, engine = _replay([good[0], unreadable, good[1], good[2]])
    assert result.invalid == ((RejectReason.UNREADABLE_HEADERS, 1),)
    assert [a.position for a in engine.accepted] == [0, 1, 2]


def test_admission_limits_come_from_the_options() -> None:
    records = call_records("c1", 3, end=False) + call_records("c2", 3, first_offset=3)
    options = ReplayOptions(limits=AdmissionLimits(max_call_ms=0, max_open_sessions=1))
    result, engine = _replay(records, options)
    assert {a.key.call_id for a in engine.accepted} == {"c1"}
    c2 = next(s for s in result.streams if s.call_id == "c2")
    assert c2.rejected == ((RejectReason.TOO_MANY_SESSIONS, 3),)


def test_only_the_chosen_calls_are_replayed() -> None:
    records = call_records("c1", 3) + call_records("c2", 3, first_offset=3)
    result, engine = _replay(records, ReplayOptions(calls=frozenset({"c2"})))
    assert {a.key.call_id for a in engine.accepted} == {"c2"}
    assert (result.records, result.skipped) == (6, 3)
    assert [s.call_id for s in result.streams] == ["c2"]


def test_calls_open_at_the_end_of_the_range_are_closed_and_finalized() -> None:
    result, engine = _replay(call_records("c1", 3, end=False))
    assert engine.closed == [SessionKey("c1", "mono")]
    (final,) = result.finals
    assert final.text == "samples 0 to 960"
    assert result.streams[0].ended_by is EndedBy.RANGE_END


def test_a_silent_call_is_closed_after_the_idle_timeout_of_stream_time() -> None:
    quiet = call_records("quiet", 2, end=False)
    # A second call on the partition keeps the stream time moving for 40 s.
    busy = [
        chunk_record("busy", seq, 2 + seq, capture_ms=1_000_000 + seq * 1000, samples=320)
        for seq in range(40)
    ]
    options = ReplayOptions(idle_timeout_ms=30_000)
    result, _ = _replay(quiet + busy, options)
    by_call = {s.call_id: s for s in result.streams}
    assert by_call["quiet"].ended_by is EndedBy.IDLE_TIMEOUT
    assert by_call["busy"].ended_by is EndedBy.RANGE_END
    quiet_final = next(f for f in result.finals if f.call_id == "quiet")
    assert 1_030_000 < quiet_final.emit_ms < 1_040_000
    # The worker's admission then refuses the call's audio: it has ended.
    late = chunk_record("quiet", 2, 100, capture_ms=1_050_000)
    result, _ = _replay([*quiet, *busy, late], options)
    by_call = {s.call_id: s for s in result.streams}
    assert by_call["quiet"].rejected == ((RejectReason.CALL_ALREADY_ENDED, 1),)


def test_the_engine_steps_on_stream_time_and_emit_times_are_stream_time() -> None:
    records = call_records("c1", 50)  # 1 s of audio, 20 ms chunks
    options = ReplayOptions(step_interval_ms=200)
    result, engine = _replay(records, options)
    # Steps every 200 ms of audio time (the capture end of the newest chunk; the first chunk
    # ends at 1_000_020), then at the end.
    assert engine.steps[:4] == [1_000_220, 1_000_420, 1_000_620, 1_000_820]
    assert result.finals[0].emit_ms == 1_000_000 + 50 * CHUNK_MS


def test_without_capture_times_the_record_timestamp_is_the_clock() -> None:
    records = [
        chunk_record("c1", seq, seq, timestamp_ms=5_000 + seq * 100, end_of_stream=seq == 9)
        for seq in range(10)
    ]
    result, engine = _replay(records, ReplayOptions(step_interval_ms=300))
    assert engine.steps[0] == 5_300
    assert result.finals[0].emit_ms == 5_900


def test_steps_also_every_max_records_when_time_stands_still() -> None:
    records = [chunk_record("c1", seq, seq, timestamp_ms=7) for seq in range(10)]
    _, engine = _replay(records, ReplayOptions(max_records_per_step=4))
    assert len(engine.steps) >= 2 + 1


def test_partitions_are_replayed_one_after_the_other_with_their_own_clock() -> None:
    first = call_records("a", 3, start_ms=9_000_000, end=False)
    second = [replace(r, partition=1) for r in call_records("b", 3, start_ms=1_000_000)]
    result, _ = _replay(first + second)
    by_call = {f.call_id: f for f in result.finals}
    # "a" was closed at its partition's end, with that partition's stream time.
    assert by_call["a"].emit_ms == 9_000_060
    assert by_call["b"].emit_ms == 1_000_060
    assert [s.partition for s in result.streams] == [0, 1]


def test_finals_and_streams_come_out_sorted_and_a_rerun_is_identical() -> None:
    records = []
    offset = 0
    for call in ("zeta", "alpha", "mid"):
        for channel in ("customer", "agent"):
            start_ms = 1_000_000 + offset * CHUNK_MS
            records += call_records(
                call, 4, first_offset=offset, channel=channel, start_ms=start_ms
            )
            records[-3] = chunk_record(
                call, 1, offset + 1, channel=channel, capture_ms=start_ms + CHUNK_MS, flush=True
            )
            offset += 4
    options = ReplayOptions(step_interval_ms=CHUNK_MS)
    first, _ = _replay(records, options)
    second, _ = _replay(records, options)
    assert first == second
    keys = [(f.call_id, f.channel, f.utterance_index) for f in first.finals]
    assert keys == sorted(keys)
    assert len(keys) == 12
    assert [(s.call_id, s.channel) for s in first.streams] == sorted(
        (s.call_id, s.channel) for s in first.streams
    )


def test_one_call_whose_capture_times_run_ahead_closes_no_other_call() -> None:
    # A file published faster than real time (or a skewed producer clock): capture times a
    # minute ahead of the send time. The worker times idleness on its wall clock, so must this.
    sent_ms = 1_700_000_000_000
    good = [
        chunk_record("good", seq, seq, capture_ms=sent_ms + seq * CHUNK_MS) for seq in range(1500)
    ]
    skewed = chunk_record("skewed", 0, 1500, capture_ms=sent_ms + 60_000, timestamp_ms=sent_ms)
    records = [*good[:6], skewed, *good[6:]]
    result, _ = _replay(records, ReplayOptions(idle_timeout_ms=30_000))
    by_call = {s.call_id: s for s in result.streams}
    assert by_call["good"].chunks == 1500
    assert by_call["good"].rejected == ()
    assert by_call["good"].ended_by is EndedBy.RANGE_END


def _stream(result: ReplayResult, call_id: str) -> object:
    return next(s for s in result.streams if s.call_id == call_id)


def test_a_call_alone_that_pauses_past_the_idle_timeout_is_closed_as_the_worker_closes_it() -> None:
    # No other record moves the time during the pause: the first record after it does, and
    # the call is closed before that record is admitted (the worker's idle close runs on every
    # poll, so it would have ended the call and dead-lettered what comes after).
    before = [chunk_record("c", seq, seq, capture_ms=1_000_000 + 20 * seq) for seq in range(5)]
    after = [
        chunk_record("c", 5 + seq, 5 + seq, capture_ms=1_060_000 + 20 * seq, end_of_stream=seq == 4)
        for seq in range(5)
    ]
    result, engine = _replay(before + after, ReplayOptions(idle_timeout_ms=30_000))
    stream = _stream(result, "c")
    assert stream.ended_by is EndedBy.IDLE_TIMEOUT  # type: ignore[attr-defined]
    assert stream.rejected == ((RejectReason.CALL_ALREADY_ENDED, 5),)  # type: ignore[attr-defined]
    assert len(engine.accepted) == 5


def test_a_calls_result_does_not_depend_on_which_other_calls_are_replayed() -> None:
    own = [chunk_record("c", seq, seq, capture_ms=1_000_000 + 20 * seq) for seq in range(5)]
    others = [chunk_record("busy", k, 5 + k, capture_ms=1_001_000 + 1000 * k) for k in range(59)]
    late = [
        chunk_record(
            "c", 5 + seq, 64 + seq, capture_ms=1_060_000 + 20 * seq, end_of_stream=seq == 4
        )
        for seq in range(5)
    ]
    records = own + others + late
    everything, _ = _replay(records, ReplayOptions(idle_timeout_ms=30_000))
    chosen, _ = _replay(records, ReplayOptions(idle_timeout_ms=30_000, calls=frozenset({"c"})))
    assert _stream(everything, "c") == _stream(chosen, "c")

    def decided(finals: Sequence[Final]) -> list[tuple[object, ...]]:
        # What the audio and the settings decide (emit times follow the steps, which the
        # other calls' records also drive).
        return [(f.utterance_id, f.text, f.start_ms, f.end_ms, f.endpoint_reason) for f in finals]

    assert decided([f for f in everything.finals if f.call_id == "c"]) == decided(chosen.finals)


def test_a_call_begun_before_the_range_has_no_missing_chunks_for_it() -> None:
    records = [
        chunk_record("c", seq, seq - 40, capture_ms=1_000_000 + 20 * seq) for seq in range(40, 50)
    ]
    records.append(chunk_record("c", 52, 10, capture_ms=1_000_000 + 20 * 52, end_of_stream=True))
    result, _ = _replay(records)
    stream = _stream(result, "c")
    assert stream.first_seq == 40  # type: ignore[attr-defined]
    assert stream.missing_chunks == 2  # type: ignore[attr-defined]  # 50 and 51, not 0 to 39


class _CardEngine(FakeEngine):
    """Its finals read a card number (the words a worker's engine would give)."""

    def step(self, max_jobs: int | None = None) -> StepReport:
        text = "card 4111 1111 1111 1111"
        words = tuple(Word(word, 10 * i, 10 * (i + 1), 0.9) for i, word in enumerate(text.split()))
        return StepReport(
            tuple(
                replace(output, text=text, words=words) if isinstance(output, Final) else output
                for output in super().step(max_jobs).outputs
            )
        )


def test_a_replay_redacts_its_finals_as_the_worker_publishes_them() -> None:
    for policy, text in (("pci", "card [CARD_NUMBER]"), ("off", "card 4111 1111 1111 1111")):
        clock = StreamClock()
        redactor = Redactor(RedactorConfig(TenantPolicies(parse_policy(policy))))
        runner = ReplayRunner(_CardEngine(clock), clock, None, redactor)
        runner.start_partition(0)
        for record in call_records("c1", 5):
            runner.feed(record)
        (final,) = runner.result().finals
        assert final.text == text
