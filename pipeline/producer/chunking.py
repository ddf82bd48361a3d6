"""The pure part of the producer: audio → payload bytes, chunk cutting, sequence numbers, times.

Nothing here touches Kafka or reads a clock. ``ChannelCutter`` owns one (call, channel)'s
remainder buffer, its next sequence number and its capture-time anchor; ``AudioPublisher`` keeps
one per channel and turns each ``CutChunk`` into a record with ``pipeline.contracts.encode_chunk``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from pipeline.audio.pcm import to_int16
from pipeline.contracts import Encoding
from pipeline.contracts.audio_chunk import MAX_CAPTURE_MS
from pipeline.contracts.g711 import alaw_encode, mulaw_encode
from pipeline.errors import ConfigError, ContractError

__all__ = [
    "AudioInput",
    "ChannelCutter",
    "CutChunk",
    "chunk_samples",
    "encode_samples",
    "split_frames",
    "to_int16",
]

ScalarT = TypeVar("ScalarT", bound=np.generic)

AudioInput = bytes | bytearray | memoryview | npt.NDArray[Any]
"""What ``CallStream.push`` takes: bytes already in the call's encoding, int16 samples, or float
samples in [-1, 1] (rounded to int16)."""


def chunk_samples(chunk_ms: int, sample_rate_hz: int) -> int:
    """Samples in one chunk of ``chunk_ms`` (a whole number, at least one).

    Raises:
        ConfigError: ``chunk_ms`` is not positive or does not hold a whole number of samples.
    """
    samples, rest = divmod(chunk_ms * sample_rate_hz, 1000)
    if chunk_ms <= 0 or samples == 0 or rest:
        raise ConfigError(
            f"chunk of {chunk_ms} ms is not a positive whole number of samples at "
            f"{sample_rate_hz} Hz"
        )
    return samples


def encode_samples(audio: AudioInput, encoding: Encoding) -> bytes:
    """``audio`` as payload bytes in ``encoding``: bytes pass through as they are (they must
    already be in ``encoding``); sample arrays become little-endian PCM or G.711 codes.

    Raises:
        ContractError: not a whole number of samples, or an array of the wrong shape or type.
    """
    if isinstance(audio, bytes | bytearray | memoryview):
        data = bytes(audio)
        if len(data) % encoding.bytes_per_sample:
            raise ContractError(
                f"{len(data)} bytes of {encoding.value} are not a whole number of samples"
            )
        return data
    pcm = to_int16(audio)
    if encoding is Encoding.MULAW:
        return mulaw_encode(pcm).tobytes()
    if encoding is Encoding.ALAW:
        return alaw_encode(pcm).tobytes()
    return pcm.astype("<i2", copy=False).tobytes()


def split_frames(frames: npt.NDArray[ScalarT], num_channels: int) -> list[npt.NDArray[ScalarT]]:
    """The channels of ``(num_frames, num_channels)`` audio (soundfile's layout), in column order.

    Interleaved PCM reshapes to that layout with ``reshape(-1, num_channels)``; a 1-D array is
    accepted for a single channel.

    Raises:
        ContractError: the array does not have ``num_channels`` columns.
    """
    if frames.ndim == 1 and num_channels == 1:
        return [frames]
    if frames.ndim != 2 or frames.shape[1] != num_channels:
        raise ContractError(
            f"expected frames of shape (n, {num_channels}), got shape {frames.shape}"
        )
    return [np.ascontiguousarray(frames[:, index]) for index in range(num_channels)]


@dataclass(frozen=True, slots=True)
class CutChunk:
    """One record's worth of a channel: sequence number, payload and its first sample's time."""

    seq: int
    payload: bytes
    num_samples: int
    capture_ms: int


class ChannelCutter:
    """Cuts one (call, channel)'s audio into chunks of ``chunk_samples`` samples.

    Contracts:
    - Audio of any size goes in (``push``); every whole chunk it completes comes out at once and
      the rest (less than one chunk) waits in the remainder buffer for more audio or ``drain``.
      The payloads, concatenated, are exactly the pushed bytes.
    - Sequence numbers run from 0, +1 per chunk, ``drain``ed chunks included.
    - Capture times: sample ``i`` of the channel was captured at
      ``anchor_ms + (i - anchor_sample) * 1000 // sample_rate_hz`` (integer arithmetic, so times
      never drift), where the anchor is the latest ``anchor``/``push`` that named a time. A chunk
      carries its first sample's time; a chunk that starts with audio pushed before the latest
      anchor keeps the time that audio had.
    - A channel must be anchored before audio is cut (``AudioPublisher`` anchors it with its
      clock on the first push that names no time).
    """

    def __init__(self, sample_rate_hz: int, bytes_per_sample: int, chunk_samples: int) -> None:
        self._sample_rate_hz = sample_rate_hz
        self._bytes_per_sample = bytes_per_sample
        self._chunk_samples = chunk_samples
        self._next_seq = 0
        self._pushed_samples = 0
        self._anchor_ms: int | None = None
        self._anchor_sample = 0
        self._pending = b""
        self._pending_start_ms = 0

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def anchored(self) -> bool:
        return self._anchor_ms is not None

    @property
    def buffered_samples(self) -> int:
        return len(self._pending) // self._bytes_per_sample

    def _time_of(self, sample: int) -> int:
        assert self._anchor_ms is not None, "anchor() before cutting audio"
        return self._anchor_ms + (sample - self._anchor_sample) * 1000 // self._sample_rate_hz

    def anchor(self, capture_ms: int) -> None:
        """The next sample pushed was captured at ``capture_ms`` (epoch ms).

        Raises:
            ContractError: a time no worker would take (``decode_chunk`` dead-letters every
                chunk of the call): negative, or past ``MAX_CAPTURE_MS`` (microseconds or
                nanoseconds by mistake).
        """
        if not 0 <= capture_ms <= MAX_CAPTURE_MS:
            raise ContractError(
                f"capture time must be epoch milliseconds in 0..{MAX_CAPTURE_MS}, got "
                f"{capture_ms} (microseconds or nanoseconds by mistake?)"
            )
        self._anchor_ms = capture_ms
        self._anchor_sample = self._pushed_samples
        if not self._pending:
            self._pending_start_ms = capture_ms

    def push(self, payload: bytes, capture_ms: int | None = None) -> list[CutChunk]:
        """Append encoded audio (whole samples); return the chunks it completes.

        ``capture_ms`` (epoch ms) is the capture time of the first sample of ``payload``; None
        continues the timeline of the audio pushed before.
        """
        if capture_ms is not None:
            self.anchor(capture_ms)
        if not self.anchored:
            raise ContractError("the first audio of a channel needs a capture time")
        if len(payload) % self._bytes_per_sample:
            raise ContractError(f"{len(payload)} bytes are not a whole number of samples")
        self._pushed_samples += len(payload) // self._bytes_per_sample
        data = self._pending + payload if self._pending else payload
        chunk_bytes = self._chunk_samples * self._bytes_per_sample
        first_sample = self._pushed_samples - len(data) // self._bytes_per_sample
        chunks = []
        offset = 0
        start_ms = self._pending_start_ms
        while len(data) - offset >= chunk_bytes:
            chunks.append(
                CutChunk(
                    self._next_seq,
                    data[offset : offset + chunk_bytes],
                    self._chunk_samples,
                    start_ms,
                )
            )
            self._next_seq += 1
            offset += chunk_bytes
            start_ms = self._time_of(first_sample + offset // self._bytes_per_sample)
        self._pending = data[offset:]
        self._pending_start_ms = start_ms
        return chunks

    def drain(self) -> CutChunk:
        """The remainder as one (possibly empty) chunk with the next sequence number.

        Its capture time is its first sample's or, when empty, the time of the next sample.
        """
        if not self.anchored:
            raise ContractError("anchor() before draining a channel")
        start_ms = self._pending_start_ms if self._pending else self._time_of(self._pushed_samples)
        chunk = CutChunk(self._next_seq, self._pending, self.buffered_samples, start_ms)
        self._next_seq += 1
        self._pending = b""
        self._pending_start_ms = self._time_of(self._pushed_samples)
        return chunk
