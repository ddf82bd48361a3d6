"""Finals and runs for the comparison tests (no engine, no torch)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.contracts import EndpointReason, Final, Word, utterance_id
from pipeline.replay.results import Run


def final(
    call_id: str,
    index: int,
    text: str,
    start_ms: int,
    end_ms: int,
    *,
    channel: str = "mono",
    reason: str = "silence",
    latency_ms: int | None = None,
    model_id: str = "whisper-tiny.en",
) -> Final:
    return Final(
        call_id=call_id,
        channel=channel,
        utterance_index=index,
        utterance_id=utterance_id(call_id, channel, index),
        text=text,
        words=tuple(Word(w, start_ms, end_ms, 0.9) for w in text.split()),
        start_ms=start_ms,
        end_ms=end_ms,
        endpoint_reason=EndpointReason(reason),
        model_id=model_id,
        emit_ms=end_ms + 1000,
        latency_ms=latency_ms,
    )


def run(*finals: Final, label: str = "run.jsonl", header: Mapping[str, Any] | None = None) -> Run:
    ordered = sorted(finals, key=lambda f: (f.call_id, f.channel, f.start_ms))
    streams = tuple(sorted({(f.call_id, f.channel) for f in finals}))
    return Run(label, header, tuple(ordered), streams)
