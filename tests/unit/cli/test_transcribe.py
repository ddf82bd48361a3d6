"""``transcribe`` without a model: how it feeds the engine and paces ``--realtime`` input."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import soundfile

from pipeline.asr.engine import StepReport
from pipeline.asr.session import SessionKey
from pipeline.cli import main, transcribe
from pipeline.text import format_span_ms


class _Engine:
    """Takes chunks, decodes nothing."""

    def __init__(self) -> None:
        self.sessions: dict[SessionKey, object] = {}
        self.capture_ms: list[int | None] = []
        self.tenants: set[str] = set()
        self.chunks: list[tuple[SessionKey, int, bool]] = []
        self.steps: list[int] = []  # chunks accepted so far, at each step

    def accept(self, key: SessionKey, samples: Any, rate: int, **chunk: Any) -> None:
        self.capture_ms.append(chunk["capture_ms"])
        self.tenants.add(chunk["tenant"])
        self.chunks.append((key, len(samples), chunk["end_of_stream"]))

    def step(self) -> StepReport:
        self.steps.append(len(self.chunks))
        return StepReport()


class _Pacer:
    offsets_ms: ClassVar[list[float]] = []  # of every instance: transcribe makes its own
    late_ms: ClassVar[float] = 0.0  # how far real time runs ahead of each wait's offset

    def wait_until(self, offset_ms: float) -> None:
        self.offsets_ms.append(offset_ms)

    def elapsed_ms(self) -> float:
        return self.offsets_ms[-1] + self.late_ms


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> _Engine:
    fake = _Engine()
    monkeypatch.setattr(
        "pipeline.asr.factory.build_engine", lambda *_, **__: types.SimpleNamespace(engine=fake)
    )
    monkeypatch.setattr(transcribe, "Pacer", _Pacer)
    _Pacer.offsets_ms = []
    _Pacer.late_ms = 0.0
    return fake


def test_realtime_input_is_paced_on_the_monotonic_pacer(tmp_path: Path, engine: _Engine) -> None:
    path = tmp_path / "c1.wav"
    soundfile.write(str(path), np.zeros(8000, np.int16), 16000, subtype="PCM_16")  # 500 ms
    assert main(["transcribe", "--realtime", "--chunk-ms", "100", str(path)]) == 0
    assert _Pacer.offsets_ms == [0, 100, 200, 300, 400, 500]
    first = engine.capture_ms[0]
    assert first is not None
    assert engine.capture_ms == [first + offset for offset in range(0, 500, 100)]


def test_realtime_steps_once_per_chunk_while_it_keeps_up(tmp_path: Path, engine: _Engine) -> None:
    path = tmp_path / "c1.wav"
    soundfile.write(str(path), np.zeros(8000, np.int16), 16000, subtype="PCM_16")  # 500 ms
    assert main(["transcribe", "--realtime", "--chunk-ms", "100", str(path)]) == 0
    assert engine.steps == [1, 2, 3, 4, 5]


def test_realtime_takes_all_the_audio_spoken_during_a_long_step(
    tmp_path: Path, engine: _Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue "Capacity": the loop fed one chunk per step, so once steps ran long it never
    # worked off the backlog the way the worker does (every record waiting goes in).
    path = tmp_path / "c1.wav"
    soundfile.write(str(path), np.zeros(48000, np.int16), 16000, subtype="PCM_16")  # 3 s
    _Pacer.late_ms = 2500.0  # each step returns 2.5 s after its audio was due
    assert main(["transcribe", "--realtime", "--chunk-ms", "100", str(path)]) == 0
    assert engine.steps == [26, 30]  # the audio spoken by then, not one chunk
    assert [n for _, n, _ in engine.chunks] == [1600] * 30
    first = engine.capture_ms[0]
    assert first is not None
    assert engine.capture_ms == [first + offset for offset in range(0, 3000, 100)]
    assert "behind real time" in capsys.readouterr().err


def test_without_realtime_nothing_waits(tmp_path: Path, engine: _Engine) -> None:
    path = tmp_path / "c1.wav"
    soundfile.write(str(path), np.zeros(8000, np.int16), 16000, subtype="PCM_16")
    assert main(["transcribe", "--chunk-ms", "100", str(path)]) == 0
    assert _Pacer.offsets_ms == [0]  # the anchor returns at once
    assert engine.capture_ms == [None] * 5


def test_the_tenant_s_endpoint_rules_apply_as_in_the_worker(
    tmp_path: Path, engine: _Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review finding: transcribe always fed tenant "default", so a tenant's endpoint rules
    # (STREAMSCRIBE_TENANT_ENDPOINTS) split its calls otherwise than the worker did.
    path = tmp_path / "c1.wav"
    soundfile.write(str(path), np.zeros(1600, np.int16), 16000, subtype="PCM_16")
    assert main(["transcribe", "--tenant", "acme", str(path)]) == 0
    assert engine.tenants == {"acme"}
    engine.tenants.clear()
    monkeypatch.setenv("STREAMSCRIBE_TENANT", "globex")
    assert main(["transcribe", str(path)]) == 0
    assert engine.tenants == {"globex"}


def test_an_empty_tenant_is_refused_not_read_as_the_default(
    tmp_path: Path, engine: _Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    # Self-review finding: `--tenant "$UNSET"` applied the default tenant's endpoint rules.
    path = tmp_path / "c1.wav"
    soundfile.write(str(path), np.zeros(1600, np.int16), 16000, subtype="PCM_16")
    assert main(["transcribe", "--tenant", "", str(path)]) == 2
    assert "--tenant (or STREAMSCRIBE_TENANT) is empty" in capsys.readouterr().err
    assert engine.tenants == set()


def test_an_empty_file_is_a_call_that_ends_at_once(tmp_path: Path, engine: _Engine) -> None:
    # Review finding: it printed nothing, not even session_ended, where publish sends an
    # end-of-stream record and the worker ends the session.
    empty, short = tmp_path / "empty.wav", tmp_path / "short.wav"
    soundfile.write(str(empty), np.zeros((0, 2), np.int16), 8000, subtype="PCM_16")
    soundfile.write(str(short), np.zeros(1600, np.int16), 16000, subtype="PCM_16")  # 100 ms
    assert main(["transcribe", "--chunk-ms", "50", str(empty), str(short)]) == 0
    assert engine.chunks == [
        (SessionKey("empty", "agent"), 0, True),
        (SessionKey("empty", "customer"), 0, True),
        (SessionKey("short", "mono"), 800, False),
        (SessionKey("short", "mono"), 800, True),
    ]


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "00:00.00"), (1_239, "00:01.23"), (61_005, "01:01.00"), (3_600_000, "60:00.00")],
)
def test_spans_are_minutes_seconds_and_hundredths(ms: int, text: str) -> None:
    assert format_span_ms(ms) == text
