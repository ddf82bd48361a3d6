"""Kafka administration: observe topics and apply a ``TopicPlan`` (confluent-kafka AdminClient)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from pipeline.errors import ConfigError, InfrastructureError, TopicPlanError
from pipeline.runtime.kafka import with_client_logs
from pipeline.settings import KafkaSettings
from pipeline.topics import ActionKind, ObservedTopic, TopicAction, TopicSpec, plan_topics

__all__ = ["ApplyReport", "TopicAdmin", "admin_client", "admin_config"]

ADMIN_TIMEOUT_S = 30.0
METADATA_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ApplyReport:
    """What ``apply`` changed (human-readable lines); empty when the cluster was in sync."""

    changes: tuple[str, ...]


def admin_config(settings: KafkaSettings) -> dict[str, str]:
    """librdkafka config of an admin client: the pass-through settings plus the bootstrap."""
    return {**settings.client, "bootstrap.servers": settings.bootstrap_servers}


def admin_client(settings: KafkaSettings) -> AdminClient:
    """An ``AdminClient`` on ``admin_config(settings)``; creating one contacts no broker. Its
    librdkafka lines go through logging (``with_client_logs``) when its ``poll`` is called.

    Raises:
        ConfigError: librdkafka refuses a property or its value (an unknown
            ``STREAMSCRIBE_LIBRDKAFKA_*`` key, a mistyped ``[kafka.client]`` value).
    """
    try:
        return AdminClient(with_client_logs(admin_config(settings)))
    except KafkaException as error:
        raise ConfigError(f"invalid Kafka client settings: {error.args[0].str()}") from None


class TopicAdmin:
    """Reads and aligns the cluster's topics. One instance per command; not thread-safe."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._client = admin_client(settings)

    def observe(self, names: Sequence[str]) -> dict[str, ObservedTopic]:
        """Partition counts and effective configs of those of ``names`` that exist."""
        metadata = self._metadata()
        present = [name for name in names if name in metadata.topics]
        if not present:
            return {}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in present]
        configs: dict[str, dict[str, str]] = {}
        for resource, future in self._client.describe_configs(resources).items():
            try:
                entries: Mapping[str, Any] = future.result()
            except KafkaException as error:
                if error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # deleted since the metadata was read: absent
                self._serve_logs()
                raise InfrastructureError(
                    f"Kafka refused an operation on {resource.name}: {error}"
                ) from None
            configs[resource.name] = {
                key: entry.value for key, entry in entries.items() if entry.value is not None
            }
        return {
            name: ObservedTopic(name, len(metadata.topics[name].partitions), configs[name])
            for name in present
            if name in configs
        }

    def _metadata(self) -> ClusterMetadata:
        try:
            return self._client.list_topics(timeout=METADATA_TIMEOUT_S)
        except KafkaException as error:
            raise InfrastructureError(
                f"Kafka at {self._settings.bootstrap_servers} did not answer: {error}"
            ) from None
        finally:
            self._serve_logs()

    def _serve_logs(self) -> None:
        """Deliver the client's queued librdkafka lines (an admin client has no other call that
        does): the line saying why a call failed shows before the error it raises."""
        self._client.poll(0)

    def apply(self, declared: Sequence[TopicSpec]) -> ApplyReport:
        """Create missing topics, raise partitions, align declared configs; idempotent.

        Raises:
            TopicPlanError: the file asks for fewer partitions than a topic has (nothing applied).
        """
        plan = plan_topics(declared, self.observe([spec.name for spec in declared]))
        if plan.refusals:
            raise TopicPlanError("; ".join(plan.refusals))
        for action in plan.actions:
            self._execute(action)
        if plan.actions:
            self._wait_visible(declared)
        return ApplyReport(tuple(action.describe() for action in plan.actions))

    def _wait_visible(self, declared: Sequence[TopicSpec]) -> None:
        """Block until the broker's metadata shows every declared topic and partition.

        The controller acknowledges a creation before every broker's metadata cache has it; a
        second ``apply`` (or a producer) right after would otherwise not see the topic yet.
        """
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while time.monotonic() < deadline:
            topics = self._metadata().topics
            if all(
                spec.name in topics and len(topics[spec.name].partitions) >= spec.partitions
                for spec in declared
            ):
                return
            time.sleep(0.1)
        raise InfrastructureError(f"topics not visible after {ADMIN_TIMEOUT_S:.0f} s")

    def delete(self, names: Sequence[str]) -> None:
        """Delete the named topics that exist (used by tests and `topics` tooling)."""
        existing = [name for name in names if name in self._metadata().topics]
        if not existing:
            return
        futures = self._client.delete_topics(existing, operation_timeout=ADMIN_TIMEOUT_S)
        for name, future in futures.items():
            self._result(future, name)

    def _execute(self, action: TopicAction) -> None:
        if action.kind is ActionKind.CREATE:
            topic = NewTopic(
                action.topic,
                num_partitions=action.partitions,
                replication_factor=self._settings.replication_factor,
                config=dict(action.config),
            )
            futures = self._client.create_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)
        elif action.kind is ActionKind.ADD_PARTITIONS:
            futures = self._client.create_partitions(
                [NewPartitions(action.topic, action.partitions)],
                operation_timeout=ADMIN_TIMEOUT_S,
            )
        else:
            resource = ConfigResource(
                ConfigResource.Type.TOPIC,
                action.topic,
                incremental_configs=[
                    ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                    for key, value in action.config.items()
                ],
            )
            futures = self._client.incremental_alter_configs([resource])
        for future in futures.values():
            try:
                future.result()
            except KafkaException as error:
                if error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue  # another `apply` won the race; the end state is the same
                self._serve_logs()
                raise InfrastructureError(
                    f"Kafka refused {action.describe()}: {error.args[0].str()}"
                ) from None

    def _result(self, future: Any, what: str) -> Any:
        try:
            return future.result()
        except KafkaException as error:
            self._serve_logs()
            raise InfrastructureError(f"Kafka refused an operation on {what}: {error}") from None
