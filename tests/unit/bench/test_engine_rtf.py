"""The recognizer benchmark's report: its units follow the device the numbers come from."""

from __future__ import annotations

from typing import Any

from bench.engine_rtf import markdown


def results() -> dict[str, Any]:
    stages = {"partial": 0.1, "final": 0.2, "mel": 0.01, "encoder": 0.05, "decoder": 0.04}
    return {
        "batches": {
            "4": {
                "batch": 4,
                "median_s": stages,
                "rtf_partial": 0.01,
                "rtf_final": 0.02,
                "partial_s_per_session": 0.025,
                "streaming_s_per_audio_s": 0.05,
                "speaking_sessions_in_real_time": 20.0,
            }
        },
        "vad": {"4": {"batch": 4, "call_s": 0.001, "s_per_audio_s_per_stream": 0.008}},
        "threads": {"1": {"threads": 1, "batch": 4, "partial_median_s": 0.1}},
    }


def test_cuda_costs_are_labelled_as_gpu_wall_time_not_cpu() -> None:
    text = markdown(results(), threads=1, device="cuda")
    assert "CPU s" not in text
    assert "CUDA wall s per audio s (streaming)" in text
    assert "CUDA wall s per audio s per stream" in text
    cpu = markdown(results(), threads=1, device="cpu")
    assert "CPU s per audio s (streaming)" in cpu
