"""``compare`` end to end on files, and ``replay`` / ``tail`` user mistakes (no broker)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.cli import main
from pipeline.contracts import to_json
from tests.unit.cli.errors import NO_BROKER, one_error_line
from tests.unit.replay.builders import final


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


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["compare", "missing.jsonl", "missing.jsonl"], "cannot read missing.jsonl"),
        (["compare", "{base}", "{base}", "--refs", "nope.tsv"], "cannot read nope.tsv"),
        (["compare", "{base}", "{base}", "--max-wer-increase", "-1"], "must be >= 0"),
        (["compare", "{base}", "{base}", "--max-wer-increase", "nan"], "must be >= 0"),
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
        (["tail", "--idle-exit-s", "0"], "--idle-exit-s must be positive"),
    ],
)
def test_replay_and_tail_user_mistakes_exit_2_before_kafka(
    capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    assert main([*NO_BROKER, *argv]) == 2
    assert match in one_error_line(capsys)
