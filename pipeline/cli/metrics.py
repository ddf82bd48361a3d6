"""``streamscribe metrics``: the catalogue of every Prometheus metric a worker exposes."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import orjson

from pipeline.runtime.metrics import CATALOGUE, catalogue_markdown

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "metrics", help="list every Prometheus metric (name, type, labels, help)"
    )
    parser.add_argument(
        "--json", action="store_true", help="machine-readable output instead of a Markdown table"
    )
    parser.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    if args.json:
        rows = [dataclasses.asdict(spec) for spec in CATALOGUE]
        print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
    else:
        print(catalogue_markdown(), end="")
    return 0
