"""Reading call audio files into labelled channels."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.audio.files import CallAudio, read_call_audio
from pipeline.contracts.audio_chunk import STEREO_CHANNELS
from pipeline.errors import ConfigError


def write(path: Path, data: np.ndarray, rate_hz: int) -> Path:
    soundfile.write(str(path), data, rate_hz, subtype="PCM_16")
    return path


def ramp(samples: int, scale: float) -> np.ndarray:
    return (scale * np.linspace(-0.5, 0.5, samples, endpoint=False)).astype(np.float32)


def test_a_mono_file_is_one_mono_channel(tmp_path: Path) -> None:
    path = write(tmp_path / "call-42.wav", ramp(8000, 1.0), 8000)
    audio = read_call_audio(path)
    assert audio.call_id == "call-42"
    assert audio.sample_rate_hz == 8000
    assert list(audio.channels) == ["mono"]
    samples = audio.channels["mono"]
    assert samples.dtype == np.float32
    assert np.allclose(samples, ramp(8000, 1.0), atol=1 / 32768)
    assert audio.duration_ms == 1000


def test_a_stereo_file_is_agent_left_and_customer_right(tmp_path: Path) -> None:
    left, right = ramp(16000, 1.0), ramp(16000, -0.5)
    path = write(tmp_path / "call-43.flac", np.stack([left, right], axis=1), 16000)
    audio = read_call_audio(path, call_id="explicit-id")
    assert STEREO_CHANNELS == ("agent", "customer")
    assert audio.call_id == "explicit-id"
    assert list(audio.channels) == ["agent", "customer"]
    assert np.allclose(audio.channels["agent"], left, atol=1 / 32768)
    assert np.allclose(audio.channels["customer"], right, atol=1 / 32768)
    assert all(ch.flags.c_contiguous for ch in audio.channels.values())
    assert audio.duration_ms == 1000


def test_more_than_two_channels_is_a_user_error(tmp_path: Path) -> None:
    path = write(tmp_path / "surround.wav", np.zeros((800, 3), dtype=np.float32), 8000)
    with pytest.raises(ConfigError, match="3 channels"):
        read_call_audio(path)


@pytest.mark.parametrize("name", ["missing.wav", "garbage.wav"])
def test_an_unreadable_file_is_a_user_error(tmp_path: Path, name: str) -> None:
    (tmp_path / "garbage.wav").write_bytes(b"not audio at all")
    with pytest.raises(ConfigError, match="cannot read audio file"):
        read_call_audio(tmp_path / name)


def test_the_fixture_calls_are_stereo() -> None:
    fixtures = Path(__file__).resolve().parents[2] / "fixtures"
    audio = read_call_audio(fixtures / "calls" / "call04_appointment_8k.flac")
    assert audio.call_id == "call04_appointment_8k"
    assert audio.sample_rate_hz == 8000
    assert list(audio.channels) == ["agent", "customer"]
    assert audio.duration_ms == 24100


def test_the_duration_is_rounded_up_so_a_chunk_loop_reaches_the_last_sample() -> None:
    audio = CallAudio("c", 16000, {"mono": np.zeros(16_001, dtype=np.float32)})
    assert audio.duration_ms == 1001
    chunk_ms, sent = 100, 0
    for start_ms in range(0, audio.duration_ms, chunk_ms):  # how transcribe and tests chunk
        sent += len(audio.channels["mono"][start_ms * 16 : (start_ms + chunk_ms) * 16])
    assert sent == 16_001


def test_a_headerless_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "call.raw"
    path.write_bytes(b"\0" * 640)
    with pytest.raises(ConfigError, match="cannot read audio file"):
        read_call_audio(path)


def test_unreadable_files_say_why(tmp_path: Path) -> None:
    # Review finding: a missing file said "System error.", a folder "Format not recognised.",
    # and a telephony .ul export gave no hint.
    with pytest.raises(ConfigError, match=r"missing\.wav: no such file$"):
        read_call_audio(tmp_path / "missing.wav")
    with pytest.raises(ConfigError, match=r"not a file$"):
        read_call_audio(tmp_path)
    (tmp_path / "leg.ul").write_bytes(b"\xff" * 800)
    with pytest.raises(ConfigError, match=r"headerless mu-law: .*sox -t ul -r 8000 in\.ul"):
        read_call_audio(tmp_path / "leg.ul")


def test_a_file_named_in_another_encoding_is_read(tmp_path: Path) -> None:
    # Review finding: libsndfile takes a path as UTF-8, so "café.flac" in Latin-1 was refused.
    path = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.flac")
    data = np.zeros(1600, dtype=np.int16)
    with open(path, "wb") as file:
        soundfile.write(file, data, 16000, format="FLAC")
    assert read_call_audio(path).sample_rate_hz == 16000
