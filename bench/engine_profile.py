"""Where a live channel's CPU goes: the engine's cost split by stage, for 1, 8 and 16 channels.

    .venv/bin/python -m bench.engine_profile [--quick] [--channels 1 8 16] [--load fixture dense]

The live run is engine_concurrency's (``run_level``: 20 ms chunks on wall-clock time, one
``engine.step`` after every delivery round, the worker's ``max_step_jobs``), on one engine built
as the worker builds it. Around it the benchmark wraps, without changing them, the functions the
engine calls and measures the **process CPU seconds** (user + system, every thread: torch's
intra-op threads included) each call takes:

- ``vad``: ``SileroVad.speech_probs`` (batched frames);
- ``log_mel``, ``encoder``, ``decoder``, ``word_timings``: ``log_mel_spectrogram``,
  ``encode_windows``, ``decode``, ``align_words`` as ``WhisperRecognizer.recognize`` calls them;
  ``recognizer_other`` is the rest of ``recognize`` (padding, prefixes, word splitting);
- ``guards``: ``check_hypothesis``;
- ``engine_other``: the rest of ``StreamingEngine.step`` and all of ``accept`` (sessions,
  agreement, endpoints, events: the Python around the models);
- ``feeder``: what the benchmark's own loop costs outside the engine (not the worker's).

Figures are CPU seconds per second of channel audio (a channel that talks half the time has
half its audio as speech; ``speech_fraction`` says how much the VAD labelled speech). The
recognizer's stages are further split by what the window was for, **partial** or **final**,
each batch's CPU shared among its rows in proportion to their audio: every partial decode is
work a later decode repeats (the live view's price), and an early final decoded ahead but not
used (``early_finals.decoded − used``) is thrown away too (estimated at the mean cost of a final
row). ``finals_equal_to_a_partial`` counts final windows whose audio and window length equal
an earlier partial's of the same utterance: work a cache of encoder outputs would save.

Loads (``--load``): ``fixture`` = the fixture calls' channels (short turns, as engine_concurrency),
``dense`` = real recorded speech from ``../shared/speech`` (16 kHz) laid end to end with 0.3–0.6 s
pauses, shorter than the 800 ms endpoint, so every channel is dense speech in long turns
(≥ 70 % speech; turns are cut by ``max_length``). The worker's Kafka side is not in this
benchmark: bench/results/transport.md measures it (consume, produce and commit per record).

Reading the committed results (bench/results/engine_profile.md, 1 torch thread, 2026-12-02):
they were taken while the 2-core machine ran at a load average of about 10 (four other
engineers' test runs and a chaos run), so the engine was far behind real time at every level
(P95 chunk → view 38–186 s) and thinned its partials; the latency columns describe that load,
not the engine. What the CPU split says all the same: the decoder costs more than the encoder
at every level (fixture calls, 1 channel: 0.133 against 0.038 CPU s per audio s; dense speech,
16 channels: 0.056 each); one channel alone spends 39 % of its CPU in the VAD (a batch of one
frame per pass: 0.124, against 0.007 per channel at 16 channels); word timings cost 0.013–0.027;
the Python around the models (``engine_other``) 0.001–0.008. Partials, all later re-decoded,
were 30 % of the recognizer's work for one channel and 2–15 % at 8–16, thinned under this load.
No final window equalled an earlier partial's (partials use a shorter minimum window), so a
cache of encoder outputs between the two would save nothing as windows are cut today. Rerun on
a quiet machine before drawing capacity conclusions.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from bench.common import (
    SHARED_MACHINE_NOTE,
    FixtureClip,
    bench_parser,
    call_clips,
    fmt,
    markdown_table,
    new_figure,
    write_results,
)
from bench.engine_concurrency import _warm_up, run_level
from bench.realspeech_wer import BANDS, load_band, parse_refs, speech_dir
from pipeline.asr import engine as engine_module
from pipeline.asr import whisper_recognizer as recognizer_module
from pipeline.asr.engine import StreamingEngine
from pipeline.asr.factory import engine_config, whisper_settings
from pipeline.asr.recognizer import RecognitionRequest
from pipeline.asr.vad import SileroVad
from pipeline.asr.whisper_recognizer import WhisperRecognizer
from pipeline.settings import AsrSettings, WorkerSettings

NAME = "engine_profile"
QUICK_CHANNELS = (1, 8)
FULL_CHANNELS = (1, 8, 16)
LOADS = ("fixture", "dense")
DENSE_PAUSE_S = (0.3, 0.6)
RECOGNIZER_STAGES = ("log_mel", "encoder", "decoder", "word_timings", "recognizer_other")
STAGES = ("vad", *RECOGNIZER_STAGES, "guards", "engine_other")


def cpu_s() -> float:
    """This process's CPU seconds (every thread)."""
    return time.process_time()


@dataclass
class StageMeter:
    """CPU seconds by stage, and by purpose (partial / final) for the recognizer's stages.

    Stages nest (``encoder`` runs inside ``recognize`` inside ``step``): each wrapper adds its
    own CPU to its stage and the enclosing one subtracts its children's, so the stages add up
    to the engine's total without counting anything twice.
    """

    cpu_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_purpose_s: dict[str, dict[str, float]] = field(
        default_factory=lambda: {"partial": defaultdict(float), "final": defaultdict(float)}
    )
    rows: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    finals_equal_to_a_partial: int = 0
    _shares: tuple[float, float] = (0.0, 1.0)  # partial, final share of the current batch
    _children_s: list[float] = field(default_factory=list)
    _partial_windows: set[bytes] = field(default_factory=set)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = cpu_s()
        self._children_s.append(0.0)
        try:
            yield
        finally:
            spent = cpu_s() - started
            children = self._children_s.pop()
            self.cpu_s[name] += spent - children
            self.calls[name] += 1
            if name in RECOGNIZER_STAGES:
                partial_share, final_share = self._shares
                self.by_purpose_s["partial"][name] += (spent - children) * partial_share
                self.by_purpose_s["final"][name] += (spent - children) * final_share
            if self._children_s:
                self._children_s[-1] += spent

    def begin_batch(self, requests: Sequence[RecognitionRequest], window_of: Any) -> None:
        """Note a recognizer batch: its rows' purposes and which finals repeat a partial."""
        samples = {"partial": 0, "final": 0}
        for request in requests:
            purpose = "partial" if request.partial else "final"
            samples[purpose] += len(request.audio)
            self.rows[purpose] += 1
            _, window = window_of(len(request.audio), request.partial)
            digest = hashlib.blake2b(request.audio.tobytes(), digest_size=16).digest()
            fingerprint = window.to_bytes(4, "little") + digest
            if request.partial:
                self._partial_windows.add(fingerprint)
            elif fingerprint in self._partial_windows:
                self.finals_equal_to_a_partial += 1
        total = max(1, samples["partial"] + samples["final"])
        self._shares = (samples["partial"] / total, samples["final"] / total)


def _wrap(meter: StageMeter, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def measured(*args: Any, **kwargs: Any) -> Any:
        with meter.stage(name):
            return function(*args, **kwargs)

    return measured


@contextmanager
def instrumented(engine: StreamingEngine, recognizer: WhisperRecognizer) -> Iterator[StageMeter]:
    """``engine`` with every stage measured into the yielded meter; restored on exit."""
    meter = StageMeter()
    patched: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attribute: str, stage_name: str) -> None:
        original = getattr(owner, attribute)
        patched.append((owner, attribute, original))
        setattr(owner, attribute, _wrap(meter, stage_name, original))

    for attribute, stage_name in (
        ("log_mel_spectrogram", "log_mel"),
        ("encode_windows", "encoder"),
        ("decode", "decoder"),
        ("align_words", "word_timings"),
    ):
        patch(recognizer_module, attribute, stage_name)
    patch(engine_module, "check_hypothesis", "guards")
    vad = engine._vad
    patch(vad, "speech_probs", "vad")
    recognize = recognizer.recognize

    def recognize_measured(requests: Sequence[RecognitionRequest]) -> Any:
        meter.begin_batch(requests, recognizer._window_frames)
        with meter.stage("recognizer_other"):
            result = recognize(requests)
        meter._shares = (0.0, 1.0)
        return result

    patched.append((recognizer, "recognize", recognize))
    recognizer.recognize = recognize_measured  # type: ignore[method-assign]
    patch(engine, "step", "engine_other")
    patch(engine, "accept", "engine_other")
    try:
        yield meter
    finally:
        for owner, attribute, original in reversed(patched):
            if owner is recognizer or owner is engine or owner is vad:
                delattr(owner, attribute)  # back to the class's method
            else:
                setattr(owner, attribute, original)


def dense_clips(seed: int, duration_s: float, count: int = 8) -> list[FixtureClip]:
    """``count`` channels of ``duration_s`` of real speech, utterances laid end to end with
    pauses of U(0.3, 0.6) s (shorter than the endpoint: one long turn until ``max_length``)."""
    directory = speech_dir()
    references = parse_refs((directory / "refs.tsv").read_text(encoding="utf-8"))
    band = next(b for b in BANDS if b.folder == "wav16k")
    utterances = load_band(directory, references, band)
    rng = np.random.default_rng(seed)
    clips = []
    for channel in range(count):
        order = rng.permutation(len(utterances))
        pieces: list[npt.NDArray[np.float32]] = []
        length = 0
        texts = []
        for index in order:
            utterance = utterances[int(index)]
            pause = np.zeros(int(16_000 * rng.uniform(*DENSE_PAUSE_S)), dtype=np.float32)
            pieces += [utterance.samples.astype(np.float32), pause]
            texts.append(utterance.text)
            length += len(utterance.samples) + len(pause)
            if length >= duration_s * 16_000:
                break
        samples = np.concatenate(pieces)[: int(duration_s * 16_000)]
        clips.append(FixtureClip(f"dense{channel}:dense-{channel}", "dense", 16_000, samples, ""))
    return clips


def profile_level(
    engine: StreamingEngine,
    recognizer: WhisperRecognizer,
    channels: int,
    clips: Sequence[FixtureClip],
    duration_s: float,
    seed: int,
) -> dict[str, Any]:
    """One live level under the meter: the stage split per channel-audio second."""
    total_started = cpu_s()
    with instrumented(engine, recognizer) as meter:
        level = run_level(
            engine,
            channels,
            duration_s,
            seed,
            WorkerSettings().max_step_jobs,
            sample_memory=False,
            clips=clips,
        )
    total_s = cpu_s() - total_started
    audio_s = level["audio_s_total"]
    stages = {name: meter.cpu_s.get(name, 0.0) for name in STAGES}
    stages["feeder"] = max(0.0, total_s - sum(stages.values()))
    final_rows = max(1, meter.rows["final"])
    final_row_s = sum(meter.by_purpose_s["final"].values()) / final_rows
    unused_early = level["early_finals"]["decoded"] - level["early_finals"]["used"]
    partial_s = sum(meter.by_purpose_s["partial"].values())
    return {
        "channels": channels,
        "audio_s_total": audio_s,
        "drained": level["drained"],
        "speech_fraction": level.get("speech_fraction"),
        "cpu_s_total": total_s,
        "cpu_s_per_audio_s": {name: value / audio_s for name, value in stages.items()},
        "cpu_s_per_audio_s_total": total_s / audio_s,
        "recognizer_by_purpose_s_per_audio_s": {
            purpose: {name: value / audio_s for name, value in split.items()}
            for purpose, split in meter.by_purpose_s.items()
        },
        "rows": dict(meter.rows),
        "calls": dict(meter.calls),
        "early_finals": level["early_finals"],
        "thrown_away": {
            "partial_cpu_s_per_audio_s": partial_s / audio_s,
            "unused_early_finals_cpu_s_per_audio_s_estimate": unused_early * final_row_s / audio_s,
            "fraction_of_recognizer": (partial_s + unused_early * final_row_s)
            / max(1e-9, sum(stages[name] for name in RECOGNIZER_STAGES)),
        },
        "finals_equal_to_a_partial": meter.finals_equal_to_a_partial,
        "partials": level["partials"],
        "finals": level["finals"],
        "chunk_to_view_ms": level["chunk_to_view_ms"],
        "endpoint_to_final_ms": level["endpoint_to_final_ms"],
    }


def measure(
    levels: Sequence[int], loads: Sequence[str], duration_s: float, threads: int
) -> dict[str, Any]:
    settings = AsrSettings(threads=threads)
    torch.set_num_threads(threads)
    vad = SileroVad()
    recognizer = WhisperRecognizer(whisper_settings(settings, "cpu"))
    engine = StreamingEngine(recognizer, vad, engine_config(settings))
    _warm_up(recognizer, settings.max_batch)
    results: dict[str, Any] = {}
    for load in loads:
        clips = call_clips() if load == "fixture" else dense_clips(7, duration_s)
        results[load] = {}
        for seed, channels in enumerate(levels):
            level = profile_level(engine, recognizer, channels, clips, duration_s, seed)
            results[load][str(channels)] = level
            print(f"{load} × {channels}: {summary(level)}", flush=True)
    return results


def summary(level: dict[str, Any]) -> str:
    split = level["cpu_s_per_audio_s"]
    top = sorted(split.items(), key=lambda item: -item[1])[:4]
    return f"{level['cpu_s_per_audio_s_total']:.3f} CPU s/audio s; " + ", ".join(
        f"{name} {value:.3f}" for name, value in top
    )


def markdown(results: dict[str, Any], duration_s: float, threads: int) -> str:
    lines = [
        "## Engine cost breakdown: CPU seconds per second of channel audio, by stage",
        "",
        f"Live channels of {duration_s:.0f} s each through one engine (engine_concurrency's "
        f"feeder, worker defaults, {threads} torch thread(s)); process CPU per stage "
        "(method: `bench/engine_profile.py`).",
        "",
    ]
    headers = ["load", "channels", *STAGES, "feeder", "total", "partial share", "thrown away"]
    rows = []
    for load, levels in results.items():
        for channels, level in levels.items():
            split = level["cpu_s_per_audio_s"]
            recognizer_s = sum(split[name] for name in RECOGNIZER_STAGES)
            partial_s = level["thrown_away"]["partial_cpu_s_per_audio_s"]
            rows.append(
                [
                    load,
                    channels,
                    *(fmt(split[name], 3) for name in STAGES),
                    fmt(split["feeder"], 3),
                    fmt(level["cpu_s_per_audio_s_total"], 3),
                    fmt(100 * partial_s / max(recognizer_s, 1e-9), 0, " %"),
                    fmt(100 * level["thrown_away"]["fraction_of_recognizer"], 0, " %"),
                ]
            )
    lines.append(markdown_table(headers, rows))
    lines += ["", "### Reuse opportunities and latency", ""]
    rows = []
    for load, levels in results.items():
        for channels, level in levels.items():
            early = level["early_finals"]
            rows.append(
                [
                    load,
                    channels,
                    level["rows"].get("partial", 0),
                    level["rows"].get("final", 0),
                    f"{early['used']} / {early['decoded']}",
                    level["finals_equal_to_a_partial"],
                    fmt((level["chunk_to_view_ms"]["p95"] or 0) / 1000, 2, " s"),
                    fmt((level["endpoint_to_final_ms"]["p95"] or 0) / 1000, 2, " s"),
                ]
            )
    lines.append(
        markdown_table(
            [
                "load",
                "channels",
                "partial rows",
                "final rows",
                "early finals used / decoded",
                "finals equal to a partial",
                "P95 chunk→view",
                "P95 endpoint→final",
            ],
            rows,
        )
    )
    return "\n".join(lines)


def plot(results: dict[str, Any]) -> Any:
    figure, axes = new_figure(8.0, 4.0)
    labels, bottoms = [], None
    bars: dict[str, list[float]] = {name: [] for name in (*STAGES, "feeder")}
    for load, levels in results.items():
        for channels, level in levels.items():
            labels.append(f"{load}\n{channels} ch")
            for name in bars:
                bars[name].append(level["cpu_s_per_audio_s"][name])
    positions = np.arange(len(labels))
    bottoms = np.zeros(len(labels))
    for name, values in bars.items():
        axes.bar(positions, values, bottom=bottoms, label=name)
        bottoms += np.asarray(values)
    axes.set_xticks(positions, labels)
    axes.set_ylabel("CPU s per channel-audio s")
    axes.set_title("Engine cost by stage")
    axes.legend(fontsize=7, ncol=2)
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, (__doc__ or "").splitlines()[0])
    parser.add_argument("--channels", type=int, nargs="+", help="concurrency levels")
    parser.add_argument("--load", choices=LOADS, nargs="+", help="loads (default: both)")
    parser.add_argument("--duration-s", type=float, help="audio per channel (s)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    levels = args.channels or (QUICK_CHANNELS if args.quick else FULL_CHANNELS)
    loads = args.load or LOADS
    duration_s = args.duration_s or (15.0 if args.quick else 30.0)
    results = measure(levels, loads, duration_s, args.threads)
    report = markdown(results, duration_s, args.threads)
    write_results(
        NAME,
        quick=args.quick,
        config={
            "channels": list(levels),
            "loads": list(loads),
            "audio_s_per_channel": duration_s,
            "torch_threads": args.threads,
            "asr": "AsrSettings() defaults",
            "dense_pause_s": DENSE_PAUSE_S,
        },
        results=results,
        markdown=report,
        figures={"": plot(results)},
        notes=[
            "CPU seconds are the process's (every thread), so a stage's figure includes "
            "torch's intra-op threads; the stages add up to the run's total.",
            SHARED_MACHINE_NOTE,
        ],
        started_s=started,
        out=args.out,
    )
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
