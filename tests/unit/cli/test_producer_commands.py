"""``publish`` / ``simulate`` user mistakes: one line on stderr, exit 2, before any Kafka I/O."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.cli import main
from pipeline.cli.options import sigterm_as_interrupt
from pipeline.cli.publish import default_call_id, load_frames
from pipeline.clock import ManualClock
from pipeline.errors import ConfigError
from tests.unit.cli.errors import NO_BROKER, one_error_line


def _wav(path: Path, sample_rate_hz: int, channels: int, num_frames: int = 800) -> Path:
    frames = np.random.default_rng(0).integers(-9000, 9000, (num_frames, channels), np.int16)
    soundfile.write(str(path), frames, sample_rate_hz, subtype="PCM_16")
    return path


def test_load_frames_reads_int16_samples_exactly(tmp_path: Path) -> None:
    path = _wav(tmp_path / "s.wav", 8000, 2)
    rate, channels, frames = load_frames(path)
    expected, _ = soundfile.read(str(path), dtype="int16", always_2d=True)
    assert (rate, channels) == (8000, ("agent", "customer"))
    assert frames.dtype == np.int16
    assert np.array_equal(frames, expected)


def test_load_frames_reads_float_files_scaled_block_by_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file is now read a block at a time into int16 (it was read whole as float, 7.5 times
    # its int16 size); float samples must still be scaled, not cast (libsndfile's int16 read
    # of a float file gives 0 for 0.5), and blocks must join without a seam.
    from pipeline.audio import files

    monkeypatch.setattr(files, "READ_BLOCK_FRAMES", 3)
    samples = np.array([[-1.0, 1.0], [0.5, -0.5], [1.5, -1.5], [3 / 32768, -0.2], [0.25, 0]])
    soundfile.write(str(tmp_path / "f.wav"), samples.astype(np.float32), 8000, subtype="FLOAT")
    _, channels, frames = load_frames(tmp_path / "f.wav")
    assert channels == ("agent", "customer")
    assert frames.T.tolist() == [[-32768, 16384, 32767, 3, 8192], [32767, -16384, -32768, -6554, 0]]


def test_a_file_at_another_rate_is_refused_before_its_samples_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Self-review finding: simulate read (and converted) every file under --audio-dir whole,
    # then skipped those at other rates; the rate is in the header.
    from pipeline.audio import files

    monkeypatch.setattr(files, "to_int16", lambda _: pytest.fail("samples were read"))
    with pytest.raises(ConfigError, match="44100 Hz; publish sends 8000 or 16000 Hz"):
        load_frames(_wav(tmp_path / "cd.wav", 44100, 1))


@pytest.mark.parametrize(
    ("rate", "channels", "match"),
    [(44100, 1, "44100 Hz; publish sends 8000 or 16000 Hz"), (16000, 3, "3 channels")],
)
def test_publish_refuses_unsupported_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rate: int, channels: int, match: str
) -> None:
    path = _wav(tmp_path / "bad.wav", rate, channels)
    assert main([*NO_BROKER, "publish", str(path), "--call-id", "c1"]) == 2
    assert match in one_error_line(capsys)


def test_publish_needs_a_readable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*NO_BROKER, "publish", str(tmp_path / "missing.wav"), "--call-id", "c"]) == 2
    assert "cannot read audio file" in one_error_line(capsys)


def test_an_empty_call_id_is_refused_not_replaced_by_a_random_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Self-review finding: `--call-id "$CALL_ID"` with the variable unset published the file
    # under a random id, and the platform's transcript never came.
    path = _wav(tmp_path / "c.wav", 8000, 1)
    assert main([*NO_BROKER, "publish", str(path), "--call-id", ""]) == 2
    assert "--call-id (or STREAMSCRIBE_CALL_ID) is empty" in one_error_line(capsys)


def test_publishing_a_file_again_without_a_call_id_is_a_new_call(tmp_path: Path) -> None:
    # Review finding: the same --call-id again within an hour was dropped by the workers as
    # duplicates of the ended call while publish reported success; the default id is new.
    path = tmp_path / "billing call.wav"
    first, second = default_call_id(path), default_call_id(path)
    assert first != second
    assert first.startswith("billing call-")
    assert len(default_call_id(tmp_path / ("é" * 200 + ".wav")).encode()) <= 128


def test_sigterm_ends_a_producing_command_like_ctrl_c() -> None:
    # Review finding: `docker stop` / `timeout` killed publish and simulate without the
    # end-of-stream records, leaving their calls to the workers' idle timeout.
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_simulate_needs_usable_audio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*NO_BROKER, "simulate", "--audio-dir", str(tmp_path / "nope")]) == 2
    assert "not a folder" in one_error_line(capsys)
    _wav(tmp_path / "cd.wav", 44100, 2)
    _wav(tmp_path / "empty.wav", 16000, 1, num_frames=0)
    assert main([*NO_BROKER, "simulate", "--audio-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("simulate: skipping ")
    assert err[1] == f"simulate: skipping {tmp_path / 'empty.wav'}: no audio"  # it said nothing
    assert err[-1].startswith("streamscribe: error: no usable")


def test_simulate_refuses_a_bad_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _wav(tmp_path / "ok.wav", 8000, 1)
    argv = [*NO_BROKER, "simulate", "--audio-dir", str(tmp_path), "--bad-rate", "2"]
    assert main(argv) == 2
    assert "--bad-rate must be within [0, 1]" in one_error_line(capsys)


def test_simulate_ends_its_open_calls_when_a_delivery_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pipeline.cli import simulate
    from pipeline.producer import AudioPublisher
    from tests.unit.producer.fakes import FakeTransport

    transport = FakeTransport(fail=lambda index: "Broker: boom" if index == 3 else None)
    fake = AudioPublisher(transport, topic="audio.chunks")
    monkeypatch.setattr(simulate.AudioPublisher, "connect", lambda *_, **__: fake)
    _wav(tmp_path / "call.wav", 8000, 2, num_frames=8000 * 20)  # 20 s: still open at the failure
    argv = ["simulate", "--audio-dir", str(tmp_path), "--calls", "3", "--no-realtime"]
    argv += ["--duration-s", "5"]
    assert main(argv) == 1  # the failed delivery is reported
    assert "Broker: boom" in capsys.readouterr().err
    ends: dict[tuple[bytes, bytes], int] = {}
    for record in transport.records:
        headers = dict(record.headers)
        key = (record.key or b"", headers["ss-channel"])
        ends[key] = ends.get(key, 0) + (headers.get("ss-end-of-stream") == b"1")
    assert ends  # calls were started, and every channel of each got its end-of-stream
    assert set(ends.values()) == {1}


class _SpokenPacer:
    """A ``Pacer`` on a manual clock: waiting moves the clock to the offset asked for."""

    clock = ManualClock(1_700_000_000_000)

    def __init__(self) -> None:
        self._start_ms: int | None = None

    def wait_until(self, offset_ms: float) -> None:
        if self._start_ms is None:
            self._start_ms = self.clock.now_ms() - round(offset_ms)
        ahead_ms = self._start_ms + round(offset_ms) - self.clock.now_ms()
        self.clock.advance(max(0, ahead_ms))


@pytest.mark.parametrize("command", ["publish", "simulate"])
def test_realtime_chunks_leave_once_their_audio_has_been_spoken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    # Review finding: each chunk went out at the start of its own audio, a chunk before a live
    # source could send it, so every latency measured from capture read a chunk short.
    from pipeline.cli import publish, simulate
    from pipeline.producer import AudioPublisher
    from tests.unit.producer.fakes import FakeTransport

    transport = FakeTransport()
    sent_at_ms: list[int] = []
    send = transport.send
    monkeypatch.setattr(
        transport,
        "send",
        lambda *a, **kw: (sent_at_ms.append(_SpokenPacer.clock.now_ms()), send(*a, **kw)),
    )
    fake = AudioPublisher(transport, topic="audio.chunks", clock=_SpokenPacer.clock)
    for module in (publish, simulate):
        monkeypatch.setattr(module.AudioPublisher, "connect", lambda *_, **__: fake)
        monkeypatch.setattr(module, "Pacer", _SpokenPacer)
    _wav(tmp_path / "call.wav", 8000, 2, num_frames=8000 * 1 + 80)  # 1.01 s: a short last chunk
    if command == "publish":
        argv = ["publish", str(tmp_path / "call.wav"), "--realtime", "--chunk-ms", "100"]
    else:
        argv = ["simulate", "--audio-dir", str(tmp_path), "--calls", "1", "--duration-s", "3"]
        argv += ["--chunk-ms", "100"]
    start_ms = _SpokenPacer.clock.now_ms()
    assert main(argv) == 0
    spoken = 0
    for chunk, at_ms in zip(transport.chunks(), sent_at_ms, strict=True):
        if not len(chunk.payload):
            continue  # end of stream
        assert chunk.capture_ms is not None
        end_ms = chunk.capture_ms + chunk.num_samples * 1000 // chunk.sample_rate_hz
        if chunk.num_samples == 800:
            assert at_ms == end_ms  # sent as its last sample was spoken, not before
        else:  # a call's short last piece: simulate sends it with its tick, never early
            assert end_ms <= at_ms < end_ms + 100
        spoken += 1
    assert spoken >= 2 * 11  # both channels of the whole file (simulate starts it again)
    assert min(c.capture_ms or 0 for c in transport.chunks()) == start_ms
