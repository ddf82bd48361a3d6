"""The replay results file (JSON lines) and the reader ``compare`` uses for both of its inputs.

A results file is UTF-8 JSON lines, each an object with a ``type``, in this order::

    {"type": "header", "schema": "replay/1", "model_id": …, "device": …, "dtype": …,
     "asr": {every asr.* setting}, "replay": {admission and stepping options},
     "source": {"topic": …, "from_ms": …, "to_ms": …, "calls": […],
                "partitions": [{"partition": 0, "start_offset": …, "end_offset": …}, …]}}
    {"type": "final", …every field of a final/1 record…}        sorted by call, channel, index
    {"type": "call", "call_id": …, "channels": [{per-channel summary}, …]}   sorted by call id
    {"type": "totals", "records": …, "skipped": …, "invalid": {reason: count}, "finals": …,
     "calls": …}

Keys are sorted and nothing depends on the wall clock, so replaying the same records with the same
settings writes the same bytes. ``load_run`` also reads plain dumps of ``asr.finals`` (one
``final/1`` object per line, with or without a ``type``; e.g. ``streamscribe tail --json``), so
production finals can be compared with a replay; lines of other types are ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.contracts.messages import FINAL_SCHEMA, Final, to_dict
from pipeline.contracts.reading import RecordRejectedError, parse_final
from pipeline.errors import ConfigError

if TYPE_CHECKING:
    from pipeline.replay.runner import ReplayResult, StreamSummary

__all__ = [
    "RESULTS_SCHEMA",
    "PartitionRange",
    "ReplayHeader",
    "Run",
    "load_run",
    "result_lines",
]

RESULTS_SCHEMA = "replay/1"


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets ``[start_offset, end_offset)`` of one partition of the source topic."""

    partition: int
    start_offset: int
    end_offset: int

    @property
    def records(self) -> int:
        return max(0, self.end_offset - self.start_offset)


@dataclass(frozen=True, slots=True)
class ReplayHeader:
    """What was replayed and with which model and settings (the results file's first line)."""

    model_id: str
    device: str
    dtype: str
    asr: Mapping[str, Any]
    options: Mapping[str, Any]
    topic: str
    from_ms: int | None
    to_ms: int | None
    calls: tuple[str, ...]
    partitions: tuple[PartitionRange, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "header",
            "schema": RESULTS_SCHEMA,
            "model_id": self.model_id,
            "device": self.device,
            "dtype": self.dtype,
            "asr": dict(self.asr),
            "replay": dict(self.options),
            "source": {
                "topic": self.topic,
                "from_ms": self.from_ms,
                "to_ms": self.to_ms,
                "calls": list(self.calls),
                "partitions": [dataclasses.asdict(p) for p in self.partitions],
            },
        }


def _line(data: Mapping[str, Any]) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS) + b"\n"


def _channel(stream: StreamSummary) -> dict[str, Any]:
    data = dataclasses.asdict(stream)
    del data["call_id"]
    data["rejected"] = dict(stream.rejected)
    data["ended_by"] = None if stream.ended_by is None else stream.ended_by.value
    return data


def result_lines(header: ReplayHeader, result: ReplayResult) -> Iterator[bytes]:
    """The results file, line by line (each line ends with a newline)."""
    yield _line(header.to_dict())
    for final in result.finals:
        yield _line({"type": "final", **to_dict(final)})
    calls: dict[str, list[StreamSummary]] = {}
    for stream in result.streams:
        calls.setdefault(stream.call_id, []).append(stream)
    for call_id, streams in sorted(calls.items()):
        yield _line(
            {"type": "call", "call_id": call_id, "channels": [_channel(s) for s in streams]}
        )
    yield _line(
        {
            "type": "totals",
            "records": result.records,
            "skipped": result.skipped,
            "invalid": dict(result.invalid),
            "finals": len(result.finals),
            "calls": len(calls),
        }
    )


@dataclass(frozen=True, slots=True)
class Run:
    """One input of ``compare``: its finals, and the header and streams when it is a replay.

    ``streams``: every (call, channel) the run covered, including those without any final.
    """

    label: str
    header: Mapping[str, Any] | None
    finals: tuple[Final, ...]
    streams: tuple[tuple[str, str], ...]

    @property
    def model_id(self) -> str | None:
        if self.header is not None:
            return str(self.header.get("model_id"))
        models = sorted({final.model_id for final in self.finals})
        return ", ".join(models) if models else None


def _parse_lines(label: str, lines: Sequence[bytes]) -> Run:
    header: Mapping[str, Any] | None = None
    finals: dict[str, Final] = {}
    streams: set[tuple[str, str]] = set()
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            raise ConfigError(f"{label}:{number}: not JSON ({error})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{label}:{number}: not a JSON object")
        kind = data.get("type")
        if kind == "header":
            if data.get("schema") != RESULTS_SCHEMA:
                raise ConfigError(
                    f"{label}:{number}: results schema {data.get('schema')!r}, "
                    f"this version reads {RESULTS_SCHEMA!r}"
                )
            header = data
        elif kind == "call":
            channels = data.get("channels")
            if not isinstance(channels, list) or not all(isinstance(c, dict) for c in channels):
                raise ConfigError(f"{label}:{number}: a call line whose channels are not objects")
            for channel in channels:
                streams.add((str(data.get("call_id")), str(channel.get("channel"))))
        elif kind == "final" or (kind is None and str(data.get("schema")).startswith("final/")):
            if data.get("schema") != FINAL_SCHEMA:
                # Skipped, a run's finals would count as all deleted and flatter the other run.
                raise ConfigError(
                    f"{label}:{number}: final schema {data.get('schema')!r}, "
                    f"this version reads {FINAL_SCHEMA!r}"
                )
            try:
                final = parse_final(raw)
            except RecordRejectedError as error:
                raise ConfigError(f"{label}:{number}: not a usable final: {error}") from None
            # A dump of asr.finals may hold one utterance twice (read_uncommitted readers see
            # aborted transactions); the utterance id identifies it, the last one wins.
            finals[final.utterance_id] = final
            streams.add((final.call_id, final.channel))
    ordered = sorted(
        finals.values(), key=lambda f: (f.call_id, f.channel, f.start_ms, f.utterance_index)
    )
    return Run(label, header, tuple(ordered), tuple(sorted(streams)))


def load_run(path: Path | str) -> Run:
    """Read a results file or a finals dump.

    Raises:
        ConfigError: the file cannot be read, a line is not JSON, or a final is malformed.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror or error}") from None
    return _parse_lines(str(path), data.splitlines())
