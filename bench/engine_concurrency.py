"""N concurrent real-time channels through one StreamingEngine: latency, CPU and memory.

    .venv/bin/python -m bench.engine_concurrency [--quick] [--channels 1 4 16]

One process, one engine (``build_engine``, the worker's defaults; CPU, or CUDA in float16 with
``--device cuda``), no Kafka. A feeder loop
delivers every channel's audio in 20 ms chunks on wall-clock time, the way a live call
arrives: chunk ``k`` of a channel is handed to ``engine.accept`` once its last sample has been
"captured" (at ``start + (k + 1) × 20 ms``), stamped with the wall time of its first sample,
and ``engine.step`` runs after every delivery round, as the worker's loop does (at most
``max_step_jobs`` decodes per step). While a step runs, chunks queue up exactly as records
would queue in Kafka, so the latencies include that wait. Channels are the fixture call
channels (cycled for large N), each starting at a random offset within the first 2 s.

- chunk→view (``bench.common.chunk_to_view_ms``): for every 20 ms chunk of every utterance's
  audio (its gated speech start to its end), the time from the chunk's capture end until the
  first partial or final of its utterance that covers it is emitted. Every chunk of an utterance
  shown counts: an utterance that got no partial counts all its chunks at its final, a gap
  between partials counts every chunk that waited in it; one never shown is not counted (it
  costs WER). The live-view target is judged on this.
- chunk→partial over emitted partials only: ``partial.emit_ms − partial.capture_ms`` for each
  partial that came (the newest audio it covers); blind to chunks no partial showed, kept
  beside the above for comparison with earlier runs.
- endpoint→final: ``final.latency_ms`` = emit time − capture time of the audio that decided
  the endpoint (800 ms of trailing silence).
- CPU: this process's CPU seconds per wall second (``psutil``) and the machine's CPU use.
- memory: RSS growth over the warmed-up baseline (after a full batch of speech windows)
  divided by open sessions, and the engine's own audio buffers (``Session.buffer`` bytes).
  The baseline is read after a garbage collection and ``malloc_trim``, before the channels'
  clock starts; during the run RSS is read as it is once a second (a plain read: a collection
  and trim take ~0.1 s, which inside the live loop would delay chunks and steps), so it also
  holds heap the allocator kept after frees. The overhead of a session = (growth − buffered
  audio) / sessions: an upper bound, since the growth also holds the decoder's working memory
  and that kept heap; how much stays once every session has closed (read after a collection
  and trim) is shown beside it. A separate run opens many quiet sessions at once, collecting
  before each reading, to measure the per-session state without decoding noise.

Reading the committed results (bench/results/engine_concurrency.md and, with
``--quantization int8``, engine_concurrency_int8.md; 2 torch threads on the shared 2-core
machine): at 16 live channels P95 chunk → view 2.68 s (target 1 s not met; 1.5–2.9 s over the
last two days' runs to 2026-11-30 on this shared machine: under load partials get rarer and the
reader waits between them), endpoint → final 0.37 s (finals decoded ahead, in the trailing
silence); 8 channels: 1.04 s / 0.21 s. Memory per open session beyond its audio: 0.06 MiB (1000
quiet sessions); with 16 live channels at most 8.1 MiB (an upper bound: RSS growth read without
collecting or trimming in the live loop, so it includes decoder working memory and heap the
allocator kept).

int8 weights (``STREAMSCRIBE_QUANTIZATION=int8``, opt-in): 16 channels P95 chunk → view 1.46 s,
endpoint → final 0.23 s (over four pairs of runs 1.44–2.35 s against float32's 1.81–2.92 s);
32 channels 3.2 s / 0.56 s against 5.3 s / 1.29 s; the recognizer 1.55–1.81× faster
(bench/results/engine_rtf.md); WER 4.7 % against 4.1 % on the fixtures
(bench/results/engine_wer.md). docs/decisions/ has the step budget, early finals and int8.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from bench.common import (
    SHARED_MACHINE_NOTE,
    CpuMeter,
    FixtureClip,
    Target,
    ViewUpdate,
    add_device_option,
    bench_parser,
    call_clips,
    chunk_to_view_ms,
    fmt,
    markdown_table,
    new_figure,
    percentiles,
    plain_log_axis,
    plot_latency_percentiles,
    release_memory,
    result_name,
    rss_bytes,
    write_results,
)
from pipeline.asr.engine import SessionEnded, StreamingEngine
from pipeline.asr.factory import engine_config, whisper_settings
from pipeline.asr.recognizer import RecognitionRequest
from pipeline.asr.session import SessionKey
from pipeline.asr.vad import SileroVad
from pipeline.asr.whisper_recognizer import WhisperRecognizer
from pipeline.contracts.messages import Final, Partial
from pipeline.settings import AsrSettings, WorkerSettings

NAME = "engine_concurrency"
CHUNK_MS = 20
START_SPREAD_S = 2.0
QUICK_CHANNELS = (1, 4, 16)
FULL_CHANNELS = (1, 4, 8, 16, 32)
TARGET_CHANNELS = 16
TARGET_VIEW_P95_S = 1.0
TARGET_FINAL_P95_S = 0.5
TARGET_SESSION_OVERHEAD_MB = 2.0
MEMORY_SAMPLE_EVERY_S = 1.0
DRAIN_TIMEOUT_S = 120.0
"""How long a level may take, after its last chunk, to end every session (then it is reported
as not drained and its open sessions are dropped)."""


@dataclass(frozen=True, slots=True)
class PlannedChannel:
    """One live channel of a level: its audio and when its first sample is captured."""

    stream_id: str  # the call id of its session
    channel: str  # the session's channel label
    samples: npt.NDArray[np.float32]
    sample_rate_hz: int
    start_s: float  # monotonic time its first sample is captured

    @property
    def chunk_samples(self) -> int:
        return self.sample_rate_hz * CHUNK_MS // 1000

    @property
    def chunks(self) -> int:
        return -(-len(self.samples) // self.chunk_samples)

    def due_s(self, chunk: int) -> float:
        """When chunk ``chunk`` is complete (handed over): ``start + (chunk + 1) × 20 ms``."""
        return self.start_s + (chunk + 1) * CHUNK_MS / 1000


def plan_channels(
    channels: int, duration_s: float, seed: int, t0: float, clips: Sequence[FixtureClip]
) -> list[PlannedChannel]:
    """A level's channels: clip ``i mod len(clips)``, cut to ``duration_s``, starting at
    ``t0 + U(0, START_SPREAD_S)`` drawn from ``default_rng(seed)`` (the same plan for every
    system a level is run on)."""
    rng = np.random.default_rng(seed)
    planned = []
    for i in range(channels):
        clip = clips[i % len(clips)]
        planned.append(
            PlannedChannel(
                f"c{channels}-{i}-{clip.clip_id.split(':')[0]}",
                clip.clip_id[-8:],
                clip.samples[: int(duration_s * clip.sample_rate_hz)],
                clip.sample_rate_hz,
                t0 + float(rng.uniform(0, START_SPREAD_S)),
            )
        )
    return planned


def _engine_buffer_bytes(engine: StreamingEngine) -> int:
    return sum(session.buffer.nbytes for session in engine.sessions.values())


def _warm_up(recognizer: WhisperRecognizer, max_batch: int) -> None:
    """Bring the recognizer's working memory near its high-water mark before the RSS baseline:
    full batches of 10 s windows of speech (8 s of call audio each), partials and finals."""
    clips = call_clips(include_8k=False)
    windows = [clips[i % len(clips)].samples[16_000 : 16_000 * 9] for i in range(max_batch)]
    recognizer.recognize([RecognitionRequest(audio) for audio in windows])
    recognizer.recognize([RecognitionRequest(audio, with_word_timings=True) for audio in windows])


def run_level(
    engine: StreamingEngine,
    channels: int,
    duration_s: float,
    seed: int,
    max_step_jobs: int,
    *,
    sample_memory: bool = True,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
    views_out: list[ViewUpdate] | None = None,
    clips: Sequence[FixtureClip] | None = None,
) -> dict[str, Any]:
    """Run ``channels`` live channels of ``duration_s`` through ``engine`` (see the module
    docstring) and return the level's numbers; ``views_out`` gets what every output showed
    (a caller that judges chunk → view against other systems). ``clips``: the channels' audio
    (default: the fixture calls' channels, ``call_clips()``).

    The level ends once every session has ended, or ``drain_timeout_s`` after the last chunk
    was handed over: then ``drained`` is False and the sessions still open are dropped (the
    engine is left with none, ready for the next level).

    ``sample_memory``: read RSS once a second in the loop (plain reads) and collect garbage and
    ``malloc_trim`` before and after the level, outside the channels' time; False does none of
    it (``memory`` is then None), for comparisons with a harness that samples nothing.
    """
    baseline_rss = 0
    if sample_memory:
        release_memory()
        baseline_rss = rss_bytes()
    epoch_offset_s = time.time() - time.monotonic()
    t0 = time.monotonic() + 0.2
    streams = plan_channels(channels, duration_s, seed, t0, clips or call_clips())
    keys = [SessionKey(stream.stream_id, stream.channel) for stream in streams]
    next_chunk = [0] * len(streams)
    anchors_ms = {
        key: round((stream.start_s + epoch_offset_s) * 1000)
        for key, stream in zip(keys, streams, strict=True)
    }
    partial_latency_ms: list[float] = []
    views: list[ViewUpdate] = []
    final_latency_ms: list[float] = []
    lateness_ms: list[float] = []
    step_s: list[float] = []
    memory_samples: list[dict[str, float]] = []
    decode_steps = 0
    partials = finals = 0
    speech_ms = audio_ms = 0
    early_decoded = early_used = 0
    cpu = CpuMeter()
    next_memory_s = t0
    drain_deadline_s: float | None = None
    while True:
        now = time.monotonic()
        for n, stream in enumerate(streams):
            while next_chunk[n] < stream.chunks and stream.due_s(next_chunk[n]) <= now:
                k = next_chunk[n]
                size = stream.chunk_samples
                capture_ms = round((stream.start_s + k * CHUNK_MS / 1000 + epoch_offset_s) * 1000)
                engine.accept(
                    keys[n],
                    stream.samples[k * size : (k + 1) * size],
                    stream.sample_rate_hz,
                    capture_ms=capture_ms,
                    end_of_stream=k == stream.chunks - 1,
                )
                lateness_ms.append(1000 * (now - stream.due_s(k)))
                next_chunk[n] += 1
        started = time.perf_counter()
        report = engine.step(max_jobs=max_step_jobs)
        elapsed = time.perf_counter() - started
        early_decoded += report.early_finals_decoded
        early_used += report.early_finals_used
        outputs = report.outputs
        decoded = False
        for output in outputs:
            if isinstance(output, Partial | Final):
                key = SessionKey(output.call_id, output.channel)
                views.append(view_update(output, anchors_ms[key]))
            if isinstance(output, Partial) and output.capture_ms is not None:
                partial_latency_ms.append(output.emit_ms - output.capture_ms)
                partials += 1
                decoded = True
            elif isinstance(output, Final):
                if output.latency_ms is not None:
                    final_latency_ms.append(output.latency_ms)
                finals += 1
                decoded = True
            elif isinstance(output, SessionEnded):
                speech_ms += output.speech_ms
                audio_ms += output.audio_ms
        if decoded:
            decode_steps += 1
            step_s.append(elapsed)
        now = time.monotonic()
        if sample_memory and now >= next_memory_s and engine.sessions:
            memory_samples.append(
                {
                    "sessions": len(engine.sessions),
                    "rss_growth_bytes": rss_bytes() - baseline_rss,
                    "buffer_bytes": _engine_buffer_bytes(engine),
                }
            )
            next_memory_s = now + MEMORY_SAMPLE_EVERY_S
        pending = [
            s.due_s(next_chunk[n]) for n, s in enumerate(streams) if next_chunk[n] < s.chunks
        ]
        if not pending:
            if not engine.sessions:
                break
            if drain_deadline_s is None:
                drain_deadline_s = now + drain_timeout_s
            elif now >= drain_deadline_s:
                break
        if pending and not decoded:
            time.sleep(max(0.0, min(pending) - time.monotonic()))
    usage = cpu.read()
    undrained = list(engine.sessions)
    for key in undrained:
        engine.drop(key)
    audio_s = sum(len(s.samples) / s.sample_rate_hz for s in streams)
    if views_out is not None:
        views_out.extend(views)
    return {
        "channels": channels,
        "audio_s_per_channel": duration_s,
        "audio_s_total": audio_s,
        "drained": not undrained,
        "undrained_sessions": len(undrained),
        "partials": partials,
        "finals": finals,
        "speech_fraction": speech_ms / audio_ms if audio_ms else None,
        "early_finals": {
            "decoded": early_decoded,
            "used": early_used,
        },
        "chunk_to_view_ms": percentiles(chunk_to_view_ms(views, CHUNK_MS)),
        "partial_latency_emitted_only_ms": percentiles(partial_latency_ms),
        "endpoint_to_final_ms": percentiles(final_latency_ms),
        "feeder_lateness_ms": percentiles(lateness_ms),
        "decode_steps": decode_steps,
        "step_s": percentiles(step_s),
        "busy_fraction": sum(step_s) / usage["wall_s"],
        "cpu": usage,
        "cpu_s_per_audio_s": usage["process_cpu_s"] / audio_s,
        "memory": _memory(memory_samples, channels, baseline_rss) if sample_memory else None,
    }


def view_update(output: Partial | Final, anchor_capture_ms: int) -> ViewUpdate:
    """What ``output`` shows of its utterance, in capture times: ``anchor_capture_ms`` is the
    capture time (epoch ms) of its stream's first sample, and the engine's ``start_ms`` /
    ``end_ms`` are positions on that stream's audio (a partial's end: the newest audio it
    covers; a final's: its utterance's end)."""
    return ViewUpdate(
        f"{output.call_id}/{output.channel}",
        output.utterance_index,
        output.emit_ms,
        anchor_capture_ms + output.start_ms,
        anchor_capture_ms + output.end_ms,
        isinstance(output, Final),
    )


def _memory(
    samples: Sequence[dict[str, float]], channels: int, baseline_rss: int
) -> dict[str, Any]:
    """The level's memory figures from its in-loop samples, and what stays once every session
    has closed (read after a collection and trim: working memory such as recognizer batches and
    allocator pools, not session state; reported beside the growth, not subtracted, since
    growth keeps coming from decoding until the last final and subtracting could go below 0)."""
    release_memory()
    retained = rss_bytes() - baseline_rss
    full = [m for m in samples if m["sessions"] == channels]
    overhead = [(m["rss_growth_bytes"] - m["buffer_bytes"]) / channels for m in full]
    return {
        "baseline_rss_bytes": baseline_rss,
        "retained_after_close_bytes": retained,
        "samples": len(samples),
        "sampling": "plain RSS reads once a second in the loop; collect + malloc_trim only "
        "before the level (baseline) and after it (retained)",
        "rss_growth_per_session_bytes": percentiles(m["rss_growth_bytes"] / channels for m in full),
        "buffer_per_session_bytes": percentiles(m["buffer_bytes"] / channels for m in full),
        "overhead_per_session_bytes": percentiles(overhead),
    }


def quiet_sessions(engine: StreamingEngine, sessions: int, audio_s: float) -> dict[str, Any]:
    """Open ``sessions`` sessions of near-silence (no decoding) and measure RSS per session."""
    release_memory()
    baseline = rss_bytes()
    rng = np.random.default_rng(2)
    chunk = 16_000 * CHUNK_MS // 1000
    for step in range(int(audio_s * 1000 / CHUNK_MS)):
        for i in range(sessions):
            noise = (1e-4 * rng.standard_normal(chunk)).astype(np.float32)
            engine.accept(SessionKey(f"quiet-{i}", "mono"), noise, 16_000, capture_ms=step)
        if step % 5 == 4:
            engine.step()
    engine.step()
    release_memory()
    growth = rss_bytes() - baseline
    buffers = _engine_buffer_bytes(engine)
    for i in range(sessions):
        engine.close(SessionKey(f"quiet-{i}", "mono"))
    while engine.sessions:
        engine.step()
    return {
        "sessions": sessions,
        "audio_s_each": audio_s,
        "rss_growth_per_session_bytes": growth / sessions,
        "buffer_per_session_bytes": buffers / sessions,
        "overhead_per_session_bytes": (growth - buffers) / sessions,
    }


def measure(
    levels: Sequence[int],
    duration_s: float,
    threads: int,
    quiet: int,
    device: str = "cpu",
    max_batch: int | None = None,
    step_budget_ms: int | None = None,
    early_final_ms: int | None = None,
    partial_min_window_ms: int | None = None,
    quantization: str | None = None,
) -> dict[str, Any]:
    settings = AsrSettings(device=device, threads=threads)
    if quantization is not None:
        settings = dataclasses.replace(settings, quantization=quantization)
    if partial_min_window_ms is not None:
        settings = dataclasses.replace(settings, partial_min_window_ms=partial_min_window_ms)
    if early_final_ms is not None:
        settings = dataclasses.replace(settings, early_final_ms=early_final_ms)
    if max_batch is not None:
        settings = dataclasses.replace(settings, max_batch=max_batch)
    if step_budget_ms is not None:
        settings = dataclasses.replace(settings, step_budget_ms=step_budget_ms)
    # What build_engine does, keeping a handle on the recognizer for the warm-up.
    vad = SileroVad(device=device)
    torch.set_num_threads(threads)
    recognizer = WhisperRecognizer(whisper_settings(settings, device))
    engine = StreamingEngine(recognizer, vad, engine_config(settings))
    worker = WorkerSettings()
    _warm_up(recognizer, settings.max_batch)
    results: dict[str, Any] = {"levels": {}}
    for seed, channels in enumerate(levels):
        results["levels"][str(channels)] = run_level(
            engine, channels, duration_s, seed, worker.max_step_jobs
        )
        print(f"{channels} channels: {_summary(results['levels'][str(channels)])}", flush=True)
    results["quiet_sessions"] = quiet_sessions(engine, quiet, 2.0)
    return results


def _summary(level: dict[str, Any]) -> str:
    return (
        f"view p95 {fmt(level['chunk_to_view_ms']['p95'], 0)} ms, "
        f"final p95 {fmt(level['endpoint_to_final_ms']['p95'], 0)} ms, "
        f"cpu {fmt(level['cpu']['process_cores'], 2)} cores, drained {level['drained']}"
    )


def _mb(value: float | None) -> str:
    return fmt(None if value is None else value / 2**20, 2)


def _emitted_only(level: dict[str, Any]) -> str:
    emitted = level["partial_latency_emitted_only_ms"]
    return f"{fmt(emitted['p50'], 0)} / {fmt(emitted['p95'], 0)}"


def _early(level: dict[str, Any]) -> str:
    early = level.get("early_finals")
    return "—" if early is None else f"{early['used']} / {early['decoded']}"


def markdown(
    results: dict[str, Any], threads: int, device: str = "cpu", quantization: str = "none"
) -> str:
    rows = []
    for level in results["levels"].values():
        p, f, mem = level["chunk_to_view_ms"], level["endpoint_to_final_ms"], level["memory"]
        rows.append(
            [
                f"{level['channels']}" + ("" if level.get("drained", True) else " (not drained)"),
                f"{fmt(p['p50'], 0)} / {fmt(p['p95'], 0)} / {fmt(p['p99'], 0)}",
                f"{fmt(f['p50'], 0)} / {fmt(f['p95'], 0)} / {fmt(f['p99'], 0)}",
                _emitted_only(level),
                f"{level['partials']} / {level['finals']}",
                _early(level),
                fmt(level["cpu"]["process_cores"], 2),
                fmt(level["cpu"]["machine_cpu_percent"], 0),
                fmt(level["busy_fraction"], 2),
                _mb(mem["rss_growth_per_session_bytes"]["p50"]),
                _mb(mem["retained_after_close_bytes"]),
                _mb(mem["overhead_per_session_bytes"]["p50"]),
                _mb(mem["buffer_per_session_bytes"]["p50"]),
            ]
        )
    quiet = results["quiet_sessions"]
    return "\n\n".join(
        [
            "## Concurrent real-time channels through one engine (no Kafka)",
            f"Whisper tiny.en + silero VAD on {device.upper()}"
            + ("" if device == "cpu" else " (float16)")
            + (" with int8 weights" if quantization == "int8" and device == "cpu" else "")
            + f", {threads} torch thread(s); latencies in ms "
            "as P50 / P95 / P99; memory in MiB (per session: median of plain RSS reads, one a "
            "second, while all sessions are open, no garbage collection or trim in the loop; "
            "overhead = (RSS growth − buffered audio) / sessions, an upper bound that includes "
            "the decoder's working memory and heap the allocator kept). Chunk→view: for every "
            "20 ms chunk of speech, capture → the first partial or final that shows it "
            "(`bench.common.chunk_to_view_ms`), so rare or missing partials count; beside it "
            "chunk→partial over emitted partials only (blind to chunks no partial showed).",
            markdown_table(
                [
                    "channels",
                    "chunk→view ms",
                    "endpoint→final ms",
                    "chunk→partial ms, emitted partials only (P50 / P95)",
                    "partials / finals",
                    "finals decoded ahead: used / decoded",
                    "CPU cores (process)",
                    "machine CPU %",
                    "engine busy",
                    "RSS growth / session",
                    "retained after close (total)",
                    "overhead / session (upper bound)",
                    "buffered audio / session",
                ],
                rows,
            ),
            f"{quiet['sessions']} quiet sessions open at once ({quiet['audio_s_each']:g} s of "
            f"near-silence each): RSS growth {_mb(quiet['rss_growth_per_session_bytes'])} MiB "
            f"per session, of which buffered audio {_mb(quiet['buffer_per_session_bytes'])} "
            f"MiB; overhead {_mb(quiet['overhead_per_session_bytes'])} MiB per session.",
        ]
    )


def plot(results: dict[str, Any], device: str = "cpu") -> tuple[Any, Any]:
    levels = list(results["levels"].values())
    channels = [level["channels"] for level in levels]
    figure, axes = new_figure(8, 4.5)
    plot_latency_percentiles(
        axes,
        levels,
        channels,
        "chunk→view",
        TARGET_VIEW_P95_S,
        TARGET_FINAL_P95_S,
        partial_metric="chunk_to_view_ms",
    )
    axes.set_xscale("log", base=2)
    plain_log_axis(axes)
    axes.set_xticks(channels, [str(c) for c in channels])
    axes.set_xlabel("concurrent real-time channels")
    axes.set_ylabel("latency, s")
    axes.set_title(f"Engine latency vs concurrent channels (one process, {device.upper()})")
    axes.legend(fontsize=7, ncol=2)

    memory_figure, memory_axes = new_figure(6, 3.5)
    growth = [level["memory"]["rss_growth_per_session_bytes"]["p50"] for level in levels]
    buffers = [level["memory"]["buffer_per_session_bytes"]["p50"] for level in levels]
    memory_axes.plot(
        channels,
        [np.nan if g is None else g / 2**20 for g in growth],
        marker="o",
        label="RSS growth / session",
    )
    memory_axes.plot(
        channels,
        [np.nan if b is None else b / 2**20 for b in buffers],
        marker="o",
        label="buffered audio / session",
    )
    memory_axes.set_xscale("log", base=2)
    memory_axes.set_xticks(channels, [str(c) for c in channels])
    memory_axes.set_xlabel("concurrent channels")
    memory_axes.set_ylabel("MiB per session")
    memory_axes.set_title("Memory per open session")
    memory_axes.legend(fontsize=8)
    return figure, memory_figure


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, (__doc__ or "").splitlines()[0])
    parser.add_argument("--channels", type=int, nargs="+", help="concurrency levels")
    parser.add_argument("--duration-s", type=float, help="audio per channel (s)")
    parser.add_argument("--quiet-sessions", type=int, help="sessions of the memory run")
    parser.add_argument("--max-batch", type=int, help="sessions per forward pass (default 16)")
    parser.add_argument(
        "--step-budget-ms", type=int, help="budget of a step's partial decodes (0 = none)"
    )
    parser.add_argument(
        "--early-final-ms",
        type=int,
        help="decode a final this far into its trailing silence (0 = at the endpoint)",
    )
    parser.add_argument(
        "--partial-min-window-ms",
        type=int,
        help="shortest decoding window of a partial (default: the setting's, 10 s)",
    )
    parser.add_argument(
        "--quantization",
        choices=("none", "int8"),
        help="Whisper weights on the CPU (default: the setting's)",
    )
    add_device_option(parser)
    args = parser.parse_args(argv)
    started = time.monotonic()
    levels = args.channels or (QUICK_CHANNELS if args.quick else FULL_CHANNELS)
    duration_s = args.duration_s or (15.0 if args.quick else 30.0)
    quiet = args.quiet_sessions or (200 if args.quick else 1000)
    results = measure(
        levels,
        duration_s,
        args.threads,
        quiet,
        args.device,
        args.max_batch,
        args.step_budget_ms,
        args.early_final_ms,
        args.partial_min_window_ms,
        args.quantization,
    )
    at_target = results["levels"].get(str(TARGET_CHANNELS))
    quiet_overhead = results["quiet_sessions"]["overhead_per_session_bytes"] / 2**20
    loaded_overhead = None
    if at_target and at_target["memory"]["overhead_per_session_bytes"]["p50"] is not None:
        loaded_overhead = at_target["memory"]["overhead_per_session_bytes"]["p50"] / 2**20
    targets = [
        Target(
            f"{TARGET_CHANNELS} channels: P95 chunk→view (every chunk of the utterances "
            "shown, until a partial or final shows it)",
            None if not at_target else _seconds(at_target["chunk_to_view_ms"]["p95"]),
            TARGET_VIEW_P95_S,
            "s",
        ),
        Target(
            f"{TARGET_CHANNELS} channels: P95 endpoint→final",
            None if not at_target else _seconds(at_target["endpoint_to_final_ms"]["p95"]),
            TARGET_FINAL_P95_S,
            "s",
        ),
        Target(
            "memory per open session beyond its audio (quiet sessions)",
            quiet_overhead,
            TARGET_SESSION_OVERHEAD_MB,
            "MiB",
        ),
        Target(
            f"memory per open session beyond its audio ({TARGET_CHANNELS} live channels, upper "
            "bound)",
            loaded_overhead,
            TARGET_SESSION_OVERHEAD_MB,
            "MiB",
        ),
    ]
    latency_figure, memory_figure = plot(results, args.device)
    int8 = args.quantization == "int8"
    write_results(
        result_name(f"{NAME}_int8" if int8 else NAME, args.device),
        quick=args.quick,
        config={
            "device": args.device,
            "max_batch": args.max_batch or AsrSettings().max_batch,
            "step_budget_ms": AsrSettings().step_budget_ms
            if args.step_budget_ms is None
            else args.step_budget_ms,
            "early_final_ms": AsrSettings().early_final_ms
            if args.early_final_ms is None
            else args.early_final_ms,
            "partial_min_window_ms": AsrSettings().partial_min_window_ms
            if args.partial_min_window_ms is None
            else args.partial_min_window_ms,
            "quantization": args.quantization or AsrSettings().quantization,
            "channels": list(levels),
            "audio_s_per_channel": duration_s,
            "torch_threads": args.threads,
            "chunk_ms": CHUNK_MS,
            "start_spread_s": START_SPREAD_S,
            "max_step_jobs": WorkerSettings().max_step_jobs,
            "asr": "AsrSettings() defaults (hop 500 ms, min window 10 s) but for the values above",
        },
        results=results,
        markdown=markdown(results, args.threads, args.device, args.quantization or "none"),
        targets=targets,
        figures={"": latency_figure, "memory": memory_figure},
        notes=notes(args.device, args.quantization or "none"),
        started_s=started,
        out=args.out,
    )
    print(markdown(results, args.threads, args.device, args.quantization or "none"))
    return 0


def notes(device: str, quantization: str = "none") -> list[str]:
    """The report's notes for a run on ``device``: the comparisons measured on CPU with
    float32 weights only go into that report."""
    common = [
        SHARED_MACHINE_NOTE,
        "RSS growth at small N is dominated by allocator noise (a few MiB spread over "
        "one session); the quiet-session run is the precise per-session figure.",
        "Memory sampling: RSS is read as it is once a second inside the live loop; garbage "
        "collection and malloc_trim (~0.1 s each) run only before a level (its baseline) and "
        "after it (retained after close), outside the channels' time, and before each reading "
        "of the quiet-session run.",
    ]
    if device != "cpu":
        return [
            *common,
            f"Memory is the host process's RSS; the {device.upper()} device's own memory is not "
            "in these figures.",
            "The step-budget and early-final comparisons of the CPU report were measured on "
            f"CPU; they were not repeated on {device.upper()}.",
        ]
    if quantization != "none":
        return [
            *common,
            "The step-budget and early-final comparisons of the float32 report "
            "(engine_concurrency) were measured with float32 weights; they were not repeated "
            f"with {quantization} weights.",
        ]
    return [
        *common,
        "Step budget (`STREAMSCRIBE_STEP_BUDGET_MS`, config above): under load a partial's "
        "latency stays near the budget and finals take turns with partials, so overload "
        "costs fewer updates per session: the partials column, and chunk→view, which counts "
        "every chunk that waited for a rarer partial. Measured "
        "without it (budget 0, 1 thread, same harness): 16 channels P95 chunk→partial "
        "3.41 s and endpoint→final 6.21 s; with 600 ms: 1.59 s and 2.88 s (chunk→partial over "
        "emitted partials only, the metric of that time; not remeasured as chunk→view).",
        "Finals decoded ahead (`STREAMSCRIBE_EARLY_FINAL_MS`, 300 ms into the trailing "
        "silence; the column above counts those published and those decoded): the final "
        "goes out, without a decode, in the step that reaches the endpoint. Measured with "
        "it off (`--early-final-ms 0`, budget 400 ms, same harness, same hour): 16 channels "
        "P95 endpoint→final 1.29 s against 0.55 s with it on.",
    ]


def _seconds(value_ms: float | None) -> float | None:
    return None if value_ms is None else value_ms / 1000


if __name__ == "__main__":
    raise SystemExit(main())
