"""``streamscribe transcribe FILE…``: the engine on audio files, without Kafka.

Each file is one call (its id: the file name without extension); a stereo file is split into
``agent`` (left) and ``customer`` (right). All files advance together, chunk by chunk, so their
sessions share recognizer batches as a worker's would. ``--realtime`` paces the input like a live
call and, as the worker takes every record waiting, feeds all the audio spoken during a long step
before the next one (warning once on stderr when it falls more than ``LAG_WARNING_MS`` behind);
``--json`` prints one JSON object per line with a ``type`` field. The tenant's redaction policy
(``STREAMSCRIBE_REDACTION_POLICY``, docs/redaction.md) applies to everything printed, as it does
to what a worker publishes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from pipeline.audio.files import CallAudio, read_call_audio
from pipeline.cli.options import add_env_option, not_empty, settings_from_args
from pipeline.clock import WallClock
from pipeline.contracts.audio_chunk import SUPPORTED_SAMPLE_RATES_HZ
from pipeline.contracts.messages import Final, Partial, to_dict
from pipeline.errors import ConfigError
from pipeline.producer.pacing import Pacer
from pipeline.text import format_span_ms

if TYPE_CHECKING:
    from pipeline.asr.engine import EngineOutput

__all__ = ["register"]

LAG_WARNING_MS = 2000
"""Behind the audio by more than this, ``--realtime`` warns once that it cannot keep up."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "transcribe", help="transcribe audio files with the streaming engine (no Kafka)"
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="WAV or FLAC files")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument(
        "--realtime", action="store_true", help="pace the input as a live call would"
    )
    add_env_option(
        parser,
        "--chunk-ms",
        env="STREAMSCRIBE_TRANSCRIBE_CHUNK_MS",
        type=int,
        default=100,
        help="audio fed per chunk",
    )
    parser.add_argument(
        "--no-partials", action="store_true", help="print finals only (partials are not decoded)"
    )
    add_env_option(
        parser,
        "--tenant",
        env="STREAMSCRIBE_TENANT",
        help="tenant whose endpoint rules (STREAMSCRIBE_TENANT_ENDPOINTS) and redaction policy "
        "(STREAMSCRIBE_REDACTION_TENANT_POLICIES) apply, as for a call published with it",
        metavar="ID",
    )
    parser.set_defaults(handler=_transcribe)


def _load(files: list[Path]) -> list[CallAudio]:
    calls = [read_call_audio(path) for path in files]
    for call in calls:
        if call.sample_rate_hz not in SUPPORTED_SAMPLE_RATES_HZ:
            rates = " or ".join(str(rate) for rate in SUPPORTED_SAMPLE_RATES_HZ)
            raise ConfigError(
                f"{call.call_id}: {call.sample_rate_hz} Hz; resample to {rates} Hz first"
            )
    ids = [call.call_id for call in calls]
    if len(set(ids)) != len(ids):
        raise ConfigError("two files share a name: each file is a call named after its file")
    return calls


def _transcribe(args: argparse.Namespace) -> int:
    # torch loads only for commands that need it, so `streamscribe topics …` starts fast.
    from pipeline.asr.factory import build_engine
    from pipeline.asr.session import SessionKey
    from pipeline.redaction import Redactor, RedactorConfig
    from pipeline.redaction.outputs import redact_outputs

    if args.chunk_ms <= 0:
        raise ConfigError(f"--chunk-ms must be positive, got {args.chunk_ms}")
    settings = settings_from_args(args)
    tenant = not_empty(args.tenant, "--tenant", "STREAMSCRIBE_TENANT") or settings.publisher.tenant
    calls = _load(args.files)
    redactor = Redactor(RedactorConfig.from_settings(settings.redaction))
    asr = settings.asr
    if args.no_partials:
        asr = dataclasses.replace(asr, partials=False)
    clock = WallClock()  # emit times, and the capture times of --realtime chunks
    loaded = build_engine(asr, clock)
    engine = loaded.engine
    printer = _Printer(sys.stdout, as_json=args.json)
    started_ms = clock.now_ms()
    pacer = Pacer()
    pacer.wait_until(0)  # the pace starts now
    position_ms = 0
    longest_ms = max(call.duration_ms for call in calls)
    behind = _Lag(sys.stderr)
    while position_ms < longest_ms or position_ms == 0:
        due_ms = position_ms + args.chunk_ms
        if args.realtime:
            # As a worker takes every record waiting in Kafka: once a step ran long, all the
            # audio spoken meanwhile goes in before the next step, so a backlog is worked off.
            pacer.wait_until(due_ms)
            spoken_ms = int(pacer.elapsed_ms()) // args.chunk_ms * args.chunk_ms
            due_ms = max(due_ms, min(spoken_ms, -(-longest_ms // args.chunk_ms) * args.chunk_ms))
        while position_ms < due_ms:
            end_ms = position_ms + args.chunk_ms
            for call in calls:
                rate = call.sample_rate_hz
                first, last = position_ms * rate // 1000, end_ms * rate // 1000
                for channel, samples in call.channels.items():
                    # An empty file is a call that ends at once (one empty end-of-stream chunk
                    # per channel, as publish sends it), so it gets its session_ended like any
                    # other.
                    if first and first >= len(samples):
                        continue
                    engine.accept(
                        SessionKey(call.call_id, channel),
                        samples[first:last],
                        rate,
                        tenant=tenant,
                        capture_ms=started_ms + position_ms if args.realtime else None,
                        end_of_stream=last >= len(samples),
                    )
            position_ms = end_ms
        printer.emit(redact_outputs(redactor, engine.step().outputs, engine.sessions))
        if args.realtime:
            behind.observe(pacer.elapsed_ms() - position_ms)
    while engine.sessions:
        printer.emit(redact_outputs(redactor, engine.step().outputs, engine.sessions))
    printer.emit(redactor.flush_all())
    printer.done()
    return 0


class _Lag:
    """Says once, on stderr, when ``--realtime`` falls behind the audio by more than
    ``LAG_WARNING_MS`` (the machine cannot keep up with these calls live), and how far it got."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.worst_ms = 0.0
        self._warned = False

    def observe(self, lag_ms: float) -> None:
        self.worst_ms = max(self.worst_ms, lag_ms)
        if lag_ms > LAG_WARNING_MS and not self._warned:
            self._warned = True
            self._stream.write(
                f"transcribe: {lag_ms / 1000:.1f} s behind real time: this machine cannot keep "
                "up with these calls live; the audio waiting is taken at the next step\n"
            )


class _Printer:
    """Readable output: partials update one line in place on a terminal; finals stay."""

    def __init__(self, stream: TextIO, *, as_json: bool) -> None:
        self._stream = stream
        self._json = as_json
        self._tty = stream.isatty()
        self._open_line = False

    def emit(self, outputs: Sequence[EngineOutput]) -> None:
        for output in outputs:
            if self._json:
                self._write_json(output)
            else:
                self._write_text(output)
        self._stream.flush()

    def _write_json(self, output: EngineOutput) -> None:
        from pipeline.asr.engine import Suppressed

        record: dict[str, Any]
        if isinstance(output, Partial | Final):
            record = {"type": "partial" if isinstance(output, Partial) else "final"}
            record.update(to_dict(output))
        elif isinstance(output, Suppressed):
            record = {
                "type": "suppressed",
                "call_id": output.key.call_id,
                "channel": output.key.channel,
                "utterance_index": output.utterance_index,
                "guard": output.guard.value,
                "text": output.text,
                "final": output.final,
            }
        else:
            record = {
                "type": "session_ended",
                "call_id": output.key.call_id,
                "channel": output.key.channel,
                "audio_ms": output.audio_ms,
                "speech_ms": output.speech_ms,
                "utterances": output.utterances,
                "suppressed": output.suppressed,
            }
        self._stream.write(orjson.dumps(record).decode() + "\n")

    def _write_text(self, output: EngineOutput) -> None:
        from pipeline.asr.engine import SessionEnded, Suppressed

        if isinstance(output, Partial):
            line = (
                f"… {output.call_id} {output.channel:<8} #{output.utterance_index:<3} "
                f"{output.committed_text} \x1b[2m{output.tentative_text}\x1b[0m"
                if self._tty
                else f"… {output.call_id} {output.channel:<8} #{output.utterance_index:<3} "
                f"{output.committed_text} [{output.tentative_text}]"
            )
            if self._tty:
                self._stream.write("\r\x1b[K" + line)
                self._open_line = True
            else:
                self._stream.write(line + "\n")
            return
        if self._open_line:
            self._stream.write("\r\x1b[K")
            self._open_line = False
        if isinstance(output, Final):
            span = f"{format_span_ms(output.start_ms)}–{format_span_ms(output.end_ms)}"
            self._stream.write(
                f"✔ {output.call_id} {output.channel:<8} #{output.utterance_index:<3} {span} "
                f"({output.endpoint_reason.value}) {output.text}\n"
            )
        elif isinstance(output, Suppressed) and output.final:
            self._stream.write(
                f"✘ {output.key.call_id} {output.key.channel:<8} #{output.utterance_index:<3} "
                f"suppressed by {output.guard.value}: {output.text!r}\n"
            )
        elif isinstance(output, SessionEnded):
            self._stream.write(
                f"■ {output.key.call_id} {output.key.channel:<8} ended: "
                f"{output.audio_ms / 1000:.1f} s audio, {output.speech_ms / 1000:.1f} s speech, "
                f"{output.utterances} utterances\n"
            )

    def done(self) -> None:
        if self._open_line:
            self._stream.write("\n")
        self._stream.flush()
