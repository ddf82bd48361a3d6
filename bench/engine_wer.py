"""Word error rate of the streaming engine against offline decoding, and of the window cut.

    .venv/bin/python -m bench.engine_wer [--quick]
    .venv/bin/python -m bench.engine_wer --realspeech [--quick]  # bench/realspeech_wer.py

Clips: the speech fixtures with a reference (``tests/fixtures/refs.tsv``): utterances,
telephone (8 kHz) and G.711 copies, noisy copies, the two pause files, the repeated sentences
and every call channel.
WER: ``pipeline.evaluation.wer`` (normalized, corpus WER = summed edits / summed reference
words, per category).

- **streaming**: the engine (``build_engine``, the worker's settings) fed 20 ms chunks of all
  clips interleaved, stepped every 100 ms of audio, end of stream on the last chunk (quick: the
  8 kHz call copies are left out). A clip's hypothesis is its finals joined. Partials are
  switched off: the engine decodes a final from its utterance's audio alone (never from
  partials), so they cannot change a final's text.
- **offline**: the same weights and decoding options (greedy, loop guards on), one decode per
  utterance in Whisper's classic 30 s window (log-mel padded to 3000 frames). A single-speaker
  clip is one utterance; a call channel is decoded turn by turn with the manifest's turn spans
  (oracle segmentation, so the difference to streaming is the engine's own segmentation and
  window policy).
- **int8 weights**: the default engine with ``quantization="int8"`` (int8 linear layers,
  ``pipeline.asr.whisper.quantize``) against float32, same clips, same run; the full run adds
  int8 with 30 s windows (does int8's saving buy back the window's accuracy?).
- **window cut**: the engine with ``min_window_ms`` 10 s (the default: window = utterance +
  ``margin_ms`` 2 s, rounded up to 1 s, at least 10 s) against 30 s (every window padded to
  Whisper's 30 s); the full run adds no minimum (audio + 2 s) and a 1 s margin.
- non-speech fixtures: words each side produces on silence, noise, music, tones (should be 0).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from bench.common import (
    SHARED_MACHINE_NOTE,
    FixtureClip,
    bench_parser,
    call_clips,
    corpus_wer,
    fmt,
    markdown_table,
    new_figure,
    single_clips,
    write_results,
)
from pipeline.asr.engine import Suppressed
from pipeline.asr.factory import build_engine
from pipeline.asr.session import SessionKey
from pipeline.asr.whisper.decoding import DecodingOptions, decode
from pipeline.asr.whisper.mel import log_mel_spectrogram, pad_or_trim_frames
from pipeline.asr.whisper.model import WhisperModel, load_whisper
from pipeline.audio.resample import to_16k
from pipeline.clock import ManualClock
from pipeline.contracts.messages import Final
from pipeline.evaluation import normalize_words, word_errors
from pipeline.settings import AsrSettings

NAME = "engine_wer"
CHUNK_MS = 20
STEP_EVERY_MS = 100
OFFLINE_BATCH = 8
OFFLINE_WINDOW_SAMPLES = 30 * 16_000
OFFLINE_CUT_SEARCH_SAMPLES = 5 * 16_000
CATEGORIES = {
    "utterance": "utterances",
    "telephone": "telephone",
    "telephone_codec": "telephone",
    "noisy": "noisy",
    "pause": "pauses",
    "call": "call channels",
    "repeat": "repeats",
}
SPEECH_KINDS = ("utterance", "telephone", "telephone_codec", "noisy", "pause", "repeat")


@dataclasses.dataclass(frozen=True, slots=True)
class Variant:
    key: str
    label: str
    min_window_ms: int
    margin_ms: int = 2000
    quantization: str = "none"


QUICK_VARIANTS = (
    Variant("stream_10s", "engine, window ≥ 10 s (default)", 10_000),
    Variant("stream_10s_int8", "engine, window ≥ 10 s, int8 weights", 10_000, quantization="int8"),
    Variant("stream_30s", "engine, 30 s window", 30_000),
    Variant("stream_5s", "engine, window ≥ 5 s (the partials' minimum)", 5_000),
)
FULL_VARIANTS = (
    *QUICK_VARIANTS,
    Variant("stream_30s_int8", "engine, 30 s window, int8 weights", 30_000, quantization="int8"),
    Variant("stream_tight", "engine, window = audio + 2 s", 0),
    Variant("stream_10s_margin1s", "engine, window ≥ 10 s, margin 1 s", 10_000, 1000),
)


@dataclasses.dataclass(frozen=True, slots=True)
class StreamingRun:
    """What the engine emitted for each clip: its finals and the finals the guards suppressed
    (in emission order), and the engine's wall time over all clips."""

    finals: dict[str, list[Final]]
    suppressed: dict[str, list[Suppressed]]
    wall_s: float

    def texts(self) -> dict[str, str]:
        """clip id → its finals' text joined in utterance order."""
        return {
            clip_id: " ".join(f.text for f in sorted(items, key=lambda f: f.utterance_index))
            for clip_id, items in self.finals.items()
        }


def run_streaming(clips: Sequence[FixtureClip], settings: AsrSettings) -> StreamingRun:
    """The engine of ``settings`` (``build_engine``, as the worker builds it) fed 20 ms chunks
    of every clip interleaved, at each clip's own rate (8 kHz goes through the engine's
    resampler), stepped every 100 ms of audio, end of stream with each clip's last chunk."""
    engine = build_engine(settings, ManualClock()).engine
    run = StreamingRun({c.clip_id: [] for c in clips}, {c.clip_id: [] for c in clips}, 0.0)
    started = time.perf_counter()
    longest_ms = max(clip.duration_ms for clip in clips)
    for position_ms in range(0, longest_ms + CHUNK_MS, CHUNK_MS):
        for clip in clips:
            rate = clip.sample_rate_hz
            first = position_ms * rate // 1000
            last = (position_ms + CHUNK_MS) * rate // 1000
            if first < len(clip.samples):
                engine.accept(
                    SessionKey(clip.clip_id, "mono"),
                    clip.samples[first:last],
                    rate,
                    end_of_stream=last >= len(clip.samples),
                )
        if position_ms % STEP_EVERY_MS == 0:
            _collect(engine.step().outputs, run)
    while engine.sessions:
        _collect(engine.step().outputs, run)
    return dataclasses.replace(run, wall_s=time.perf_counter() - started)


def _collect(outputs: Sequence[Any], run: StreamingRun) -> None:
    for output in outputs:
        if isinstance(output, Final):
            run.finals[output.call_id].append(output)
        elif isinstance(output, Suppressed) and output.final:
            run.suppressed[output.key.call_id].append(output)


def streaming_hypotheses(
    clips: Sequence[FixtureClip], variant: Variant, threads: int
) -> tuple[dict[str, str], float]:
    """clip id → its finals' text joined, and the wall time the engine took."""
    settings = AsrSettings(
        device="cpu",
        threads=threads,
        partials=False,
        min_window_ms=variant.min_window_ms,
        margin_ms=variant.margin_ms,
        quantization=variant.quantization,
    )
    run = run_streaming(clips, settings)
    return run.texts(), run.wall_s


def offline_windows(
    audio: npt.NDArray[np.float32],
    window_samples: int = OFFLINE_WINDOW_SAMPLES,
    search_samples: int = OFFLINE_CUT_SEARCH_SAMPLES,
) -> list[npt.NDArray[np.float32]]:
    """``audio`` (16 kHz) cut into consecutive windows of at most ``window_samples``, each cut
    in the middle of the quietest 20 ms of its last ``search_samples`` (a word is rarely split
    there); one window for audio that fits. The windows tile ``audio`` exactly."""
    frame = 320
    windows = []
    start = 0
    while len(audio) - start > window_samples:
        search_first = start + max(window_samples - search_samples, frame)
        frames = audio[search_first : start + window_samples]
        usable = len(frames) // frame * frame
        energy = np.square(frames[:usable].reshape(-1, frame), dtype=np.float64).sum(axis=1)
        cut = search_first + int(np.argmin(energy)) * frame + frame // 2
        windows.append(audio[start:cut])
        start = cut
    windows.append(audio[start:])
    return windows


def offline_hypotheses(
    model: WhisperModel, clips: Sequence[FixtureClip]
) -> tuple[dict[str, str], float]:
    """clip id → offline text (30 s windows, consecutive for a longer clip; call channels
    turn by turn), and wall time."""
    segments: list[tuple[str, np.ndarray]] = []
    for clip in clips:
        audio = to_16k(clip.samples, clip.sample_rate_hz)
        if clip.turns:
            for start_ms, end_ms, _ in clip.turns:
                segments.append((clip.clip_id, audio[start_ms * 16 : end_ms * 16]))
        else:
            segments.extend((clip.clip_id, window) for window in offline_windows(audio))
    options = DecodingOptions(max_words_per_second=6.0, max_prompt_tokens=64)
    texts: dict[str, list[str]] = {clip.clip_id: [] for clip in clips}
    started = time.perf_counter()
    for first in range(0, len(segments), OFFLINE_BATCH):
        batch = segments[first : first + OFFLINE_BATCH]
        mels = [log_mel_spectrogram(audio[:OFFLINE_WINDOW_SAMPLES]) for _, audio in batch]
        windows = [pad_or_trim_frames(mel, 3000) for mel in mels]
        results = decode(model, windows, options, content_frames=[m.shape[1] for m in mels])
        for (clip_id, _), result in zip(batch, results, strict=True):
            texts[clip_id].append(result.text.strip())
    elapsed = time.perf_counter() - started
    return {k: " ".join(t for t in v if t) for k, v in texts.items()}, elapsed


def score(clips: Sequence[FixtureClip], hypotheses: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Corpus WER per category and overall."""
    return corpus_wer(clips, hypotheses, CATEGORIES)


def measure(
    quick: bool, threads: int, limit: int | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    torch.set_num_threads(threads)
    # Quick: the 16 kHz calls only (the 8 kHz copies repeat them; telephone covers 8 kHz).
    speech = single_clips(SPEECH_KINDS)[:limit] + call_clips(include_8k=not quick)[:limit]
    nonspeech = single_clips({"nonspeech"})[:limit]
    variants = QUICK_VARIANTS if quick else FULL_VARIANTS
    model = load_whisper()

    offline_texts, offline_s = offline_hypotheses(model, speech)
    offline_nonspeech, _ = offline_hypotheses(model, nonspeech)
    systems: dict[str, Any] = {
        "offline_30s": {
            "label": "offline, 30 s window, whole utterance",
            "wer": score(speech, offline_texts),
            "wall_s": offline_s,
            "nonspeech_words": _word_count(offline_nonspeech),
        }
    }
    hypotheses = {"offline_30s": offline_texts}
    for variant in variants:
        texts, elapsed = streaming_hypotheses(speech, variant, threads)
        texts_ns, _ = streaming_hypotheses(nonspeech, variant, threads)
        torch.set_num_threads(threads)
        systems[variant.key] = {
            "label": variant.label,
            "min_window_ms": variant.min_window_ms,
            "margin_ms": variant.margin_ms,
            "wer": score(speech, texts),
            "wall_s": elapsed,
            "nonspeech_words": _word_count(texts_ns),
        }
        hypotheses[variant.key] = texts
    per_clip = [
        {
            "clip": clip.clip_id,
            "kind": clip.kind,
            "reference": clip.text,
            **{key: texts[clip.clip_id] for key, texts in hypotheses.items()},
        }
        for clip in speech
    ]
    audio_s = sum(c.duration_ms for c in speech) / 1000
    config = {
        "clips": len(speech),
        "audio_s": audio_s,
        "nonspeech_clips": len(nonspeech),
        "variants": [dataclasses.asdict(v) for v in variants],
        "step_every_ms": STEP_EVERY_MS,
        "torch_threads": threads,
        "chunk_ms": CHUNK_MS,
    }
    return config, {"systems": systems, "per_clip": per_clip}


def _word_count(texts: dict[str, str]) -> dict[str, Any]:
    counts = {clip: len(normalize_words(text)) for clip, text in texts.items()}
    return {"total": sum(counts.values()), "per_clip": counts, "texts": texts}


def markdown(results: dict[str, Any]) -> str:
    systems = results["systems"]
    categories = [*dict.fromkeys(CATEGORIES.values()), "all"]
    rows = []
    for system in systems.values():
        wer = system["wer"]
        rows.append(
            [
                system["label"],
                *(fmt(100 * wer[c]["wer"], 1) if c in wer else "—" for c in categories),
                system["nonspeech_words"]["total"],
                fmt(system["wall_s"], 1),
            ]
        )
    base = systems["stream_10s"]
    wide = systems["stream_30s"]
    lines = [
        "## WER: streaming engine vs offline, and the window cut",
        "Corpus WER in % (normalized; summed edits / summed reference words). Wall time: "
        "decoding all clips in this run (the ratio between rows is what counts).",
        markdown_table(
            ["system", *categories, "words on non-speech", "wall s"],
            rows,
        ),
        f"Window cut: WER {fmt(100 * base['wer']['all']['wer'], 2)} % with the 10 s minimum "
        f"window against {fmt(100 * wide['wer']['all']['wer'], 2)} % with 30 s windows; the "
        f"10 s engine decoded in {fmt(base['wall_s'] / max(wide['wall_s'], 1e-9), 2)}× the "
        "time of the 30 s one.",
    ]
    int8 = systems.get("stream_10s_int8")
    if int8 is not None:
        lines.append(
            f"int8 weights (`STREAMSCRIBE_QUANTIZATION=int8`): WER "
            f"{fmt(100 * int8['wer']['all']['wer'], 2)} % against "
            f"{fmt(100 * base['wer']['all']['wer'], 2)} % with float32 weights, decoded in "
            f"{fmt(int8['wall_s'] / max(base['wall_s'], 1e-9), 2)}× the time."
        )
    wide_int8 = systems.get("stream_30s_int8")
    if wide_int8 is not None:
        lines.append(
            f"int8 weights with 30 s windows: WER {fmt(100 * wide_int8['wer']['all']['wer'], 2)} "
            f"%, decoded in {fmt(wide_int8['wall_s'] / max(base['wall_s'], 1e-9), 2)}× the time "
            "of the default (float32, 10 s)."
        )
    differing = _differing_clips(results)
    if differing:
        lines += [
            "Clips whose word errors differ between systems (texts in the JSON, `per_clip`):",
            markdown_table(["clip", *(s["label"] for s in systems.values())], differing),
        ]
    return "\n\n".join(lines)


def _differing_clips(results: dict[str, Any]) -> list[list[Any]]:
    keys = list(results["systems"])
    rows = []
    for clip in results["per_clip"]:
        errors = [word_errors(clip["reference"], clip[key]).errors for key in keys]
        if len(set(errors)) > 1:
            rows.append([clip["clip"], *errors])
    return rows


def plot(results: dict[str, Any]) -> Any:
    figure, axes = new_figure(8, 4)
    systems = results["systems"]
    categories = [*dict.fromkeys(CATEGORIES.values()), "all"]
    width = 0.8 / len(systems)
    for i, (key, system) in enumerate(systems.items()):
        values = [100 * system["wer"].get(c, {}).get("wer", np.nan) for c in categories]
        positions = np.arange(len(categories)) + (i - (len(systems) - 1) / 2) * width
        axes.bar(positions, values, width, label=system["label"] if key else key)
    axes.set_xticks(np.arange(len(categories)), categories)
    axes.set_ylabel("WER %")
    axes.set_title("WER by fixture category")
    axes.legend(fontsize=8)
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, (__doc__ or "").splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="at most N clips of each set")
    parser.add_argument(
        "--realspeech",
        action="store_true",
        help="measure on the real-speech set instead (bench/realspeech_wer.py)",
    )
    # Imported here: realspeech_wer builds on this module's decoders.
    from bench import realspeech_wer

    realspeech_wer.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.realspeech:
        return realspeech_wer.run(args)
    started = time.monotonic()
    config, results = measure(args.quick, args.threads, args.limit)
    systems = results["systems"]
    stream_wer = systems["stream_10s"]["wer"]["all"]["wer"]
    offline_wer = systems["offline_30s"]["wer"]["all"]["wer"]
    results["streaming_minus_offline_wer"] = stream_wer - offline_wer
    write_results(
        NAME,
        quick=args.quick,
        config=config,
        results=results,
        markdown=markdown(results),
        figures={"": plot(results)},
        notes=[
            SHARED_MACHINE_NOTE,
            "WER comes from pipeline/evaluation/wer.py (the project's helper).",
            f"Streaming − offline WER, all clips: {100 * (stream_wer - offline_wer):+.2f} "
            "percentage points (no target is set for it).",
        ],
        started_s=started,
        out=args.out,
    )
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
