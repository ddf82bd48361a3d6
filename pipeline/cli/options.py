"""Flags that may also come from environment variables (the help names the variable)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from pipeline.settings import Settings, load_settings

__all__ = ["add_env_option", "add_global_options", "settings_from_args"]


def add_env_option(
    parser: argparse.ArgumentParser | Any,
    *flags: str,
    env: str,
    help: str,
    **kwargs: Any,
) -> None:
    """``parser.add_argument`` whose default is read from ``env`` (named in the help)."""
    default = kwargs.pop("default", None)
    if env in os.environ:
        raw = os.environ[env]
        if kwargs.get("action") == "store_true":
            default = raw.strip().lower() in ("1", "true", "yes", "on")
        elif "type" in kwargs:
            default = kwargs["type"](raw)
        else:
            default = raw
    shown = f" (env {env}" + (f"; default {default!r})" if default not in (None, False) else ")")
    parser.add_argument(*flags, default=default, help=help + shown, **kwargs)


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """Options every subcommand understands: settings file and connection overrides."""
    add_env_option(
        parser, "--config", env="STREAMSCRIBE_CONFIG", help="settings file (TOML)", metavar="FILE"
    )
    add_env_option(
        parser,
        "--bootstrap",
        env="STREAMSCRIBE_KAFKA_BOOTSTRAP",
        help="Kafka bootstrap servers",
        metavar="HOST:PORT",
    )
    add_env_option(
        parser,
        "--topic-prefix",
        env="STREAMSCRIBE_TOPIC_PREFIX",
        help="prefix of every topic name",
        metavar="PREFIX",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from file and environment, with the global flags applied on top."""
    settings = load_settings(args.config)
    kafka = settings.kafka
    if args.bootstrap:
        kafka = dataclasses.replace(kafka, bootstrap_servers=args.bootstrap)
    if args.topic_prefix is not None:
        kafka = dataclasses.replace(kafka, topic_prefix=args.topic_prefix)
    return dataclasses.replace(settings, kafka=kafka)
