"""Settings: defaults < file < environment; librdkafka pass-through; secrets masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.settings import describe_settings, load_settings


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
