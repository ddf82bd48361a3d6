"""The ``streamscribe`` command line: one entry point, one subcommand per job.

User mistakes and infrastructure failures print one line (``streamscribe: error: …``) and exit
non-zero without a traceback; anything else is a bug: it keeps its traceback and exits 70
(``EX_SOFTWARE``), so that no caller mistakes a crash for an answer (``compare`` exits 1 only
for a regression).

Exit status: 0 done, 1 infrastructure failure (or ``compare``'s regression), 2 user mistake
(a bad flag, setting or file, a topics file the cluster cannot follow),
70 internal error, 130 interrupted. librdkafka's own lines before the error line are logged with
repeats suppressed (``pipeline.runtime.client_logs``).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from pipeline.cli import (
    compare,
    config,
    hotwords,
    ingress,
    metrics,
    monitor,
    publish,
    qa,
    replay,
    simulate,
    tail,
    topics,
    transcribe,
    worker,
)
from pipeline.cli.options import add_global_options, invalid_env
from pipeline.errors import ConfigError, StreamscribeError, TopicPlanError
from pipeline.runtime.client_logs import report_suppressed

__all__ = ["build_parser", "main"]

SUBCOMMANDS: tuple[Callable[[Any], None], ...] = (
    topics.register,
    config.register,
    metrics.register,
    publish.register,
    simulate.register,
    tail.register,
    replay.register,
    compare.register,
    qa.register,
    monitor.register,
    transcribe.register,
    hotwords.register,
    worker.register,
    ingress.register,
)

EXIT_USER_ERROR = 2
EXIT_RUNTIME_ERROR = 1
EXIT_INTERNAL_ERROR = 70  # sysexits.h EX_SOFTWARE: a bug, never a verdict


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamscribe",
        description="Kafka-native streaming speech recognition.",
    )
    add_global_options(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in SUBCOMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    unusable = invalid_env(args)
    if unusable is not None:
        print(f"streamscribe: error: {unusable.message()}", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        try:
            result: int = args.handler(args)
        finally:
            report_suppressed()  # before the command's own error line, which stays the last
    except (ConfigError, TopicPlanError) as error:
        # A topics file that asks the cluster for the impossible is the user's to change.
        print(f"streamscribe: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except StreamscribeError as error:
        print(f"streamscribe: error: {error}", file=sys.stderr)
        return EXIT_RUNTIME_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of stdout is gone (`tail --json | head`): it took what it wanted. Point
        # stdout at /dev/null so that the interpreter's last flush does not fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception:
        traceback.print_exc()
        print(
            f"streamscribe: internal error in {args.command!r} (a bug; the traceback is above)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR
    return result
