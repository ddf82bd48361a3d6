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
    "AsrSettings",
    "HotwordSettings",
    "KafkaSettings",
    "MetricsSettings",
    "MonitorSettings",
    "PublisherSettings",
    "QaSettings",
    "RedisSettings",
    "SettingInfo",
    "Settings",
    "WorkerSettings",
    "describe_settings",
    "load_settings",
    "masked_client_config",
    "setting",
]

ENV_PREFIX = "STREAMSCRIBE_"
LIBRDKAFKA_ENV_PREFIX = "STREAMSCRIBE_LIBRDKAFKA_"
SECRET_KEY_MARKERS = (
    "password",
    "secret",
    "token",
    "key.pem",
    "private",
    "jaas",
    "oauthbearer.config",  # holds the OAuth client secret (clientSecret=…)
    "keytab",
)


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
class AsrSettings:
    """The recognizer and its streaming policy (per process; tenants share the model, and may
    have their own endpoint rules)."""

    model_dir: str = setting(
        "", "MODEL_DIR", "CTranslate2 Whisper directory; empty = bundled tiny.en"
    )
    device: str = setting("auto", "DEVICE", "torch device: auto (cuda when present), cpu, cuda")
    threads: int = setting(0, "TORCH_THREADS", "CPU threads for torch; 0 = all cores")
    hop_ms: int = setting(500, "HOP_MS", "re-decode an open utterance every this much audio")
    min_decode_ms: int = setting(500, "MIN_DECODE_MS", "first partial after this much speech")
    max_batch: int = setting(16, "MAX_BATCH", "most windows per recognizer forward pass")
    step_budget_ms: int = setting(
        300, "STEP_BUDGET_MS", "wall-time budget of a step's partial decodes; 0 = none"
    )
    early_final_ms: int = setting(
        300,
        "EARLY_FINAL_MS",
        "decode a final this far into its trailing silence; 0 = at the endpoint",
    )
    margin_ms: int = setting(2000, "WINDOW_MARGIN_MS", "silence appended to each decoding window")
    min_window_ms: int = setting(10000, "MIN_WINDOW_MS", "shortest decoding window (Whisper)")
    vad_threshold: float = setting(0.5, "VAD_THRESHOLD", "speech probability that starts speech")
    speech_pad_ms: int = setting(60, "SPEECH_PAD_MS", "audio kept around detected speech")
    endpoint_silence_ms: int = setting(
        800, "ENDPOINT_SILENCE_MS", "trailing silence that ends an utterance"
    )
    max_utterance_ms: int = setting(20000, "MAX_UTTERANCE_MS", "longest utterance before a cut")
    tenant_endpoints: str = setting(
        "",
        "TENANT_ENDPOINTS",
        "per-tenant endpoint rules `tenant:silence_ms[:max_utterance_ms],…`; "
        "other tenants use the two above",
    )
    partials: bool = setting(True, "PARTIALS", "publish partial transcripts")
    denoise: bool = setting(
        False, "DENOISE", "RNNoise before VAD (extra `denoise`; helps noisy lines, not clean ones)"
    )


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """The ASR worker (``streamscribe worker``)."""

    group_id: str = setting("streamscribe-asr", "GROUP_ID", "consumer group of the ASR workers")
    worker_id: str = setting(
        "", "WORKER_ID", "stable id of this worker (transactional id); empty = host-pid"
    )
    static_membership: bool = setting(
        False, "STATIC_MEMBERSHIP", "use worker_id as group.instance.id (static membership)"
    )
    poll_batch: int = setting(1000, "POLL_BATCH", "most records taken per poll")
    poll_timeout_ms: int = setting(20, "POLL_TIMEOUT_MS", "longest wait for records per poll")
    commit_interval_ms: int = setting(
        1000, "COMMIT_INTERVAL_MS", "commit offsets and checkpoints at least this often"
    )
    checkpoint_interval_ms: int = setting(
        5000, "CHECKPOINT_INTERVAL_MS", "snapshot an idle session's progress at most this often"
    )
    idle_timeout_ms: int = setting(
        30000,
        "IDLE_TIMEOUT_MS",
        "close a session after this long without its audio (time spent fetching: pauses and "
        "stalls do not count)",
    )
    ended_retention_ms: int = setting(
        3_600_000,
        "ENDED_RETENTION_MS",
        "remember an ended channel this long (its late chunks are refused), then forget it",
    )
    max_call_ms: int = setting(14_400_000, "MAX_CALL_MS", "longest call per channel (audio ms)")
    max_open_sessions: int = setting(2000, "MAX_OPEN_SESSIONS", "most open sessions per worker")
    max_chunk_bytes: int = setting(65536, "MAX_CHUNK_BYTES", "largest accepted audio payload")
    max_pending_jobs: int = setting(
        64,
        "MAX_PENDING_JOBS",
        "thin partials when more decodes than half this are due; pause partitions when more "
        "finals than this wait",
    )
    max_step_jobs: int = setting(64, "MAX_STEP_JOBS", "most decodes per engine step")
    session_timeout_ms: int = setting(
        10000, "KAFKA_SESSION_TIMEOUT_MS", "group session timeout (failover detection)"
    )
    transaction_timeout_ms: int = setting(
        10000, "TRANSACTION_TIMEOUT_MS", "abort a dead worker's open transaction after this"
    )
    shutdown_timeout_ms: int = setting(
        10000, "SHUTDOWN_TIMEOUT_MS", "SIGTERM: exit within this long"
    )


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
    tenant: str = setting("default", "TENANT", "tenant id of published calls (ss-tenant)")


@dataclass(frozen=True, slots=True)
class QaSettings:
    """The QA analytics app (``streamscribe qa``)."""

    app_id: str = setting(
        "streamscribe-qa",
        "QA_APP_ID",
        "faust app id (consumer group, table and internal topic names; the topic prefix is "
        "prepended)",
    )
    web_port: int = setting(6066, "QA_WEB_PORT", "port of the QA app's web views and /metrics")
    web_bind: str = setting("0.0.0.0", "QA_WEB_BIND", "address the QA app's web server binds")
    rules_file: str = setting("", "QA_RULES_FILE", "compliance rules file (TOML); empty = built-in")
    partitions: int = setting(
        6,
        "QA_PARTITIONS",
        "partitions of the QA app's internal input topic and table changelogs (fixed once created)",
    )
    idle_timeout_ms: int = setting(
        1_800_000,
        "QA_IDLE_TIMEOUT_MS",
        "a call without session_ended for every channel ends after this long without records",
    )
    end_grace_ms: int = setting(
        5_000,
        "QA_END_GRACE_MS",
        "an ended call whose session_ended events carry no finals count (detail.utterances) is "
        "published once it has been quiet this long (finals and events arrive on different topics)",
    )
    retention_ms: int = setting(
        86_400_000,
        "QA_RETENTION_MS",
        "ended calls stay in the QA tables (late finals, web views) this long",
    )


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """Prometheus exposition and probes of a worker (``pipeline.runtime.health``)."""

    port: int = setting(9400, "METRICS_PORT", "port of /metrics, /healthz and /readyz (0 = off)")
    host: str = setting(
        "0.0.0.0", "METRICS_HOST", "address /metrics, /healthz and /readyz listen on"
    )
    gpu_sample_interval_ms: int = setting(
        5000, "METRICS_GPU_SAMPLE_INTERVAL_MS", "period of GPU utilization and memory sampling"
    )
    probe_timeout_ms: int = setting(
        2000, "METRICS_PROBE_TIMEOUT_MS", "timeout of one Kafka / Redis reachability probe"
    )


@dataclass(frozen=True, slots=True)
class HotwordSettings:
    """Hotword lists in Redis and how strongly they bias decoding (``docs/hotwords.md``)."""

    key_prefix: str = setting(
        "ss:hotwords", "HOTWORDS_KEY_PREFIX", "prefix of hotword keys and channel in Redis"
    )
    call_ttl_s: int = setting(
        86400, "HOTWORDS_CALL_TTL_S", "a per-call list expires this long after its last change"
    )
    start_bonus: float = setting(
        5.0,
        "HOTWORDS_START_BONUS",
        "largest logit bonus of a phrase's first token (× its boost; scaled by token rarity)",
    )
    continue_bonus: float = setting(
        7.0,
        "HOTWORDS_CONTINUE_BONUS",
        "logit bonus of the next token of a phrase in progress (× its boost)",
    )
    resync_interval_ms: int = setting(
        30000, "HOTWORDS_RESYNC_INTERVAL_MS", "version check (reload on mismatch) and TTL sweep"
    )
    reconnect_initial_ms: int = setting(
        100, "HOTWORDS_RECONNECT_INITIAL_MS", "first reconnect delay after Redis is lost"
    )
    reconnect_max_ms: int = setting(
        10000, "HOTWORDS_RECONNECT_MAX_MS", "longest reconnect delay (exponential backoff)"
    )


@dataclass(frozen=True, slots=True)
class MonitorSettings:
    """The web monitor for supervisors and QA analysts (``streamscribe monitor``)."""

    port: int = setting(6070, "MONITOR_PORT", "port of the monitor's web pages and JSON APIs")
    bind: str = setting("0.0.0.0", "MONITOR_BIND", "address the monitor's web server binds")
    max_calls: int = setting(
        1000, "MONITOR_MAX_CALLS", "most calls held in memory (live and recent); oldest evicted"
    )
    max_age_ms: int = setting(
        86_400_000,
        "MONITOR_MAX_AGE_MS",
        "a call leaves the monitor this long after its last record; also how far back the "
        "topics are read at start",
    )
    ended_linger_ms: int = setting(
        60_000, "MONITOR_ENDED_LINGER_MS", "an ended call stays on the live page this long"
    )
    worker_metrics_urls: str = setting(
        "",
        "MONITOR_WORKER_METRICS_URLS",
        "comma-separated /metrics URLs of the ASR workers for the health strip; empty = unknown",
    )
    metrics_interval_ms: int = setting(
        5000, "MONITOR_METRICS_INTERVAL_MS", "how often the workers' /metrics are read"
    )
    metrics_window_ms: int = setting(
        60_000, "MONITOR_METRICS_WINDOW_MS", "P95 latencies and the DLQ rate cover this window"
    )


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of a Streamscribe process, grouped by concern."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    asr: AsrSettings = field(default_factory=AsrSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    publisher: PublisherSettings = field(default_factory=PublisherSettings)
    qa: QaSettings = field(default_factory=QaSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    hotwords: HotwordSettings = field(default_factory=HotwordSettings)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)


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
