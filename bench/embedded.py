"""The finals the engine alone makes of some calls: the fault-free reference of the broker tests
and benchmarks (finals are a function of the audio: ``docs/decisions/0002``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.asr.factory import build_engine
from pipeline.asr.session import SessionKey
from pipeline.audio.files import CallAudio
from pipeline.clock import ManualClock
from pipeline.contracts.messages import Final
from pipeline.settings import AsrSettings

__all__ = ["CHUNK_MS", "embedded_finals"]

CHUNK_MS = 20
STEP_EVERY_MS = 500


def embedded_finals(
    calls: Mapping[str, CallAudio], asr: AsrSettings | None = None
) -> dict[str, str]:
    """utterance_id → text from one engine fed every call (call id → audio) in 20 ms chunks,
    interleaved, without Kafka."""
    engine = build_engine(asr or AsrSettings(threads=1), ManualClock()).engine
    finals: dict[str, str] = {}
    longest_ms = max((call.duration_ms for call in calls.values()), default=0)
    for position_ms in range(0, longest_ms + CHUNK_MS, CHUNK_MS):
        for call_id, call in calls.items():
            rate = call.sample_rate_hz
            first, last = position_ms * rate // 1000, (position_ms + CHUNK_MS) * rate // 1000
            for channel, samples in call.channels.items():
                if first < len(samples):
                    engine.accept(
                        SessionKey(call_id, channel),
                        samples[first:last],
                        rate,
                        end_of_stream=last >= len(samples),
                    )
        if position_ms % STEP_EVERY_MS == 0:
            _collect(engine.step().outputs, finals)
    while engine.sessions:
        _collect(engine.step().outputs, finals)
    return finals


def _collect(outputs: Sequence[Any], finals: dict[str, str]) -> None:
    for output in outputs:
        if isinstance(output, Final):
            finals[output.utterance_id] = output.text
