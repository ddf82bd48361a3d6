"""TopicAdmin against a fake admin client: what it makes of a topic deleted mid-observation."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline.errors import ConfigError, InfrastructureError
from pipeline.runtime.admin import TopicAdmin, admin_client
from pipeline.settings import KafkaSettings


class _Entry:
    def __init__(self, value: str) -> None:
        self.value = value


class _Admin:
    """Lists both topics; describing ``gone`` fails with ``error`` (deleted in between)."""

    def __init__(self, error: int) -> None:
        self._error = error

    def poll(self, timeout: float) -> int:
        return 0

    def list_topics(self, timeout: float) -> Any:
        partitions = {0: object(), 1: object()}
        topics = {"kept": SimpleNamespace(partitions=partitions), "gone": SimpleNamespace()}
        return SimpleNamespace(topics=topics)

    def describe_configs(self, resources: list[Any]) -> dict[Any, Future[Any]]:
        futures: dict[Any, Future[Any]] = {}
        for resource in resources:
            future: Future[Any] = Future()
            if resource.name == "gone":
                future.set_exception(KafkaException(KafkaError(self._error)))
            else:
                future.set_result({"cleanup.policy": _Entry("delete")})
            futures[resource] = future
        return futures


def _admin(error: int) -> TopicAdmin:
    admin = TopicAdmin(KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    admin._client = _Admin(error)  # type: ignore[assignment]
    return admin


def test_a_topic_deleted_between_listing_and_describing_is_absent() -> None:
    observed = _admin(KafkaError.UNKNOWN_TOPIC_OR_PART).observe(["kept", "gone"])
    assert list(observed) == ["kept"]
    assert observed["kept"].partitions == 2
    assert observed["kept"].config == {"cleanup.policy": "delete"}


def test_any_other_refusal_is_an_infrastructure_error() -> None:
    with pytest.raises(InfrastructureError, match="gone"):
        _admin(KafkaError.TOPIC_AUTHORIZATION_FAILED).observe(["kept", "gone"])


@pytest.mark.parametrize(
    ("client", "message"),
    [
        ({"no.such.prop": "1"}, 'No such configuration property: "no.such.prop"'),
        ({"security.protocol": "bogus"}, 'Invalid value "bogus" for configuration property'),
    ],
)
def test_client_settings_librdkafka_refuses_are_a_config_error(
    client: dict[str, str], message: str
) -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", client=client)
    with pytest.raises(ConfigError, match=f"^invalid Kafka client settings: {message}"):
        admin_client(settings)
    with pytest.raises(ConfigError, match="invalid Kafka client settings"):
        TopicAdmin(settings)


class _Unreachable:
    """An admin client whose broker never answers; ``served`` lists what the caller did."""

    def __init__(self) -> None:
        self.served: list[str] = []

    def poll(self, timeout: float) -> int:
        self.served.append("poll")
        return 0

    def list_topics(self, timeout: float) -> Any:
        self.served.append("list_topics")
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))


def test_the_librdkafka_lines_of_a_failed_call_are_served_before_its_error() -> None:
    # With a `logger`, an admin client's lines wait for `poll`: unserved, the line that says
    # why (Connection refused) would never show.
    admin = TopicAdmin(KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    client = _Unreachable()
    admin._client = client  # type: ignore[assignment]
    with pytest.raises(InfrastructureError, match="did not answer"):
        admin.observe(["kept"])
    assert client.served == ["list_topics", "poll"]
