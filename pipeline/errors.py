"""The exception tree of Streamscribe.

Every error the package raises on purpose derives from one root, so callers can catch
``StreamscribeError`` and user-facing commands can print one clear line::

    StreamscribeError
    ├── ConfigError            a setting is missing or invalid (user mistake: no traceback)
    ├── ContractError          a record breaks a wire contract
    │   ├── ChunkRejectedError      an audio chunk that must go to the dead-letter topic
    │   │                           (``reason``: a ``RejectReason``)
    │   └── RecordRejectedError     a JSON record a consumer cannot use
    │                               (``reason``: a ``RecordRejectReason``; contracts/reading.py)
    ├── TopicPlanError         the topics file cannot be applied (e.g. lowering partitions)
    ├── InfrastructureError    Kafka / Redis unreachable or answering with an error
    │   ├── StuckCallError          a transactional Kafka call blocked past its timeout
    │   │                           (runtime/transactions.py; the producer is given up)
    │   └── CheckpointReadCutError  a checkpoint read given up for a shutdown
    │                               (runtime/checkpoint_reader.py; nothing restored)
    ├── InjectedFaultError     raised at an armed fault point, in tests (worker/faults.py)
    ├── PublishError           produced records were not delivered (delivery report failed)
    └── ModelLoadError         model weights missing, unreadable or of an unknown layout
"""

from __future__ import annotations

__all__ = [
    "ChunkRejectedError",
    "ConfigError",
    "ContractError",
    "InfrastructureError",
    "ModelLoadError",
    "PublishError",
    "StreamscribeError",
    "TopicPlanError",
]


class StreamscribeError(Exception):
    """Root of every error raised on purpose by Streamscribe."""


class ConfigError(StreamscribeError):
    """A setting is missing or invalid; the message names the setting and its env variable."""


class ContractError(StreamscribeError):
    """A record does not follow a wire contract in ``schemas/``."""


class ChunkRejectedError(ContractError):
    """An audio chunk that cannot be processed.

    ``reason`` is a stable machine-readable code (a ``RejectReason`` value, also written to the
    dead-letter record's headers); the message is the human-readable detail.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class TopicPlanError(StreamscribeError):
    """The declared topics cannot be applied to the cluster as they are."""


class InfrastructureError(StreamscribeError):
    """Kafka or Redis is unreachable, or answered with an error we cannot recover from."""


class PublishError(StreamscribeError):
    """Records sent to Kafka were not delivered: their delivery report failed or never came.

    ``failures`` describes each undelivered record (call, channel, sequence number, broker
    error), so the caller knows exactly which audio is missing.
    """

    def __init__(self, detail: str, failures: tuple[str, ...] = ()) -> None:
        super().__init__(detail)
        self.failures = failures


class ModelLoadError(StreamscribeError):
    """Model weights are missing, unreadable or of a layout we do not understand."""
