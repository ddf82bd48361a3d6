"""Wire contracts: the audio chunk (headers + raw audio) and the JSON output records."""

from pipeline.contracts.audio_chunk import (
    CONTRACT_VERSION,
    AudioChunk,
    Encoding,
    Header,
    RejectReason,
    decode_chunk,
    encode_chunk,
)
from pipeline.contracts.messages import (
    DeadLetterInfo,
    EndpointReason,
    Event,
    EventType,
    Final,
    Partial,
    Word,
    to_json,
    utterance_id,
)

__all__ = [
    "CONTRACT_VERSION",
    "AudioChunk",
    "DeadLetterInfo",
    "Encoding",
    "EndpointReason",
    "Event",
    "EventType",
    "Final",
    "Header",
    "Partial",
    "RejectReason",
    "Word",
    "decode_chunk",
    "encode_chunk",
    "to_json",
    "utterance_id",
]
