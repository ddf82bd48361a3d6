"""``streamscribe simulate --audio-dir DIR``: a load generator of concurrent calls.

Plays ``pipeline.producer.loadgen.LoadSchedule`` against an ``AudioPublisher``: calls built from
the wav/flac files under DIR (8/16 kHz, mono or stereo; others are skipped), real-time paced
unless ``--no-realtime``, with seeded bad records mixed in (``--bad-rate``). Prints a progress
line to stderr about once a second and a summary at the end (JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import secrets
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pipeline.cli.options import add_env_option, settings_from_args, sigterm_as_interrupt
from pipeline.cli.publish import add_common_publish_options, load_frames
from pipeline.contracts import AudioChunk, Encoding
from pipeline.errors import ConfigError, PublishError, StreamscribeError
from pipeline.producer import AudioPublisher, CallStream
from pipeline.producer.chunking import encode_samples, split_frames
from pipeline.producer.loadgen import (
    Arrival,
    LoadSchedule,
    LoadSpec,
    SourceShape,
    Tick,
    make_bad_record,
)
from pipeline.producer.pacing import Pacer

__all__ = ["register"]

AUDIO_SUFFIXES = (".wav", ".flac")
PROGRESS_INTERVAL_S = 1.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate", help="load generator: concurrent calls from a folder of audio files"
    )
    add_env_option(
        parser,
        "--audio-dir",
        env="STREAMSCRIBE_SIM_AUDIO_DIR",
        help="folder searched (recursively) for .wav / .flac files",
        type=Path,
        metavar="DIR",
    )
    add_env_option(
        parser,
        "--calls",
        env="STREAMSCRIBE_SIM_CALLS",
        help="calls active at once, at most",
        type=int,
        default=4,
        metavar="N",
    )
    add_env_option(
        parser,
        "--arrival-rate",
        env="STREAMSCRIBE_SIM_ARRIVAL_RATE",
        help="new calls per second (default: none, a new call as soon as one ends)",
        type=float,
        metavar="PER_S",
    )
    add_env_option(
        parser,
        "--arrival",
        env="STREAMSCRIBE_SIM_ARRIVAL",
        help="arrival process of --arrival-rate",
        choices=[arrival.value for arrival in Arrival],
        default=Arrival.POISSON.value,
    )
    add_env_option(
        parser,
        "--duration-s",
        env="STREAMSCRIBE_SIM_DURATION_S",
        help="simulated seconds; calls still running then are ended",
        type=float,
        default=60.0,
        metavar="S",
    )
    add_env_option(
        parser,
        "--no-realtime",
        env="STREAMSCRIBE_SIM_NO_REALTIME",
        help="send as fast as possible instead of at the audio's pace",
        action="store_true",
    )
    add_env_option(
        parser,
        "--bad-rate",
        env="STREAMSCRIBE_SIM_BAD_RATE",
        help="chance, per good record, of injecting one bad record beside it",
        type=float,
        default=0.0,
        metavar="X",
    )
    add_env_option(
        parser,
        "--seed",
        env="STREAMSCRIBE_SIM_SEED",
        help="seed of arrivals, file choice and bad records",
        type=int,
        default=0,
    )
    add_env_option(
        parser,
        "--call-prefix",
        env="STREAMSCRIBE_SIM_CALL_PREFIX",
        help="call ids are PREFIX-00000, PREFIX-00001, … (default: sim-<random hex>)",
        metavar="PREFIX",
    )
    add_common_publish_options(parser)
    add_env_option(
        parser,
        "--json",
        env="STREAMSCRIBE_SIM_JSON",
        help="print the summary as JSON",
        action="store_true",
    )
    parser.set_defaults(handler=_simulate)


@dataclass(frozen=True, slots=True, eq=False)
class _Source:
    """A loaded audio file: one contiguous int16 array per channel."""

    path: Path
    sample_rate_hz: int
    channels: tuple[str, ...]
    columns: tuple[npt.NDArray[np.int16], ...]

    @property
    def shape(self) -> SourceShape:
        return SourceShape(self.sample_rate_hz, len(self.columns[0]), self.channels)


def _load_sources(directory: Path | None) -> list[_Source]:
    if directory is None:
        raise ConfigError("--audio-dir is required (or STREAMSCRIBE_SIM_AUDIO_DIR)")
    if not directory.is_dir():
        raise ConfigError(f"--audio-dir {directory} is not a folder")
    sources = []
    for path in sorted(p for p in directory.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES):
        try:
            sample_rate_hz, channels, frames = load_frames(path)
        except ConfigError as error:
            print(f"simulate: skipping {error}", file=sys.stderr)
            continue
        if not len(frames):
            print(f"simulate: skipping {path}: no audio", file=sys.stderr)
            continue
        columns = split_frames(frames, len(channels))
        sources.append(_Source(path, sample_rate_hz, channels, tuple(columns)))
    if not sources:
        raise ConfigError(f"no usable .wav / .flac files (8/16 kHz, mono/stereo) in {directory}")
    return sources


class _Run:
    """Plays ticks against a publisher and counts what it sent."""

    def __init__(
        self,
        publisher: AudioPublisher,
        sources: list[_Source],
        spec: LoadSpec,
        call_prefix: str,
        tenant: str | None,
        max_chunk_bytes: int,
    ) -> None:
        self.publisher = publisher
        self.max_chunk_bytes = max_chunk_bytes
        self.tenant = tenant
        self.sources = sources
        self.spec = spec
        self.call_prefix = call_prefix
        self.streams: dict[int, tuple[CallStream, _Source]] = {}
        self.calls_started = 0
        self.calls_completed = 0
        self.calls_truncated = 0
        self.good_records = 0
        self.audio_ms = 0.0
        self.payload_bytes = 0
        self.bad_by_reason: Counter[str] = Counter()
        self.bad_failures: list[str] = []

    def play(self, tick: Tick, capture_ms: int | None = None) -> None:
        """Sends ``tick``; ``capture_ms`` (epoch ms of the tick's first sample) stamps the calls
        starting in it (None: the clock's time when sent, as with ``--no-realtime``)."""
        for start in tick.starts:
            source = self.sources[start.source_index]
            stream = self.publisher.open_call(
                f"{self.call_prefix}-{start.call_index:05d}",
                tenant=self.tenant,
                channels=source.channels,
                sample_rate_hz=source.sample_rate_hz,
                encoding=self.spec.encoding,
                chunk_ms=self.spec.chunk_ms,
            )
            self.streams[start.call_index] = (stream, source)
            self.calls_started += 1
        started = {start.call_index for start in tick.starts}
        for piece in tick.slices:
            stream, source = self.streams[piece.call_index]
            first_capture_ms = capture_ms if piece.call_index in started else None
            for label, column in zip(source.channels, source.columns, strict=True):
                samples = column[piece.start_sample : piece.end_sample]
                self.good_records += stream.push(label, samples, first_capture_ms)
        slices = {piece.call_index: piece for piece in tick.slices}
        for injection in tick.bad:
            stream, source = self.streams[injection.call_index]
            piece = slices[injection.call_index]
            column = source.columns[source.channels.index(injection.channel)]
            template = AudioChunk(
                stream.call_id,
                injection.channel,
                stream.next_seq(injection.channel),
                stream.sample_rate_hz,
                stream.encoding,
                memoryview(
                    encode_samples(column[piece.start_sample : piece.end_sample], stream.encoding)
                ),
                tenant=stream.tenant,
            )
            record = make_bad_record(
                injection.reason, template, max_payload_bytes=self.max_chunk_bytes
            )
            self.publisher.transport.send(
                self.publisher.topic,
                record.key,
                record.value,
                record.headers,
                self._bad_delivery_report(f"bad record ({record.reason}) of {stream.call_id}"),
            )
            self.bad_by_reason[str(record.reason)] += 1
        for call_index in tick.completed:
            self._end(call_index)
            self.calls_completed += 1
        for call_index in tick.truncated:
            self._end(call_index)
            self.calls_truncated += 1

    def end_open_calls(self) -> None:
        """Send end-of-stream on every call still open (a run cut short): best effort, the
        first error is left to the caller's own."""
        for call_index in list(self.streams):
            stream, _ = self.streams.pop(call_index)
            with contextlib.suppress(StreamscribeError):
                stream.end()

    def _end(self, call_index: int) -> None:
        stream, _ = self.streams.pop(call_index)
        self.good_records += stream.end()
        summary = stream.summary()
        self.audio_ms += sum(stats.audio_ms for stats in summary.channels)
        self.payload_bytes += summary.payload_bytes

    def _bad_delivery_report(self, what: str) -> Callable[[str | None, int], None]:
        def report(error: str | None, partition: int) -> None:
            if error is not None:
                self.bad_failures.append(f"{what}: {error}")

        return report

    @property
    def bad_records(self) -> int:
        return sum(self.bad_by_reason.values())


def _simulate(args: argparse.Namespace) -> int:
    with sigterm_as_interrupt():
        return _simulate_load(args)


def _simulate_load(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    sources = _load_sources(args.audio_dir)
    if not 0 < args.duration_s < math.inf:
        raise ConfigError(f"--duration-s must be a positive number, got {args.duration_s}")
    spec = LoadSpec(
        max_calls=args.calls,
        duration_ms=round(args.duration_s * 1000),
        chunk_ms=settings.publisher.chunk_ms if args.chunk_ms is None else args.chunk_ms,
        arrival_rate_per_s=args.arrival_rate,
        arrival=Arrival(args.arrival),
        bad_rate=args.bad_rate,
        encoding=Encoding(args.encoding),
        seed=args.seed,
    )
    schedule = LoadSchedule(spec, [source.shape for source in sources])
    realtime = not args.no_realtime
    pacer = Pacer() if realtime else None
    started_s = time.monotonic()
    with AudioPublisher.connect(settings) as publisher:
        capture_start_ms: int | None = None
        if pacer is not None:
            pacer.wait_until(0)  # the simulated capture starts now
            capture_start_ms = publisher.clock.now_ms()
        prefix = args.call_prefix or f"sim-{secrets.token_hex(4)}"
        run = _Run(publisher, sources, spec, prefix, args.tenant, settings.worker.max_chunk_bytes)
        last_report_s = started_s
        last_records = 0
        try:
            for tick in schedule:
                if pacer is not None:  # a live source hands a chunk over once it has been spoken
                    pacer.wait_until(tick.at_ms + spec.chunk_ms)
                run.play(tick, None if capture_start_ms is None else capture_start_ms + tick.at_ms)
                now_s = time.monotonic()
                if now_s - last_report_s >= PROGRESS_INTERVAL_S:
                    records = run.good_records + run.bad_records
                    rate = (records - last_records) / (now_s - last_report_s)
                    print(
                        f"simulate: {tick.at_ms / 1000:7.1f}/{spec.duration_ms / 1000:.1f} s | "
                        f"calls active {len(run.streams)} done "
                        f"{run.calls_completed + run.calls_truncated} | {rate:,.0f} chunks/s | "
                        f"bad {run.bad_records}",
                        file=sys.stderr,
                        flush=True,
                    )
                    last_report_s, last_records = now_s, records
        finally:
            run.end_open_calls()  # an error or Ctrl-C must not leave the workers waiting
    if run.bad_failures:
        raise PublishError(
            f"{len(run.bad_failures)} bad record(s) not delivered: {run.bad_failures[0]}",
            tuple(run.bad_failures),
        )
    wall_s = time.monotonic() - started_s
    summary = {
        "topic": publisher.topic,
        "seed": spec.seed,
        "realtime": realtime,
        "simulated_s": spec.duration_ms / 1000,
        "wall_s": round(wall_s, 3),
        "files": len(sources),
        "calls_started": run.calls_started,
        "calls_completed": run.calls_completed,
        "calls_truncated": run.calls_truncated,
        "calls_not_started": schedule.calls_not_started,
        "good_records": run.good_records,
        "audio_s": round(run.audio_ms / 1000, 3),
        "payload_bytes": run.payload_bytes,
        "bad_records": run.bad_records,
        "bad_by_reason": dict(sorted(run.bad_by_reason.items())),
        "records_per_s": round((run.good_records + run.bad_records) / max(wall_s, 1e-9), 1),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for name, value in summary.items():
            if isinstance(value, dict):
                value = ", ".join(f"{key}={count}" for key, count in value.items()) or "-"
            print(f"{name:<18} {value}")
    return 0
