"""Where an utterance's start is lost: the VAD's onset against the audio's, and the final decoded
with more audio before it (a diagnosis of issue 21's "utterance starts lost", not a benchmark).

    .venv/bin/python -m bench.realspeech_onsets [ID ...] [--summary] [--speech-dir DIR]

For each utterance of the real-speech set (default: the issue's two examples), telephone and
wideband: the audio's onset (the first 10 ms within 30 dB of the loudest), the silero speech
probability of every 32 ms frame up to the gate's start, the gate's first speech start (the
engine's default gate, pad included), the streaming engine's finals (start, text) and
suppressed finals, and the first final's audio decoded again by the engine's recognizer with
``PRE_ROLL_MS`` more audio before its start. ``--summary``: how late the gate starts, over
every utterance. Printed; nothing is written.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from bench.engine_wer import run_streaming
from bench.realspeech_wer import (
    BANDS,
    QUICK_PREFERRED,
    load_band,
    parse_refs,
    speech_dir,
    streaming_settings,
)
from pipeline.asr.factory import engine_config
from pipeline.asr.recognizer import RecognitionRequest
from pipeline.asr.vad import SileroVad, SpeechGate
from pipeline.asr.whisper_recognizer import WhisperRecognizer, WhisperSettings
from pipeline.audio.resample import to_16k
from pipeline.settings import AsrSettings

PRE_ROLL_MS = (0, 60, 120, 200, 300, 500)
SAMPLES_PER_MS = 16


def audio_onset_ms(audio: npt.NDArray[np.float32], below_peak_db: float = 30.0) -> int:
    """Start of the first 10 ms frame of ``audio`` (16 kHz) within ``below_peak_db`` of the
    loudest frame's energy."""
    frames = audio[: len(audio) // 160 * 160].reshape(-1, 160).astype(np.float64)
    level_db = 10 * np.log10(np.mean(np.square(frames), axis=1) + 1e-12)
    return 10 * int(np.argmax(level_db > level_db.max() - below_peak_db))


def gate_trace(vad: SileroVad, audio: npt.NDArray[np.float32]) -> tuple[list[float], int | None]:
    """Speech probability of every VAD frame, and the start (ms) of the first speech span the
    engine's default gate settles."""
    gate = SpeechGate(engine_config(AsrSettings()).gate)
    state = vad.new_state()
    probabilities: list[float] = []
    frame = vad.frame_samples
    for first in range(0, len(audio) - frame + 1, frame):
        probability = float(vad.speech_probs(audio[None, first : first + frame], [state])[0])
        probabilities.append(probability)
        for span in gate.push(probability):
            if span.is_speech:
                return probabilities, span.start_samples // SAMPLES_PER_MS
    return probabilities, None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.realspeech_onsets", description=__doc__)
    parser.add_argument("ids", nargs="*", default=list(QUICK_PREFERRED), help="utterance ids")
    parser.add_argument("--speech-dir", type=Path, default=None, help="the real-speech set")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--summary",
        action="store_true",
        help="every utterance: how late the gate starts after the audio onset (no decoding)",
    )
    args = parser.parse_args(argv)
    directory = speech_dir(args.speech_dir)
    references = parse_refs((directory / "refs.tsv").read_text(encoding="utf-8"))
    chosen = [r for r in references if args.summary or r.utterance_id in args.ids]
    vad = SileroVad()
    if args.summary:
        torch.set_num_threads(args.threads)
        for band in BANDS:
            lateness_ms = []
            for clip in load_band(directory, chosen, band):
                audio = to_16k(clip.samples, clip.sample_rate_hz)
                _, start_ms = gate_trace(vad, audio)
                if start_ms is not None:
                    lateness_ms.append(start_ms - audio_onset_ms(audio))
            late = np.asarray(lateness_ms)
            print(
                f"{band.label}: gate start - audio onset, median {np.median(late):.0f} ms, "
                f"P90 {np.percentile(late, 90):.0f} ms, max {late.max()} ms; "
                f"{(late >= 300).sum()} of {len(late)} utterances start >= 300 ms late"
            )
        return 0
    recognizer = WhisperRecognizer(WhisperSettings(device="cpu"))
    torch.set_num_threads(args.threads)
    for band in BANDS:
        clips = load_band(directory, chosen, band)
        run = run_streaming(clips, streaming_settings(args.threads, {}))
        torch.set_num_threads(args.threads)
        for clip in clips:
            audio = to_16k(clip.samples, clip.sample_rate_hz)
            probabilities, start_ms = gate_trace(vad, audio)
            print(f"\n== {clip.clip_id}, {band.label}")
            print(f"audio onset {audio_onset_ms(audio)} ms; gate speech start {start_ms} ms")
            shown = " ".join(f"{32 * i}:{p:.2f}" for i, p in enumerate(probabilities))
            print(f"speech probability per 32 ms frame (start ms:p): {shown}")
            finals = run.finals[clip.clip_id]
            for final in finals:
                print(
                    f"final {final.utterance_index} {final.start_ms}-{final.end_ms} ms: "
                    f"{final.text}"
                )
            for suppressed in run.suppressed[clip.clip_id]:
                print(
                    f"suppressed final {suppressed.utterance_index} ({suppressed.guard}): "
                    f"{suppressed.text}"
                )
            if not finals:
                continue
            first = finals[0]
            for pre_roll_ms in PRE_ROLL_MS:
                start = max(0, first.start_ms - pre_roll_ms)
                window = audio[start * SAMPLES_PER_MS : first.end_ms * SAMPLES_PER_MS]
                request = RecognitionRequest(window, with_word_timings=True)
                result = recognizer.recognize([request])[0]
                print(
                    f"final 0 decoded from {start} ms (+{pre_roll_ms} ms): avg log-prob "
                    f"{result.avg_logprob:.2f}, no-speech {result.no_speech_prob:.2f}: "
                    f"{result.text.strip()}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
