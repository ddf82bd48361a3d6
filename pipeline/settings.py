"""Settings: frozen dataclasses whose every field can come from a TOML file or the environment.

Each field declares its environment variable and help in ``field(metadata=...)`` via ``setting()``;
``load_settings`` reads, in increasing precedence: defaults, the TOML file named by
``STREAMSCRIBE_CONFIG`` (or passed explicitly), then environment variables. ``describe_settings``
lists every setting with its default and variable (the README's configuration table and
``streamscribe config`` are generated from it).

Every value is checked when settings are loaded (``validate_settings``): a value from the file
must have the setting's TOML type (an integer for an int setting, never a bool or a float), a
value from the environment must parse as that type, and both must lie within the bounds the
field declares (``setting(minimum=…, maximum=…, non_empty=…, pattern=…)``). A violation is a
``ConfigError`` naming the setting, its variable, the value and what is allowed.

librdkafka settings pass through untouched: ``[kafka.client]`` in the file (dotted keys, quoted
or not: ``sasl.password = "…"`` and ``"sasl.password" = "…"`` are the same key), or environment
variables ``STREAMSCRIBE_LIBRDKAFKA_<KEY>`` where the key's dots are written as underscores
(``STREAMSCRIBE_LIBRDKAFKA_SASL_USERNAME`` → ``sasl.username``). Whenever settings are shown,
values of keys that look secret are masked, and so is the password of any URL
(``redis://:pw@host`` → ``redis://:***@host``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from pipeline.contracts.audio_chunk import DEFAULT_MAX_PAYLOAD_BYTES
from pipeline.errors import ConfigError
from pipeline.redaction.policy import POLICY_PATTERN
from pipeline.worker.faults import FAULTS_PATTERN

__all__ = [
    "AsrSettings",
    "HotwordSettings",
    "IngressSettings",
    "KafkaSettings",
    "MetricsSettings",
    "MonitorSettings",
    "PublisherSettings",
    "QaSettings",
    "RedactionSettings",
    "RedisSettings",
    "SettingInfo",
    "Settings",
    "WorkerSettings",
    "describe_settings",
    "env_variable",
    "load_settings",
    "mask_url_passwords",
    "masked_client_config",
    "setting",
    "validate_settings",
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


DEVICE_PATTERN = r"auto|cpu|cuda(:[0-9]+)?"
"""The values of ``asr.device`` (``pipeline.asr.factory.resolve_device`` resolves them)."""

# The password runs to the last "@" of the URL, not to its first "/", "?" or "#": a generated
# password pasted without percent-encoding often has a "/". A space, a quote or the next URL's
# "://" (a comma-separated list) ends the URL.
_URL_PASSWORD = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#\s'\"]*:)(?:(?!://)[^\s'\"])*@"
)


def setting(
    default: Any,
    env: str,
    help: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    greater_than: float | None = None,
    non_empty: bool = False,
    pattern: str | None = None,
    expects: str = "",
    secret: bool = False,
) -> Any:
    """A dataclass field with its environment variable (without prefix), a one-line help, and
    the values it accepts: numbers within ``minimum``..``maximum`` (inclusive) and above
    ``greater_than`` (exclusive); strings that are not blank (``non_empty``) or that match
    ``pattern`` as a whole (``expects`` describes it in errors). A ``secret`` value is shown as
    ``***`` wherever settings are shown."""
    metadata = {
        "env": ENV_PREFIX + env,
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "greater_than": greater_than,
        "non_empty": non_empty,
        "pattern": pattern,
        "expects": expects,
        "secret": secret,
    }
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """Where the brokers are and how topics are named."""

    bootstrap_servers: str = setting(
        "127.0.0.1:19092",
        "KAFKA_BOOTSTRAP",
        "Kafka bootstrap servers (host:port,…)",
        non_empty=True,
    )
    topic_prefix: str = setting(
        "", "TOPIC_PREFIX", "prefix prepended to every topic name (per environment)"
    )
    replication_factor: int = setting(
        1,
        "REPLICATION_FACTOR",
        "replication factor of topics created by `topics apply`",
        minimum=1,
        maximum=32767,  # Kafka's int16
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

    url: str = setting(
        "redis://127.0.0.1:16379/0",
        "REDIS_URL",
        "Redis URL",
        pattern=r"(redis|rediss|unix)://.+",
        expects="a redis://, rediss:// or unix:// URL",
    )


@dataclass(frozen=True, slots=True)
class AsrSettings:
    """The recognizer and its streaming policy (per process; tenants share the model, and may
    have their own endpoint rules)."""

    model_dir: str = setting(
        "", "MODEL_DIR", "CTranslate2 Whisper directory; empty = bundled tiny.en"
    )
    device: str = setting(
        "auto",
        "DEVICE",
        "torch device: auto (cuda when present), cpu, cuda, cuda:N",
        pattern=DEVICE_PATTERN,
        expects="auto, cpu, cuda or cuda:N",
    )
    threads: int = setting(0, "TORCH_THREADS", "CPU threads for torch; 0 = all cores", minimum=0)
    quantization: str = setting(
        "none",
        "QUANTIZATION",
        "Whisper weights on the CPU: none (float32) or int8 (int8 linear layers, x86 CPUs; "
        "faster, +0.5 WER point on the fixtures); CUDA always runs float16",
        pattern=r"none|int8",
        expects="none or int8",
    )
    hop_ms: int = setting(
        500, "HOP_MS", "re-decode an open utterance every this much audio", minimum=1
    )
    min_decode_ms: int = setting(
        500, "MIN_DECODE_MS", "first partial after this much speech", minimum=0
    )
    max_batch: int = setting(16, "MAX_BATCH", "most windows per recognizer forward pass", minimum=1)
    step_budget_ms: int = setting(
        300,
        "STEP_BUDGET_MS",
        "wall-time budget of a step's partial decodes; 0 = none",
        minimum=0,
    )
    early_final_ms: int = setting(
        300,
        "EARLY_FINAL_MS",
        "decode a final this far into its trailing silence; 0 = at the endpoint",
        minimum=0,
    )
    # Whisper's encoder sees at most 30 s: a longer margin or window would be cut to that.
    margin_ms: int = setting(
        2000,
        "WINDOW_MARGIN_MS",
        "silence appended to each decoding window",
        minimum=0,
        maximum=30000,
    )
    min_window_ms: int = setting(
        10000, "MIN_WINDOW_MS", "shortest decoding window (Whisper)", minimum=0, maximum=30000
    )
    partial_min_window_ms: int = setting(
        10000,
        "PARTIAL_MIN_WINDOW_MS",
        "shortest decoding window of a partial (the smaller of this and MIN_WINDOW_MS applies)",
        minimum=0,
        maximum=30000,
    )
    vad_threshold: float = setting(
        0.5,
        "VAD_THRESHOLD",
        "speech probability that starts speech",
        greater_than=0.0,
        maximum=1.0,
    )
    speech_pad_ms: int = setting(60, "SPEECH_PAD_MS", "audio kept after detected speech", minimum=0)
    speech_start_pad_ms: int = setting(
        60,
        "SPEECH_START_PAD_MS",
        "audio kept before detected speech (pre-roll: late VAD starts clip first words)",
        minimum=0,
    )
    endpoint_silence_ms: int = setting(
        800, "ENDPOINT_SILENCE_MS", "trailing silence that ends an utterance", minimum=1
    )
    max_utterance_ms: int = setting(
        20000,
        "MAX_UTTERANCE_MS",
        "longest utterance before a cut (Whisper hears 30 s)",
        minimum=1,
        maximum=29000,
    )
    long_utterance_ms: int = setting(
        0,
        "LONG_UTTERANCE_MS",
        "from this much speech on, a shorter pause (LONG_UTTERANCE_SILENCE_MS) ends an "
        "utterance, so a long turn is cut between sentences; 0 = never",
        minimum=0,
        maximum=29000,
    )
    long_utterance_silence_ms: int = setting(
        200,
        "LONG_UTTERANCE_SILENCE_MS",
        "trailing silence that ends an utterance longer than LONG_UTTERANCE_MS",
        minimum=1,
    )
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

    group_id: str = setting(
        "streamscribe-asr", "GROUP_ID", "consumer group of the ASR workers", non_empty=True
    )
    worker_id: str = setting(
        "", "WORKER_ID", "stable id of this worker (transactional id); empty = host-pid"
    )
    static_membership: bool = setting(
        False,
        "STATIC_MEMBERSHIP",
        "use worker_id as group.instance.id (static membership; give a worker_id that "
        "survives restarts)",
    )
    poll_batch: int = setting(
        1000,
        "POLL_BATCH",
        "most records taken per poll",
        minimum=1,
        maximum=1_000_000,  # confluent-kafka's limit of one consume()
    )
    poll_timeout_ms: int = setting(
        20,
        "POLL_TIMEOUT_MS",
        "longest wait for records per poll",
        minimum=0,
        maximum=60_000,  # from 2^31 ms on, confluent-kafka's consume returns at once: a busy loop
    )
    commit_interval_ms: int = setting(
        1000,
        "COMMIT_INTERVAL_MS",
        "commit offsets and checkpoints at least this often",
        minimum=0,
    )
    checkpoint_interval_ms: int = setting(
        5000,
        "CHECKPOINT_INTERVAL_MS",
        "snapshot an idle session's progress at most this often",
        minimum=0,
    )
    idle_timeout_ms: int = setting(
        30000,
        "IDLE_TIMEOUT_MS",
        "close a session after this long without its audio while its partition delivers "
        "other records (pauses, stalls and outages do not count)",
        minimum=1,
    )
    quiet_idle_timeout_ms: int = setting(
        300_000,
        "QUIET_IDLE_TIMEOUT_MS",
        "close a session after this long without its audio when its partition delivers no "
        "record at all (time spent fetching; a publisher or broker outage looks the same)",
        minimum=1,
    )
    ended_retention_ms: int = setting(
        3_600_000,
        "ENDED_RETENTION_MS",
        "remember an ended channel this long (its late chunks are refused), then forget it",
        minimum=0,
    )
    max_call_ms: int = setting(
        14_400_000, "MAX_CALL_MS", "longest call per channel (audio ms)", minimum=1
    )
    max_open_sessions: int = setting(
        2000, "MAX_OPEN_SESSIONS", "most open sessions per worker", minimum=1
    )
    max_chunk_bytes: int = setting(
        DEFAULT_MAX_PAYLOAD_BYTES, "MAX_CHUNK_BYTES", "largest accepted audio payload", minimum=1
    )
    max_pending_jobs: int = setting(
        64,
        "MAX_PENDING_JOBS",
        "thin partials when more decodes than half this are due; pause partitions when more "
        "finals than this wait",
        minimum=1,
    )
    max_step_jobs: int = setting(64, "MAX_STEP_JOBS", "most decodes per engine step", minimum=1)
    session_timeout_ms: int = setting(
        10000,
        "KAFKA_SESSION_TIMEOUT_MS",
        "group session timeout (failover detection)",
        minimum=1,
        maximum=300_000,  # librdkafka: at most the consumer's max.poll.interval.ms
    )
    transaction_timeout_ms: int = setting(
        10000,
        "TRANSACTION_TIMEOUT_MS",
        "abort a dead worker's open transaction after this",
        minimum=1000,  # librdkafka's range of transaction.timeout.ms
        maximum=2_147_483_647,
    )
    shutdown_timeout_ms: int = setting(
        10000, "SHUTDOWN_TIMEOUT_MS", "SIGTERM: exit within this long", minimum=0
    )
    faults: str = setting(
        "",
        "FAULTS",
        "TESTS ONLY: fault points to arm, POINT=ACTION[:MS][@N],... (pipeline/worker/faults.py); "
        "never set in production",
        pattern=FAULTS_PATTERN,
        expects="POINT=raise|kill|stop|sleep:MS[@N], comma-separated",
    )


@dataclass(frozen=True, slots=True)
class PublisherSettings:
    """How producers cut and send audio (``AudioPublisher``, ``publish``, ``simulate``)."""

    chunk_ms: int = setting(20, "CHUNK_MS", "audio per chunk record, milliseconds", minimum=1)
    linger_ms: int = setting(
        5,
        "PUBLISH_LINGER_MS",
        "producer batching delay (librdkafka linger.ms)",
        minimum=0,
        maximum=900_000,  # librdkafka's range of linger.ms
    )
    delivery_timeout_ms: int = setting(
        30000,
        "PUBLISH_DELIVERY_TIMEOUT_MS",
        "give up on a chunk's delivery after this long",
        minimum=1,
        maximum=2_147_483_647,
    )
    tenant: str = setting(
        "default", "TENANT", "tenant id of published calls (ss-tenant)", non_empty=True
    )


@dataclass(frozen=True, slots=True)
class QaSettings:
    """The QA analytics app (``streamscribe qa``)."""

    app_id: str = setting(
        "streamscribe-qa",
        "QA_APP_ID",
        "faust app id (consumer group, table and internal topic names; the topic prefix is "
        "prepended)",
        non_empty=True,
    )
    web_port: int = setting(
        6066,
        "QA_WEB_PORT",
        "port of the QA app's web views and /metrics",
        minimum=1,
        maximum=65535,
    )
    web_bind: str = setting("0.0.0.0", "QA_WEB_BIND", "address the QA app's web server binds")
    rules_file: str = setting("", "QA_RULES_FILE", "compliance rules file (TOML); empty = built-in")
    partitions: int = setting(
        6,
        "QA_PARTITIONS",
        "partitions of the QA app's internal input topic and table changelogs (fixed once created)",
        minimum=1,
    )
    idle_timeout_ms: int = setting(
        1_800_000,
        "QA_IDLE_TIMEOUT_MS",
        "a call without session_ended for every channel ends after this long without records",
        minimum=1,
    )
    end_grace_ms: int = setting(
        5_000,
        "QA_END_GRACE_MS",
        "an ended call is published once it has the finals its session_ended events announce "
        "(detail.utterances), or else (no count, or finals missing) once it has been quiet this "
        "long (finals and events arrive on different topics)",
        minimum=0,
    )
    retention_ms: int = setting(
        86_400_000,
        "QA_RETENTION_MS",
        "ended calls stay in the QA tables (late finals, web views) this long, and until their "
        "last change is published",
        minimum=0,
    )


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """Prometheus exposition and probes of a worker (``pipeline.runtime.health``)."""

    port: int = setting(
        9400,
        "METRICS_PORT",
        "port of /metrics, /healthz and /readyz (0 = off)",
        minimum=0,
        maximum=65535,
    )
    host: str = setting(
        "0.0.0.0", "METRICS_HOST", "address /metrics, /healthz and /readyz listen on"
    )
    gpu_sample_interval_ms: int = setting(
        5000,
        "METRICS_GPU_SAMPLE_INTERVAL_MS",
        "period of GPU utilization and memory sampling",
        minimum=1,
    )
    probe_timeout_ms: int = setting(
        2000,
        "METRICS_PROBE_TIMEOUT_MS",
        "timeout of one Kafka reachability probe (/readyz)",
        minimum=1,
    )
    latency_objective_ms: int = setting(
        400,
        "LATENCY_OBJECTIVE_MS",
        "P99 latency the latency alerts hold the workers to (exported as "
        "asr_latency_objective_seconds); CPU workers need more, e.g. 1500",
        minimum=1,
    )


@dataclass(frozen=True, slots=True)
class HotwordSettings:
    """Hotword lists in Redis and how strongly they bias decoding (``docs/hotwords.md``)."""

    key_prefix: str = setting(
        "ss:hotwords",
        "HOTWORDS_KEY_PREFIX",
        "prefix of hotword keys and channel in Redis",
        non_empty=True,
    )
    call_ttl_s: int = setting(
        86400,
        "HOTWORDS_CALL_TTL_S",
        "a per-call list expires this long after its last change",
        minimum=0,  # 0: never (HotwordStore's own contract)
    )
    start_bonus: float = setting(
        5.0,
        "HOTWORDS_START_BONUS",
        "largest logit bonus of a phrase's first token (× its boost; scaled by token rarity)",
        minimum=0.0,
    )
    continue_bonus: float = setting(
        7.0,
        "HOTWORDS_CONTINUE_BONUS",
        "logit bonus of the next token of a phrase in progress (× its boost)",
        minimum=0.0,
    )
    resync_interval_ms: int = setting(
        30000,
        "HOTWORDS_RESYNC_INTERVAL_MS",
        "version check (reload on mismatch) and TTL sweep",
        minimum=1,
    )
    reconnect_initial_ms: int = setting(
        100,
        "HOTWORDS_RECONNECT_INITIAL_MS",
        "first reconnect delay after Redis is lost",
        minimum=1,
    )
    reconnect_max_ms: int = setting(
        10000,
        "HOTWORDS_RECONNECT_MAX_MS",
        "longest reconnect delay (exponential backoff)",
        minimum=1,
    )


@dataclass(frozen=True, slots=True)
class RedactionSettings:
    """Redaction of card numbers and personal data from transcripts (``docs/redaction.md``)."""

    policy: str = setting(
        "off",
        "REDACTION_POLICY",
        "what every tenant's transcripts lose: off, pci (card number, security code, expiry), "
        "pii (pci + SSN, bank account, routing number, phone, e-mail, date of birth) or entity "
        "types joined by + (card_number+email)",
        pattern=POLICY_PATTERN,
        expects="off, pci, pii or entity types joined by + (docs/redaction.md)",
    )
    tenant_policies: str = setting(
        "",
        "REDACTION_TENANT_POLICIES",
        "per-tenant policies `tenant:policy,…`; other tenants use the one above",
    )
    hold_ms: int = setting(
        3000,
        "REDACTION_HOLD_MS",
        "a final ending in an unfinished number waits for the channel's next final if that "
        "starts within this much audio after it; 0 = never held",
        minimum=0,
        maximum=10_000,
    )
    phone_region: str = setting(
        "US",
        "REDACTION_PHONE_REGION",
        "region (ISO 3166 alpha-2) of phone numbers said without a country code",
        pattern=r"[A-Z]{2}",
        expects="two capital letters (US, GB, …)",
    )


@dataclass(frozen=True, slots=True)
class MonitorSettings:
    """The web monitor for supervisors and QA analysts (``streamscribe monitor``)."""

    port: int = setting(
        6070,
        "MONITOR_PORT",
        "port of the monitor's web pages and JSON APIs",
        minimum=1,
        maximum=65535,
    )
    bind: str = setting("0.0.0.0", "MONITOR_BIND", "address the monitor's web server binds")
    max_calls: int = setting(
        1000,
        "MONITOR_MAX_CALLS",
        "most calls held in memory (live and recent); oldest evicted",
        minimum=1,
    )
    max_age_ms: int = setting(
        86_400_000,
        "MONITOR_MAX_AGE_MS",
        "a call leaves the monitor this long after its last record; also how far back the "
        "topics are read at start",
        minimum=1,
    )
    ended_linger_ms: int = setting(
        60_000,
        "MONITOR_ENDED_LINGER_MS",
        "an ended call stays on the live page this long",
        minimum=0,
    )
    worker_metrics_urls: str = setting(
        "",
        "MONITOR_WORKER_METRICS_URLS",
        "comma-separated /metrics URLs of the ASR workers for the health strip; empty = unknown",
    )
    metrics_interval_ms: int = setting(
        5000,
        "MONITOR_METRICS_INTERVAL_MS",
        "how often the workers' /metrics are read",
        minimum=100,
    )
    metrics_window_ms: int = setting(
        60_000,
        "MONITOR_METRICS_WINDOW_MS",
        "P95 latencies and the DLQ rate cover this window",
        minimum=100,
    )


@dataclass(frozen=True, slots=True)
class IngressSettings:
    """The telephony ingress gateway (``streamscribe ingress``, docs/ingress.md)."""

    bind: str = setting(
        "0.0.0.0", "INGRESS_BIND", "address of the control API, WebSocket media and /metrics"
    )
    port: int = setting(
        8090,
        "INGRESS_PORT",
        "port of the control API, WebSocket media streams, /metrics, /healthz and /readyz",
        minimum=0,  # 0: any free port (tests)
        maximum=65535,
    )
    rtp_bind: str = setting("0.0.0.0", "INGRESS_RTP_BIND", "address the RTP receive ports bind")
    advertised_host: str = setting(
        "",
        "INGRESS_ADVERTISED_HOST",
        "host named in allocations (where senders send RTP); empty = the host the request used",
    )
    rtp_port_min: int = setting(
        40000, "INGRESS_RTP_PORT_MIN", "lowest RTP receive port", minimum=1, maximum=65535
    )
    rtp_port_max: int = setting(
        40999,
        "INGRESS_RTP_PORT_MAX",
        "highest RTP receive port (the range bounds the open channels)",
        minimum=1,
        maximum=65535,
    )
    allowed_networks: str = setting(
        "127.0.0.0/8,::1/128",
        "INGRESS_ALLOWED_NETWORKS",
        "comma-separated networks RTP and SIP may come from; `any` = every address",
        non_empty=True,
    )
    auth_token: str = setting(
        "",
        "INGRESS_AUTH_TOKEN",
        "bearer token the control API and WebSocket streams require (`Authorization: Bearer`, "
        "`?token=` or Twilio's `token` custom parameter)",
        secret=True,
    )
    auth_disabled: bool = setting(
        False,
        "INGRESS_AUTH_DISABLED",
        "serve the control API and WebSocket streams without a token (only behind another guard)",
    )
    record_ms: int = setting(
        100,
        "INGRESS_RECORD_MS",
        "audio per published record, milliseconds",
        minimum=10,
        maximum=2000,
    )
    max_calls: int = setting(500, "INGRESS_MAX_CALLS", "most open calls", minimum=1)
    idle_timeout_ms: int = setting(
        10_000,
        "INGRESS_IDLE_TIMEOUT_MS",
        "end a call (end-of-stream on every channel) after this long without its media",
        minimum=1,
    )
    reorder_depth_packets: int = setting(
        8,
        "INGRESS_REORDER_DEPTH_PACKETS",
        "most RTP packets a channel holds back to reorder; a missing one is lost beyond this",
        minimum=1,
        maximum=1000,
    )
    reorder_wait_ms: int = setting(
        60,
        "INGRESS_REORDER_WAIT_MS",
        "longest a packet waits for a missing earlier one",
        minimum=0,
        maximum=10_000,
    )
    reorder_start_hold_ms: int = setting(
        40,
        "INGRESS_REORDER_START_HOLD_MS",
        "how long a stream's first packets wait to be reordered (0: the first one starts it)",
        minimum=0,
        maximum=1000,
    )
    max_gap_ms: int = setting(
        10_000,
        "INGRESS_MAX_GAP_MS",
        "longest silence filled in one gap; a larger timestamp jump is a stream reset",
        minimum=20,
        maximum=600_000,
    )
    max_ws_frame_bytes: int = setting(
        65_536,
        "INGRESS_MAX_WS_FRAME_BYTES",
        "largest WebSocket frame taken (a larger one closes the stream with 1009)",
        minimum=1024,
        maximum=16 * 1024 * 1024,
    )
    sip_enabled: bool = setting(
        True, "INGRESS_SIP_ENABLED", "answer SIP calls (UDP and TCP) on `ingress.sip_port`"
    )
    sip_bind: str = setting("0.0.0.0", "INGRESS_SIP_BIND", "address SIP (UDP and TCP) binds")
    sip_port: int = setting(
        5060,
        "INGRESS_SIP_PORT",
        "SIP port, UDP and TCP (0: any free port, the same for both)",
        minimum=0,
        maximum=65535,
    )
    siprec_agent_rule: str = setting(
        "",
        "INGRESS_SIPREC_AGENT_RULE",
        "which SIPREC participant is the agent: `aor:GLOB`, `domain:DOMAIN` or `name:GLOB`, "
        "comma-separated alternatives; empty = SIPREC refused (420)",
    )
    dtmf_digits_in_events: bool = setting(
        False,
        "INGRESS_DTMF_DIGITS_IN_EVENTS",
        "name the digit in `dtmf_received` events (off: they say a key was pressed, not which)",
    )
    reject_log_interval_ms: int = setting(
        10_000,
        "INGRESS_REJECT_LOG_INTERVAL_MS",
        "log one line per rejection reason at most this often (the metric counts all)",
        minimum=0,
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
    redaction: RedactionSettings = field(default_factory=RedactionSettings)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)
    ingress: IngressSettings = field(default_factory=IngressSettings)


@dataclass(frozen=True, slots=True)
class SettingInfo:
    """One row of the configuration table."""

    name: str
    env: str
    value: str
    help: str


T = TypeVar("T")

_TOML_KINDS: dict[Any, tuple[tuple[type, ...], str]] = {
    bool: ((bool,), "true or false"),
    int: ((int,), "an integer"),
    float: ((int, float), "a number"),
    str: ((str,), "a string"),
}


def _shown(value: Any) -> str:
    """``repr(value)`` with URL passwords masked: error messages may be logged or pasted."""
    return mask_url_passwords(repr(value)) if isinstance(value, str) else repr(value)


def _from_env(value: str, kind: Any, name: str, env: str) -> Any:
    """An environment variable's text parsed as ``kind``."""
    if kind is bool:
        text = value.strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name} ({env}) must be true or false, got {_shown(value)}")
    if kind is int:
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{name} ({env}) must be an integer, got {_shown(value)}") from None
    if kind is float:
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{name} ({env}) must be a number, got {_shown(value)}") from None
    if isinstance(kind, types.UnionType):
        if value == "":
            return None
        inner = [k for k in kind.__args__ if k is not type(None)]
        return _from_env(value, inner[0], name, env)
    return value


def _from_file(value: Any, kind: Any, name: str, env: str) -> Any:
    """A TOML value, which must already have the setting's type (an integer is a float too;
    a bool is never a number): the file says what it means, nothing is converted."""
    if isinstance(kind, types.UnionType):
        inner = [k for k in kind.__args__ if k is not type(None)]
        return _from_file(value, inner[0], name, env)
    accepted, described = _TOML_KINDS[kind]
    if type(value) not in accepted:
        raise ConfigError(
            f"{name} ({env}) must be {described} in the settings file, got {_shown(value)}"
        )
    return float(value) if kind is float else value


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
            values[spec.name] = _from_env(env[env_name], kind, name, env_name)
        elif spec.name in section:
            values[spec.name] = _from_file(section[spec.name], kind, name, env_name)
    unknown = set(section) - {spec.name for spec in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if unknown:
        raise ConfigError(f"unknown setting(s) in the settings file: {sorted(unknown)} ({path})")
    return cls(**values)


def _flatten_client(table: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, str]]:
    """``{"sasl": {"password": "x"}}`` → ``("sasl.password", "x")``: TOML reads an unquoted
    dotted key as nested tables, librdkafka wants the dotted name."""
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flatten_client(value, name + ".")
        elif isinstance(value, bool):
            yield name, "true" if value else "false"
        elif isinstance(value, str | int | float):
            yield name, str(value)
        else:
            # The value itself is not shown: it may be a secret.
            raise ConfigError(
                f"kafka.client {name} must be a string, number or boolean in the settings "
                f"file, got a {type(value).__name__}"
            )


def _librdkafka_config(from_file: Any, env: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(from_file, Mapping):
        raise ConfigError(
            "[kafka.client] must be a table of librdkafka settings in the settings file"
        )
    config: dict[str, str] = {}
    for key, value in _flatten_client(from_file, ""):
        if key in config:
            raise ConfigError(f"kafka.client {key} is given twice in the settings file")
        config[key] = value
    for name, value in env.items():
        if name.startswith(LIBRDKAFKA_ENV_PREFIX):
            key = name.removeprefix(LIBRDKAFKA_ENV_PREFIX).lower().replace("_", ".")
            config[key] = value
    return config


def load_settings(path: Path | str | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Defaults, overlaid by the TOML file (``path`` or ``$STREAMSCRIBE_CONFIG``), then env vars.

    Raises:
        ConfigError: unreadable or non-UTF-8 file, unknown key, a value of the wrong type, or
            a value outside its setting's bounds (``validate_settings``).
    """
    environ = os.environ if env is None else env
    file_path = path if path is not None else environ.get(ENV_PREFIX + "CONFIG")
    data: dict[str, Any] = {}
    if file_path:
        try:
            data = tomllib.loads(Path(file_path).read_text(encoding="utf-8"))
        except UnicodeDecodeError as error:
            raise ConfigError(
                f"cannot read settings file {file_path}: not UTF-8 (byte {error.start})"
            ) from None
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise ConfigError(f"cannot read settings file {file_path}: {error}") from None
    return validate_settings(_build(Settings, data, environ, ""))


def _violation(metadata: Mapping[str, Any], value: Any) -> str | None:
    """What ``value`` must be, when it breaks the bounds declared in ``metadata``; else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "a finite number"
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = metadata.get("minimum"), metadata.get("maximum")
        above = metadata.get("greater_than")
        if (
            (low is not None and value < low)
            or (high is not None and value > high)
            or (above is not None and value <= above)
        ):
            if above is not None:
                return f"greater than {above}" + ("" if high is None else f" and at most {high}")
            if low is not None and high is not None:
                return f"between {low} and {high}"
            return f"at least {low}" if low is not None else f"at most {high}"
    if isinstance(value, str):
        if metadata.get("non_empty") and not value.strip():
            return "non-empty"
        pattern = metadata.get("pattern")
        if pattern is not None and not re.fullmatch(pattern, value):
            return str(metadata["expects"])
    return None


def validate_settings(settings: Settings) -> Settings:
    """``settings`` itself, once every value is within the bounds its field declares.

    ``load_settings`` calls it; call it again after replacing values (a command-line flag that
    overrides a setting), so a flag is held to the same bounds as the variable.

    Raises:
        ConfigError: the first value out of bounds, naming the setting, its environment
            variable, the value and what is allowed.
    """
    for name, spec, value in _walk(Settings, settings, ""):
        must_be = _violation(spec.metadata, value)
        if must_be is not None:
            raise ConfigError(
                f"{name} ({spec.metadata['env']}) must be {must_be}, got {_shown(value)}"
            )
    return settings


def _walk(cls: type[Any], instance: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    for spec in dataclasses.fields(cls):
        name = f"{path}.{spec.name}" if path else spec.name
        value = getattr(instance, spec.name)
        if dataclasses.is_dataclass(value):
            yield from _walk(type(value), value, name)
        else:
            yield name, spec, value


def env_variable(settings_class: type[Any], name: str) -> str:
    """The environment variable of setting ``name`` of ``settings_class`` (for messages about a
    value that is checked after loading, e.g. ``env_variable(AsrSettings, "tenant_endpoints")``)."""
    for spec in dataclasses.fields(settings_class):
        if spec.name == name:
            return str(spec.metadata["env"])
    raise KeyError(f"{settings_class.__name__} has no setting {name!r}")


def describe_settings(settings: Settings | None = None) -> list[SettingInfo]:
    """Every setting with its env variable, and its value in ``settings`` (defaults if None).

    Secrets are masked: secret-looking librdkafka values, and the password of any URL."""
    current = settings or Settings()
    rows = []
    for name, spec, value in _walk(Settings, current, ""):
        shown = masked_client_config(value) if name == "kafka.client" else value
        if spec.metadata.get("secret") and value:
            shown = "***"
        rows.append(
            SettingInfo(
                name, spec.metadata["env"], mask_url_passwords(repr(shown)), spec.metadata["help"]
            )
        )
    return rows


def mask_url_passwords(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``
    (``rediss://user:pw@host:6380/0`` → ``rediss://user:***@host:6380/0``); the rest, user
    names included, is left as it is."""
    return _URL_PASSWORD.sub(r"\g<head>***@", text)


def masked_client_config(config: Mapping[str, str]) -> dict[str, str]:
    """A copy of a librdkafka config whose secret-looking values are replaced by ``***`` (and
    whose URLs lose their passwords)."""
    return {
        key: (
            "***"
            if any(marker in key.lower() for marker in SECRET_KEY_MARKERS)
            else mask_url_passwords(value)
        )
        for key, value in config.items()
    }
