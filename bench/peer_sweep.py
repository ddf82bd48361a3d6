"""Streamscribe against the per-stream pattern, N real-time channels at once.

    .venv/bin/python -m bench.peer [--quick] [--channels 1 2 4 …] [--systems streamscribe peer]

The systems: **streamscribe** (the default settings: the one the targets judge),
**streamscribe-int8** (the same with ``STREAMSCRIBE_QUANTIZATION=int8``, full sweep only, shown
beside: what the opt-in int8 weights buy in channels and cost in WER on this load), and the peer's
variants **peer** and **peer-1s**.

Both systems get the same live load, with the latency definitions of
``bench/engine_concurrency.py``:

- **streamscribe** runs under that module's own harness, ``engine_concurrency.run_level``: the
  fixture call channels (channel ``i`` plays call channel ``i mod 12``, 8 and 16 kHz), each
  starting at a seeded random offset within 2 s, delivered in 20 ms chunks on wall-clock time
  (chunk ``k`` handed over at ``start + (k + 1) × 20 ms``, stamped with the capture time of its
  first sample), ``engine.step(max_jobs=max_step_jobs)`` after every delivery round, as the
  worker's loop. The engine is ``StreamingEngine`` with the default ``AsrSettings`` (CPU, hop
  500 ms, batches ≤ 16, windows ≥ 10 s) and the benchmarks' torch thread count (``--threads``,
  default 1, see bench/common.py); it only keeps its finals' text for WER (:class:`_Recording`).
- **peer** (bench/peer.py) has one thread per channel, so its chunks come from a feeder thread
  (:func:`run_peer_level`) that builds the same channels with the same seed and hands over the
  same chunks at the same times with the same stamps.

Latencies, computed alike for both systems from what each emits: **chunk → view**
(``bench.common.chunk_to_view_ms``) = for every 20 ms chunk of every utterance's audio (its gated
speech start to its end), the emit time of the first partial or final of that utterance covering the
chunk − the chunk's capture end; every chunk counts, so an utterance without partials and the chunks
waiting between rare partials count in full, and the chunks of an utterance a system never showed
count as never (``judge_chunk_to_view``: per stream, the most chunks any system of the same N
showed, less its own, each at ``NEVER_SHOWN_S``). **chunk → partial over emitted partials only** = a
partial's emit time − the capture time of the newest audio it covers, for the partials that came
(blind to the chunks none showed; kept beside for earlier runs). **endpoint → final** = a final's
emit time − the capture time of the audio that decided its endpoint (800 ms of silence, or the end
of the stream). WER (``pipeline.evaluation``): each channel's finals joined against its reference
(``refs.tsv``; channels play their whole call), summed over the channels of a run.

The sweep runs N = 1, 2, 4, 8, 16, 32 (quick: 1, 4, 8, 16), the systems one after the other
at each N, and stops a system once its P95 chunk → view passes 5 s (or it cannot finish the
channels within 2 minutes of their end). A system **sustains** N channels when its P95
chunk → view is ≤ 1.5 s and every channel finished.

Reading the committed results (bench/results/peer_sweep.md; a shared, noisy 2-core CPU machine,
the README's headline "vs one faster-whisper loop per channel": same weights, same live load,
both on 2 cores): Streamscribe sustains 8 real-time channels at P95 chunk → view ≤ 1.5 s (1.06 s
at 8 with 6 chunks never shown, 2.05 s at 16); the peer sustains 1 at its best of three variants
(500 ms hop: 1.18 s at 1, 1.74 s at 2; one decode at a time on both cores: 1.02 s / 1.57 s; 1 s
hop: none): 8× (8–15× within the grid's resolution). WER on the same audio, pooled over
N = 1–16: 2.42 % against 2.52 % for the peer's lowest-WER variant (1 s hop, which sustains no
channel) and 6.06 % for the 500 ms variant that sustains 1 (one decode at a time: 3.14 % against
our 1.66 % over N = 1–8). With int8 weights Streamscribe also sustains 8 channels: P95
chunk → view 0.81 s at 8 (float32 1.06 s), 2.17 s at 16 (2.05 s), 32 channels 2.99 s / 0.33 s
to a final against 4.41 s / 0.91 s, and it left 88 chunks unshown at 32 against float32's 302;
WER on that audio 2.91 % against 3.24 %.

Each cell is one run; over the four runs before the committed one the peer sustained 0 or 1 and
Streamscribe 8 by the older count that left dropped utterances out, which in the last of them
hid 99 chunks (counted, about 1.55 s at 8: 4 channels).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import engine_concurrency
from bench.common import (
    DEFAULT_TORCH_THREADS,
    SHARED_MACHINE_NOTE,
    CpuMeter,
    FixtureClip,
    Target,
    ViewUpdate,
    bench_parser,
    call_clips,
    chunk_to_view_by_stream_ms,
    fmt,
    markdown_table,
    percentiles,
    write_results,
)
from bench.engine_concurrency import plan_channels
from bench.peer import (
    FinalObservation,
    PackagedSileroVad,
    PartialObservation,
    PeerDecoder,
    PeerSettings,
    PeerSystem,
    VadLike,
)
from pipeline.asr.engine import StepReport, StreamingEngine
from pipeline.asr.factory import engine_config, whisper_settings
from pipeline.asr.session import SessionKey
from pipeline.asr.vad import SileroVad
from pipeline.asr.whisper.quantize import Quantization
from pipeline.asr.whisper_recognizer import WhisperRecognizer
from pipeline.contracts.messages import Final
from pipeline.evaluation import WordErrors, word_errors
from pipeline.settings import AsrSettings, WorkerSettings

NAME = "peer_sweep"
CHUNK_MS = engine_concurrency.CHUNK_MS
START_SPREAD_S = engine_concurrency.START_SPREAD_S
FULL_CHANNELS = (1, 2, 4, 8, 16, 32)
QUICK_CHANNELS = (1, 4, 8, 16)
CHANNEL_AUDIO_S = 31.0  # longer than every fixture call: each channel plays its whole call
SUSTAIN_P95_S = 1.5
SATURATED_P95_S = 5.0
DRAIN_TIMEOUT_S = engine_concurrency.DRAIN_TIMEOUT_S  # both systems get the same
NEVER_SHOWN_S = CHANNEL_AUDIO_S + DRAIN_TIMEOUT_S
"""What a chunk of speech that a system never showed counts in its chunk → view: longer than any
chunk waited that was shown (the whole level), so a percentile that reaches one reads as never."""
TARGET_RATIO = 3.0
PEER_HOPS_MS: dict[str, int | None] = {"peer": None, "peer-1s": 1000, "peer-1x": None}
"""The peer's variants by system name, with their hop: ``peer`` decodes every ``--peer-hop-ms``
(default the engine's 500 ms: the same latency floor), ``peer-1s`` every 1 s (whisper_streaming's
``min-chunk-size``: fewer decodes, steadier agreement, a chunk waits up to 1 s for its first),
``peer-1x`` at the engine's hop with one decode at a time on every core (``PEER_SPLITS``)."""
PEER_SPLITS: dict[str, tuple[int, int]] = {"peer-1x": (os.cpu_count() or 1, 1)}
"""CTranslate2 ``(cpu_threads, num_workers)`` of a variant, instead of the calibrated split (which
is chosen for 4 decodes at once: at 1 or 2 channels it leaves cores idle)."""
OURS: dict[str, Quantization] = {
    "streamscribe": Quantization.NONE,
    "streamscribe-int8": Quantization.INT8,
}
"""Streamscribe's variants by system name. The targets judge ``streamscribe`` (the defaults);
the others are set against it on the same audio."""
QUICK_SYSTEMS = ("streamscribe", *PEER_HOPS_MS)
FULL_SYSTEMS = (*OURS, *PEER_HOPS_MS)
TARGET_WER_POINTS = 0.5
VAD_WARM_UP_FRAMES = 3

Output = PartialObservation | FinalObservation


def wall_ms() -> int:
    """Epoch milliseconds: the clock both systems and both harnesses stamp with."""
    return time.time_ns() // 1_000_000


# -- streamscribe ---------------------------------------------------------------------------------


class _Recording(StreamingEngine):
    """The engine, unchanged, keeping the finals it emits (the harness keeps only counts)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.finals: list[Final] = []

    def step(
        self, max_jobs: int | None = None, *, partials: bool = True, partials_first: bool = False
    ) -> StepReport:
        report = super().step(max_jobs, partials=partials, partials_first=partials_first)
        self.finals.extend(output for output in report.outputs if isinstance(output, Final))
        return report


class Streamscribe:
    """Our engine as ``build_engine`` makes it (CPU, default ``AsrSettings`` but for
    ``quantization``), run by ``engine_concurrency.run_level``."""

    def __init__(self, threads: int, name: str = "streamscribe") -> None:
        self.name = name
        self._settings = AsrSettings(device="cpu", threads=threads, quantization=OURS[name].value)
        self._threads = threads
        vad = SileroVad(device="cpu")
        torch.set_num_threads(threads)  # after silero's load, as build_engine does
        recognizer = WhisperRecognizer(whisper_settings(self._settings, "cpu"))
        self._model_id = recognizer.model_id
        self._dtype = "int8" if OURS[name] is Quantization.INT8 else "float32"
        self.engine = _Recording(recognizer, vad, engine_config(self._settings))
        self._max_step_jobs = WorkerSettings().max_step_jobs

    def describe(self) -> dict[str, Any]:
        config = self.engine.config
        return {
            "engine": "StreamingEngine, AsrSettings defaults, CPU (as build_engine)",
            "model": f"{self._model_id} (torch {self._dtype})",
            "quantization": self._settings.quantization,
            "torch_threads": self._threads,
            "hop_ms": config.hop_ms,
            "min_decode_ms": config.min_decode_ms,
            "max_batch": config.max_batch,
            "min_window_ms": self._settings.min_window_ms,
            "partial_min_window_ms": self._settings.partial_min_window_ms,
            "margin_ms": self._settings.margin_ms,
            "endpoint_silence_ms": self._settings.endpoint_silence_ms,
            "max_step_jobs": self._max_step_jobs,
            "harness": "engine_concurrency.run_level (one loop: deliver due chunks, step), "
            "no memory sampling",
        }

    def warm_up(self, clip: FixtureClip) -> None:
        """Decode a few seconds of ``clip`` as a stream (first calls allocate, pick kernels)."""
        torch.set_num_threads(self._threads)
        self.engine.accept(
            SessionKey("warm-up", "mono"),
            clip.samples[: 4 * clip.sample_rate_hz],
            clip.sample_rate_hz,
            end_of_stream=True,
        )
        while self.engine.sessions:
            self.engine.step()

    def run_level(self, channels: int, seed: int) -> dict[str, Any]:
        torch.set_num_threads(self._threads)
        self.engine.finals.clear()
        views: list[ViewUpdate] = []
        # No memory sampling: the peer's harness samples none, and the figures are not used.
        level = engine_concurrency.run_level(
            self.engine,
            channels,
            CHANNEL_AUDIO_S,
            seed,
            self._max_step_jobs,
            sample_memory=False,
            drain_timeout_s=DRAIN_TIMEOUT_S,
            views_out=views,
        )
        texts: dict[str, list[tuple[int, str]]] = {}
        for final in self.engine.finals:
            texts.setdefault(final.call_id, []).append((final.utterance_index, final.text))
        return {
            "channels": channels,
            # Streams by call id, as the peer's: "call/mono" is the engine's view of one.
            "view_ms_by_stream": {
                stream.partition("/")[0]: latencies
                for stream, latencies in chunk_to_view_by_stream_ms(views, CHUNK_MS).items()
            },
            "partial_latency_emitted_only_s": _ms_to_s(level["partial_latency_emitted_only_ms"]),
            "hop_s": self.engine.config.hop_ms / 1000,
            "endpoint_to_final_s": _ms_to_s(level["endpoint_to_final_ms"]),
            "partials": level["partials"],
            "finals": level["finals"],
            "drained": level["drained"],
            "cpu": level["cpu"],
            "feeder_lateness_ms": level["feeder_lateness_ms"],
            "texts": _joined(texts),
        }


def _ms_to_s(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: (v / 1000 if k != "n" and v is not None else v) for k, v in stats.items()}


def _joined(texts: dict[str, list[tuple[int, str]]]) -> dict[str, str]:
    return {key: " ".join(t for _, t in sorted(items)) for key, items in texts.items()}


# -- the peer -------------------------------------------------------------------------------------


class Peer(PeerSystem):
    """The per-stream pattern with its model and a pool of per-stream VADs (``make_vad``: silero's
    packaged model, one per stream, as the pattern's systems run it) loaded once."""

    name = "peer"
    make_vad: Callable[[], VadLike] = PackagedSileroVad
    vad_description = (
        f"silero-vad {PackagedSileroVad.version()} packaged model (load_silero_vad(), "
        "TorchScript float32), one instance per stream, one frame per call; project speech gate"
    )

    def __init__(self, settings: PeerSettings, name: str = "peer") -> None:
        self.name = name
        self._pool: list[VadLike] = []
        super().__init__(PeerDecoder(settings), self._vad_pool, settings, wall_ms)

    def _vad_pool(self, n: int) -> list[VadLike]:
        """``n`` VADs, each loaded and warmed once: a TorchScript model's first calls compile
        (tens of ms each), which would otherwise land on a live stream's first frames."""
        while len(self._pool) < n:
            vad = self.make_vad()
            state = vad.new_state()
            for _ in range(VAD_WARM_UP_FRAMES):
                vad.speech_probs(np.zeros((1, vad.frame_samples), dtype=np.float32), [state])
            self._pool.append(vad)
        return self._pool[:n]

    def warm_up(self, clip: FixtureClip) -> None:
        from pipeline.audio.resample import to_16k

        torch.set_num_threads(1)
        self._decoder(to_16k(clip.samples, clip.sample_rate_hz)[: 4 * 16_000], "")

    def run_level(self, channels: int, seed: int) -> dict[str, Any]:
        torch.set_num_threads(1)  # what the silero-vad package sets for its users
        return run_peer_level(self, channels, seed)


def run_peer_level(
    peer: PeerSystem,
    channels: int,
    seed: int,
    audio_s: float = CHANNEL_AUDIO_S,
    *,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """``run_level``'s load for a system with a thread per channel: a feeder hands every chunk
    over when due (the same chunks, times and capture stamps), the channels' threads decode.

    The peer is started (its VAD pool sized and loaded, its threads running) before the clock
    of the channels starts, so that start-up is not charged to the first chunks. ``monotonic``
    and ``sleep`` are the feeder's clock (a test's fake one: the hand-over is then checked
    without waiting)."""
    clips = call_clips()
    stream_ids = [c.stream_id for c in plan_channels(channels, audio_s, seed, 0.0, clips)]
    outputs: list[Output] = []
    peer.start(stream_ids, outputs.append)
    epoch_offset_s = time.time() - monotonic()
    t0 = monotonic() + 0.2
    planned = plan_channels(channels, audio_s, seed, t0, clips)
    lateness_ms: list[float] = []
    next_chunk = {c.stream_id: 0 for c in planned}
    cpu = CpuMeter()
    while True:
        now = monotonic()
        for channel in planned:
            k = next_chunk[channel.stream_id]
            while k < channel.chunks and channel.due_s(k) <= now:
                size = channel.chunk_samples
                capture_ms = round((channel.start_s + k * CHUNK_MS / 1000 + epoch_offset_s) * 1000)
                peer.accept(
                    channel.stream_id,
                    channel.samples[k * size : (k + 1) * size],
                    channel.sample_rate_hz,
                    capture_ms,
                    k == channel.chunks - 1,
                )
                lateness_ms.append(1000 * (now - channel.due_s(k)))
                k += 1
            next_chunk[channel.stream_id] = k
        pending = [
            c.due_s(next_chunk[c.stream_id]) for c in planned if next_chunk[c.stream_id] < c.chunks
        ]
        if not pending:
            break
        sleep(max(0.0, min(pending) - monotonic()))
    drained = peer.join(DRAIN_TIMEOUT_S)
    usage = cpu.read()
    partial_s = [
        (o.emit_ms - o.covered_capture_ms) / 1000
        for o in outputs
        if isinstance(o, PartialObservation)
    ]
    finals = [o for o in outputs if isinstance(o, FinalObservation)]
    texts: dict[str, list[tuple[int, str]]] = {}
    for final in finals:
        texts.setdefault(final.stream_id, []).append((final.utterance_index, final.text))
    return {
        "channels": channels,
        "view_ms_by_stream": chunk_to_view_by_stream_ms(peer_view_updates(outputs), CHUNK_MS),
        "partial_latency_emitted_only_s": percentiles(partial_s),
        "hop_s": peer.hop_ms / 1000,
        "endpoint_to_final_s": percentiles(
            (f.emit_ms - f.decided_capture_ms) / 1000 for f in finals
        ),
        "partials": len(partial_s),
        "finals": len(finals),
        "drained": drained,
        "cpu": usage,
        "feeder_lateness_ms": percentiles(lateness_ms),
        "texts": _joined(texts),
    }


def peer_view_updates(outputs: Sequence[Output]) -> list[ViewUpdate]:
    """What the peer's partials and finals show, each in the utterance it carries (the index
    its final has; an utterance whose final was empty and never emitted keeps its own index):
    the same ``ViewUpdate`` the engine's outputs become in ``engine_concurrency.run_level``."""
    return [
        ViewUpdate(
            o.stream_id,
            o.utterance_index,
            o.emit_ms,
            o.speech_start_capture_ms,
            o.covered_capture_ms if isinstance(o, PartialObservation) else o.speech_end_capture_ms,
            isinstance(o, FinalObservation),
        )
        for o in outputs
    ]


def calibrate_peer(
    candidates: Sequence[tuple[int, int]], log: Callable[[str], None] = print
) -> tuple[PeerSettings, dict[str, float]]:
    """Give the peer its best CTranslate2 split: time 8 decodes of 6 s from 4 threads (how the
    pattern loads the model) for each ``(cpu_threads, num_workers)``; the fastest wins."""
    import threading

    from pipeline.audio.resample import to_16k

    clip = call_clips()[0]
    audio = to_16k(clip.samples, clip.sample_rate_hz)[: 6 * 16_000]
    timings: dict[str, float] = {}
    best: tuple[float, PeerSettings] | None = None
    for threads, workers in candidates:
        settings = PeerSettings(cpu_threads=threads, num_workers=workers)
        decoder = PeerDecoder(settings)
        decoder(audio, "")

        def decode_twice(decoder: PeerDecoder = decoder) -> None:
            for _ in range(2):
                decoder(audio, "")

        pool = [threading.Thread(target=decode_twice) for _ in range(4)]
        started = time.monotonic()
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        elapsed = time.monotonic() - started
        timings[f"cpu_threads={threads}, num_workers={workers}"] = round(elapsed, 2)
        log(f"peer calibration: cpu_threads={threads} num_workers={workers}: {elapsed:.2f} s")
        if best is None or elapsed < best[0]:
            best = (elapsed, settings)
        del decoder
    assert best is not None
    return best[1], timings


# -- the sweep ------------------------------------------------------------------------------------


def score(level: dict[str, Any], clips: Sequence[FixtureClip]) -> WordErrors:
    """WER of a run: channel ``i`` (stream id ``c<N>-<i>-…``) against clip ``i mod 12``."""
    total = WordErrors()
    for i in range(level["channels"]):
        clip = clips[i % len(clips)]
        stream_id = f"c{level['channels']}-{i}-{clip.clip_id.split(':')[0]}"
        total = total + word_errors(clip.text, level["texts"].get(stream_id, ""))
    return total


def sweep(
    systems: Sequence[Streamscribe | Peer],
    counts: Sequence[int],
    log: Callable[[str], None] = print,
) -> dict[str, list[dict[str, Any]]]:
    """Every system at every N (the systems one after the other), until a system saturates."""
    clips = call_clips()
    for system in systems:
        system.warm_up(clips[0])
    active = list(systems)
    results: dict[str, list[dict[str, Any]]] = {s.name: [] for s in systems}
    for n in counts:
        ran = [(system, system.run_level(n, seed=n)) for system in list(active)]
        judge_chunk_to_view([level for _, level in ran])
        for system, level in ran:
            errors = score(level, clips)
            p95 = level["chunk_to_view_s"]["p95"]
            level.update(
                wer=errors.wer,
                word_errors={
                    "substitutions": errors.substitutions,
                    "deletions": errors.deletions,
                    "insertions": errors.insertions,
                    "reference_words": errors.reference_words,
                },
                process_cpu_percent_of_machine=100
                * level["cpu"]["process_cores"]
                / (os.cpu_count() or 1),
                machine_cpu_percent=level["cpu"]["machine_cpu_percent"],
                load_average_1m=round(os.getloadavg()[0], 2),
                sustained=is_sustained(level),
            )
            results[system.name].append(level)
            log(
                f"{system.name:>12} N={n:<3} chunk → view P50/P95 "
                f"{fmt(level['chunk_to_view_s']['p50'])}/{fmt(p95)} s, emitted partials P95 "
                f"{fmt(level['partial_latency_emitted_only_s']['p95'])} s, final P95 "
                f"{fmt(level['endpoint_to_final_s']['p95'])} s, WER {fmt(100 * errors.wer, 1)} %, "
                f"{fmt(level['cpu']['process_cores'])} cores, drained {level['drained']}, "
                f"load {level['load_average_1m']}"
            )
            if not level["drained"] or p95 is None or p95 > SATURATED_P95_S:
                active.remove(system)
        if not active:
            break
    return results


def judge_chunk_to_view(levels: Sequence[dict[str, Any]]) -> None:
    """Each level's ``chunk_to_view_s`` from its ``view_ms_by_stream`` (removed), with the chunks
    it never showed: per stream, the most chunks any system of the same N showed of it (the same
    audio) minus its own, each counted as ``NEVER_SHOWN_S`` (``chunks_never_shown`` says how
    many). An utterance a system dropped would otherwise leave its chunks out and flatter it."""
    reference: dict[str, int] = {}
    for level in levels:
        for stream, latencies in level["view_ms_by_stream"].items():
            reference[stream] = max(reference.get(stream, 0), len(latencies))
    for level in levels:
        by_stream: dict[str, list[float]] = level.pop("view_ms_by_stream")
        shown = [latency / 1000 for latencies in by_stream.values() for latency in latencies]
        never = sum(
            max(0, count - len(by_stream.get(stream, ()))) for stream, count in reference.items()
        )
        level["chunks_never_shown"] = never
        level["chunk_to_view_s"] = percentiles([*shown, *([NEVER_SHOWN_S] * never)])


def is_sustained(level: dict[str, Any]) -> bool:
    """Every channel finished and P95 chunk → view ≤ 1.5 s: every chunk of speech, whether a
    partial or only the final showed it, or none (``judge_chunk_to_view``)."""
    p95 = level["chunk_to_view_s"]["p95"]
    return bool(level["drained"] and p95 is not None and p95 <= SUSTAIN_P95_S)


def sustained_channels(levels: Sequence[dict[str, Any]]) -> tuple[int, bool]:
    """Largest N sustained (see ``sweep``), and whether that is only a lower bound (the
    largest N tried still met it)."""
    best = max((level["channels"] for level in levels if level["sustained"]), default=0)
    at_least = bool(levels) and levels[-1]["sustained"] and levels[-1]["channels"] == best
    return best, at_least


def _pooled_wer(
    results: dict[str, list[dict[str, Any]]], other: str, ours: str = "streamscribe"
) -> dict[str, Any]:
    """``ours``'s and ``other``'s WER, each pooled over the N both ran (the same audio): under
    the keys ``streamscribe`` and ``peer`` when ``ours`` is streamscribe (set against a peer),
    else under the two systems' names; ``difference_points`` is ours − other."""
    common = sorted(
        {lv["channels"] for lv in results[ours]} & {lv["channels"] for lv in results[other]}
    )
    keys = ("streamscribe", "peer") if ours == "streamscribe" else (ours, other)
    pooled: dict[str, Any] = {"channels": common}
    for name, key in zip((ours, other), keys, strict=True):
        errors = sum(
            (WordErrors(**lv["word_errors"]) for lv in results[name] if lv["channels"] in common),
            WordErrors(),
        )
        pooled[key] = errors.wer
    pooled["difference_points"] = 100 * (pooled[keys[0]] - pooled[keys[1]])
    return pooled


def summarize(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per system: runs and sustained N; streamscribe against the peer: the ratio and WER pooled
    over the N both ran; each other variant of ours (``variants``): its WER against
    streamscribe's, pooled likewise."""
    summary: dict[str, Any] = {"systems": {}}
    for name, levels in results.items():
        best, at_least = sustained_channels(levels)
        failing = [lv["channels"] for lv in levels if lv["channels"] > best and not lv["sustained"]]
        summary["systems"][name] = {
            "runs": levels,
            "sustained_channels": best,
            "sustained_is_lower_bound": at_least,
            "first_failing_channels": min(failing, default=None),
        }
    peers = [name for name in results if name not in OURS]
    if "streamscribe" in results:
        summary["variants"] = {
            name: {"wer_pooled": _pooled_wer(results, "streamscribe", ours=name)}
            for name in results
            if name in OURS and name != "streamscribe"
        }
    if "streamscribe" in results and peers:
        # The peer at its best on each axis: its capacity is the variant that sustains most
        # channels, its WER the variant with the lowest (a shorter hop buys latency with WER).
        by_peer = {name: _pooled_wer(results, name) for name in peers}
        capacity_peer = max(peers, key=lambda name: summary["systems"][name]["sustained_channels"])
        wer_peer = min(peers, key=lambda name: by_peer[name]["peer"])
        summary["capacity_peer"] = capacity_peer
        ours, peer = summary["systems"]["streamscribe"], summary["systems"][capacity_peer]
        summary["channel_ratio"] = (
            ours["sustained_channels"] / peer["sustained_channels"]
            if peer["sustained_channels"]
            else None
        )
        # The grid only brackets each system's true capacity: between its sustained N and the
        # first failing N minus one. The ratio is bracketed accordingly (None: unbounded).
        peer_max = (
            None if peer["first_failing_channels"] is None else peer["first_failing_channels"] - 1
        )
        ours_max = (
            None if ours["first_failing_channels"] is None else ours["first_failing_channels"] - 1
        )
        summary["channel_ratio_bounds"] = [
            # A peer that sustains no N tried has a capacity below its smallest N (1 channel).
            ours["sustained_channels"] / (peer_max or 1) if peer_max is not None else None,
            ours_max / peer["sustained_channels"]
            if ours_max is not None and peer["sustained_channels"]
            else None,
        ]
        summary["wer_pooled"] = {**by_peer[wer_peer], "peer_variant": wer_peer, "by_peer": by_peer}
    return summary


# -- report ---------------------------------------------------------------------------------------


def _triple(stats: dict[str, Any]) -> str:
    return f"{fmt(stats['p50'])} / {fmt(stats['p95'])} / {fmt(stats['p99'])}"


def markdown(summary: dict[str, Any], config: dict[str, Any]) -> str:
    rows = [
        [
            name,
            level["channels"],
            _triple(level["chunk_to_view_s"]),
            level.get("chunks_never_shown", "—"),
            _triple(level["partial_latency_emitted_only_s"]),
            _triple(level["endpoint_to_final_s"]),
            f"{level['partials']} / {level['finals']}",
            fmt(100 * level["wer"], 1),
            fmt(level["process_cpu_percent_of_machine"], 0),
            fmt(level["machine_cpu_percent"], 0),
            "yes" if level["sustained"] else "no",
        ]
        for name, system in summary["systems"].items()
        for level in system["runs"]
    ]
    parts = [
        "## Against the per-stream pattern (whisper_streaming / WhisperLive), N live channels",
        "Same live load (fixture call channels in 20 ms chunks on wall-clock time), same tiny.en "
        "weights, same latency definitions as the engine concurrency benchmark. Latency in s "
        "(P50 / P95 / P99); WER of the finals in %; CPU = the benchmark process, % of all "
        "cores; machine = every process on the machine (the machine is shared). Chunk → "
        "view = for every 20 ms chunk of speech, its capture → the first partial or final that "
        "shows it (`bench.common.chunk_to_view_ms`): an utterance with no partial counts all its "
        "chunks at its final, the chunks waiting between rare partials count in full, and a "
        "chunk a system never showed (an utterance it dropped: per stream, the most chunks any "
        f"system of that N showed, less its own) counts as {NEVER_SHOWN_S:.0f} s, longer than "
        "the level, so a percentile that reaches one reads as never. "
        "Chunk → partial over emitted partials only = each partial's emit − the capture of the "
        "newest audio it covers (blind to the chunks no partial showed). **Sustained**: P95 "
        "chunk → view ≤ 1.5 s and every channel finished.",
        markdown_table(
            [
                "system",
                "N",
                "chunk → view s",
                "chunks never shown",
                "chunk → partial s, emitted partials only",
                "endpoint → final s",
                "partials / finals",
                "WER %",
                "CPU %",
                "machine %",
                "sustained",
            ],
            rows,
        ),
    ]
    facts = [
        f"{name} {'≥ ' if system['sustained_is_lower_bound'] else ''}{system['sustained_channels']}"
        for name, system in summary["systems"].items()
    ]
    parts.append("Channels sustained: " + ", ".join(facts) + ".")
    if "wer_pooled" in summary:
        pooled = summary["wer_pooled"]
        low, high = summary["channel_ratio_bounds"]
        ratio = (
            f"Ratio against {summary['capacity_peer']} (the peer variant sustaining most "
            f"channels): {fmt(summary['channel_ratio'], 2)}× at the grid's resolution; with each "
            f"system's capacity somewhere between its sustained N and its first failing N − 1, "
            f"the ratio lies between {fmt(low, 2)}× and {fmt(high, 2)}× (— = unbounded)."
            if summary["channel_ratio"] is not None
            else f"Ratio undefined at the grid's resolution: {summary['capacity_peer']} "
            f"sustained none of the channel counts tried, so its capacity is below 1 channel and "
            f"the ratio above {fmt(low, 2)}×."
        )
        parts.append(
            f"{ratio} WER against {pooled['peer_variant']} (the peer variant with the lowest), "
            f"pooled over N = {', '.join(map(str, pooled['channels']))} (the same audio for "
            f"both): streamscribe {fmt(100 * pooled['streamscribe'], 2)} %, "
            f"{pooled['peer_variant']} {fmt(100 * pooled['peer'], 2)} % "
            f"({pooled['difference_points']:+.2f} points)."
        )
    for name, variant in summary.get("variants", {}).items():
        pooled = variant["wer_pooled"]
        parts.append(
            f"{name} beside streamscribe, WER pooled over N = "
            f"{', '.join(map(str, pooled['channels']))} (the same audio): {name} "
            f"{fmt(100 * pooled[name], 2)} %, streamscribe "
            f"{fmt(100 * pooled['streamscribe'], 2)} % "
            f"({pooled['difference_points']:+.2f} points). The targets judge streamscribe, "
            "the defaults."
        )
    settings = [
        f"- {name}: " + "; ".join(f"{key} = {value}" for key, value in described.items())
        for name, described in config["systems"].items()
    ]
    calibration = config.get("peer_calibration_s")
    if isinstance(calibration, dict):
        settings.append(
            "- the peer's CTranslate2 split, calibrated (8 decodes of 6 s from 4 threads): "
            + ", ".join(f"{split}: {seconds} s" for split, seconds in calibration.items())
        )
    parts.append("Settings:\n\n" + "\n".join(settings))
    return "\n\n".join(parts)


def plot(summary: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (latency, cpu) = pyplot.subplots(1, 2, figsize=(11, 4))
    colors = {
        "streamscribe": "tab:blue",
        "streamscribe-int8": "tab:green",
        "peer": "tab:orange",
        "peer-1s": "tab:red",
    }
    ticks: set[int] = set()
    for name, system in summary["systems"].items():
        levels = system["runs"]
        ns = [level["channels"] for level in levels]
        ticks.update(ns)
        color = colors.get(name)
        for metric, style, label in (
            ("chunk_to_view_s", "o-", "chunk → view"),
            ("endpoint_to_final_s", "s--", "endpoint → final"),
        ):
            values = [np.nan if lv[metric]["p95"] is None else lv[metric]["p95"] for lv in levels]
            latency.plot(ns, values, style, color=color, label=f"{name}: {label}")
        cpu.plot(
            ns,
            [lv["process_cpu_percent_of_machine"] for lv in levels],
            "o-",
            color=color,
            label=name,
        )
    latency.axhline(SUSTAIN_P95_S, color="grey", linestyle=":", label="1.5 s")
    for axes in (latency, cpu):
        axes.set_xscale("log", base=2)
        axes.set_xticks(sorted(ticks), [str(t) for t in sorted(ticks)])
        axes.set_xlabel("concurrent real-time channels")
    # Below the plot: with four systems, inside it covers the lines.
    latency.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    cpu.legend(fontsize=8)
    latency.set_yscale("log")
    latency.set_ylabel("P95 latency, s")
    latency.set_title("P95 latency by live channels")
    cpu.set_ylabel("process CPU, % of all cores")
    cpu.set_title("CPU by live channels")
    figure.tight_layout()
    return figure


def targets(summary: dict[str, Any]) -> list[Target]:
    if "wer_pooled" not in summary:
        return []
    return [
        Target(
            "channels sustained (P95 chunk → view ≤ 1.5 s, every channel finished), "
            "streamscribe / the peer variant sustaining most",
            summary["channel_ratio"],
            TARGET_RATIO,
            "×",
            higher_is_better=True,
        ),
        Target(
            "the same ratio's lower bound (capacities bracketed by the grid)",
            summary["channel_ratio_bounds"][0],
            TARGET_RATIO,
            "×",
            higher_is_better=True,
        ),
        Target(
            "WER streamscribe − the peer variant with the lowest (pooled, same audio)",
            summary["wer_pooled"]["difference_points"],
            TARGET_WER_POINTS,
            "points",
        ),
    ]


# -- entry points ---------------------------------------------------------------------------------


def measure(
    quick: bool,
    counts: Sequence[int] | None = None,
    system_names: Sequence[str] | None = None,
    threads: int = DEFAULT_TORCH_THREADS,
    peer_settings: PeerSettings | None = None,
    out: Path | None = None,
    peer_hop_ms: int | None = None,
) -> dict[str, Any]:
    """Run the sweep, write bench/results/peer_sweep.*, return the summary numbers.

    ``peer_hop_ms`` (default: the engine's hop) replaces the peer's published 1 s hop: every chunk
    counts in chunk → view, and a 1 s hop alone makes a chunk wait up to 1 s for its first
    decode, so the peer gets the engine's latency floor rather than a handicap.
    """
    started = time.monotonic()
    counts = tuple(counts or (QUICK_CHANNELS if quick else FULL_CHANNELS))
    system_names = tuple(system_names or (QUICK_SYSTEMS if quick else FULL_SYSTEMS))
    calibration: dict[str, float] = {}
    if peer_settings is None and set(PEER_HOPS_MS) & set(system_names):
        cores = os.cpu_count() or 1
        candidates = sorted({(1, cores), (cores, 1)})
        peer_settings, calibration = calibrate_peer(candidates)
    peer_settings = dataclasses.replace(
        peer_settings or PeerSettings(),
        hop_ms=AsrSettings().hop_ms if peer_hop_ms is None else peer_hop_ms,
    )
    systems: list[Streamscribe | Peer] = []
    for name in system_names:
        if name in OURS:
            systems.append(Streamscribe(threads, name))
        else:
            hop_ms = PEER_HOPS_MS[name] or peer_settings.hop_ms
            variant = dataclasses.replace(peer_settings, hop_ms=hop_ms)
            if name in PEER_SPLITS:
                threads_, workers = PEER_SPLITS[name]
                variant = dataclasses.replace(variant, cpu_threads=threads_, num_workers=workers)
            systems.append(Peer(variant, name))
    summary = summarize(sweep(systems, counts))
    config = {
        "channel_counts": list(counts),
        "channel_audio": "each channel plays one whole fixture call channel (24–30 s)",
        "chunk_ms": CHUNK_MS,
        "start_spread_s": START_SPREAD_S,
        "sustain_p95_s": SUSTAIN_P95_S,
        "stop_when_p95_above_s": SATURATED_P95_S,
        "drain_timeout_s": DRAIN_TIMEOUT_S,
        "systems": {system.name: system.describe() for system in systems},
        "peer_calibration_s": calibration or "not run (split given on the command line)",
    }
    found = targets(summary)
    write_results(
        NAME,
        quick=quick,
        config=config,
        results=summary,
        markdown=markdown(summary, config),
        targets=found,
        figures={"": plot(summary)},
        notes=[
            SHARED_MACHINE_NOTE,
            "The systems ran in one process, one after the other at each N; CPU is that "
            "process's over the run (feeding included).",
            "The peer is our implementation of the published pattern (bench/peer.py), not "
            "whisper_streaming's or WhisperLive's code. Its VAD is silero's own packaged model "
            "(silero-vad's load_silero_vad()), one instance per stream called one frame at a "
            "time, as those systems run it; streamscribe's is the engine's batched SileroVad.",
            "Sustained is judged on chunk → view, which counts every chunk of speech, a chunk "
            "never shown as never (since 2026-11-30 22:20 UTC; before, a dropped utterance was "
            "left out). Sweeps before chunk → view judged P95 chunk → partial over emitted "
            "partials only plus a partial refresh bound, and are not comparable with this one.",
        ],
        started_s=started,
        **({} if out is None else {"out": out}),
    )
    return _numbers(summary, found)


def _numbers(summary: dict[str, Any], found: Sequence[Target]) -> dict[str, Any]:
    return {
        "sustained_channels": {
            name: system["sustained_channels"] for name, system in summary["systems"].items()
        },
        "channel_ratio": summary.get("channel_ratio"),
        "channel_ratio_bounds": summary.get("channel_ratio_bounds"),
        "wer_pooled": summary.get("wer_pooled"),
        "variants": summary.get("variants"),
        "targets": [target.to_dict() for target in found],
    }


def rerender(out: Path) -> dict[str, Any]:
    """Rebuild the summary, markdown and figure from the runs in ``<out>/peer_sweep.json``
    (machine, configuration and measurements kept as they were; whether a run is sustained is
    judged again by ``is_sustained``). ValueError for results without chunk → view (measured
    before it existed: they must be measured again)."""
    path = out / f"{NAME}.json"
    report = json.loads(path.read_text())
    runs = {name: system["runs"] for name, system in report["results"]["systems"].items()}
    for levels in runs.values():
        for level in levels:
            if "chunk_to_view_s" not in level:
                raise ValueError(
                    f"{path} has no chunk_to_view_s (measured before it existed); rerun the sweep"
                )
            level["sustained"] = is_sustained(level)
    summary = summarize(runs)
    found = targets(summary)
    report["results"], report["targets"] = summary, [t.to_dict() for t in found]
    path.write_text(json.dumps(report, indent=2) + "\n")
    plot(summary).savefig(out / f"{NAME}.png", dpi=110, bbox_inches="tight")
    parts = [markdown(summary, report["config"])]
    if found:
        parts.append(markdown_table(["target", "limit", "measured", ""], (t.row() for t in found)))
    parts.append("\n".join(f"- {note}" for note in report["notes"]))
    (out / f"{NAME}.md").write_text("\n\n".join(parts) + "\n")
    return _numbers(summary, found)


def run(quick: bool) -> dict[str, Any]:
    """For ``bench.run``."""
    return measure(quick)


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("peer", (__doc__ or "").splitlines()[0])
    parser.add_argument("--channels", type=int, nargs="+", help="channel counts to run")
    parser.add_argument(
        "--systems",
        nargs="+",
        choices=[*OURS, *PEER_HOPS_MS],
        help=f"which systems to run (default: {' '.join(FULL_SYSTEMS)}; "
        f"quick: {' '.join(QUICK_SYSTEMS)})",
    )
    parser.add_argument(
        "--peer-threads",
        type=int,
        help="the peer's CTranslate2 cpu_threads (default: calibrated with --peer-workers)",
    )
    parser.add_argument("--peer-workers", type=int, help="the peer's CTranslate2 num_workers")
    parser.add_argument(
        "--peer-hop-ms",
        type=int,
        help="audio between the peer's decodes (default: the engine's; the pattern's own: 1000)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild the markdown and figure from the existing results JSON, measure nothing",
    )
    args = parser.parse_args(argv)
    if args.report_only:
        try:
            print(rerender(args.out))
        except ValueError as error:
            print(f"bench.peer_sweep: {error}", file=sys.stderr)
            return 2
        return 0
    summary = measure(
        args.quick,
        args.channels,
        args.systems,
        args.threads,
        None
        if args.peer_threads is None and args.peer_workers is None
        else PeerSettings(cpu_threads=args.peer_threads or 1, num_workers=args.peer_workers or 1),
        args.out,
        args.peer_hop_ms,
    )
    print((args.out / f"{NAME}.md").read_text())
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
