"""librdkafka configurations of the worker's clients (settings map onto librdkafka keys here),
and ``new_consumer`` / ``new_producer``, which every command's confluent-kafka readers and
writers are created through (a property librdkafka refuses is one ``ConfigError`` everywhere;
librdkafka's log lines go through Python logging, repeats suppressed: ``client_logs``)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from pipeline.errors import ConfigError
from pipeline.runtime.client_logs import LOGGER
from pipeline.settings import KafkaSettings, WorkerSettings
from pipeline.worker.dead_letter import DEAD_LETTER_MAX_BYTES

__all__ = [
    "checkpoint_reader_config",
    "consumer_config",
    "log_client_error",
    "new_consumer",
    "new_producer",
    "partials_producer_config",
    "transactional_producer_config",
    "with_client_logs",
]


_Client = TypeVar("_Client")


def new_consumer(config: Mapping[str, object]) -> Consumer:
    """A confluent-kafka ``Consumer`` of ``config``.

    Raises:
        ConfigError: librdkafka refuses a property or its value (an unknown
            ``STREAMSCRIBE_LIBRDKAFKA_*`` key, a mistyped ``[kafka.client]`` value).
    """
    return _new_client(Consumer, "consumer", config)


def new_producer(config: Mapping[str, object]) -> Producer:
    """A confluent-kafka ``Producer`` of ``config``; creating one contacts no broker.

    Raises:
        ConfigError: as ``new_consumer``.
    """
    return _new_client(Producer, "producer", config)


def _new_client(
    client: Callable[[dict[str, object]], _Client], what: str, config: Mapping[str, object]
) -> _Client:
    try:
        return client(with_client_logs(config))
    except KafkaException as error:
        raise ConfigError(f"invalid {what} settings: {error.args[0].str()}") from None


def with_client_logs(config: Mapping[str, object]) -> dict[str, object]:
    """``config`` plus a ``logger`` and an ``error_cb`` that send the client's librdkafka log
    lines and errors to ``client_logs.LOGGER`` (repeats suppressed) instead of stderr; a
    ``logger`` or ``error_cb`` already in ``config`` is kept.

    The lines are delivered when the client is served (``poll``, ``consume``, ``flush``,
    ``close``; an ``AdminClient``'s ``poll``), on the serving thread. With librdkafka's
    ``debug`` property set (``STREAMSCRIBE_LIBRDKAFKA_DEBUG``) there is no ``logger``:
    librdkafka writes every line to stderr itself, stamped when it happened, as debugging wants.
    """
    client_id = str(config.get("client.id", "rdkafka"))
    logs: dict[str, object] = {"error_cb": functools.partial(log_client_error, client_id)}
    if "debug" not in config:
        logs["logger"] = LOGGER
    return {**logs, **config}


def log_client_error(client_id: str, error: KafkaError) -> None:
    """Log a client error as ``with_client_logs`` does (for a caller with its own ``error_cb``)."""
    # librdkafka logs the cause of a client error itself (a refused connection is a FAIL
    # line too), so most would double a line: a fatal error is worth its own, and "all brokers
    # down" (which no line says) a note.
    if error.fatal():
        level = logging.ERROR
    elif error.code() == KafkaError._ALL_BROKERS_DOWN:
        level = logging.INFO
    else:
        level = logging.DEBUG
    LOGGER.log(level, "client error [%s] %s: %s", client_id, error.name(), error.str())


def _base(kafka: KafkaSettings) -> dict[str, str | int | bool]:
    return {**kafka.client, "bootstrap.servers": kafka.bootstrap_servers}


def consumer_config(
    kafka: KafkaSettings, worker: WorkerSettings, worker_id: str
) -> dict[str, object]:
    """The audio consumer: group member, manual commits through transactions, cooperative."""
    config: dict[str, object] = {
        **_base(kafka),
        "group.id": worker.group_id,
        "client.id": f"streamscribe-worker-{worker_id}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": worker.session_timeout_ms,
        "heartbeat.interval.ms": max(500, worker.session_timeout_ms // 5),
        "max.poll.interval.ms": 300_000,
        "fetch.wait.max.ms": 50,
        "queued.max.messages.kbytes": 65536,
    }
    if worker.static_membership:
        config["group.instance.id"] = worker_id
    return config


def readable_headers(record: Message) -> list[tuple[str, bytes | None]] | None:
    """A consumed record's headers (``[]`` without any); ``None`` when they cannot be read.

    confluent-kafka decodes header names as UTF-8 while it reads them, and Kafka allows any
    bytes there: for a name that is not UTF-8, ``headers()`` raises ``SystemError`` (a
    ``UnicodeDecodeError`` in its context), and a second call returns a list with a null in it.
    So read them once, here, and refuse such a record rather than crash on it.
    """
    try:
        return record.headers() or []  # a new list per call: no copy needed
    except (SystemError, UnicodeDecodeError):
        return None


def transactional_producer_config(
    kafka: KafkaSettings, worker: WorkerSettings, worker_id: str
) -> dict[str, object]:
    """Finals, events, checkpoints and dead letters: one transaction per commit.

    The transactional id is stable per worker, so a restarted worker fences its previous
    incarnation; ``transaction.timeout.ms`` bounds how long a dead worker's open transaction
    blocks ``read_committed`` readers.
    """
    return {
        **_base(kafka),
        "transactional.id": f"{worker.group_id}-{worker_id}",
        "client.id": f"streamscribe-worker-{worker_id}-tx",
        "enable.idempotence": True,
        "transaction.timeout.ms": worker.transaction_timeout_ms,
        "message.max.bytes": DEAD_LETTER_MAX_BYTES,
        "linger.ms": 2,
        "compression.type": "lz4",
    }


def partials_producer_config(kafka: KafkaSettings, worker_id: str) -> dict[str, object]:
    """Partials: idempotent, not transactional (visible at once; may repeat after failover)."""
    return {
        **_base(kafka),
        "client.id": f"streamscribe-worker-{worker_id}-partials",
        "enable.idempotence": True,
        "linger.ms": 5,
        "compression.type": "lz4",
    }


def checkpoint_reader_config(
    kafka: KafkaSettings, worker_id: str, *, committed: bool = True
) -> dict[str, object]:
    """A group-less reader of ``asr.checkpoints`` (assign + read to the end, never commits).

    ``committed``: reads committed records only (the reader); False: the client that asks for
    the partitions' high watermarks (a ``read_committed`` client is told the last stable offset
    instead, which leaves out a transaction still being resolved).
    """
    return {
        **_base(kafka),
        "group.id": f"streamscribe-checkpoint-reader-{worker_id}",
        "client.id": f"streamscribe-worker-{worker_id}-checkpoints",
        "enable.auto.commit": False,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "auto.offset.reset": "earliest",
    }
