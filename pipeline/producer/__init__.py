"""The producer side: put call audio on ``audio.chunks`` (SDK, ``publish``, ``simulate``).

``AudioPublisher`` / ``CallStream`` are the SDK; ``chunking`` is the pure cutting core,
``kafka`` the confluent-kafka shell, ``loadgen`` the pure core of the load generator.
"""

from pipeline.producer.publisher import (
    MONO,
    STEREO,
    AudioPublisher,
    CallStream,
    CallSummary,
    ChannelStats,
    Transport,
)

__all__ = [
    "MONO",
    "STEREO",
    "AudioPublisher",
    "CallStream",
    "CallSummary",
    "ChannelStats",
    "Transport",
]
