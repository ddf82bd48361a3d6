"""``streamscribe config``: every setting, its environment variable and current value."""

from __future__ import annotations

import argparse
from typing import Any

from pipeline.cli.options import settings_from_args, warn_unknown_env_variables
from pipeline.settings import Settings, describe_settings

__all__ = ["check_consistency", "register", "settings_markdown"]


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


def check_consistency(settings: Settings) -> None:
    """The rules between settings that the commands check as they start (endpoint silence
    against the speech pad, utterance limits, per-tenant endpoint rules and redaction policies,
    hotword reconnect delays, the monitor's windows), checked here by the same code so that
    ``config`` finds them before a worker crash-loops on them. Raises ``ConfigError``."""
    # The engine's policy lives beside the model loader: torch is imported, no model loaded.
    from pipeline.asr.factory import engine_config
    from pipeline.hotwords.registry import RegistryConfig
    from pipeline.monitor.server import validate_monitor_settings
    from pipeline.qa.app import faust_credentials
    from pipeline.redaction import RedactorConfig
    from pipeline.runtime.admin import admin_client

    admin_client(settings.kafka)  # librdkafka checks the pass-through keys as it is created
    engine_config(settings.asr)
    RedactorConfig.from_settings(settings.redaction)
    RegistryConfig.from_settings(settings.hotwords)
    validate_monitor_settings(settings.monitor)
    faust_credentials(settings.kafka.client)  # the QA app's reading of the Kafka security


def _show(args: argparse.Namespace) -> int:
    if args.markdown:
        print(settings_markdown())
        return 0
    settings = settings_from_args(args)
    check_consistency(settings)
    warn_unknown_env_variables()
    rows = describe_settings(settings)
    width = max(len(row.name) for row in rows)
    env_width = max(len(row.env) for row in rows)
    for row in rows:
        print(f"{row.name:<{width}}  {row.env:<{env_width}}  {row.value}")
    return 0
