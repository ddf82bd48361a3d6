"""``streamscribe replay``: recorded audio from ``audio.chunks`` through the engine, again.

Reads a time range (``--from`` / ``--to``: record timestamps) and/or a set of calls (``--calls``)
without touching the production consumer group, runs the engine of the current settings (the
global ``--config`` file and ``STREAMSCRIBE_*`` variables: model, endpoint, VAD…) over it
exactly as the worker would, and writes the finals to a results file (``--output``, stdout by
default) and/or to shadow topics (``--shadow-prefix``). With ``--hotwords`` it decodes with the
hotword lists in Redis, read once at the start. The same range, settings (and hotword lists)
always write the same bytes. A summary goes to stderr. ``docs/replay.md`` shows the
model-upgrade workflow.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pipeline.cli.options import add_env_option, settings_from_args
from pipeline.clock import WallClock
from pipeline.errors import ConfigError
from pipeline.replay.results import ReplayHeader, result_lines
from pipeline.replay.timerange import replay_range
from pipeline.topics import TopicRole, topic_name

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="re-run the recognizer over recorded audio.chunks (a time range and/or calls)",
        description="Re-run the engine of the current settings over a range of audio.chunks, "
        "as the worker would, without touching the production consumer group. Times: epoch ms, "
        "ISO 8601 (UTC unless an offset is given), now, or relative to now written with '=' "
        "(--from=-2h, --to=-15m).",
    )
    add_env_option(
        parser,
        "--from",
        dest="from_time",
        env="STREAMSCRIBE_REPLAY_FROM",
        help="first record timestamp to replay",
        metavar="TIME",
    )
    add_env_option(
        parser,
        "--to",
        dest="to_time",
        env="STREAMSCRIBE_REPLAY_TO",
        help="replay records before this timestamp (default: up to the newest at start)",
        metavar="TIME",
    )
    add_env_option(
        parser,
        "--calls",
        env="STREAMSCRIBE_REPLAY_CALLS",
        help="only these call ids (comma separated); alone: their whole retained audio",
        metavar="ID,ID",
    )
    add_env_option(
        parser,
        "--output",
        env="STREAMSCRIBE_REPLAY_OUTPUT",
        help="results file (JSON lines); stdout when neither this nor --shadow-prefix is given",
        metavar="FILE",
    )
    add_env_option(
        parser,
        "--shadow-prefix",
        env="STREAMSCRIBE_REPLAY_SHADOW_PREFIX",
        help="also write finals and session_ended events to PREFIX + asr.finals / asr.events",
        metavar="PREFIX",
    )
    add_env_option(
        parser,
        "--hotwords",
        env="STREAMSCRIBE_REPLAY_HOTWORDS",
        action="store_true",
        help="decode with the hotword lists in Redis now (read once, recorded in the header); "
        "without it a replay decodes without hotwords",
    )
    add_env_option(
        parser,
        "--step-ms",
        env="STREAMSCRIBE_REPLAY_STEP_MS",
        type=int,
        default=100,
        help="step the engine every this much audio time per partition",
    )
    parser.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
    if not args.output:
        return _run(args, None)
    # Opened now, so that an --output that cannot be written is found before the whole replay.
    output = _ResultsFile(Path(args.output))
    try:
        return _run(args, output)
    finally:
        output.discard()


def _run(args: argparse.Namespace, output: _ResultsFile | None) -> int:
    # The model, torch and the Kafka clients load only for this command.
    from pipeline.asr.engine import BiasSource
    from pipeline.asr.factory import build_engine
    from pipeline.asr.whisper.tokenizer import WhisperTokenizer
    from pipeline.hotwords.registry import read_catalog
    from pipeline.redaction import Redactor, RedactorConfig
    from pipeline.replay.kafka import ChunkSource, ShadowSink
    from pipeline.replay.runner import ReplayOptions, ReplayRunner, StreamClock
    from pipeline.worker.admission import AdmissionLimits

    settings = settings_from_args(args)
    if args.step_ms <= 0:
        raise ConfigError("--step-ms must be positive")
    wanted = replay_range(args.from_time, args.to_time, args.calls, WallClock().now_ms())
    if args.shadow_prefix is not None and not args.shadow_prefix:
        raise ConfigError("--shadow-prefix must not be empty")
    sink = ShadowSink(settings.kafka, args.shadow_prefix) if args.shadow_prefix else None
    source = ChunkSource(
        settings.kafka, topic_name(TopicRole.AUDIO_CHUNKS, settings.kafka.topic_prefix)
    )
    try:
        plan = source.plan(wanted.from_ms, wanted.to_ms)
        # Partials are not part of a replay's output; decoding them would only cost time.
        asr = dataclasses.replace(settings.asr, partials=False)
        clock = StreamClock()
        hotwords: dict[str, Any] | None = None

        def snapshot(tokenizer: WhisperTokenizer) -> BiasSource:
            nonlocal hotwords
            read = read_catalog(settings, tokenizer)
            section = settings.hotwords
            hotwords = {
                "version": read.version,
                "lists": read.lists,
                "key_prefix": section.key_prefix,
                "start_bonus": section.start_bonus,
                "continue_bonus": section.continue_bonus,
            }
            return read.catalog

        loaded = build_engine(asr, clock, biases=snapshot if args.hotwords else None)
        worker = settings.worker
        options = ReplayOptions(
            calls=frozenset(wanted.calls) if wanted.calls else None,
            max_chunk_bytes=worker.max_chunk_bytes,
            limits=AdmissionLimits.of(worker),
            idle_timeout_ms=worker.idle_timeout_ms,
            step_interval_ms=args.step_ms,
        )
        runner = ReplayRunner(
            loaded.engine,
            clock,
            options,
            Redactor(RedactorConfig.from_settings(settings.redaction)),
        )
        started = time.monotonic()
        for span in plan:
            runner.start_partition(span.partition)
            for record in source.read(span):
                runner.feed(record)
            runner.end_partition()
        result = runner.result()
        elapsed_s = time.monotonic() - started
    finally:
        source.close()
    header = ReplayHeader(
        model_id=loaded.model_id,
        device=loaded.device,
        dtype=loaded.dtype,
        asr=dataclasses.asdict(asr),
        options={
            "idle_timeout_ms": options.idle_timeout_ms,
            "max_call_ms": worker.max_call_ms,
            "max_chunk_bytes": options.max_chunk_bytes,
            "max_open_sessions": worker.max_open_sessions,
            "step_interval_ms": options.step_interval_ms,
            "hotwords": hotwords,
        },
        topic=source.topic,
        from_ms=wanted.from_ms,
        to_ms=wanted.to_ms,
        calls=wanted.calls,
        partitions=tuple(plan),
    )
    lines = result_lines(header, result)
    if output is not None:
        output.commit(lines)
    elif sink is None:
        for line in lines:
            sys.stdout.buffer.write(line)
        sys.stdout.flush()
    if sink is not None:
        sink.publish(result.finals, result.streams)
    audio_s = sum(stream.audio_ms for stream in result.streams) / 1000
    invalid = sum(count for _, count in result.invalid)
    print(
        f"replay: {result.records} records from {len(plan)} partition(s), "
        f"{len({s.call_id for s in result.streams})} call(s), {len(result.finals)} finals, "
        f"{invalid} invalid; {audio_s:.1f} s of audio in {elapsed_s:.1f} s "
        f"with {loaded.model_id} on {loaded.device}",
        file=sys.stderr,
    )
    return 0


class _ResultsFile:
    """The ``--output`` file, written whole or not at all through one temporary file beside it.

    Made at once (``.NAME.XXXX`` in the target's folder), so that an ``--output`` that cannot be
    written fails before the replay; ``commit`` writes the lines into it and renames it onto the
    target; ``discard``, which the owner calls whatever happened, removes it unless committed.
    The object owns the temporary file and its descriptor. A replay killed outright (SIGKILL,
    out of memory) leaves that hidden file behind; the target itself is never half-written.
    """

    def __init__(self, path: Path) -> None:
        if path.is_dir():
            raise ConfigError(f"--output {path} is a directory; name a file")
        try:
            handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        except OSError as error:
            raise ConfigError(
                f"--output {path}: cannot write there: {error.strerror or error}"
            ) from None
        self.path = path
        self._temporary = Path(temporary)
        self._stream = os.fdopen(handle, "wb")
        self._committed = False

    def commit(self, lines: Iterable[bytes]) -> None:
        """Write ``lines`` and rename the file onto the target: never a half-written file."""
        try:
            os.fchmod(self._stream.fileno(), 0o644)
            for line in lines:
                self._stream.write(line)
            self._stream.close()
            os.replace(self._temporary, self.path)
        except OSError as error:
            raise ConfigError(f"cannot write {self.path}: {error.strerror or error}") from None
        self._committed = True

    def discard(self) -> None:
        """Close and remove the temporary file, unless ``commit`` renamed it (idempotent)."""
        if self._committed:
            return
        with contextlib.suppress(OSError):  # discarded: what it could not flush is no loss
            self._stream.close()
        self._temporary.unlink(missing_ok=True)
