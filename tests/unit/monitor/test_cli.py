"""`streamscribe monitor`: flags, settings, validation and the reader's consumer settings."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from pipeline.cli import build_parser, main
from pipeline.cli.monitor import _monitor_settings
from pipeline.errors import ConfigError
from pipeline.monitor import kafka as monitor_kafka
from pipeline.monitor.kafka import reader_config
from pipeline.monitor.server import validate_monitor_settings
from pipeline.settings import MonitorSettings, Settings, load_settings
from pipeline.topics import TopicRole, topic_name


def test_flags_override_the_monitor_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSCRIBE_MONITOR_MAX_CALLS", "50")
    monkeypatch.delenv("STREAMSCRIBE_CONFIG", raising=False)
    args = build_parser().parse_args(
        [
            "--topic-prefix",
            "staging.",
            "monitor",
            "--port",
            "7001",
            "--worker-metrics",
            "http://w1:9400/metrics,http://w2:9400/metrics",
        ]
    )
    settings = _monitor_settings(args)
    assert settings.kafka.topic_prefix == "staging."
    assert (settings.monitor.port, settings.monitor.max_calls) == (7001, 50)
    assert settings.monitor.worker_metrics_urls == "http://w1:9400/metrics,http://w2:9400/metrics"
    assert settings.monitor.bind == "0.0.0.0"


def test_monitor_settings_come_from_the_environment() -> None:
    settings = load_settings(
        env={
            "STREAMSCRIBE_MONITOR_PORT": "7100",
            "STREAMSCRIBE_MONITOR_MAX_AGE_MS": "3600000",
            "STREAMSCRIBE_MONITOR_WORKER_METRICS_URLS": "http://w1:9400/metrics",
        }
    )
    assert settings.monitor == MonitorSettings(
        port=7100, max_age_ms=3_600_000, worker_metrics_urls="http://w1:9400/metrics"
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"port": 0}, "STREAMSCRIBE_MONITOR_PORT"),
        ({"max_calls": 0}, "STREAMSCRIBE_MONITOR_MAX_CALLS"),
        ({"max_age_ms": 0}, "STREAMSCRIBE_MONITOR_MAX_AGE_MS"),
        ({"metrics_interval_ms": 10}, "STREAMSCRIBE_MONITOR_METRICS_INTERVAL_MS"),
        ({"metrics_window_ms": 1000}, "STREAMSCRIBE_MONITOR_METRICS_WINDOW_MS"),
        ({"worker_metrics_urls": "w1:9400/metrics"}, "STREAMSCRIBE_MONITOR_WORKER_METRICS_URLS"),
    ],
)
def test_unusable_settings_are_config_errors_naming_the_variable(
    change: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        validate_monitor_settings(MonitorSettings(**change))  # type: ignore[arg-type]


def test_a_refused_metrics_url_is_shown_without_its_password() -> None:
    # Review finding: the error quoted the URL whole, password included.
    with pytest.raises(ConfigError) as refused:
        validate_monitor_settings(MonitorSettings(worker_metrics_urls="ftp://u:secretpw@h/metrics"))
    assert "secretpw" not in str(refused.value)
    assert "ftp://u:***@h/metrics" in str(refused.value)


def test_a_bad_flag_value_exits_2_with_one_line_before_touching_kafka(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STREAMSCRIBE_CONFIG", raising=False)
    assert main(["monitor", "--port", "70000"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("streamscribe: error: monitor.port")
    assert error.count("\n") == 1


def test_the_readers_join_no_group_and_commit_nothing() -> None:
    live = reader_config(Settings(), read_committed=False)
    committed = reader_config(Settings(), read_committed=True)
    for config in (live, committed):
        assert config["enable.auto.commit"] is False
        assert config["enable.auto.offset.store"] is False
        assert str(config["group.id"]).startswith("streamscribe-monitor-")
    assert live["isolation.level"] == "read_uncommitted"
    assert committed["isolation.level"] == "read_committed"
    assert live["group.id"] != committed["group.id"]


class _FakeConsumer:
    """What ``KafkaReader.open`` asks of a consumer: metadata, offsets by time, an assignment."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self.config = dict(config)
        self.assigned: list[str] = []

    def list_topics(self, timeout: float) -> Any:
        partitions = {0: object()}
        topics = {
            topic_name(role): SimpleNamespace(error=None, partitions=partitions)
            for role in TopicRole
        }
        return SimpleNamespace(topics=topics)

    def offsets_for_times(self, wanted: list[TopicPartition], timeout: float) -> Any:
        return [TopicPartition(tp.topic, tp.partition, 0) for tp in wanted]

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += [tp.topic for tp in partitions]

    def close(self) -> None:
        pass


def test_partials_are_read_uncommitted_and_every_transactional_topic_read_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Events are written in the workers' transactions: read uncommitted, the chunk_rejected
    # events of an aborted transaction (replayed afterwards) counted twice as dead letters.
    consumers: list[_FakeConsumer] = []

    def new_consumer(config: Mapping[str, object]) -> _FakeConsumer:
        consumers.append(_FakeConsumer(config))
        return consumers[-1]

    monkeypatch.setattr(monitor_kafka, "new_consumer", new_consumer)
    reader = monitor_kafka.KafkaReader(
        Settings(), lambda records: None, history_ms=1000, now_ms=lambda: 5000
    )
    reader.open()
    isolation = {
        topic: consumer.config["isolation.level"]
        for consumer in consumers
        for topic in consumer.assigned
    }
    assert isolation == {
        "asr.partials": "read_uncommitted",
        "asr.events": "read_committed",
        "asr.finals": "read_committed",
        "qa.calls": "read_committed",
    }
    reader.close()


def test_a_librdkafka_property_it_refuses_is_a_config_error_not_a_traceback() -> None:
    from pipeline.monitor.kafka import KafkaReader
    from pipeline.settings import KafkaSettings

    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:9", client={"no.such.prop": "1"})
    reader = KafkaReader(Settings(kafka=kafka), lambda records: None, history_ms=1, now_ms=int)
    with pytest.raises(ConfigError, match=r"no\.such\.prop"):
        reader.open()
