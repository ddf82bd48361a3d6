"""``AudioPublisher``: the SDK a call platform uses to put live call audio on ``audio.chunks``.

::

    with AudioPublisher.connect() as publisher:  # settings from file + environment
        with publisher.open_call(
            "call-42", tenant="acme", channels=("agent", "customer"), sample_rate_hz=8000
        ) as call:
            for agent_pcm, customer_pcm in audio_source:  # int16 arrays (or bytes), any size
                call.push("agent", agent_pcm)
                call.push("customer", customer_pcm)
            call.flush("agent")  # force a final of the agent's open utterance now
        # leaving the call: remaining audio + end-of-stream on every channel
    # leaving the publisher: waits for every delivery report; PublishError if one failed

Delivery is asynchronous; a failed delivery report is never dropped: it raises ``PublishError``
from the next ``push``/``flush``/``end`` of any call, or from ``AudioPublisher.flush``/``close``
(``end`` first sends its end-of-stream records: a call always ends). A record the transport
refuses at once is counted failed and raised after the rest of that push was sent (the worker
sees a one-chunk gap); for ``push_frames``, after every channel's part.
Neither class is thread-safe: one thread drives a publisher and its calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import numpy.typing as npt

from pipeline.clock import Clock, WallClock
from pipeline.contracts import AudioChunk, Encoding, decode_chunk, encode_chunk
from pipeline.contracts.audio_chunk import MONO_CHANNEL, STEREO_CHANNELS
from pipeline.errors import ChunkRejectedError, ConfigError, ContractError, PublishError
from pipeline.producer.chunking import (
    AudioInput,
    ChannelCutter,
    CutChunk,
    chunk_samples,
    encode_samples,
    split_frames,
)
from pipeline.producer.kafka import KafkaTransport, producer_config
from pipeline.settings import Settings, load_settings
from pipeline.topics import TopicRole, topic_name

__all__ = [
    "MONO",
    "STEREO",
    "AudioPublisher",
    "CallStream",
    "CallSummary",
    "ChannelStats",
    "DeliveryCallback",
    "Transport",
]

logger = logging.getLogger(__name__)

MONO = (MONO_CHANNEL,)
STEREO = STEREO_CHANNELS
FLUSH_MARGIN_S = 5.0
"""``flush`` waits this much longer than the delivery timeout, by which every record has
either been delivered or reported failed."""

DeliveryCallback = Callable[[str | None, int], None]
"""Called once per record with (error text or None, partition; -1 when unknown)."""


class Transport(Protocol):
    """Where records go: ``KafkaTransport`` in production, a fake in unit tests.

    Delivery callbacks run on the caller's thread, from inside ``send``, ``poll`` or ``flush``.
    """

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes]],
        on_delivery: DeliveryCallback,
    ) -> None:
        """Queue one record (may block while the local queue is full)."""
        ...

    def poll(self, timeout_s: float) -> None:
        """Serve the delivery reports that are ready, waiting at most ``timeout_s``."""
        ...

    def flush(self, timeout_s: float) -> int:
        """Wait until every queued record is reported; return how many are still unreported."""
        ...

    def close(self) -> None:
        """Release the connection; records still queued are dropped (``flush`` first)."""
        ...


@dataclass(frozen=True, slots=True)
class ChannelStats:
    """What one channel of a call has sent so far (records include flush/end-of-stream ones)."""

    channel: str
    records: int
    audio_samples: int
    payload_bytes: int
    sample_rate_hz: int

    @property
    def audio_ms(self) -> float:
        return 1000.0 * self.audio_samples / self.sample_rate_hz


@dataclass(frozen=True, slots=True)
class CallSummary:
    """A call's records: per channel, and how their delivery went (so far)."""

    call_id: str
    topic: str
    channels: tuple[ChannelStats, ...]
    partitions: tuple[int, ...]
    delivered_records: int
    failed_records: int

    @property
    def records(self) -> int:
        return sum(stats.records for stats in self.channels)

    @property
    def payload_bytes(self) -> int:
        return sum(stats.payload_bytes for stats in self.channels)


class _Channel:
    """One channel's cutter and counters (internal to ``CallStream``)."""

    def __init__(self, label: str, cutter: ChannelCutter) -> None:
        self.label = label
        self.cutter = cutter
        self.records = 0
        self.audio_samples = 0
        self.payload_bytes = 0
        self.ended = False


class AudioPublisher:
    """Publishes calls' audio as chunk records (``pipeline.contracts.encode_chunk``).

    ``transport`` carries the records (``connect`` builds the idempotent Kafka one); ``clock``
    dates audio pushed without a capture time; ``chunk_ms`` is the default chunk length.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        topic: str,
        chunk_ms: int = 20,
        tenant: str = "default",
        clock: Clock | None = None,
        flush_timeout_s: float = 30.0 + FLUSH_MARGIN_S,
    ) -> None:
        self._transport = transport
        self._topic = topic
        self._chunk_ms = chunk_ms
        self._tenant = tenant
        self._clock: Clock = clock or WallClock()
        self._flush_timeout_s = flush_timeout_s
        self._failures: list[str] = []
        self._open_calls: set[str] = set()
        self._closed = False

    @classmethod
    def connect(
        cls, settings: Settings | None = None, *, clock: Clock | None = None
    ) -> AudioPublisher:
        """A publisher on the ``audio.chunks`` topic of ``settings`` (default: file + env).

        The producer is idempotent with ``acks=all``: retries never duplicate or reorder a
        call's records.
        """
        current = settings or load_settings()
        return cls(
            KafkaTransport(producer_config(current.kafka, current.publisher)),
            topic=topic_name(TopicRole.AUDIO_CHUNKS, current.kafka.topic_prefix),
            chunk_ms=current.publisher.chunk_ms,
            tenant=current.publisher.tenant,
            clock=clock,
            flush_timeout_s=current.publisher.delivery_timeout_ms / 1000 + FLUSH_MARGIN_S,
        )

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def transport(self) -> Transport:
        """The transport, for records outside any call (``simulate``'s bad records)."""
        return self._transport

    def open_call(
        self,
        call_id: str,
        *,
        tenant: str | None = None,
        channels: Sequence[str] = MONO,
        sample_rate_hz: int = 16000,
        encoding: Encoding | str = Encoding.PCM_S16LE,
        chunk_ms: int | None = None,
    ) -> CallStream:
        """Start a call; every channel's sequence numbers start at 0.

        Raises:
            ConfigError: the call id, a channel label, the tenant, rate, encoding or chunk length
                would break the audio-chunk contract, or the call is already open here.
        """
        if self._closed:
            raise ConfigError("the publisher is closed")
        if not channels or len(set(channels)) != len(channels):
            raise ConfigError(f"channels must be distinct labels, got {tuple(channels)}")
        if call_id in self._open_calls:
            raise ConfigError(f"call {call_id!r} is already open on this publisher")
        try:
            chosen_encoding = Encoding(encoding)
        except ValueError:
            raise ConfigError(
                f"encoding {encoding!r}: one of {', '.join(e.value for e in Encoding)}"
            ) from None
        stream = CallStream(
            self,
            call_id,
            tenant=self._tenant if tenant is None else tenant,
            channels=tuple(channels),
            sample_rate_hz=sample_rate_hz,
            encoding=chosen_encoding,
            chunk_samples=chunk_samples(
                self._chunk_ms if chunk_ms is None else chunk_ms, sample_rate_hz
            ),
        )
        self._open_calls.add(call_id)
        return stream

    def check(self) -> None:
        """Serve the delivery reports that are ready; raise if one failed.

        Raises:
            PublishError: records reported undelivered since the last raise.
        """
        self._serve_reports()
        self._raise_failures()

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every record sent so far is delivered.

        Raises:
            PublishError: a record failed, or some are still unconfirmed after ``timeout_s``
                (default: the delivery timeout plus a margin).
        """
        timeout = self._flush_timeout_s if timeout_s is None else timeout_s
        remaining = self._transport.flush(timeout)
        self._raise_failures()
        if remaining:
            raise PublishError(
                f"{remaining} record(s) to {self._topic} unconfirmed after {timeout:.1f} s"
            )

    def close(self, timeout_s: float | None = None) -> None:
        """``flush``, then release the transport (also when ``flush`` raises). Idempotent.

        Calls still open are not ended: end them (or leave their ``with`` block) first.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(timeout_s)
        finally:
            self._transport.close()

    def __enter__(self) -> AudioPublisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _serve_reports(self) -> None:
        """Run the delivery callbacks that are ready (failures are kept for ``_raise_failures``)."""
        self._transport.poll(0)

    def _raise_failures(self) -> None:
        if not self._failures:
            return
        failures = tuple(self._failures)
        self._failures.clear()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise PublishError(
            f"{len(failures)} record(s) not delivered to {self._topic}: {failures[0]}{more}",
            failures,
        )

    def _send(self, chunk: AudioChunk, on_delivery: DeliveryCallback) -> None:
        if self._closed:
            raise ConfigError(
                f"the publisher is closed: call {chunk.call_id!r} {chunk.channel} seq "
                f"{chunk.seq} not sent"
            )
        key, value, headers = encode_chunk(chunk)
        # Only the names, not the chunk: its payload need not outlive librdkafka's copy.
        call_id, channel, seq = chunk.call_id, chunk.channel, chunk.seq

        def report(error: str | None, partition: int) -> None:
            if error is not None:
                self._failures.append(f"call {call_id!r} {channel} seq {seq}: {error}")
            on_delivery(error, partition)

        self._transport.send(self._topic, key, value, headers, report)

    def _ended(self, call_id: str) -> None:
        self._open_calls.discard(call_id)


class CallStream:
    """One call's channels on a publisher (made by ``AudioPublisher.open_call``).

    ``push`` cuts audio of any size into chunks of the call's chunk length, keeping the
    remainder per channel; ``flush`` sends the remainder with the ``ss-flush`` flag (a forced
    final); ``end`` sends the remainder with the end-of-stream flag on every channel. Audio and
    flags of one channel reach the topic in call order with contiguous sequence numbers.
    """

    def __init__(
        self,
        publisher: AudioPublisher,
        call_id: str,
        *,
        tenant: str,
        channels: tuple[str, ...],
        sample_rate_hz: int,
        encoding: Encoding,
        chunk_samples: int,
    ) -> None:
        self._publisher = publisher
        self.call_id = call_id
        self.tenant = tenant
        self.sample_rate_hz = sample_rate_hz
        self.encoding = encoding
        self.chunk_samples = chunk_samples
        self._channels = {
            label: _Channel(
                label, ChannelCutter(sample_rate_hz, encoding.bytes_per_sample, chunk_samples)
            )
            for label in channels
        }
        self._partitions: set[int] = set()
        self._delivered = 0
        self._failed = 0
        for label in channels:
            self._validate(label)

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(self._channels)

    @property
    def ended(self) -> bool:
        return all(channel.ended for channel in self._channels.values())

    def next_seq(self, channel: str) -> int:
        """The sequence number the channel's next record will carry."""
        return self._channel(channel).cutter.next_seq

    def push(self, channel: str, audio: AudioInput, capture_ms: int | None = None) -> int:
        """Add audio to ``channel``; send every whole chunk it completes; return how many.

        ``audio``: bytes already in the call's encoding, or int16 / float ([-1, 1]) samples
        (encoded to the call's encoding). ``capture_ms``: epoch ms of its first sample; when
        None, the channel's timeline continues (its first push takes the clock's time).

        Raises:
            PublishError: an earlier record's delivery failed (of this call or another): raised
                after this push's audio was taken and sent, so none of it is lost.
            ConfigError: unknown channel, or the publisher is closed.
            ContractError: the channel has ended, or the audio is not whole samples.
        """
        self._publisher._serve_reports()  # reports of earlier records, raised below
        sent = self._push(channel, audio, capture_ms)
        self._publisher._raise_failures()
        return sent

    def _push(self, channel: str, audio: AudioInput, capture_ms: int | None) -> int:
        state = self._open_channel(channel)
        payload = encode_samples(audio, self.encoding)
        if capture_ms is None and not state.cutter.anchored:
            capture_ms = self._publisher.clock.now_ms()
        cuts = state.cutter.push(payload, capture_ms)
        self._emit_each([(state, cut, {}) for cut in cuts])
        return len(cuts)

    def push_frames(self, frames: npt.NDArray[Any], capture_ms: int | None = None) -> int:
        """``push`` the columns of ``(num_frames, num_channels)`` audio to the call's channels
        in order (stereo: left → first channel); all channels share one capture time.

        Raises as ``push``, and only after every channel took its column: a record of one
        channel refused at once leaves the others' audio and timelines untouched (the first
        refusal is raised).
        """
        columns = split_frames(frames, len(self._channels))
        if capture_ms is None and not all(c.cutter.anchored for c in self._channels.values()):
            capture_ms = self._publisher.clock.now_ms()
        self._publisher._serve_reports()
        sent = 0
        refused: PublishError | None = None
        for label, column in zip(self._channels, columns, strict=True):
            try:
                sent += self._push(label, column, capture_ms)
            except PublishError as error:  # raised by ``_emit_each`` once the column was taken
                refused = refused or error
        if refused is not None:
            raise refused
        self._publisher._raise_failures()  # after every channel took its audio (see ``push``)
        return sent

    def flush(self, channel: str | None = None) -> int:
        """Send the remainder of ``channel`` (every channel when None) as a record flagged
        ``ss-flush``: the worker finalizes the open utterance after that audio. Returns the
        number of records sent."""
        self._publisher.check()
        states = [self._open_channel(channel)] if channel is not None else self._open_states()
        self._emit_each([(state, self._drain(state), {"flush": True}) for state in states])
        return len(states)

    def end(self) -> int:
        """Send each open channel's remainder flagged end-of-stream, then report failed
        deliveries (``PublishError``, as ``check``). The call ends either way: every channel's
        end-of-stream is sent first, so an earlier failure (of this call or another) never
        leaves the workers waiting for an end that does not come. Returns records sent; ending
        an ended call sends nothing."""
        states = self._open_states()
        try:
            self._emit_each(
                [(state, self._drain(state), {"end_of_stream": True}) for state in states]
            )
        finally:
            for state in states:
                state.ended = True
            self._publisher._ended(self.call_id)
        self._publisher.check()
        return len(states)

    def _emit_each(self, cuts: list[tuple[_Channel, CutChunk, dict[str, bool]]]) -> None:
        """Send every cut; one refused at once (``PublishError`` from the transport: too large,
        a fatal producer error) is counted as failed, the others are still sent, and the first
        refusal is raised after them. The lost chunk shows as a sequence gap to the worker."""
        refused: PublishError | None = None
        for state, cut, flags in cuts:
            try:
                self._emit(state, cut, **flags)
            except PublishError as error:
                self._failed += 1
                refused = refused or error
        if refused is not None:
            raise refused

    def summary(self) -> CallSummary:
        return CallSummary(
            call_id=self.call_id,
            topic=self._publisher.topic,
            channels=tuple(
                ChannelStats(
                    state.label,
                    state.records,
                    state.audio_samples,
                    state.payload_bytes,
                    self.sample_rate_hz,
                )
                for state in self._channels.values()
            ),
            partitions=tuple(sorted(self._partitions)),
            delivered_records=self._delivered,
            failed_records=self._failed,
        )

    def __enter__(self) -> CallStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.end()
            return
        try:
            self.end()
        except PublishError as error:  # the body's own exception is the one to see
            logger.warning(
                "call %s ended after an error; delivery failed too: %s", self.call_id, error
            )

    def _validate(self, label: str) -> None:
        """Check the call's constants against the contract itself: encode a probe record of
        one full chunk and decode it, so this class never re-states the contract's rules."""
        probe = AudioChunk(
            self.call_id,
            label,
            0,
            self.sample_rate_hz,
            self.encoding,
            memoryview(bytes(self.chunk_samples * self.encoding.bytes_per_sample)),
            tenant=self.tenant,
        )
        try:
            decode_chunk(*encode_chunk(probe))
        except ChunkRejectedError as error:
            raise ConfigError(f"call {self.call_id!r}: {error.detail}") from None
        except UnicodeEncodeError:  # undecodable bytes of a command line (lone surrogates)
            raise ConfigError(
                f"call {self.call_id!r}: the call id, channel and tenant must be valid text"
            ) from None

    def _channel(self, label: str) -> _Channel:
        try:
            return self._channels[label]
        except KeyError:
            raise ConfigError(
                f"call {self.call_id!r} has no channel {label!r} (it has {self.channels})"
            ) from None

    def _open_channel(self, label: str) -> _Channel:
        state = self._channel(label)
        if state.ended:
            raise ContractError(f"call {self.call_id!r} channel {label!r} has already ended")
        return state

    def _open_states(self) -> list[_Channel]:
        return [state for state in self._channels.values() if not state.ended]

    def _drain(self, state: _Channel) -> CutChunk:
        if not state.cutter.anchored:
            state.cutter.anchor(self._publisher.clock.now_ms())
        return state.cutter.drain()

    def _emit(
        self, state: _Channel, cut: CutChunk, *, flush: bool = False, end_of_stream: bool = False
    ) -> None:
        chunk = AudioChunk(
            call_id=self.call_id,
            channel=state.label,
            seq=cut.seq,
            sample_rate_hz=self.sample_rate_hz,
            encoding=self.encoding,
            payload=memoryview(cut.payload),
            capture_ms=cut.capture_ms,
            end_of_stream=end_of_stream,
            flush=flush,
            tenant=self.tenant,
        )
        self._publisher._send(chunk, self._on_delivery)
        state.records += 1
        state.audio_samples += cut.num_samples
        state.payload_bytes += len(cut.payload)

    def _on_delivery(self, error: str | None, partition: int) -> None:
        if error is None:
            self._delivered += 1
            self._partitions.add(partition)
        else:
            self._failed += 1
