"""Flags that may also come from environment variables (the help names the variable)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from pipeline.errors import ConfigError
from pipeline.settings import (
    LIBRDKAFKA_ENV_PREFIX,
    Settings,
    describe_settings,
    load_settings,
    mask_url_passwords,
    validate_settings,
)

__all__ = [
    "LOG_LEVELS",
    "InvalidEnv",
    "add_env_option",
    "add_global_options",
    "add_log_level_option",
    "invalid_env",
    "not_empty",
    "settings_from_args",
    "unknown_env_variables",
    "warn_unknown_env_variables",
]

LOG_LEVELS = ("debug", "info", "warning", "error")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclasses.dataclass(frozen=True, slots=True)
class InvalidEnv:
    """The default of a flag whose environment variable holds an unusable value.

    Every subcommand's parser is built for every command, so a bad value cannot fail there;
    it becomes this default instead, and ``invalid_env`` reports it (exit 2) only when the
    command that has the flag runs without it on the command line.
    """

    env: str
    raw: str
    reason: str

    def message(self) -> str:
        return f"{self.env}={mask_url_passwords(repr(self.raw))}: {self.reason}"


ENV_OPTIONS: set[str] = set()
"""Every variable ``add_env_option`` has read (all of them once ``build_parser`` ran)."""


def add_env_option(
    parser: argparse.ArgumentParser | Any,
    *flags: str,
    env: str,
    help: str,
    **kwargs: Any,
) -> None:
    """``parser.add_argument`` whose default is read from ``env`` (named in the help), converted
    and checked like a command-line value (``type``, ``choices``, on/off for flags).

    The help shows the default with the password of any URL in it masked (``--redis-url``
    from ``redis://:pw@host`` shows ``redis://:***@host``): help text ends up in terminals,
    logs and bug reports."""
    default = kwargs.pop("default", None)
    ENV_OPTIONS.add(env)
    if env in os.environ:
        default = _from_env(env, os.environ[env], kwargs)
    shown = f" (env {env}" + (
        f"; default {mask_url_passwords(repr(default))})"
        if default is not None and default is not False and not isinstance(default, InvalidEnv)
        else ")"
    )
    # argparse formats help with %: a value's own % (a URL-encoded path) must not be read so.
    parser.add_argument(*flags, default=default, help=help + shown.replace("%", "%%"), **kwargs)


def _from_env(env: str, raw: str, kwargs: dict[str, Any]) -> Any:
    if kwargs.get("action") == "store_true":
        word = raw.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        return InvalidEnv(env, raw, f"use one of {', '.join(repr(w) for w in _TRUE + _FALSE[:-1])}")
    value: Any = raw
    if "type" in kwargs:
        convert = kwargs["type"]
        try:
            value = convert(raw)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as error:
            return InvalidEnv(
                env,
                raw,
                f"not a valid {getattr(convert, '__name__', 'value')}"
                + (f" ({error})" if isinstance(error, argparse.ArgumentTypeError) else ""),
            )
    choices = kwargs.get("choices")
    if choices is not None and value not in choices:
        return InvalidEnv(env, raw, f"choose from {', '.join(map(str, choices))}")
    return value


def not_empty(value: str | None, flag: str, env: str) -> str | None:
    """An option's text, ``None`` when not given. Given but empty (``--x "$UNSET"``, or ``env``
    set to nothing) is refused rather than read as not given: it would silently stand for the
    default (another tenant's rules, a random call id, the configured Redis).

    Raises:
        ConfigError: ``value`` is the empty string.
    """
    if value == "":
        raise ConfigError(f"{flag} (or {env}) is empty; give a value, or leave it out")
    return value


def invalid_env(args: argparse.Namespace) -> InvalidEnv | None:
    """The first parsed option still holding an unusable environment default, if any."""
    for value in vars(args).values():
        if isinstance(value, InvalidEnv):
            return value
    return None


def add_log_level_option(parser: argparse.ArgumentParser | Any) -> None:
    """``--log-level`` / ``STREAMSCRIBE_LOG_LEVEL`` (one value for every process, any case)."""
    add_env_option(
        parser,
        "--log-level",
        env="STREAMSCRIBE_LOG_LEVEL",
        help=f"log level ({', '.join(LOG_LEVELS)})",
        type=str.lower,
        default="info",
        choices=LOG_LEVELS,
    )


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
    """Settings from file and environment, with the global flags applied on top.

    Raises:
        ConfigError: an unreadable settings file or an invalid value (``load_settings``).
    """
    settings = load_settings(args.config)
    kafka = settings.kafka
    if args.bootstrap is not None:  # an empty one is refused below, as from the environment
        kafka = dataclasses.replace(kafka, bootstrap_servers=args.bootstrap)
    if args.topic_prefix is not None:
        kafka = dataclasses.replace(kafka, topic_prefix=args.topic_prefix)
    return validate_settings(dataclasses.replace(settings, kafka=kafka))


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM (``docker stop``, ``timeout``, a pod stopping) raises KeyboardInterrupt
    as Ctrl-C does, so that a producing command ends its open calls (end-of-stream on every
    channel) instead of leaving them to the workers' idle timeout; exit status 130."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def unknown_env_variables(env: Mapping[str, str] | None = None) -> list[str]:
    """``STREAMSCRIBE_*`` variables that nothing reads (a mistyped name is silently ignored
    otherwise): not a setting's, not a command's option (``ENV_OPTIONS``, complete once the
    parser is built), not a ``STREAMSCRIBE_LIBRDKAFKA_*`` pass-through, not CONFIG or CACHE."""
    known = {row.env for row in describe_settings()} | ENV_OPTIONS | _OTHER_VARIABLES
    return sorted(
        name
        for name in (os.environ if env is None else env)
        if name.startswith("STREAMSCRIBE_")
        and name not in known
        and not name.startswith(LIBRDKAFKA_ENV_PREFIX)
    )


_OTHER_VARIABLES = frozenset(
    {"STREAMSCRIBE_CONFIG", "STREAMSCRIBE_CACHE", "STREAMSCRIBE_SCREENSHOT_DIR"}
)
"""Read outside the settings: the settings file's path, the local services' cache folder, the
monitor test's screenshot folder (docs/monitor.md)."""


def warn_unknown_env_variables() -> None:
    """One warning line on stderr per ``unknown_env_variables`` name."""
    for name in unknown_env_variables():
        print(
            f"streamscribe: warning: {name} is not a Streamscribe variable (mistyped?); "
            "it is ignored",
            file=sys.stderr,
        )
