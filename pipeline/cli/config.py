"""``streamscribe config``: every setting, its environment variable and current value."""

from __future__ import annotations

import argparse
from typing import Any

from pipeline.cli.options import settings_from_args
from pipeline.settings import Settings, describe_settings

__all__ = ["register", "settings_markdown"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config", help="show every setting with its env variable (secrets masked)"
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the defaults as the README's configuration table",
    )
    parser.set_defaults(handler=_show)


def settings_markdown() -> str:
    """The configuration table of the README: every setting, its variable, default, meaning."""
    lines = ["| setting | env variable | default | meaning |", "| --- | --- | --- | --- |"]
    for row in describe_settings(Settings()):
        lines.append(f"| `{row.name}` | `{row.env}` | `{row.value}` | {row.help} |")
    return "\n".join(lines)


def _show(args: argparse.Namespace) -> int:
    if args.markdown:
        print(settings_markdown())
        return 0
    rows = describe_settings(settings_from_args(args))
    width = max(len(row.name) for row in rows)
    env_width = max(len(row.env) for row in rows)
    for row in rows:
        print(f"{row.name:<{width}}  {row.env:<{env_width}}  {row.value}")
    return 0
