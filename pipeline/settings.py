"""Settings: frozen dataclasses whose every field can come from a TOML file or the environment.

Each field declares its environment variable and help in ``field(metadata=...)`` via ``setting()``;
``load_settings`` reads, in increasing precedence: defaults, the TOML file named by
``STREAMSCRIBE_CONFIG`` (or passed explicitly), then environment variables. ``describe_settings``
lists every setting with its default and variable (the README's configuration table and
``streamscribe config`` are generated from it).

librdkafka settings pass through untouched: ``[kafka.client]`` in the file, or environment
variables ``STREAMSCRIBE_LIBRDKAFKA_<KEY>`` where the key's dots are written as underscores
(``STREAMSCRIBE_LIBRDKAFKA_SASL_USERNAME`` → ``sasl.username``). Values of keys that look secret
are masked whenever settings are shown.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from pipeline.errors import ConfigError

__all__ = [
    "KafkaSettings",
    "MetricsSettings",
    "PublisherSettings",
    "QaSettings",
    "RedisSettings",
    "SettingInfo",
    "Settings",
    "describe_settings",
    "load_settings",
    "masked_client_config",
    "setting",
]

ENV_PREFIX = "STREAMSCRIBE_"
LIBRDKAFKA_ENV_PREFIX = "STREAMSCRIBE_LIBRDKAFKA_"
SECRET_KEY_MARKERS = ("password", "secret", "token", "key.pem", "private", "jaas")


def setting(default: Any, env: str, help: str) -> Any:
    """A dataclass field with its environment variable (without prefix) and a one-line help."""
    return field(default=default, metadata={"env": ENV_PREFIX + env, "help": help})


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """Where the brokers are and how topics are named."""

    bootstrap_servers: str = setting(
        "127.0.0.1:19092", "KAFKA_BOOTSTRAP", "Kafka bootstrap servers (host:port,…)"
    )
    topic_prefix: str = setting(
        "", "TOPIC_PREFIX", "prefix prepended to every topic name (per environment)"
    )
    replication_factor: int = setting(
        1, "REPLICATION_FACTOR", "replication factor of topics created by `topics apply`"
    )
    client: Mapping[str, str] = field(
        default_factory=dict,
        metadata={
            "env": LIBRDKAFKA_ENV_PREFIX + "<KEY>",
            "help": "extra librdkafka settings (SASL/SSL…), dots written as underscores",
        },
    )


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Where Redis is (hotword lists and their live updates)."""

    url: str = setting("redis://127.0.0.1:16379/0", "REDIS_URL", "Redis URL")


@dataclass(frozen=True, slots=True)
class PublisherSettings:
    """How producers cut and send audio (``AudioPublisher``, ``publish``, ``simulate``)."""

    chunk_ms: int = setting(20, "CHUNK_MS", "audio per chunk record, milliseconds")
    linger_ms: int = setting(
        5, "PUBLISH_LINGER_MS", "producer batching delay (librdkafka linger.ms)"
    )
    delivery_timeout_ms: int = setting(
        30000, "PUBLISH_DELIVERY_TIMEOUT_MS", "give up on a chunk's delivery after this long"
    )


@dataclass(frozen=True, slots=True)
class QaSettings:
    """The QA analytics app (``streamscribe qa``)."""

    app_id: str = setting("streamscribe-qa", "QA_APP_ID", "faust app id (consumer group, tables)")
    web_port: int = setting(6066, "QA_WEB_PORT", "port of the QA app's web views and /metrics")
    rules_file: str = setting("", "QA_RULES_FILE", "compliance rules file (TOML); empty = built-in")


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """Prometheus exposition of a worker."""

    port: int = setting(9400, "METRICS_PORT", "port of /metrics, /healthz and /readyz (0 = off)")


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of a Streamscribe process, grouped by concern."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    publisher: PublisherSettings = field(default_factory=PublisherSettings)
    qa: QaSettings = field(default_factory=QaSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)


@dataclass(frozen=True, slots=True)
class SettingInfo:
    """One row of the configuration table."""

    name: str
    env: str
    value: str
    help: str


T = TypeVar("T")


def _coerce(value: Any, kind: Any, name: str, env: str) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name} ({env}) must be true or false, got {value!r}")
    if kind in (int, float):
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} ({env}) must be a number, got {value!r}") from None
    if kind is str:
        return str(value)
    if isinstance(kind, types.UnionType) and value in ("", None):
        return None
    if isinstance(kind, types.UnionType):
        inner = [k for k in kind.__args__ if k is not type(None)]
        return _coerce(value, inner[0], name, env)
    return value


def _build(cls: type[T], section: Mapping[str, Any], env: Mapping[str, str], path: str) -> T:
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = f"{path}.{spec.name}" if path else spec.name
        kind = hints[spec.name]
        if dataclasses.is_dataclass(kind):
            sub = section.get(spec.name, {})
            if not isinstance(sub, Mapping):
                raise ConfigError(f"[{name}] must be a table in the settings file")
            values[spec.name] = _build(kind, sub, env, name)  # type: ignore[arg-type]
            continue
        env_name = spec.metadata.get("env", "")
        if spec.name == "client" and cls is KafkaSettings:
            values[spec.name] = _librdkafka_config(section.get("client", {}), env)
            continue
        if env_name in env:
            values[spec.name] = _coerce(env[env_name], kind, name, env_name)
        elif spec.name in section:
            values[spec.name] = _coerce(section[spec.name], kind, name, env_name)
    unknown = set(section) - {spec.name for spec in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if unknown:
        raise ConfigError(f"unknown setting(s) in the settings file: {sorted(unknown)} ({path})")
    return cls(**values)


def _librdkafka_config(from_file: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    config = {str(k): str(v) for k, v in from_file.items()}
    for name, value in env.items():
        if name.startswith(LIBRDKAFKA_ENV_PREFIX):
            key = name.removeprefix(LIBRDKAFKA_ENV_PREFIX).lower().replace("_", ".")
            config[key] = value
    return config


def load_settings(path: Path | str | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Defaults, overlaid by the TOML file (``path`` or ``$STREAMSCRIBE_CONFIG``), then env vars.

    Raises:
        ConfigError: unreadable file, unknown key, or a value of the wrong type.
    """
    environ = os.environ if env is None else env
    file_path = path if path is not None else environ.get(ENV_PREFIX + "CONFIG")
    data: dict[str, Any] = {}
    if file_path:
        try:
            data = tomllib.loads(Path(file_path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise ConfigError(f"cannot read settings file {file_path}: {error}") from None
    return _build(Settings, data, environ, "")


def _walk(cls: type[Any], instance: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    for spec in dataclasses.fields(cls):
        name = f"{path}.{spec.name}" if path else spec.name
        value = getattr(instance, spec.name)
        if dataclasses.is_dataclass(value):
            yield from _walk(type(value), value, name)
        else:
            yield name, spec, value


def describe_settings(settings: Settings | None = None) -> list[SettingInfo]:
    """Every setting with its env variable, and its value in ``settings`` (defaults if None)."""
    current = settings or Settings()
    rows = []
    for name, spec, value in _walk(Settings, current, ""):
        shown = masked_client_config(value) if name == "kafka.client" else value
        rows.append(SettingInfo(name, spec.metadata["env"], repr(shown), spec.metadata["help"]))
    return rows


def masked_client_config(config: Mapping[str, str]) -> dict[str, str]:
    """A copy of a librdkafka config whose secret-looking values are replaced by ``***``."""
    return {
        key: ("***" if any(marker in key.lower() for marker in SECRET_KEY_MARKERS) else value)
        for key, value in config.items()
    }
