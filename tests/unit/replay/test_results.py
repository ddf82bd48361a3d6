"""The results file: deterministic lines, and reading it (or a finals dump) back."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.contracts import to_json
from pipeline.errors import ConfigError
from pipeline.replay.results import (
    RESULTS_SCHEMA,
    PartitionRange,
    ReplayHeader,
    load_run,
    result_lines,
)
from pipeline.replay.runner import EndedBy, ReplayResult, StreamSummary
from tests.unit.replay.builders import final

HEADER = ReplayHeader(
    model_id="whisper-tiny.en",
    device="cpu",
    dtype="float32",
    asr={"endpoint_silence_ms": 800, "partials": False},
    options={"step_interval_ms": 100},
    topic="audio.chunks",
    from_ms=1000,
    to_ms=None,
    calls=(),
    partitions=(PartitionRange(3, 10, 20),),
)


def _stream(call_id: str, channel: str, finals: int) -> StreamSummary:
    return StreamSummary(
        call_id=call_id,
        channel=channel,
        tenant="default",
        partition=3,
        first_offset=10,
        last_offset=19,
        first_seq=0,
        last_seq=9,
        chunks=10,
        duplicates=0,
        missing_chunks=0,
        rejected=(("call_already_ended", 1),),
        audio_ms=200,
        speech_ms=150,
        finals=finals,
        suppressed=0,
        last_audio_ms=1200,
        ended_by=EndedBy.END_OF_STREAM,
    )


RESULT = ReplayResult(
    finals=(
        final("c1", 0, "Hello there.", 100, 900, channel="agent"),
        final("c1", 0, "Hi.", 1000, 1400, channel="customer", latency_ms=30),
    ),
    streams=(_stream("c1", "agent", 1), _stream("c1", "customer", 1), _stream("c2", "mono", 0)),
    records=31,
    skipped=1,
    invalid=(("missing_key", 1),),
)


def test_lines_are_header_finals_calls_totals_with_sorted_keys(tmp_path: Path) -> None:
    lines = list(result_lines(HEADER, RESULT))
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    decoded = [orjson.loads(line) for line in lines]
    assert [d["type"] for d in decoded] == ["header", "final", "final", "call", "call", "totals"]
    assert decoded[0]["schema"] == RESULTS_SCHEMA
    assert decoded[0]["source"]["partitions"] == [
        {"partition": 3, "start_offset": 10, "end_offset": 20}
    ]
    assert decoded[3]["call_id"] == "c1"
    assert [c["channel"] for c in decoded[3]["channels"]] == ["agent", "customer"]
    assert decoded[3]["channels"][0]["rejected"] == {"call_already_ended": 1}
    assert decoded[3]["channels"][0]["ended_by"] == "end_of_stream"
    assert decoded[-1] == {
        "type": "totals",
        "records": 31,
        "skipped": 1,
        "invalid": {"missing_key": 1},
        "finals": 2,
        "calls": 2,
    }
    for line in lines:
        assert line == orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS) + b"\n"
    assert lines == list(result_lines(HEADER, RESULT))


def test_a_results_file_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(result_lines(HEADER, RESULT)))
    run = load_run(path)
    assert run.header is not None
    assert run.header["model_id"] == "whisper-tiny.en"
    assert run.finals == RESULT.finals
    # c2 has no final but was replayed: it is one of the run's streams.
    assert run.streams == (("c1", "agent"), ("c1", "customer"), ("c2", "mono"))
    assert run.model_id == "whisper-tiny.en"


def test_a_finals_dump_reads_too_duplicates_collapse(tmp_path: Path) -> None:
    first = final("c1", 0, "Hello.", 0, 500)
    second = final("c1", 1, "Bye.", 900, 1300)
    path = tmp_path / "dump.jsonl"
    tail_line = orjson.dumps({"type": "final", **orjson.loads(to_json(second))})
    partial_line = b'{"type": "partial", "schema": "partial/1", "call_id": "c1"}'
    path.write_bytes(b"\n".join([to_json(first), partial_line, tail_line, to_json(first), b""]))
    run = load_run(path)
    assert run.header is None
    assert run.finals == (first, second)
    assert run.model_id == "whisper-tiny.en"


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"not json\n", "run.jsonl:1: not JSON"),
        (b"[1, 2]\n", "not a JSON object"),
        (b'{"type": "header", "schema": "replay/9"}\n', "results schema 'replay/9'"),
        (b'{"schema": "final/1", "call_id": "c"}\n', "not a usable final"),
        # Review finding: finals of another version were skipped, so that run's streams
        # counted as all deleted and any candidate passed the gate against it.
        (b'{"type": "final", "schema": "final/2", "call_id": "c"}\n', "final schema 'final/2'"),
        (b'{"schema": "final/0", "call_id": "c"}\n', "final schema 'final/0'"),
    ],
)
def test_unreadable_input_is_a_user_error(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=match):
        load_run(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_run(tmp_path / "missing.jsonl")
