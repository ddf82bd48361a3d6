"""``streamscribe publish FILE --call-id ID``: send an audio file to ``audio.chunks`` as one call.

Mono files go to channel ``mono``; stereo files are split into ``agent`` (left) and
``customer`` (right). WAV, FLAC and whatever else soundfile reads, at 8 or 16 kHz; other rates
are refused (resample first, e.g. ``sox in.wav -r 16000 out.wav``) rather than resampled here,
so what reaches the topic is always the recording's own samples.
"""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pipeline.audio.files import read_call_frames
from pipeline.cli.options import (
    add_env_option,
    not_empty,
    settings_from_args,
    sigterm_as_interrupt,
)
from pipeline.clock import Clock
from pipeline.contracts import Encoding
from pipeline.contracts.audio_chunk import SUPPORTED_SAMPLE_RATES_HZ
from pipeline.errors import ConfigError
from pipeline.producer import AudioPublisher, CallStream, CallSummary
from pipeline.producer.chunking import chunk_samples
from pipeline.producer.pacing import Pacer

__all__ = ["default_call_id", "load_frames", "register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "publish", help="send an audio file (wav/flac, 8/16 kHz) to audio.chunks as one call"
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="mono or stereo audio file")
    add_env_option(
        parser,
        "--call-id",
        env="STREAMSCRIBE_CALL_ID",
        help="call id (record key); default: the file's name and a random suffix, printed. It "
        "must be new: workers drop the chunks of a call id that ended within the last hour "
        "(STREAMSCRIBE_ENDED_RETENTION_MS) as duplicates",
        metavar="ID",
    )
    add_common_publish_options(parser)
    add_env_option(
        parser,
        "--realtime",
        env="STREAMSCRIBE_PUBLISH_REALTIME",
        help="send chunks at the audio's own pace (without it the file goes out at once, its "
        "capture times running ahead of the clock: the workers' latency metrics read 0 for it)",
        action="store_true",
    )
    add_env_option(
        parser,
        "--flush-at-end",
        env="STREAMSCRIBE_PUBLISH_FLUSH_AT_END",
        help="send a flush record (forced final) on every channel before end-of-stream",
        action="store_true",
    )
    parser.set_defaults(handler=_publish)


def add_common_publish_options(parser: argparse.ArgumentParser) -> None:
    """``--tenant``, ``--chunk-ms`` and ``--encoding`` (shared with ``simulate``)."""
    add_env_option(
        parser, "--tenant", env="STREAMSCRIBE_TENANT", help="tenant id (ss-tenant)", metavar="ID"
    )
    add_env_option(
        parser,
        "--chunk-ms",
        env="STREAMSCRIBE_CHUNK_MS",
        help="audio per record, milliseconds",
        type=int,
        metavar="MS",
    )
    add_env_option(
        parser,
        "--encoding",
        env="STREAMSCRIBE_PUBLISH_ENCODING",
        help="payload encoding on the wire (G.711 is encoded here)",
        choices=[encoding.value for encoding in Encoding],
        default=Encoding.PCM_S16LE.value,
    )


def load_frames(path: Path) -> tuple[int, tuple[str, ...], npt.NDArray[np.int16]]:
    """A file's (sample rate, channel labels, int16 frames of shape (n, channels)).

    Raises:
        ConfigError: unreadable, more than two channels, or a rate other than 8 or 16 kHz.
    """

    def check_rate(sample_rate_hz: int) -> None:  # before reading: simulate skips such files
        if sample_rate_hz not in SUPPORTED_SAMPLE_RATES_HZ:
            raise ConfigError(
                f"{path} is {sample_rate_hz} Hz; publish sends 8000 or 16000 Hz "
                f"(resample first, e.g. sox {path.name} -r 16000 out.wav)"
            )

    audio = read_call_frames(path, check_rate)
    return audio.sample_rate_hz, audio.channels, audio.frames


def default_call_id(path: Path) -> str:
    """A new call id for a file: its name (cut to fit the key's limit) and 8 random hex digits,
    so that publishing a file again is a new call, not duplicates of the last one."""
    stem = path.stem.encode()[:96].decode(errors="ignore") or "call"
    return f"{stem}-{secrets.token_hex(4)}"


def _publish(args: argparse.Namespace) -> int:
    with sigterm_as_interrupt():
        return _publish_file(args)


def _publish_file(args: argparse.Namespace) -> int:
    call_id = not_empty(args.call_id, "--call-id", "STREAMSCRIBE_CALL_ID") or default_call_id(
        args.file
    )
    settings = settings_from_args(args)
    sample_rate_hz, channels, frames = load_frames(args.file)
    chunk_ms = settings.publisher.chunk_ms if args.chunk_ms is None else args.chunk_ms
    with (
        AudioPublisher.connect(settings) as publisher,
        publisher.open_call(
            call_id,
            tenant=args.tenant,
            channels=channels,
            sample_rate_hz=sample_rate_hz,
            encoding=args.encoding,
            chunk_ms=chunk_ms,
        ) as call,
    ):
        if args.realtime:
            _push_paced(call, frames, chunk_ms, publisher.clock)
        else:
            call.push_frames(frames)
        if args.flush_at_end:
            call.flush()
    # Leaving the publisher waited for every delivery report: the summary is final.
    _print_summary(call.summary(), args.encoding)
    return 0


def _push_paced(
    call: CallStream, frames: npt.NDArray[np.int16], chunk_ms: int, clock: Clock
) -> None:
    """Sends ``frames`` as a live source would: each chunk once its last sample has been spoken.

    The capture starts when this is called; the first chunk leaves ``chunk_ms`` later, stamped
    with that start (a chunk sent at the start of its own audio would arrive a chunk early and
    flatter every latency measured from capture).
    """
    step = chunk_samples(chunk_ms, call.sample_rate_hz)
    pacer = Pacer()
    pacer.wait_until(0)  # the capture starts now
    capture_ms: int | None = clock.now_ms()
    for start in range(0, len(frames), step):
        end = min(start + step, len(frames))
        pacer.wait_until(end * 1000 / call.sample_rate_hz)
        call.push_frames(frames[start:end], capture_ms)
        capture_ms = None  # later chunks continue the timeline


def _print_summary(summary: CallSummary, encoding: str) -> None:
    partitions = ",".join(str(p) for p in summary.partitions) or "?"
    print(
        f"published call {summary.call_id} to {summary.topic} partition {partitions} "
        f"({encoding}, {summary.delivered_records} records delivered)"
    )
    for stats in summary.channels:
        print(
            f"  {stats.channel:<10} {stats.records:>6} records  {stats.audio_ms / 1000:8.2f} s"
            f"  {stats.payload_bytes:>10} bytes"
        )
    print(f"  {'total':<10} {summary.records:>6} records  {summary.payload_bytes:>22} bytes")
