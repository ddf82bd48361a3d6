"""Every confluent-kafka client is created through one function per kind: a property librdkafka
refuses is one ConfigError (one line from the CLI), never a KafkaException traceback."""

from __future__ import annotations

import types
from typing import Any

import pytest

from pipeline.errors import ConfigError
from pipeline.producer.kafka import KafkaTransport
from pipeline.runtime.kafka import new_consumer, new_producer
from pipeline.settings import KafkaSettings, Settings
from pipeline.worker.loop import AsrWorker

NO_BROKER = "127.0.0.1:1"


@pytest.mark.parametrize(
    ("create", "what"), [(new_consumer, "consumer"), (new_producer, "producer")]
)
def test_a_property_librdkafka_refuses_is_a_config_error(create: Any, what: str) -> None:
    config = {"bootstrap.servers": NO_BROKER, "group.id": "g", "no.such.prop": "1"}
    with pytest.raises(ConfigError, match=rf'^invalid {what} settings: .*"no.such.prop"'):
        create(config)


def test_the_audio_publisher_refuses_the_same_way() -> None:
    with pytest.raises(ConfigError, match=r"^invalid producer settings"):
        KafkaTransport({"bootstrap.servers": NO_BROKER, "no.such.prop": "1"})


def test_the_worker_refuses_a_producer_setting_its_transactions_cannot_use() -> None:
    # The readiness probe's admin client accepts acks=1; only an idempotent producer refuses it.
    settings = Settings(kafka=KafkaSettings(bootstrap_servers=NO_BROKER, client={"acks": "1"}))
    engine: Any = types.SimpleNamespace(model_id="test")
    worker = AsrWorker(settings, engine)
    with pytest.raises(ConfigError, match=r"^invalid producer settings: .*acks"):
        worker.run()
