"""The pure producer core: chunk sizes, cutting, sequence numbers, capture times, stereo split."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.contracts import Encoding
from pipeline.contracts.audio_chunk import MAX_CAPTURE_MS
from pipeline.contracts.g711 import alaw_encode, mulaw_encode
from pipeline.errors import ConfigError, ContractError
from pipeline.producer.chunking import (
    ChannelCutter,
    chunk_samples,
    encode_samples,
    split_frames,
    to_int16,
)
from pipeline.producer.pacing import Pacer


def test_chunk_samples_are_whole_and_positive() -> None:
    assert chunk_samples(20, 8000) == 160
    assert chunk_samples(20, 16000) == 320
    assert chunk_samples(1, 8000) == 8
    for bad in (0, -20):
        with pytest.raises(ConfigError):
            chunk_samples(bad, 16000)
    with pytest.raises(ConfigError, match="whole number"):
        chunk_samples(1, 11025)


def test_cutter_keeps_the_remainder_until_a_chunk_is_complete() -> None:
    cutter = ChannelCutter(8000, 2, 160)
    first = cutter.push(bytes(2 * 100), capture_ms=1000)
    assert first == []
    assert cutter.buffered_samples == 100
    second = cutter.push(bytes(2 * 300))
    assert [c.seq for c in second] == [0, 1]
    assert [c.num_samples for c in second] == [160, 160]
    assert cutter.buffered_samples == 80
    last = cutter.drain()
    assert (last.seq, last.num_samples, len(last.payload)) == (2, 80, 160)
    assert cutter.next_seq == 3
    empty = cutter.drain()
    assert (empty.seq, empty.payload) == (3, b"")


def test_capture_time_advances_with_the_audio_not_the_pushes() -> None:
    cutter = ChannelCutter(8000, 1, 160)  # 20 ms chunks of G.711
    chunks = cutter.push(bytes(7 * 160 + 3), capture_ms=1_700_000_000_000)
    assert [c.capture_ms - 1_700_000_000_000 for c in chunks] == [0, 20, 40, 60, 80, 100, 120]
    tail = cutter.drain()
    assert tail.capture_ms == 1_700_000_000_000 + 140
    # Drained empty: the time of the next sample (3 samples = 0.375 ms later, floored).
    assert cutter.drain().capture_ms == 1_700_000_000_000 + 140


def test_a_new_capture_time_applies_to_its_own_audio_the_remainder_keeps_its_time() -> None:
    cutter = ChannelCutter(8000, 2, 160)
    assert cutter.push(bytes(2 * 100), capture_ms=5000) == []
    chunks = cutter.push(bytes(2 * 300), capture_ms=9000)  # audio after a 4 s gap
    assert chunks[0].capture_ms == 5000  # starts with the remainder, captured at 5000
    # The second chunk starts 60 samples into the new audio: 9000 + 60 / 8 ms, floored.
    assert chunks[1].capture_ms == 9000 + 60 * 1000 // 8000


def test_cutter_refuses_partial_samples_and_unanchored_audio() -> None:
    cutter = ChannelCutter(16000, 2, 320)
    with pytest.raises(ContractError, match="capture time"):
        cutter.push(b"\x00\x00")
    with pytest.raises(ContractError, match="whole number"):
        cutter.push(b"\x00\x00\x00", capture_ms=0)
    with pytest.raises(ContractError):
        cutter.anchor(-1)
    # Microseconds by mistake: every chunk would be dead-lettered (bad_header_value), silently.
    with pytest.raises(ContractError, match="microseconds or nanoseconds"):
        cutter.anchor(1_796_054_541_016_706)
    cutter.anchor(MAX_CAPTURE_MS)  # the last millisecond of the year 9999 is still a time


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=700), min_size=1, max_size=30),
    chunk=st.sampled_from([8, 80, 160, 320]),
    start_ms=st.integers(min_value=0, max_value=2**41),
)
def test_cutting_is_lossless_contiguous_and_timed_by_sample_index(
    sizes: list[int], chunk: int, start_ms: int
) -> None:
    rng = np.random.default_rng(len(sizes))
    pushed = [rng.integers(-32768, 32767, size, dtype=np.int16).tobytes() for size in sizes]
    cutter = ChannelCutter(16000, 2, chunk)
    chunks = cutter.push(pushed[0], capture_ms=start_ms)
    for data in pushed[1:]:
        chunks += cutter.push(data)
    chunks.append(cutter.drain())
    assert b"".join(c.payload for c in chunks) == b"".join(pushed)
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert all(c.num_samples == chunk for c in chunks[:-1])
    for index, c in enumerate(chunks):
        assert c.capture_ms == start_ms + index * chunk * 1000 // 16000


def test_encode_samples_pcm_g711_bytes_and_floats() -> None:
    pcm = np.array([0, 1, -1, 32767, -32768, 1234], dtype=np.int16)
    assert encode_samples(pcm, Encoding.PCM_S16LE) == pcm.astype("<i2").tobytes()
    assert encode_samples(pcm, Encoding.MULAW) == mulaw_encode(pcm).tobytes()
    assert encode_samples(pcm, Encoding.ALAW) == alaw_encode(pcm).tobytes()
    as_float = pcm.astype(np.float32) / 32768.0
    assert encode_samples(as_float, Encoding.PCM_S16LE) == pcm.tobytes()
    assert encode_samples(b"\x01\x02", Encoding.PCM_S16LE) == b"\x01\x02"
    assert encode_samples(b"\x01", Encoding.MULAW) == b"\x01"
    with pytest.raises(ContractError):
        encode_samples(b"\x01", Encoding.PCM_S16LE)


def test_to_int16_clips_floats_and_refuses_other_types() -> None:
    assert to_int16(np.array([2.0, -2.0])).tolist() == [32767, -32768]
    with pytest.raises(ContractError, match="int16 or float"):
        to_int16(np.zeros(3, dtype=np.int32))
    with pytest.raises(ContractError, match="1-D"):
        to_int16(np.zeros((3, 2), dtype=np.int16))


def test_split_frames_gives_columns_in_order() -> None:
    frames = np.array([[1, -1], [2, -2], [3, -3]], dtype=np.int16)
    left, right = split_frames(frames, 2)
    assert left.tolist() == [1, 2, 3]
    assert right.tolist() == [-1, -2, -3]
    assert left.flags.c_contiguous
    interleaved = frames.reshape(-1)
    assert [c.tolist() for c in split_frames(interleaved.reshape(-1, 2), 2)] == [
        [1, 2, 3],
        [-1, -2, -3],
    ]
    assert split_frames(left, 1)[0] is left
    with pytest.raises(ContractError, match=r"\(n, 3\)"):
        split_frames(frames, 3)


def test_pacer_sleeps_only_when_ahead_of_the_audio() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now[0] += seconds

    pacer = Pacer(lambda: now[0], sleep)
    pacer.wait_until(0)
    assert slept == []
    now[0] += 0.005
    pacer.wait_until(20)
    assert slept == [0.015]
    now[0] += 0.5  # fell behind: no sleep, no catch-up wait
    pacer.wait_until(40)
    assert slept == [0.015]


def test_pacer_says_how_much_audio_has_been_spoken() -> None:
    now = [100.0]
    pacer = Pacer(lambda: now[0], lambda seconds: None)
    assert pacer.elapsed_ms() == 0.0  # not started
    pacer.wait_until(0)
    now[0] += 1.25
    assert pacer.elapsed_ms() == pytest.approx(1250.0)
