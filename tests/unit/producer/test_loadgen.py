"""The load generator's pure core: arrivals, concurrency, slices, seeded bad records."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from pipeline.contracts import AudioChunk, Encoding, RejectReason, decode_chunk, encode_chunk
from pipeline.errors import ChunkRejectedError, ConfigError
from pipeline.producer.loadgen import (
    INJECTABLE_REASONS,
    Arrival,
    LoadSchedule,
    LoadSpec,
    SourceShape,
    Tick,
    _arrival_times,
    make_bad_record,
)

MONO_1S = SourceShape(16000, 16000, ("mono",))
STEREO_HALF_S_8K = SourceShape(8000, 4000, ("agent", "customer"))


def _run(spec: LoadSpec, sources: tuple[SourceShape, ...] = (MONO_1S,)) -> list[Tick]:
    return list(LoadSchedule(spec, sources))


def test_closed_loop_keeps_the_calls_busy_and_replaces_ended_ones() -> None:
    spec = LoadSpec(max_calls=3, duration_ms=2500, chunk_ms=20)
    ticks = _run(spec, (STEREO_HALF_S_8K,))
    assert len(ticks) == 125
    assert [len(tick.slices) for tick in ticks] == [3] * 125
    started = [start.call_index for tick in ticks for start in tick.starts]
    ended = [i for tick in ticks for i in (*tick.completed, *tick.truncated)]
    assert sorted(started) == sorted(ended) == list(range(len(started)))
    # 0.5 s calls: each lasts 25 ticks, its replacement starts on the next tick.
    assert [tick.at_ms for tick in ticks if tick.starts] == [0, 500, 1000, 1500, 2000]
    assert ticks[-1].truncated == ()


def test_every_call_sends_its_audio_once_in_order() -> None:
    short = SourceShape(16000, 16000 + 100, ("mono",))
    ticks = _run(LoadSpec(max_calls=2, duration_ms=3000), (short,))
    pieces: dict[int, list[tuple[int, int]]] = {}
    for tick in ticks:
        for piece in tick.slices:
            pieces.setdefault(piece.call_index, []).append((piece.start_sample, piece.end_sample))
    completed = {i for tick in ticks for i in tick.completed}
    for call_index, spans in pieces.items():
        assert spans[0][0] == 0
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
        if call_index in completed:
            assert spans[-1][1] == short.num_samples
            assert spans[-1][1] - spans[-1][0] == 100


def test_fixed_arrivals_wait_for_a_free_slot() -> None:
    spec = LoadSpec(max_calls=1, duration_ms=2900, arrival_rate_per_s=2.0, arrival=Arrival.FIXED)
    schedule = LoadSchedule(spec, (MONO_1S,))
    ticks = list(schedule)
    starts = [(tick.at_ms, start.arrival_ms) for tick in ticks for start in tick.starts]
    # Arrivals at 0, 500, 1000, …; one slot; each call lasts one second.
    assert starts == [(0, 0), (1000, 500), (2000, 1000)]
    assert schedule.calls_not_started == 6 - 3
    assert ticks[-1].truncated == (2,)


def test_poisson_arrivals_are_seeded_and_within_the_run() -> None:
    spec = LoadSpec(max_calls=100, duration_ms=10_000, arrival_rate_per_s=3.0, seed=5)
    first = [s.arrival_ms for tick in _run(spec) for s in tick.starts]
    again = [s.arrival_ms for tick in _run(spec) for s in tick.starts]
    other = LoadSpec(max_calls=100, duration_ms=10_000, arrival_rate_per_s=3.0, seed=6)
    assert first == again
    assert first != [s.arrival_ms for tick in _run(other) for s in tick.starts]
    assert first == sorted(first)
    assert all(0 < t < 10_000 and t % 20 == 0 for t in first)


def test_bad_records_are_seeded_and_never_change_the_good_load() -> None:
    sources = (MONO_1S, STEREO_HALF_S_8K)
    clean = _run(LoadSpec(max_calls=4, duration_ms=4000, seed=3), sources)
    dirty = _run(LoadSpec(max_calls=4, duration_ms=4000, seed=3, bad_rate=0.25), sources)
    again = _run(LoadSpec(max_calls=4, duration_ms=4000, seed=3, bad_rate=0.25), sources)
    assert dirty == again
    assert [(t.starts, t.slices, t.completed) for t in clean] == [
        (t.starts, t.slices, t.completed) for t in dirty
    ]
    injected = Counter(bad.reason for tick in dirty for bad in tick.bad)
    channels_of = {
        s.call_index: len(sources[s.source_index].channels) for t in dirty for s in t.starts
    }
    records = sum(channels_of[piece.call_index] for t in dirty for piece in t.slices)
    assert 0.15 * records < sum(injected.values()) < 0.4 * records
    assert set(injected) == set(INJECTABLE_REASONS)
    assert all(not tick.bad for tick in clean)


def test_g711_loads_never_pick_an_odd_byte_count() -> None:
    spec = LoadSpec(max_calls=2, duration_ms=2000, bad_rate=1.0, encoding=Encoding.ALAW)
    reasons = {bad.reason for tick in _run(spec) for bad in tick.bad}
    assert RejectReason.ODD_BYTE_COUNT not in reasons
    assert reasons == set(INJECTABLE_REASONS) - {RejectReason.ODD_BYTE_COUNT}


@pytest.mark.parametrize("encoding", list(Encoding))
def test_each_bad_record_fails_decode_chunk_with_its_reason(encoding: Encoding) -> None:
    template = AudioChunk(
        "call-1",
        "agent",
        7,
        8000,
        encoding,
        memoryview(bytes(160 * encoding.bytes_per_sample)),
        capture_ms=123,
        tenant="acme",
    )
    decode_chunk(*encode_chunk(template))
    for reason in LoadSpec(1, 1000, encoding=encoding).reasons:
        record = make_bad_record(reason, template)
        with pytest.raises(ChunkRejectedError) as rejected:
            decode_chunk(record.key, record.value, record.headers)
        assert rejected.value.reason == reason


def test_an_oversize_record_exceeds_the_workers_own_limit() -> None:
    template = AudioChunk("c", "mono", 0, 16000, Encoding.PCM_S16LE, memoryview(bytes(640)))
    limit = 131072  # a deployment that raised STREAMSCRIBE_MAX_CHUNK_BYTES
    record = make_bad_record(RejectReason.OVERSIZE_PAYLOAD, template, max_payload_bytes=limit)
    with pytest.raises(ChunkRejectedError) as rejected:
        decode_chunk(record.key, record.value, record.headers, max_payload_bytes=limit)
    assert rejected.value.reason == RejectReason.OVERSIZE_PAYLOAD


def test_impossible_bad_records_are_refused() -> None:
    one_byte = AudioChunk("c", "mono", 0, 8000, Encoding.MULAW, memoryview(b"\x01\x02"))
    with pytest.raises(ValueError, match="odd"):
        make_bad_record(RejectReason.ODD_BYTE_COUNT, one_byte)
    with pytest.raises(ValueError, match="worker"):
        make_bad_record(RejectReason.OUT_OF_ORDER, one_byte)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_calls": 0}, "--calls"),
        ({"duration_ms": 0}, "--duration-s"),
        ({"arrival_rate_per_s": 0.0}, "--arrival-rate"),
        ({"arrival_rate_per_s": float("inf")}, "--arrival-rate"),
        ({"arrival_rate_per_s": float("nan")}, "--arrival-rate"),
        ({"bad_rate": 1.5}, "--bad-rate"),
        ({"chunk_ms": -1}, "--chunk-ms"),
    ],
)
def test_load_spec_validation(kwargs: dict[str, object], match: str) -> None:
    values: dict[str, object] = {"max_calls": 1, "duration_ms": 1000, **kwargs}
    with pytest.raises(ConfigError, match=match):
        LoadSpec(**values)  # type: ignore[arg-type]


def test_schedule_needs_usable_sources() -> None:
    spec = LoadSpec(max_calls=1, duration_ms=1000)
    with pytest.raises(ConfigError, match="no audio"):
        LoadSchedule(spec, ())
    with pytest.raises(ConfigError, match="samples"):
        LoadSchedule(spec, (SourceShape(16000, 0, ("mono",)),))
    with pytest.raises(ConfigError, match="whole number"):
        LoadSchedule(
            LoadSpec(max_calls=1, duration_ms=1000, chunk_ms=1), (SourceShape(11025, 5, ("mono",)),)
        )


@pytest.mark.parametrize("rate_per_s", [10.0, 50.0, 3.0])
def test_fixed_arrivals_land_on_their_exact_ticks(rate_per_s: float) -> None:
    spec = LoadSpec(
        max_calls=1000, duration_ms=2000, arrival_rate_per_s=rate_per_s, arrival=Arrival.FIXED
    )
    times = _arrival_times(spec, random.Random(0))
    expected = [-(-round(n * 1000 / rate_per_s) // 20) * 20 for n in range(round(2 * rate_per_s))]
    assert times == [t for t in expected if t < 2000]
