"""``streamscribe config``: every setting, its environment variable and current value."""

from __future__ import annotations

import argparse
from typing import Any

from pipeline.cli.options import settings_from_args
from pipeline.settings import describe_settings

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config", help="show every setting with its env variable (secrets masked)"
    )
    parser.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    rows = describe_settings(settings_from_args(args))
    width = max(len(row.name) for row in rows)
    env_width = max(len(row.env) for row in rows)
    for row in rows:
        print(f"{row.name:<{width}}  {row.env:<{env_width}}  {row.value}")
    return 0
