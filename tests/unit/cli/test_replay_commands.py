"""``compare`` end to end on files, ``replay`` / ``tail`` user mistakes, and ``replay``'s results
file on a fake engine and source (no broker)."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from pipeline.cli import main
from pipeline.clock import Clock
from pipeline.contracts import to_json
from pipeline.errors import InfrastructureError
from pipeline.replay.results import PartitionRange
from pipeline.replay.runner import ChunkRecord
from pipeline.settings import AsrSettings
from tests.unit.cli.errors import NO_BROKER, one_error_line
from tests.unit.replay.builders import final
from tests.unit.replay.fakes import FakeEngine, call_records


def _dump(path: Path, *finals: object) -> Path:
    path.write_bytes(b"".join(to_json(f) + b"\n" for f in finals))  # type: ignore[arg-type]
    return path


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    base = _dump(
        tmp_path / "base.jsonl",
        final("u1", 0, "Reset my password please.", 100, 2100, latency_ms=400),
    )
    worse = _dump(
        tmp_path / "worse.jsonl",
        final("u1", 0, "Reset my", 100, 1000, reason="max_length"),
        final("u1", 1, "passport please.", 1000, 2100),
    )
    refs = tmp_path / "refs.tsv"
    refs.write_text("u1\tReset my password, please.\n")
    return base, worse, refs


def test_compare_prints_markdown_and_exits_0_when_the_gate_passes(
    runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, _, refs = runs
    argv = ["compare", str(base), str(base), "--refs", str(refs), "--max-wer-increase", "0"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("# Replay comparison")
    assert captured.err.startswith("compare: PASS: candidate WER 0.00 %")


def test_compare_exits_1_on_a_regression_and_writes_both_reports(
    runs: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, worse, refs = runs
    report_json, report_md = tmp_path / "r.json", tmp_path / "r.md"
    argv = [
        "compare",
        str(base),
        str(worse),
        "--refs",
        str(refs),
        "--max-wer-increase",
        "0.5",
        "--json",
        str(report_json),
        "--markdown",
        str(report_md),
    ]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("compare: FAIL: candidate WER 25.00 % vs baseline 0.00 %")
    data = orjson.loads(report_json.read_bytes())
    assert data["gate"]["passed"] is False
    assert data["endpoint_changes"]["split"] == 1
    assert "| split | 1 |" in report_md.read_text()


def test_compare_reads_refs_saved_with_a_byte_order_mark(
    runs: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, worse, refs = runs
    with_bom = tmp_path / "bom.tsv"
    with_bom.write_bytes(b"\xef\xbb\xbf" + refs.read_bytes())  # as spreadsheets export it
    argv = ["compare", str(base), str(worse), "--refs", str(with_bom), "--max-wer-increase", "0.5"]
    assert main(argv) == 1  # the first reference still counts: the regression is caught
    assert capsys.readouterr().err.startswith("compare: FAIL")


def test_compare_json_to_stdout(
    runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, worse, _ = runs
    assert main(["compare", str(base), str(worse), "--json", "-"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["gate"]["metric"] == "divergence"
    assert data["gate"]["max_increase"] is None


def test_compare_gate_from_the_environment(
    runs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, worse, _ = runs
    monkeypatch.setenv("STREAMSCRIBE_COMPARE_MAX_WER_INCREASE", "0")
    assert main(["compare", str(base), str(worse)]) == 1


def test_a_tail_call_id_that_is_no_text_is_a_user_mistake(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Review finding: a byte the shell passed undecoded crashed tail (exit 70).
    assert main([*NO_BROKER, "tail", "--call", "\udcff"]) == 2
    assert "--call '\\udcff' is not valid UTF-8 text" in one_error_line(capsys)


def test_a_compare_that_crashes_is_not_taken_for_a_regression(
    runs: tuple[Path, Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A CI gate reads exit 1 as "the candidate is worse": a bug must exit otherwise (70)."""
    base, worse, _ = runs

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the comparison")

    monkeypatch.setattr("pipeline.cli.compare.compare_runs", crash)
    assert main(["compare", str(base), str(worse), "--max-wer-increase", "0"]) == 70
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "RuntimeError: a bug in the comparison" in err
    assert err.rstrip().endswith("internal error in 'compare' (a bug; the traceback is above)")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["compare", "missing.jsonl", "missing.jsonl"], "cannot read missing.jsonl"),
        (["compare", "{base}", "{base}", "--refs", "nope.tsv"], "cannot read nope.tsv"),
        (["compare", "{base}", "{base}", "--max-wer-increase", "-1"], "must be >= 0"),
        (["compare", "{base}", "{base}", "--max-wer-increase", "nan"], "must be >= 0"),
        (["compare", "{base}", "{base}", "--max-examples", "-1"], "--max-examples must be"),
        (["compare", "{base}", "{base}", "--refs", "{latin1_refs}"], "not UTF-8 text"),
        (["compare", "{base}", "{base}", "--refs", "{bad_refs}"], "expected 'id<TAB>text'"),
        (["compare", "{base}", "{base}", "--refs", "{other_refs}"], "no stream of either run"),
        (["compare", "{base}", "{junk}"], "junk.jsonl:1: not JSON"),
    ],
)
def test_compare_user_mistakes_exit_2(
    runs: tuple[Path, Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    match: str,
) -> None:
    (tmp_path / "bad.tsv").write_text("no tab\n")
    (tmp_path / "other.tsv").write_text("someone_else\ttext\n")
    (tmp_path / "junk.jsonl").write_text("{oops\n")
    (tmp_path / "latin1.tsv").write_bytes("u0\tr\xe9set\n".encode("latin-1"))
    names = {
        "latin1_refs": str(tmp_path / "latin1.tsv"),
        "base": str(runs[0]),
        "bad_refs": str(tmp_path / "bad.tsv"),
        "other_refs": str(tmp_path / "other.tsv"),
        "junk": str(tmp_path / "junk.jsonl"),
    }
    assert main([arg.format(**names) for arg in argv]) == 2
    assert match in one_error_line(capsys)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["replay"], "say what to replay"),
        (["replay", "--to", "now"], "say what to replay"),
        (["replay", "--from", "yesterday"], "--from 'yesterday'"),
        (["replay", "--from", "now", "--to=-1h"], "must be after"),
        (["replay", "--calls", "c1", "--step-ms", "0"], "--step-ms must be positive"),
        (["replay", "--calls", "c1", "--shadow-prefix", ""], "must not be empty"),
        (
            ["--topic-prefix", "prod.", "replay", "--calls", "c1", "--shadow-prefix", "prod."],
            "must not write into the topics it replays",
        ),
        (
            ["replay", "--calls", "c1", "--output", "/nonexistent/folder/out.jsonl"],
            "cannot write there",
        ),
        (["replay", "--calls", "c1", "--output", "/"], "is a directory"),
        (["tail", "--max-records", "0"], "--max-records must be at least 1"),
        (["tail", "--idle-exit-s", "0"], "--idle-exit-s must be a positive number"),
        (["tail", "--idle-exit-s", "nan"], "--idle-exit-s must be a positive number"),
    ],
)
def test_replay_and_tail_user_mistakes_exit_2_before_kafka(
    capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    assert main([*NO_BROKER, *argv]) == 2
    assert match in one_error_line(capsys)


# -- replay's results file: one temporary file, made before the replay, never left behind ------


class _Source:
    """A ``ChunkSource`` over one call's records; records what the output folder holds when
    the replay starts reading, and fails where told."""

    def __init__(self, folder: Path, fail: BaseException | None) -> None:
        self._folder = folder
        self._fail = fail
        self.listing: list[str] = []
        self.topic = "audio.chunks"

    def plan(self, from_ms: int | None, to_ms: int | None) -> list[PartitionRange]:
        self.listing = sorted(path.name for path in self._folder.iterdir())
        return [PartitionRange(0, 0, 3)]

    def read(self, span: PartitionRange) -> list[ChunkRecord]:
        if self._fail is not None:
            raise self._fail
        return call_records("c1", 3)

    def close(self) -> None:
        pass


@dataclass
class _FakeReplay:
    """``replay`` on a fake engine, and on a fake source once ``source`` made it; every
    ``tempfile.mkstemp`` call is listed in ``temporaries``."""

    monkeypatch: pytest.MonkeyPatch
    temporaries: list[str] = field(default_factory=list)

    def source(self, folder: Path, fail: BaseException | None = None) -> _Source:
        source = _Source(folder, fail)
        self.monkeypatch.setattr("pipeline.replay.kafka.ChunkSource", lambda kafka, topic: source)
        return source


@pytest.fixture
def fake_replay(monkeypatch: pytest.MonkeyPatch) -> _FakeReplay:
    fake = _FakeReplay(monkeypatch)
    mkstemp = tempfile.mkstemp

    def counting_mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        handle, name = mkstemp(*args, **kwargs)
        fake.temporaries.append(name)
        return handle, name

    def build_engine(settings: AsrSettings, clock: Clock, **_: object) -> SimpleNamespace:
        return SimpleNamespace(
            engine=FakeEngine(clock), model_id="fake-model", device="cpu", dtype="float32"
        )

    monkeypatch.setattr(tempfile, "mkstemp", counting_mkstemp)
    monkeypatch.setattr("pipeline.asr.factory.build_engine", build_engine)
    return fake


def test_replay_writes_its_results_through_the_one_temporary_file_it_made_first(
    tmp_path: Path, fake_replay: _FakeReplay
) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    source = fake_replay.source(folder)
    output = folder / "run.jsonl"
    assert main([*NO_BROKER, "replay", "--calls", "c1", "--output", str(output)]) == 0
    temporaries = fake_replay.temporaries
    assert len(temporaries) == 1
    # Made before the replay read anything, and renamed onto the results at the end.
    assert source.listing == [Path(temporaries[0]).name]
    assert source.listing[0].startswith(".run.jsonl.")
    assert sorted(path.name for path in folder.iterdir()) == ["run.jsonl"]
    lines = [orjson.loads(line) for line in output.read_bytes().splitlines()]
    assert [line["type"] for line in lines] == ["header", "final", "call", "totals"]
    assert output.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    ("argv", "fail", "status"),
    [
        (["--step-ms", "0"], None, 2),  # a user mistake found after --output was opened
        ([], InfrastructureError("cannot read offsets of audio.chunks: down"), 1),
        ([], KeyboardInterrupt(), 130),
        ([], RuntimeError("a bug"), 70),
    ],
    ids=["config-error", "kafka-down", "interrupted", "exception"],
)
def test_a_failing_replay_leaves_the_results_as_they_were_and_no_temporary_file(
    tmp_path: Path,
    fake_replay: _FakeReplay,
    argv: list[str],
    fail: BaseException | None,
    status: int,
) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    output = folder / "run.jsonl"
    output.write_bytes(b"the previous run\n")
    fake_replay.source(folder, fail)
    command = [*NO_BROKER, "replay", "--calls", "c1", *argv, "--output", str(output)]
    assert main(command) == status
    assert len(fake_replay.temporaries) == 1
    assert sorted(path.name for path in folder.iterdir()) == ["run.jsonl"]
    assert output.read_bytes() == b"the previous run\n"


def test_a_results_file_that_cannot_be_written_at_the_end_is_one_error_line(
    tmp_path: Path,
    fake_replay: _FakeReplay,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def disk_full(*_: object) -> Iterator[bytes]:
        yield b"{}\n"
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("pipeline.cli.replay.result_lines", disk_full)
    folder = tmp_path / "results"
    folder.mkdir()
    output = folder / "run.jsonl"
    fake_replay.source(folder)
    assert main([*NO_BROKER, "replay", "--calls", "c1", "--output", str(output)]) == 2
    assert one_error_line(capsys).endswith(f"cannot write {output}: No space left on device")
    assert len(fake_replay.temporaries) == 1
    assert list(folder.iterdir()) == []
