"""RNNoise before the streaming engine: WER with and without it, noise removed, and its cost.

    .venv/bin/python -m bench.denoise [--quick]

- **WER**: the streaming engine (``build_engine(AsrSettings(threads=2))``, on the CPU, partials
  off: a final is decoded from its utterance's audio alone, so partials cannot change it) fed
  each clip twice, raw and denoised, in 20 ms chunks (all streams interleaved, a ``step`` every
  100 ms of audio, end of stream on the last chunk). Denoised = the whole clip through a
  :class:`~pipeline.audio.denoise.StreamDenoiser` (20 ms chunks, then ``flush``) before the
  engine: the same samples the in-engine stage produces, since the denoiser's output is aligned
  with and as long as its input. Clips: the noisy fixtures (speech + white/pink noise, 10 dB
  SNR) and the clean utterances they come from (does denoising harm clean speech?); the full run
  adds the 8 kHz telephone and G.711 copies (upsampled to 16 kHz first, as the engine does),
  every call channel, and the non-speech fixtures (words produced, should stay 0).
  WER: ``pipeline.evaluation`` (normalized; corpus WER = summed edits / summed words).
- **Signal**: on each noisy fixture, the noise power outside the speech span (±50 ms) before
  and after, and the correlation of the speech span with the clean utterance before and after.
- **Cost**: CPU seconds per audio second of one stream (= fraction of a core per stream) for
  the denoiser fed 20 ms chunks, fed whole files, and for its two resampling filters alone.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from bench.common import (
    RESULTS,
    SHARED_MACHINE_NOTE,
    FixtureClip,
    bench_parser,
    call_clips,
    corpus_wer,
    fmt,
    load_manifest,
    markdown_table,
    single_clips,
    write_results,
)
from pipeline.asr.factory import build_engine
from pipeline.asr.session import SessionKey
from pipeline.audio.denoise import (
    DENOISE_LATENCY_SAMPLES,
    Decimator3x,
    StreamDenoiser,
    Upsampler3x,
)
from pipeline.audio.resample import to_16k
from pipeline.clock import ManualClock
from pipeline.contracts.messages import Final
from pipeline.evaluation import normalize_words, word_errors
from pipeline.settings import AsrSettings

NAME = "denoise"
RATE_HZ = 16_000
CHUNK_MS = 20
CHUNK_SAMPLES = RATE_HZ * CHUNK_MS // 1000
STEP_EVERY_MS = 100
MARGIN_MS = 50
ENGINE_THREADS = 2
CATEGORIES = {
    "noisy": "noisy",
    "utterance": "clean utterances",
    "telephone": "telephone",
    "telephone_codec": "telephone",
    "call": "call channels",
}
QUICK_KINDS = ("noisy", "utterance")
FULL_KINDS = ("noisy", "utterance", "telephone", "telephone_codec")
Audio = npt.NDArray[np.float32]


# -- audio ---------------------------------------------------------------------------------------


def denoise(samples: Audio) -> Audio:
    """A whole 16 kHz signal through one streaming denoiser, 20 ms at a time, then flushed."""
    with StreamDenoiser() as denoiser:
        pieces = [
            denoiser.process(samples[start : start + CHUNK_SAMPLES])
            for start in range(0, len(samples), CHUNK_SAMPLES)
        ]
        return np.concatenate([*pieces, denoiser.flush()])


def at_16k(clip: FixtureClip) -> FixtureClip:
    return dataclasses.replace(
        clip, samples=to_16k(clip.samples, clip.sample_rate_hz), sample_rate_hz=RATE_HZ
    )


def denoised(clip: FixtureClip) -> FixtureClip:
    """The clip at 16 kHz, denoised (same length, same timing)."""
    wide = at_16k(clip)
    return dataclasses.replace(wide, samples=denoise(wide.samples))


# -- the engine ----------------------------------------------------------------------------------


def engine_hypotheses(streams: dict[str, Audio]) -> tuple[dict[str, str], float]:
    """Stream name → its finals' text joined (16 kHz audio in), and the engine's wall time."""
    settings = AsrSettings(threads=ENGINE_THREADS, device="cpu", partials=False)
    engine = build_engine(settings, ManualClock()).engine
    finals: dict[str, list[Final]] = {name: [] for name in streams}
    started = time.perf_counter()
    longest_samples = max(len(samples) for samples in streams.values())
    for first in range(0, longest_samples, CHUNK_SAMPLES):
        last = first + CHUNK_SAMPLES
        for name, samples in streams.items():
            if first < len(samples):
                engine.accept(
                    SessionKey(name, "mono"),
                    samples[first:last],
                    RATE_HZ,
                    end_of_stream=last >= len(samples),
                )
        if (first // CHUNK_SAMPLES) % (STEP_EVERY_MS // CHUNK_MS) == 0:
            _collect(engine.step().outputs, finals)
    while engine.sessions:
        _collect(engine.step().outputs, finals)
    elapsed = time.perf_counter() - started
    texts = {
        name: " ".join(f.text for f in sorted(items, key=lambda f: f.utterance_index)).strip()
        for name, items in finals.items()
    }
    return texts, elapsed


def _collect(outputs: Iterable[Any], finals: dict[str, list[Final]]) -> None:
    for output in outputs:
        if isinstance(output, Final):
            finals[output.call_id].append(output)


def score(clips: Sequence[FixtureClip], texts: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Corpus WER per category (and over all speech clips)."""
    return corpus_wer(clips, texts, CATEGORIES)


# -- measurements --------------------------------------------------------------------------------


def measure_wer(speech: Sequence[FixtureClip], nonspeech: Sequence[FixtureClip]) -> dict[str, Any]:
    raw = [at_16k(clip) for clip in (*speech, *nonspeech)]
    clean = [denoised(clip) for clip in (*speech, *nonspeech)]
    streams = {f"raw|{c.clip_id}": c.samples for c in raw}
    streams |= {f"denoised|{c.clip_id}": c.samples for c in clean}
    texts, engine_s = engine_hypotheses(streams)
    raw_texts = {c.clip_id: texts[f"raw|{c.clip_id}"] for c in raw}
    denoised_texts = {c.clip_id: texts[f"denoised|{c.clip_id}"] for c in clean}
    per_clip = []
    for clip in speech:
        raw_errors = word_errors(clip.text, raw_texts[clip.clip_id])
        denoised_errors = word_errors(clip.text, denoised_texts[clip.clip_id])
        per_clip.append(
            {
                "clip": clip.clip_id,
                "kind": clip.kind,
                "reference": clip.text,
                "raw": raw_texts[clip.clip_id],
                "denoised": denoised_texts[clip.clip_id],
                "raw_errors": raw_errors.errors,
                "denoised_errors": denoised_errors.errors,
                "reference_words": raw_errors.reference_words,
            }
        )
    return {
        "raw": score(speech, raw_texts),
        "denoised": score(speech, denoised_texts),
        "per_clip": per_clip,
        "nonspeech_words": {
            label: {clip.clip_id: len(normalize_words(source[clip.clip_id])) for clip in nonspeech}
            for label, source in (("raw", raw_texts), ("denoised", denoised_texts))
        },
        "nonspeech_texts": {
            clip.clip_id: {"raw": raw_texts[clip.clip_id], "denoised": denoised_texts[clip.clip_id]}
            for clip in nonspeech
        },
        "engine_wall_s": engine_s,
        "engine_audio_s": sum(len(s) for s in streams.values()) / RATE_HZ,
    }


def _power(samples: Audio) -> float:
    return float(np.mean(np.square(samples, dtype=np.float64)))


def _correlation(a: Audio, b: Audio) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(np.dot(a64, b64) / np.sqrt(np.dot(a64, a64) * np.dot(b64, b64)))


def measure_signal(noisy: Sequence[FixtureClip]) -> list[dict[str, Any]]:
    """Noise power removed between words, and closeness of the speech to the clean original."""
    entries = {entry["id"]: entry for entry in load_manifest()}
    sources = {c.clip_id: c for c in single_clips({"utterance"})}
    rows = []
    for clip in noisy:
        entry = entries[clip.clip_id]
        clean = sources[entry["source_id"]].samples
        out = denoise(clip.samples)
        ms = RATE_HZ // 1000
        start, end = entry["speech_start_ms"] * ms, entry["speech_end_ms"] * ms
        lead_end, tail_start = max(start - MARGIN_MS * ms, 0), end + MARGIN_MS * ms

        def outside(audio: Audio, lead_end: int = lead_end, tail_start: int = tail_start) -> Audio:
            return np.concatenate([audio[:lead_end], audio[tail_start:]])

        reduction = _power(outside(clip.samples)) / max(_power(outside(out)), 1e-20)
        rows.append(
            {
                "clip": clip.clip_id,
                "noise": entry["noise"],
                "noise_reduction_db": 10 * np.log10(reduction),
                "speech_corr_raw": _correlation(clip.samples[start:end], clean[start:end]),
                "speech_corr_denoised": _correlation(out[start:end], clean[start:end]),
            }
        )
    return rows


def _cpu_per_audio_s(run: Any, audio_s: float, repeats: int) -> dict[str, float]:
    run()  # warm-up: library load, allocator
    values = []
    for _ in range(repeats):
        started = time.process_time()
        run()
        values.append((time.process_time() - started) / audio_s)
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure_cost(clips: Sequence[FixtureClip], repeats: int) -> dict[str, Any]:
    """CPU seconds per audio second of one stream (single-threaded: RNNoise and numpy)."""
    signals = [at_16k(clip).samples for clip in clips]
    audio_s = sum(len(s) for s in signals) / RATE_HZ

    def chunked() -> None:
        for samples in signals:
            denoise(samples)

    def whole() -> None:
        for samples in signals:
            with StreamDenoiser() as denoiser:
                denoiser.process(samples)
                denoiser.flush()

    def filters_only() -> None:
        for samples in signals:
            upsampler, decimator = Upsampler3x(), Decimator3x()
            for start in range(0, len(samples), CHUNK_SAMPLES):
                decimator.process(upsampler.process(samples[start : start + CHUNK_SAMPLES]))

    chunked_cost = _cpu_per_audio_s(chunked, audio_s, repeats)
    return {
        "audio_s": audio_s,
        "repeats": repeats,
        "chunked_20ms": chunked_cost,
        "whole_file": _cpu_per_audio_s(whole, audio_s, repeats),
        "filters_only_20ms": _cpu_per_audio_s(filters_only, audio_s, repeats),
        "us_per_10ms_frame": 1e6 * chunked_cost["median"] / 100,
        "streams_per_core": 1 / chunked_cost["median"],
        "latency_ms": 1000 * DENOISE_LATENCY_SAMPLES / RATE_HZ,
    }


# -- report --------------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    wer = results["wer"]
    categories = [c for c in (*dict.fromkeys(CATEGORIES.values()), "all") if c in wer["raw"]]
    rows = []
    for category in categories:
        raw, den = wer["raw"][category], wer["denoised"][category]
        rows.append(
            [
                category,
                raw["reference_words"],
                f"{fmt(100 * raw['wer'], 1)} ({raw['errors']})",
                f"{fmt(100 * den['wer'], 1)} ({den['errors']})",
                f"{100 * (den['wer'] - raw['wer']):+.1f}",
            ]
        )
    noisy_rows = [
        [c["clip"], c["raw_errors"], c["denoised_errors"], c["raw"], c["denoised"]]
        for c in wer["per_clip"]
        if c["kind"] == "noisy"
    ]
    signal_rows = [
        [
            s["clip"],
            s["noise"],
            fmt(s["noise_reduction_db"], 1),
            fmt(s["speech_corr_raw"], 3),
            fmt(s["speech_corr_denoised"], 3),
        ]
        for s in results["signal"]
    ]
    cost = results["cost"]
    parts = [
        "## RNNoise denoising before the streaming engine",
        "Corpus WER in % (errors), engine with 2 threads on the CPU, raw vs denoised input.",
        markdown_table(["clips", "words", "raw", "denoised", "Δ points"], rows),
        markdown_table(
            ["noisy clip", "raw errors", "denoised errors", "raw", "denoised"], noisy_rows
        ),
        "Noise power outside the speech span (±50 ms) removed, and correlation of the speech "
        "span with the clean utterance:",
        markdown_table(
            ["noisy clip", "noise", "noise removed dB", "corr. raw", "corr. denoised"],
            signal_rows,
        ),
        f"Cost per stream ({fmt(cost['audio_s'], 0)} s of audio, median of "
        f"{cost['repeats']}): {fmt(cost['chunked_20ms']['median'], 4)} CPU-s per audio s in "
        f"20 ms chunks ({fmt(cost['us_per_10ms_frame'], 0)} µs per 10 ms frame, "
        f"≈ {fmt(cost['streams_per_core'], 0)} streams per core), "
        f"{fmt(cost['whole_file']['median'], 4)} fed whole files; the resampling filters "
        f"alone {fmt(cost['filters_only_20ms']['median'], 4)}. Added latency: "
        f"{fmt(cost['latency_ms'], 1)} ms.",
    ]
    nonspeech = wer["nonspeech_words"]
    if nonspeech["raw"]:
        parts.append(
            f"Words on the non-speech fixtures: raw {sum(nonspeech['raw'].values())}, "
            f"denoised {sum(nonspeech['denoised'].values())}."
        )
    return "\n\n".join(parts)


def run(quick: bool, out: Path = RESULTS) -> dict[str, Any]:
    """Measure, write ``bench/results/denoise.{json,md}``, return the results."""
    started = time.monotonic()
    kinds = QUICK_KINDS if quick else FULL_KINDS
    speech = single_clips(kinds) + ([] if quick else call_clips())
    nonspeech = [] if quick else single_clips({"nonspeech"})
    noisy = [clip for clip in speech if clip.kind == "noisy"]
    repeats = 3 if quick else 5
    results: dict[str, Any] = {
        "wer": measure_wer(speech, nonspeech),
        "signal": measure_signal(noisy),
        "cost": measure_cost(single_clips(QUICK_KINDS), repeats),
    }
    wer = results["wer"]
    deltas = {
        category: wer["denoised"][category]["wer"] - wer["raw"][category]["wer"]
        for category in wer["raw"]
    }
    results["wer_delta_points"] = {k: 100 * v for k, v in deltas.items()}
    config = {
        "engine": {"threads": ENGINE_THREADS, "device": "cpu", "partials": False},
        "torch_threads": torch.get_num_threads(),
        "chunk_ms": CHUNK_MS,
        "step_every_ms": STEP_EVERY_MS,
        "speech_clips": len(speech),
        "nonspeech_clips": len(nonspeech),
        "denoise_latency_samples": DENOISE_LATENCY_SAMPLES,
    }
    noisy_delta = results["wer_delta_points"].get("noisy")
    clean_delta = results["wer_delta_points"].get("clean utterances")
    noisy_words = max(wer["raw"]["noisy"]["reference_words"], 1)
    write_results(
        NAME,
        quick=quick,
        config=config,
        results=results,
        markdown=markdown(results),
        notes=[
            SHARED_MACHINE_NOTE,
            "WER comes from pipeline/evaluation/wer.py (the project's helper).",
            f"Denoising changes WER by {fmt(noisy_delta, 1)} points on the noisy fixtures and "
            f"{fmt(clean_delta, 1)} points on clean utterances (no target is set).",
            f"Few words: one error is {fmt(100 / noisy_words, 1)} points on the noisy set; "
            "read the per-clip texts in denoise.json before concluding.",
        ],
        started_s=started,
        out=out,
    )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, (__doc__ or "").splitlines()[0])
    args = parser.parse_args(argv)
    results = run(args.quick, args.out)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
