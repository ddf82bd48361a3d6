"""Settings: defaults < file < environment; librdkafka pass-through; secrets masked."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline import settings as settings_module
from pipeline.asr.factory import TENANT_ENDPOINTS_ENV, whisper_settings
from pipeline.asr.whisper.quantize import Quantization
from pipeline.contracts.audio_chunk import DEFAULT_MAX_PAYLOAD_BYTES
from pipeline.errors import ConfigError
from pipeline.replay.runner import ReplayOptions
from pipeline.settings import (
    AsrSettings,
    MetricsSettings,
    Settings,
    WorkerSettings,
    describe_settings,
    env_variable,
    load_settings,
    mask_url_passwords,
    masked_client_config,
    validate_settings,
)
from pipeline.worker.admission import AdmissionLimits


def test_defaults_without_file_or_environment() -> None:
    settings = load_settings(env={})
    assert settings.kafka.bootstrap_servers == "127.0.0.1:19092"
    assert settings.kafka.topic_prefix == ""
    assert dict(settings.kafka.client) == {}


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        '[kafka]\nbootstrap_servers = "file:1"\nreplication_factor = 3\n'
        '[kafka.client]\n"security.protocol" = "SASL_SSL"\n'
    )
    settings = load_settings(path, env={"STREAMSCRIBE_KAFKA_BOOTSTRAP": "env:2"})
    assert settings.kafka.bootstrap_servers == "env:2"
    assert settings.kafka.replication_factor == 3
    assert settings.kafka.client == {"security.protocol": "SASL_SSL"}


def test_librdkafka_settings_pass_through_and_secrets_are_masked() -> None:
    env = {
        "STREAMSCRIBE_LIBRDKAFKA_SASL_USERNAME": "svc",
        "STREAMSCRIBE_LIBRDKAFKA_SASL_PASSWORD": "hunter2",
        "STREAMSCRIBE_LIBRDKAFKA_SASL_OAUTHBEARER_CONFIG": "clientId=svc clientSecret=s3cr3t",
        "STREAMSCRIBE_LIBRDKAFKA_SASL_KERBEROS_KEYTAB": "/etc/secret-path.keytab",
    }
    settings = load_settings(env=env)
    assert settings.kafka.client["sasl.username"] == "svc"
    assert settings.kafka.client["sasl.password"] == "hunter2"
    shown = " ".join(row.value for row in describe_settings(settings))
    for secret in ("hunter2", "s3cr3t", "secret-path"):
        assert secret not in shown
    assert "'sasl.username': 'svc'" in shown


def test_every_setting_names_its_environment_variable() -> None:
    rows = describe_settings()
    assert rows
    assert all(row.env.startswith("STREAMSCRIBE_") and row.help for row in rows)


def test_bad_values_and_unknown_keys_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="STREAMSCRIBE_REPLICATION_FACTOR"):
        load_settings(env={"STREAMSCRIBE_REPLICATION_FACTOR": "three"})
    path = tmp_path / "s.toml"
    path.write_text("[kafka]\nbootstrap = 'x'\n")
    with pytest.raises(ConfigError, match="unknown setting"):
        load_settings(path, env={})


# --- secrets in URLs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:pw@host:6380/0", "rediss://user:***@host:6380/0"),
        ("redis://:p@ss@host/0", "redis://:***@host/0"),  # an unescaped @ in the password
        ("redis://:a,b@host/0", "redis://:***@host/0"),
        ("redis://user@host/0", "redis://user@host/0"),  # a user name alone is no secret
        ("redis://127.0.0.1:16379/0", "redis://127.0.0.1:16379/0"),  # host:port, no userinfo
        (
            "http://w1:9400/metrics,https://u:pw@w2:9400/metrics",
            "http://w1:9400/metrics,https://u:***@w2:9400/metrics",
        ),
        ("{'a': 'http://u:pw@h', 'b': 'x@y'}", "{'a': 'http://u:***@h', 'b': 'x@y'}"),
        # Security review: a raw "/", "?" or "#" in the password left the whole URL unmasked.
        ("'redis://default:Zm9v/YmFy+@redis:6379/0'", "'redis://default:***@redis:6379/0'"),
        ("rediss://u:p#w@h:6380/0", "rediss://u:***@h:6380/0"),
        ("redis://u:p?w@h", "redis://u:***@h"),
        ("http://u:pa/ss@h/metrics: refused", "http://u:***@h/metrics: refused"),
        ("http://a:p/1@h1/m,http://b:q@h2/m", "http://a:***@h1/m,http://b:***@h2/m"),
    ],
)
def test_the_password_of_a_url_is_masked(text: str, shown: str) -> None:
    assert mask_url_passwords(text) == shown


def test_url_passwords_are_masked_wherever_settings_are_shown() -> None:
    settings = load_settings(
        env={
            "STREAMSCRIBE_REDIS_URL": "rediss://svc:hunter2@redis.internal:6380/0",
            "STREAMSCRIBE_MONITOR_WORKER_METRICS_URLS": "https://scrape:s3cr3t@w1:9400/metrics",
            "STREAMSCRIBE_LIBRDKAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "https://id:t0k@idp/t",
        }
    )
    assert settings.redis.url == "rediss://svc:hunter2@redis.internal:6380/0"  # used as given
    shown = {row.name: row.value for row in describe_settings(settings)}
    assert shown["redis.url"] == "'rediss://svc:***@redis.internal:6380/0'"
    assert shown["monitor.worker_metrics_urls"] == "'https://scrape:***@w1:9400/metrics'"
    for secret in ("hunter2", "s3cr3t", "t0k"):
        assert all(secret not in value for value in shown.values())


# --- [kafka.client] in the file --------------------------------------------------------------


def test_dotted_client_keys_in_the_file_are_librdkafka_keys_and_their_secrets_masked(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        "[kafka.client]\n"
        'security.protocol = "SASL_SSL"\n'  # unquoted: TOML reads nested tables
        'sasl.mechanism = "PLAIN"\n'
        'sasl.username = "svc"\n'
        'sasl.password = "hunter2"\n'
        '"ssl.ca.location" = "/etc/ca.pem"\n'
        "enable.idempotence = true\n"
        "linger.ms = 5\n"
    )
    client = load_settings(path, env={}).kafka.client
    assert client == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "svc",
        "sasl.password": "hunter2",
        "ssl.ca.location": "/etc/ca.pem",
        "enable.idempotence": "true",
        "linger.ms": "5",
    }
    assert masked_client_config(client)["sasl.password"] == "***"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[kafka]\nclient = "x"\n', r"\[kafka.client\] must be a table"),
        ('[kafka.client]\nsasl.mechanisms = ["PLAIN"]\n', "sasl.mechanisms must be a string"),
        (
            '[kafka.client]\nsasl.password = "a"\n"sasl.password" = "b"\n',
            "sasl.password is given twice",
        ),
    ],
)
def test_a_client_table_of_anything_but_scalars_is_a_config_error(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_settings(path, env={})


# --- bounds ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("MAX_BATCH", "0", r"asr\.max_batch \(STREAMSCRIBE_MAX_BATCH\) must be at least 1, got 0$"),
        ("MAX_BATCH", "-1", r"asr\.max_batch .* at least 1, got -1"),
        ("POLL_BATCH", "0", r"worker\.poll_batch .* between 1 and 1000000, got 0"),
        ("POLL_TIMEOUT_MS", "-1", r"worker\.poll_timeout_ms .* between 0 and 60000, got -1"),
        ("MAX_CHUNK_BYTES", "0", r"worker\.max_chunk_bytes .* at least 1"),
        ("TORCH_THREADS", "-2", r"asr\.threads .* at least 0"),
        ("IDLE_TIMEOUT_MS", "0", r"worker\.idle_timeout_ms .* at least 1"),
        ("METRICS_PORT", "70000", r"metrics\.port .* between 0 and 65535, got 70000"),
        ("METRICS_PORT", "-1", r"metrics\.port .* between 0 and 65535, got -1"),
        ("QA_WEB_PORT", "0", r"qa\.web_port .* between 1 and 65535"),
        ("QA_APP_ID", "", r"qa\.app_id \(STREAMSCRIBE_QA_APP_ID\) must be non-empty, got ''"),
        ("QA_END_GRACE_MS", "-5", r"qa\.end_grace_ms .* at least 0, got -5"),
        ("GROUP_ID", " ", r"worker\.group_id .* non-empty"),
        ("KAFKA_BOOTSTRAP", "", r"kafka\.bootstrap_servers .* non-empty"),
        ("TENANT", "", r"publisher\.tenant .* non-empty"),
        ("HOTWORDS_KEY_PREFIX", "", r"hotwords\.key_prefix .* non-empty"),
        ("REPLICATION_FACTOR", "0", r"kafka\.replication_factor .* between 1 and 32767"),
        ("VAD_THRESHOLD", "0", r"asr\.vad_threshold .* greater than 0\.0 and at most 1\.0"),
        ("VAD_THRESHOLD", "nan", r"asr\.vad_threshold .* a finite number, got nan"),
        ("HOTWORDS_START_BONUS", "-1", r"hotwords\.start_bonus .* at least 0\.0"),
        ("KAFKA_SESSION_TIMEOUT_MS", "400000", r"worker\.session_timeout_ms .* and 300000"),
        ("TRANSACTION_TIMEOUT_MS", "999", r"worker\.transaction_timeout_ms .* between 1000"),
        ("PUBLISH_LINGER_MS", "900001", r"publisher\.linger_ms .* between 0 and 900000"),
        ("MONITOR_METRICS_INTERVAL_MS", "10", r"monitor\.metrics_interval_ms .* at least 100"),
        ("MIN_WINDOW_MS", "30001", r"asr\.min_window_ms .* between 0 and 30000"),
        ("REDIS_URL", "localhost:6379", r"redis\.url .* a redis://, rediss:// or unix:// URL"),
    ],
)
def test_a_value_out_of_bounds_names_setting_variable_value_and_range(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env={f"STREAMSCRIBE_{variable}": value})


def test_a_file_value_out_of_bounds_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[worker]\npoll_batch = 0\n")
    with pytest.raises(ConfigError, match=r"worker\.poll_batch \(STREAMSCRIBE_POLL_BATCH\)"):
        load_settings(path, env={})


def test_zero_stays_allowed_where_it_means_off_none_or_all() -> None:
    settings = load_settings(
        env={
            "STREAMSCRIBE_TORCH_THREADS": "0",  # all cores
            "STREAMSCRIBE_METRICS_PORT": "0",  # off
            "STREAMSCRIBE_STEP_BUDGET_MS": "0",  # no budget
            "STREAMSCRIBE_EARLY_FINAL_MS": "0",  # at the endpoint
            "STREAMSCRIBE_POLL_TIMEOUT_MS": "0",
            "STREAMSCRIBE_QA_END_GRACE_MS": "0",
            "STREAMSCRIBE_TOPIC_PREFIX": "",
            "STREAMSCRIBE_WORKER_ID": "",  # host-pid
            "STREAMSCRIBE_VAD_THRESHOLD": "1",
        }
    )
    assert (settings.asr.threads, settings.metrics.port, settings.asr.vad_threshold) == (0, 0, 1.0)


def test_every_numeric_setting_declares_a_bound_and_every_default_is_within_it() -> None:
    validate_settings(Settings())
    numeric = [
        (name, spec) for name, spec in _fields(Settings, "") if spec.type in ("int", "float")
    ]
    assert len(numeric) > 40
    unbounded = [
        name
        for name, spec in numeric
        if spec.metadata.get("minimum") is None and spec.metadata.get("greater_than") is None
    ]
    assert unbounded == []


def test_a_replaced_value_is_held_to_the_same_bounds() -> None:
    settings = Settings(metrics=dataclasses.replace(MetricsSettings(), port=70000))
    with pytest.raises(ConfigError, match=r"metrics\.port \(STREAMSCRIBE_METRICS_PORT\)"):
        validate_settings(settings)


def test_an_error_never_shows_a_url_password() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"STREAMSCRIBE_REDIS_URL": "http://u:hunter2@redis:6379"})
    assert "hunter2" not in str(caught.value)
    assert "http://u:***@redis:6379" in str(caught.value)


# --- quantization ----------------------------------------------------------------------------


def test_int8_weights_are_chosen_by_environment_and_reach_the_recognizer() -> None:
    settings = load_settings(env={"STREAMSCRIBE_QUANTIZATION": "int8"})
    assert whisper_settings(settings.asr, "cpu").quantization is Quantization.INT8
    default = load_settings(env={}).asr
    assert whisper_settings(default, "cpu").quantization is Quantization.NONE


@pytest.mark.parametrize("value", ["INT8", "int4", "fp16", ""])
def test_another_quantization_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match=r"asr\.quantization \(STREAMSCRIBE_QUANTIZATION\)"):
        load_settings(env={"STREAMSCRIBE_QUANTIZATION": value})


# --- device ----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:3"])
def test_a_torch_device_name_is_accepted(device: str) -> None:
    assert load_settings(env={"STREAMSCRIBE_DEVICE": device}).asr.device == device


@pytest.mark.parametrize("device", ["gpu", "GPU", "mps", "cuda:", "cuda:x", "cpu:0", ""])
def test_another_device_name_is_a_config_error(device: str) -> None:
    with pytest.raises(ConfigError, match=r"asr\.device \(STREAMSCRIBE_DEVICE\) must be auto"):
        load_settings(env={"STREAMSCRIBE_DEVICE": device})


def test_resolve_device_refuses_unknown_names_and_invisible_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from pipeline.asr.factory import resolve_device

    with pytest.raises(ConfigError, match="must be auto, cpu, cuda or cuda:N, got 'gpu'"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match=r"'cuda' but 0 CUDA device\(s\) are visible"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(ConfigError, match=r"'cuda:2' but 2 CUDA device"):
        resolve_device("cuda:2")


# --- the file: encoding and TOML types -------------------------------------------------------


def test_a_settings_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('[worker]\ngroup_id = "café"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"cannot read settings file .*latin1\.toml: not UTF-8"):
        load_settings(path, env={})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[worker]\npoll_timeout_ms = 20.9", r"worker\.poll_timeout_ms .* must be an integer"),
        ("[worker]\nmax_pending_jobs = true", r"worker\.max_pending_jobs .* must be an integer"),
        ('[asr]\nhop_ms = "500"', r"asr\.hop_ms .* must be an integer in the settings file"),
        ('[asr]\ntenant_endpoints = ["a:1"]', r"asr\.tenant_endpoints .* must be a string"),
        ('[asr]\npartials = "yes"', r"asr\.partials .* must be true or false"),
        ("[asr]\nvad_threshold = true", r"asr\.vad_threshold .* must be a number"),
        ("[kafka]\nbootstrap_servers = 9092", r"kafka\.bootstrap_servers .* must be a string"),
    ],
)
def test_a_file_value_of_the_wrong_type_is_a_config_error(
    tmp_path: Path, line: str, message: str
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError, match=message):
        load_settings(path, env={})


def test_file_values_of_the_right_type_and_environment_text_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[asr]\nvad_threshold = 1\npartials = false\nhop_ms = 250\n")
    asr = load_settings(path, env={}).asr
    assert (asr.vad_threshold, asr.partials, asr.hop_ms) == (1.0, False, 250)
    assert isinstance(asr.vad_threshold, float)
    from_env = load_settings(
        env={"STREAMSCRIBE_PARTIALS": "off", "STREAMSCRIBE_VAD_THRESHOLD": "0.4"}
    ).asr
    assert (from_env.partials, from_env.vad_threshold) == (False, 0.4)
    with pytest.raises(ConfigError, match=r"asr\.hop_ms \(STREAMSCRIBE_HOP_MS\) must be an int"):
        load_settings(env={"STREAMSCRIBE_HOP_MS": "20.9"})


def _fields(cls: type[Any], path: str) -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    for spec in dataclasses.fields(cls):
        name = f"{path}.{spec.name}" if path else spec.name
        if isinstance(spec.type, str) and spec.type.endswith("Settings"):
            yield from _fields(getattr(settings_module, spec.type), name)
        else:
            yield name, spec


def test_the_worker_defaults_are_written_once() -> None:
    worker = WorkerSettings()
    assert AdmissionLimits() == AdmissionLimits.of(worker)
    replay = ReplayOptions()
    assert replay.limits == AdmissionLimits.of(worker)
    assert replay.max_chunk_bytes == worker.max_chunk_bytes == DEFAULT_MAX_PAYLOAD_BYTES
    assert replay.idle_timeout_ms == worker.idle_timeout_ms
    assert env_variable(AsrSettings, "tenant_endpoints") == TENANT_ENDPOINTS_ENV
    with pytest.raises(KeyError, match="no_such"):
        env_variable(AsrSettings, "no_such")
