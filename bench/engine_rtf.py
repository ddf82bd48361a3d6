"""Real-time factor of the recognizer by batch size, with a per-stage split, and VAD cost.

    .venv/bin/python -m bench.engine_rtf [--quick] [--repeats N] [--batch-sizes 1 4 16]
                                          [--device cuda]

What one ``WhisperRecognizer.recognize`` call costs for a batch of 1, 4 and 16 utterance
windows (the 12 clean fixture utterances, 3–5 s each, cycled to fill a batch; windows as the
engine cuts them: audio + 2 s margin, at least 10 s), for both kinds of request the engine
makes: a *partial* (greedy decode) and a *final* (decode + word timings). Repeats are
interleaved over batch sizes and the median is quoted.

- ``rtf`` = wall time / (batch × audio seconds): compute per audio second per session for
  one decode of the whole utterance (offline use).
- streaming cost: a session with an open utterance is re-decoded every ``hop_ms`` (500 ms) of
  audio, so one speaking session needs ``t_partial(B) / B / 0.5 s`` seconds of the device's
  time per second of audio (``streaming_s_per_audio_s``; wall time of the device's work: CPU
  seconds on CPU with one torch thread, GPU wall seconds on CUDA); its inverse is how many
  continuously speaking sessions one process keeps up with at that batch size (upper bound:
  VAD, finals and Kafka come on top).
- split (partials): log-mel, encoder, greedy decoder, each timed alone with the public
  functions of ``pipeline.asr.whisper`` on the same windows; plus the encoder alone for
  Whisper's fixed 30 s window (what ``min_window_ms`` = 30 s would cost).
- int8 (CPU): the same partial and final requests through a recognizer with int8 weights
  (``Quantization.INT8``), timed interleaved with the float32 ones; speed-up = float32 / int8.
- VAD: one batched silero call per 32 ms frame for B streams, on the same device → wall time
  per audio second per stream (``s_per_audio_s_per_stream``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from bench.common import (
    SHARED_MACHINE_NOTE,
    FixtureClip,
    add_device_option,
    bench_parser,
    fmt,
    markdown_table,
    new_figure,
    result_name,
    single_clips,
    synchronize,
    write_results,
)
from pipeline.asr.recognizer import RecognitionRequest
from pipeline.asr.vad import SileroVad
from pipeline.asr.whisper.decoding import DecodingOptions, decode, encode_windows
from pipeline.asr.whisper.mel import log_mel_spectrogram
from pipeline.asr.whisper.quantize import Quantization
from pipeline.asr.whisper_recognizer import WhisperRecognizer, WhisperSettings

NAME = "engine_rtf"
BATCH_SIZES = (1, 4, 16)
HOP_S = 0.5
SAMPLES_PER_FRAME = 160

T = TypeVar("T")


def _timed(timings: dict[str, list[float]], stage: str, run: Callable[..., T], *args: Any) -> T:
    """Call ``run(*args)``, append its wall time to ``timings[stage]``, return its result."""
    started = time.perf_counter()
    result = run(*args)
    if torch.cuda.is_available():
        synchronize("cuda")  # queued kernels belong to this stage
    timings.setdefault(stage, []).append(time.perf_counter() - started)
    return result


def _window_frames(settings: WhisperSettings, n_samples: int, min_window_ms: int) -> int:
    """The engine's window length in mel frames (see ``WhisperRecognizer``)."""
    content = max(1, n_samples // SAMPLES_PER_FRAME)
    step = settings.window_step_ms // 10
    window = -(-(content + settings.margin_ms // 10) // step) * step
    return min(max(window, min_window_ms // 10), 3000)


def _mels(
    recognizer: WhisperRecognizer, clips: Sequence[FixtureClip], min_window_ms: int
) -> tuple[list[torch.Tensor], list[int]]:
    settings = WhisperSettings()
    mels, contents = [], []
    for clip in clips:
        window = _window_frames(settings, len(clip.samples), min_window_ms)
        padded = np.zeros(window * SAMPLES_PER_FRAME, dtype=np.float32)
        padded[: len(clip.samples)] = clip.samples[: len(padded)]
        mels.append(log_mel_spectrogram(padded, recognizer.model.dims.n_mels))
        contents.append(min(len(clip.samples) // SAMPLES_PER_FRAME, window))
    return mels, contents


def measure(
    repeats: int, batch_sizes: Sequence[int], threads: int, device: str = "cpu"
) -> dict[str, Any]:
    torch.set_num_threads(threads)
    recognizer = WhisperRecognizer(WhisperSettings(device=device))
    model = recognizer.model
    # int8 weights (CPU only), timed interleaved with float32 on the same requests.
    quantized = (
        WhisperRecognizer(WhisperSettings(device=device, quantization=Quantization.INT8))
        if device == "cpu"
        else None
    )
    utterances = single_clips({"utterance"})
    batches = {b: [utterances[i % len(utterances)] for i in range(b)] for b in batch_sizes}
    options = DecodingOptions(max_words_per_second=6.0, max_prompt_tokens=64)

    # Warm-up: first calls allocate and pick kernels.
    recognizer.recognize([RecognitionRequest(utterances[0].samples)])
    if quantized is not None:
        quantized.recognize([RecognitionRequest(utterances[0].samples)])
    raw: dict[int, dict[str, list[float]]] = {b: {} for b in batch_sizes}
    for _ in range(repeats):
        for b in batch_sizes:
            clips, timings = batches[b], raw[b]
            partials = [RecognitionRequest(c.samples, partial=True) for c in clips]
            finals = [RecognitionRequest(c.samples, with_word_timings=True) for c in clips]
            _timed(timings, "partial", recognizer.recognize, partials)
            _timed(timings, "final", recognizer.recognize, finals)
            if quantized is not None:
                _timed(timings, "partial_int8", quantized.recognize, partials)
                _timed(timings, "final_int8", quantized.recognize, finals)
            mels, contents = _timed(timings, "mel", _mels, recognizer, clips, 10_000)
            encoded = _timed(timings, "encoder", encode_windows, model, mels, contents)
            _timed(timings, "decoder", decode, model, encoded, options)
            if b <= 4:
                mels_30s, contents_30s = _mels(recognizer, clips, 30_000)
                _timed(timings, "encoder_30s_window", encode_windows, model, mels_30s, contents_30s)

    # Thread count: the bench's setting against every core, interleaved, batch 4 partials.
    thread_counts = sorted({threads, os.cpu_count() or 1})
    thread_raw: dict[int, dict[str, list[float]]] = {t: {} for t in thread_counts}
    thread_batch = [RecognitionRequest(c.samples) for c in batches[max(batch_sizes[:2])]]
    for _ in range(repeats):
        for count in thread_counts:
            torch.set_num_threads(count)
            _timed(thread_raw[count], "partial", recognizer.recognize, thread_batch)
    torch.set_num_threads(threads)

    vad = SileroVad(device=device)
    torch.set_num_threads(threads)  # loading silero may change it
    vad_raw: dict[int, float] = {}
    frames_per_call = 100
    for b in batch_sizes:
        states = [vad.new_state() for _ in range(b)]
        rng = np.random.default_rng(0)
        frames = (0.05 * rng.standard_normal((frames_per_call, b, vad.frame_samples))).astype(
            np.float32
        )

        vad_timings: dict[str, list[float]] = {}
        for _ in range(repeats):
            _timed(vad_timings, "vad", _run_vad, vad, frames, states)
        vad_raw[b] = float(np.median(vad_timings["vad"])) / frames_per_call

    results: dict[str, Any] = {
        "batches": {},
        "vad": {},
        "threads": {
            str(count): {
                "threads": count,
                "batch": len(thread_batch),
                "partial_median_s": float(np.median(times["partial"])),
            }
            for count, times in thread_raw.items()
        },
    }
    for b in batch_sizes:
        audio_s = sum(len(c.samples) / c.sample_rate_hz for c in batches[b])
        med = {stage: float(np.median(times)) for stage, times in raw[b].items()}
        partial_per_session_s = med["partial"] / b
        results["batches"][str(b)] = {
            "batch": b,
            "audio_s": round(audio_s, 3),
            "median_s": med,
            "samples": {stage: len(times) for stage, times in raw[b].items()},
            "rtf_partial": med["partial"] / audio_s,
            "rtf_final": med["final"] / audio_s,
            "partial_s_per_session": partial_per_session_s,
            "streaming_s_per_audio_s": partial_per_session_s / HOP_S,
            "speaking_sessions_in_real_time": HOP_S / partial_per_session_s,
        }
        frame_s = vad.frame_samples / 16_000
        results["vad"][str(b)] = {
            "batch": b,
            "call_s": vad_raw[b],
            "s_per_audio_s_per_stream": vad_raw[b] / b / frame_s,
        }
    results["ratios"] = {
        "partial_per_session_b16_over_b1": results["batches"]["16"]["partial_s_per_session"]
        / results["batches"]["1"]["partial_s_per_session"]
        if "16" in results["batches"] and "1" in results["batches"]
        else None,
    }
    return results


def _run_vad(vad: SileroVad, frames: npt.NDArray[np.float32], states: list[Any]) -> None:
    for frame in frames:
        vad.speech_probs(frame, states)


def markdown(results: dict[str, Any], threads: int, device: str = "cpu") -> str:
    seconds = device_seconds(device)
    rows = []
    for entry in results["batches"].values():
        med = entry["median_s"]
        rows.append(
            [
                entry["batch"],
                fmt(med["partial"], 3),
                fmt(med["final"], 3),
                fmt(entry["rtf_partial"], 3),
                fmt(entry["rtf_final"], 3),
                fmt(entry["partial_s_per_session"] * 1000, 0),
                fmt(entry["streaming_s_per_audio_s"], 2),
                fmt(entry["speaking_sessions_in_real_time"], 1),
            ]
        )
    split_rows = []
    for entry in results["batches"].values():
        med = entry["median_s"]
        split_rows.append(
            [
                entry["batch"],
                fmt(med["mel"] * 1000, 0),
                fmt(med["encoder"] * 1000, 0),
                fmt(med["decoder"] * 1000, 0),
                fmt(med.get("encoder_30s_window", float("nan")) * 1000, 0),
            ]
        )
    vad_rows = [
        [v["batch"], fmt(v["call_s"] * 1000, 2), fmt(v["s_per_audio_s_per_stream"], 4)]
        for v in results["vad"].values()
    ]
    int8_rows = [
        [
            entry["batch"],
            fmt(med["partial_int8"], 3),
            fmt(med["final_int8"], 3),
            fmt(med["partial"] / med["partial_int8"], 2),
            fmt(med["final"] / med["final_int8"], 2),
        ]
        for entry in results["batches"].values()
        if "partial_int8" in (med := entry["median_s"])
    ]
    int8_section = [
        "int8 weights (`STREAMSCRIBE_QUANTIZATION=int8`, `pipeline.asr.whisper.quantize`), "
        "the same requests timed interleaved with the float32 rows above; WER in engine_wer:",
        markdown_table(
            ["B", "partial s", "final s", "partial speed-up", "final speed-up"], int8_rows
        ),
    ]
    return "\n\n".join(
        [
            "## Recognizer real-time factor (Whisper tiny.en, "
            + ("CPU)" if device == "cpu" else f"{device.upper()}, float16)"),
            f"Batch of B utterance windows (3–5 s of speech, 10 s windows), {threads} torch "
            "thread(s), median wall time. "
            "RTF = time / (B × audio s). Streaming: one decode per 500 ms hop per speaking "
            "session.",
            markdown_table(
                [
                    "B",
                    "partial s",
                    "final s",
                    "RTF partial",
                    "RTF final",
                    "ms/session/hop",
                    f"{seconds} per audio s (streaming)",
                    "speaking sessions in real time",
                ],
                rows,
            ),
            "Split of a partial decode (ms per batch; the 30 s column is the encoder alone on "
            "Whisper's fixed 30 s window):",
            markdown_table(
                ["B", "log-mel", "encoder", "decoder", "encoder, 30 s window"], split_rows
            ),
            *(int8_section if int8_rows else []),
            f"Torch threads (partial decode, batch "
            f"{next(iter(results['threads'].values()))['batch']}, median s): "
            + ", ".join(
                f"{t['threads']} thread(s): {fmt(t['partial_median_s'], 3)}"
                for t in results["threads"].values()
            )
            + ".",
            f"Silero VAD on {device.upper()}, one batched call per 32 ms frame:",
            markdown_table(
                ["streams", "ms per call", f"{seconds} per audio s per stream"], vad_rows
            ),
        ]
    )


def device_seconds(device: str) -> str:
    """The unit of the streaming and VAD costs on ``device``: wall time of the device's work,
    which on CPU (one torch thread) is CPU time and on a GPU is not."""
    return "CPU s" if device == "cpu" else f"{device.upper()} wall s"


def plot(results: dict[str, Any]) -> Any:
    figure, axes = new_figure()
    batches = [e["batch"] for e in results["batches"].values()]
    stages = ("mel", "encoder", "decoder")
    bottom = np.zeros(len(batches))
    for stage in stages:
        values = np.array(
            [1000 * e["median_s"][stage] / e["batch"] for e in results["batches"].values()]
        )
        axes.bar([str(b) for b in batches], values, bottom=bottom, label=stage)
        bottom += values
    axes.set_xlabel("batch size (windows per forward pass)")
    axes.set_ylabel("ms per window (partial decode)")
    axes.set_title("Recognizer cost per session and hop, by batch size")
    axes.legend()
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, (__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per batch size")
    parser.add_argument(
        "--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES), help="batch sizes"
    )
    add_device_option(parser)
    args = parser.parse_args(argv)
    started = time.monotonic()
    repeats = args.repeats or (3 if args.quick else 7)
    results = measure(repeats, args.batch_sizes, args.threads, args.device)
    b16 = results["batches"].get("16")
    write_results(
        result_name(NAME, args.device),
        quick=args.quick,
        config={
            "repeats": repeats,
            "batch_sizes": args.batch_sizes,
            "hop_s": HOP_S,
            "torch_threads": args.threads,
            "device": args.device,
        },
        results=results,
        markdown=markdown(results, args.threads, args.device),
        targets=[],
        figures={"": plot(results)},
        notes=[
            SHARED_MACHINE_NOTE,
            "Per-stage times are measured separately from the end-to-end `recognize` call; "
            "their sum need not equal it (word timings, prompt building, Python overhead).",
            f"At B=16 one speaking session costs "
            f"{fmt(b16['streaming_s_per_audio_s'] if b16 else None, 2)} "
            f"{device_seconds(args.device)} per audio s of partials alone.",
        ],
        started_s=started,
        out=args.out,
    )
    print(markdown(results, args.threads, args.device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
