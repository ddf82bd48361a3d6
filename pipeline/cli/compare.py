"""``streamscribe compare BASELINE CANDIDATE``: what changed between two runs, and a CI gate.

Inputs are replay results files or finals dumps (``pipeline.replay.results.load_run``). The
markdown report goes to stdout unless ``--markdown FILE`` (or ``--json -``) is given; the verdict
line always goes to stderr. Exit status: 0 when the candidate passes the gate (or no gate is
set), 1 when ``--max-wer-increase`` is exceeded, 2 for unreadable input, 70 for a bug
(``pipeline.cli.main``): 1 means a regression and nothing else.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import orjson

from pipeline.cli.options import add_env_option
from pipeline.errors import ConfigError
from pipeline.replay.compare import DEFAULT_BOUNDARY_TOLERANCE_MS, compare_runs, parse_refs
from pipeline.replay.report import (
    DEFAULT_MAX_EXAMPLES,
    comparison_json,
    comparison_markdown,
    verdict_line,
)
from pipeline.replay.results import load_run

__all__ = ["EXIT_REGRESSION", "register"]

EXIT_REGRESSION = 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare two replay results (WER, divergence, endpoints, latency); gate CI",
        description="Compare a candidate run with a baseline run: WER per call against "
        "references (--refs), otherwise the word-level divergence between the runs; endpoint "
        "decisions that moved; latency percentiles. Exit 1 when --max-wer-increase is exceeded.",
    )
    parser.add_argument(
        "baseline", type=Path, metavar="BASELINE", help="results file or finals dump"
    )
    parser.add_argument(
        "candidate", type=Path, metavar="CANDIDATE", help="results file or finals dump"
    )
    add_env_option(
        parser,
        "--refs",
        env="STREAMSCRIBE_COMPARE_REFS",
        help="reference transcripts, id<TAB>text; ids call_id:channel (or call_id)",
        metavar="REFS.tsv",
    )
    add_env_option(
        parser,
        "--max-wer-increase",
        env="STREAMSCRIBE_COMPARE_MAX_WER_INCREASE",
        type=float,
        help="fail (exit 1) when candidate WER exceeds baseline WER by more than this many "
        "percentage points (divergence without --refs)",
        metavar="POINTS",
    )
    add_env_option(
        parser,
        "--json",
        env="STREAMSCRIBE_COMPARE_JSON",
        help="JSON report ('-': stdout)",
        metavar="OUT",
    )
    add_env_option(
        parser,
        "--markdown",
        env="STREAMSCRIBE_COMPARE_MARKDOWN",
        help="markdown report file (default: stdout)",
        metavar="OUT",
    )
    add_env_option(
        parser,
        "--boundary-tolerance-ms",
        env="STREAMSCRIBE_COMPARE_BOUNDARY_TOLERANCE_MS",
        type=int,
        default=DEFAULT_BOUNDARY_TOLERANCE_MS,
        help="utterance starts/ends that move by more than this are reported",
    )
    add_env_option(
        parser,
        "--max-examples",
        env="STREAMSCRIBE_COMPARE_MAX_EXAMPLES",
        type=int,
        default=DEFAULT_MAX_EXAMPLES,
        help="changed utterances shown in the markdown report",
    )
    parser.set_defaults(handler=_compare)


def _write(target: str, text: str) -> None:
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot write {target}: {error.strerror or error}") from None


def _compare(args: argparse.Namespace) -> int:
    if args.max_wer_increase is not None and not 0 <= args.max_wer_increase < math.inf:
        raise ConfigError(
            f"--max-wer-increase must be >= 0 and finite, got {args.max_wer_increase}"
        )
    if args.boundary_tolerance_ms < 0:
        raise ConfigError("--boundary-tolerance-ms must be >= 0")
    if args.max_examples < 0:
        raise ConfigError("--max-examples must be >= 0")
    refs = None
    if args.refs:
        try:
            # utf-8-sig: spreadsheet exports often start with a BOM, which would hide the first id
            refs = parse_refs(Path(args.refs).read_text(encoding="utf-8-sig"), args.refs)
        except OSError as error:
            raise ConfigError(f"cannot read {args.refs}: {error.strerror or error}") from None
        except UnicodeDecodeError as error:
            raise ConfigError(f"cannot read {args.refs}: not UTF-8 text ({error})") from None
    comparison = compare_runs(
        load_run(args.baseline),
        load_run(args.candidate),
        refs,
        max_increase_pct=args.max_wer_increase,
        boundary_tolerance_ms=args.boundary_tolerance_ms,
    )
    if args.json:
        data = comparison_json(comparison)
        _write(args.json, orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    if args.markdown or args.json != "-":
        _write(args.markdown or "-", comparison_markdown(comparison, args.max_examples))
    print(f"compare: {verdict_line(comparison)}", file=sys.stderr)
    return 0 if comparison.gate.passed else EXIT_REGRESSION
