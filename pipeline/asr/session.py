"""One (call, channel) stream: audio in, VAD frames out, utterances tracked, jobs queued.

A ``Session`` is the per-stream state of the engine and owns nothing shared: the VAD model and
the recognizer are the engine's. It is pure (no I/O, no clock) and deterministic: positions are
sample counts at 16 kHz from the stream's first sample, derived from the audio alone.

Audio flows: ``accept`` (resample 8 → 16 kHz) → ``buffer`` → VAD frames (``frames_ready`` /
``next_vad_frame``, scored by the engine's batched VAD, fed back one probability at a time
through ``apply_vad``) → ``SpeechGate`` spans → ``EndpointDetector`` decisions → ``FinalJob``s;
while an utterance is open, ``due_partial`` says when it should be re-decoded (every ``hop_ms``
of audio).

Only the audio still needed is kept: from the open utterance's start (or the gate's unsettled
audio, which may become the start of one) to the newest sample.
"""

from __future__ import annotations

import base64
from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from pipeline.asr.agreement import LocalAgreement
from pipeline.asr.endpoint import (
    EndpointConfig,
    EndpointDecision,
    EndpointDetector,
    EndpointReason,
    EndpointSnapshot,
)
from pipeline.asr.recognizer import Recognition, RecognizedWord
from pipeline.asr.vad import GatedSpan, SpeechGate, SpeechGateConfig, SpeechGateSnapshot
from pipeline.audio.denoise import StreamDenoiser
from pipeline.audio.resample import Upsampler2x, UpsamplerState

__all__ = ["EarlyFinal", "FinalJob", "Session", "SessionKey", "SessionSnapshot", "SessionStats"]

SAMPLE_RATE_HZ = 16000
SAMPLES_PER_MS = SAMPLE_RATE_HZ // 1000
_MIN_STORE_SAMPLES = SAMPLE_RATE_HZ  # a session's audio store never shrinks below 1 s


class SessionKey(NamedTuple):
    """A stream: one channel of one call."""

    call_id: str
    channel: str


@dataclass(frozen=True, slots=True)
class FinalJob:
    """An utterance whose endpoint was decided and whose final is still to be decoded.

    ``start_is_onset`` / ``end_is_offset``: whether that edge is where the VAD heard speech
    begin / end (``EndpointDecision``), so that word timings may be snapped to it.
    """

    utterance_index: int
    start_samples: int
    end_samples: int
    decided_at_samples: int
    reason: EndpointReason
    start_is_onset: bool
    end_is_offset: bool


@dataclass(frozen=True, slots=True)
class EarlyFinal:
    """A final decoded ahead, while its utterance's trailing silence was still running.

    Valid for a final of exactly ``[start_samples, end_samples)`` decoded with the same ``bias``
    object: the request is then identical, and so is its result.
    """

    start_samples: int
    end_samples: int
    bias: object
    recognition: Recognition

    def serves(self, start_samples: int, end_samples: int, bias: object) -> bool:
        return (
            self.start_samples == start_samples
            and self.end_samples == end_samples
            and self.bias is bias
        )


@dataclass(slots=True)
class SessionStats:
    """What ``session_ended`` reports."""

    audio_samples: int = 0
    speech_samples: int = 0
    utterances: int = 0
    suppressed: int = 0


@dataclass(slots=True)
class OpenUtterance:
    """The utterance being decoded: its index, start and the agreement over its hypotheses."""

    index: int
    start_samples: int
    agreement: LocalAgreement[RecognizedWord] = field(default_factory=LocalAgreement)
    revision: int = 0
    decoded_to_samples: int = 0


def _encode_floats(values: npt.NDArray[Any]) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f8").tobytes()).decode()


def _decode_floats(text: str) -> npt.NDArray[np.float64]:
    return np.frombuffer(base64.b64decode(text), dtype="<f8").copy()


def _int(value: object) -> int:
    """A JSON integer, exactly (no float, string or bool: those would fail a step later)."""
    if type(value) is not int:
        raise TypeError(f"session snapshot: {value!r} is not an integer")
    return value


def _int_or_none(value: object) -> int | None:
    return None if value is None else _int(value)


def _bool(value: object) -> bool:
    if type(value) is not bool:
        raise TypeError(f"session snapshot: {value!r} is not a boolean")
    return value


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    """Everything a quiescent session needs to resume exactly (no utterance open).

    Taken between utterances, so it holds no utterance audio: the VAD's recurrent state, the
    ``tail`` of audio the gate has not settled yet (its speech pad plus the part of a VAD frame
    not yet scored: well under a second), gate and endpoint state, the resampler's history, the
    next utterance index and the newest capture-time mark. ``last_position`` is the opaque
    position (a Kafka offset) of the newest chunk it covers.
    """

    tenant: str
    input_rate_hz: int
    total_samples: int
    tail: tuple[float, ...]
    vad_state: tuple[tuple[float, ...], tuple[float, ...]]
    gate: SpeechGateSnapshot
    endpoint: EndpointSnapshot
    upsampler: tuple[float, ...]
    next_index: int
    capture_mark: tuple[int, int] | None
    last_position: int | None
    stats: tuple[int, int, int, int]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (floats as base64 float64, so a restore is bit-exact)."""
        return {
            "tenant": self.tenant,
            "input_rate_hz": self.input_rate_hz,
            "total_samples": self.total_samples,
            "tail": _encode_floats(np.asarray(self.tail)),
            "vad_state": [_encode_floats(np.asarray(part)) for part in self.vad_state],
            "gate": [
                self.gate.position_samples,
                self.gate.settled_samples,
                self.gate.in_speech,
                self.gate.candidate_start_samples,
                self.gate.silence_start_samples,
            ],
            "endpoint": [
                self.endpoint.position_samples,
                self.endpoint.utterance_start_samples,
                self.endpoint.last_speech_end_samples,
            ],
            "upsampler": _encode_floats(np.asarray(self.upsampler)),
            "next_index": self.next_index,
            "capture_mark": list(self.capture_mark) if self.capture_mark else None,
            "last_position": self.last_position,
            "stats": list(self.stats),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionSnapshot:
        """The snapshot ``to_dict`` wrote. Raises ``ValueError`` on inconsistent endpoint state,
        ``KeyError`` / ``TypeError`` on a missing or ill-shaped field (``decode_checkpoint``
        turns all of these into ``ValueError``)."""
        lstm, context = (tuple(_decode_floats(part).tolist()) for part in data["vad_state"])
        mark = data["capture_mark"]
        stats = data["stats"]
        gate, endpoint = data["gate"], data["endpoint"]
        if not isinstance(data["tenant"], str):
            raise TypeError("session snapshot: tenant is not a string")
        if len(gate) != 5 or len(endpoint) != 3 or len(stats) != 4:
            raise TypeError("session snapshot: gate, endpoint or stats of the wrong length")
        snapshot = cls(
            tenant=data["tenant"],
            input_rate_hz=_int(data["input_rate_hz"]),
            total_samples=_int(data["total_samples"]),
            tail=tuple(_decode_floats(data["tail"]).tolist()),
            vad_state=(lstm, context),
            gate=SpeechGateSnapshot(
                _int(gate[0]),
                _int(gate[1]),
                _bool(gate[2]),
                _int_or_none(gate[3]),
                _int_or_none(gate[4]),
            ),
            endpoint=EndpointSnapshot(
                _int(endpoint[0]), _int_or_none(endpoint[1]), _int_or_none(endpoint[2])
            ),
            upsampler=tuple(_decode_floats(data["upsampler"]).tolist()),
            next_index=_int(data["next_index"]),
            capture_mark=(_int(mark[0]), _int(mark[1])) if mark else None,
            last_position=_int_or_none(data["last_position"]),
            stats=(_int(stats[0]), _int(stats[1]), _int(stats[2]), _int(stats[3])),
        )
        snapshot._check()
        return snapshot

    def _check(self) -> None:
        """``ValueError`` unless the positions agree with each other: a record that decodes but
        does not would fail the worker's step later, on every worker that takes the partition."""
        gate, endpoint = self.gate, self.endpoint
        if (endpoint.utterance_start_samples is None) != (endpoint.last_speech_end_samples is None):
            raise ValueError("session snapshot: utterance start and last speech end disagree")
        if self.input_rate_hz not in (0, 8000, 16000):
            raise ValueError(f"session snapshot: input rate {self.input_rate_hz} Hz")
        if not 0 <= gate.settled_samples <= gate.position_samples <= self.total_samples:
            raise ValueError("session snapshot: gate positions outside the stream")
        if not 0 <= endpoint.position_samples <= self.total_samples:
            raise ValueError("session snapshot: endpoint position outside the stream")
        if len(self.tail) > self.total_samples or self.next_index < 0:
            raise ValueError("session snapshot: tail longer than the stream, or a negative index")


class Session:
    """State of one stream. Owned by the engine's thread; not thread-safe."""

    def __init__(
        self,
        key: SessionKey,
        tenant: str,
        vad_state: Any,
        gate_config: SpeechGateConfig,
        endpoint_config: EndpointConfig,
        frame_samples: int,
        *,
        denoise: bool = False,
    ) -> None:
        self.key = key
        self.tenant = tenant
        self.vad_state = vad_state
        self.gate = SpeechGate(gate_config)
        self.endpoint = EndpointDetector(endpoint_config)
        self.frame_samples = frame_samples
        self.input_rate_hz = 0
        self._upsampler: Upsampler2x | None = None
        self._denoiser: StreamDenoiser | None = StreamDenoiser() if denoise else None
        # Audio kept, in a store that grows by doubling: appending a 20 ms chunk must not copy
        # the whole open utterance (np.concatenate did, 0.3–0.6 ms a chunk at 5–20 s).
        self._store = np.zeros(_MIN_STORE_SAMPLES, dtype=np.float32)
        self._length = 0
        self.buffer_start_samples = 0
        self.total_samples = 0
        self.next_index = 0
        self.finals_through = -1
        # Where the utterances finalized before a failover end (ms of the call), when the
        # checkpoint said: a replay skips by position, not by index (``_finalized_before``).
        self.finals_end_ms: int | None = None
        self.utterance: OpenUtterance | None = None
        self.final_jobs: deque[FinalJob] = deque()
        self.early_final: EarlyFinal | None = None
        self.capture_marks: deque[tuple[int, int]] = deque()
        self.last_position: int | None = None
        self.received_end_samples: int | None = None
        self.ended = False
        self.end_pending = False
        self.flush_pending = False
        self.stats = SessionStats()

    # -- audio in ---------------------------------------------------------------------------

    def accept(
        self,
        samples: npt.NDArray[np.float32],
        sample_rate_hz: int,
        capture_ms: int | None,
        position: int | None,
    ) -> None:
        """Append one chunk (8 or 16 kHz float32). The session copies what it keeps."""
        if sample_rate_hz != self.input_rate_hz:
            # A rate change mid-stream ends the old rate's resampling (its held-back tail is
            # kept) and restarts the resampler (its history is of the old rate).
            self._drain_upsampler()
            self.input_rate_hz = sample_rate_hz
            self._upsampler = Upsampler2x() if sample_rate_hz == 8000 else None
        audio = self._upsampler.process(samples) if self._upsampler else samples
        chunk_start_samples = self.total_samples
        if self._denoiser is not None:
            # The denoiser holds back its latency; this chunk starts after what it holds.
            chunk_start_samples += self._denoiser.pending_samples
        if capture_ms is not None:
            self.capture_marks.append((chunk_start_samples, capture_ms))
        self._keep_16k(audio)
        if position is not None:
            self.last_position = position

    def drain(self) -> None:
        """At the end of the stream, take the audio the resampler and the denoiser still hold
        back: the resampler's tail goes through the denoiser, then the denoiser is flushed and
        closed. Idempotent."""
        if self._denoiser is not None and self._denoiser.closed:
            return
        self._drain_upsampler()
        if self._denoiser is not None:
            tail = self._denoiser.flush()
            self._denoiser.close()
            self._keep(tail)

    def _drain_upsampler(self) -> None:
        if self._upsampler is not None:
            self._keep_16k(self._upsampler.flush())

    def _keep_16k(self, audio: npt.NDArray[np.float32]) -> None:
        """Keep 16 kHz audio of the stream, denoised when the session denoises."""
        self._keep(self._denoiser.process(audio) if self._denoiser is not None else audio)

    def _keep(self, audio: npt.NDArray[np.float32]) -> None:
        """Append audio ready for the VAD and count it as received."""
        if len(audio):
            self._append(audio)
            self.total_samples += len(audio)
            self.stats.audio_samples += len(audio)

    def close(self) -> None:
        """Release what is not garbage-collected promptly (the denoiser's C state)."""
        if self._denoiser is not None:
            self._denoiser.close()

    @property
    def buffer(self) -> npt.NDArray[np.float32]:
        """The audio kept, from ``buffer_start_samples`` (a view: valid until the next change)."""
        return self._store[: self._length]

    def _append(self, audio: npt.NDArray[np.float32]) -> None:
        needed = self._length + len(audio)
        if needed > len(self._store):
            grown = np.zeros(max(needed, 2 * len(self._store)), dtype=np.float32)
            grown[: self._length] = self._store[: self._length]
            self._store = grown
        self._store[self._length : needed] = audio
        self._length = needed

    def pad_to_frame(self) -> bool:
        """At the end of a stream, zero-pad the last partial VAD frame; True if it padded.

        The padding is scored like audio (so the stream's last speech is not lost) but does not
        count as received audio in the stats.
        """
        remainder = (self.total_samples - self.gate.position_samples) % self.frame_samples
        if remainder == 0:
            return False
        silence = np.zeros(self.frame_samples - remainder, dtype=np.float32)
        self._append(silence)
        self.received_end_samples = self.total_samples
        self.total_samples += len(silence)
        return True

    @property
    def vad_position_samples(self) -> int:
        return self.gate.position_samples

    @property
    def settled_ms(self) -> int:
        """Audio ms (from the channel's first sample) before which no final of this session
        can still start: the earliest of its queued finals, its open utterance and the VAD's
        settled labels (new speech starts at or after them). The redaction stage's hold
        (``pipeline.redaction.Redactor.advance``) runs out against it."""
        starts = [self.gate.settled_samples, *(job.start_samples for job in self.final_jobs)]
        if self.endpoint.utterance_start_samples is not None:
            starts.append(self.endpoint.utterance_start_samples)
        return min(starts) // SAMPLES_PER_MS

    def frames_ready(self) -> int:
        """Whole VAD frames buffered but not yet scored."""
        return (self.total_samples - self.gate.position_samples) // self.frame_samples

    def next_vad_frame(self) -> npt.NDArray[np.float32]:
        """The next unscored frame (a view into the buffer)."""
        start = self.gate.position_samples - self.buffer_start_samples
        return self.buffer[start : start + self.frame_samples]

    def apply_vad(self, speech_prob: float) -> None:
        """Feed one frame's probability through gate and endpoint; queue finals it decides."""
        self._label(self.gate.push(speech_prob))
        self._track_open_utterance()

    def _label(self, spans: tuple[GatedSpan, ...]) -> None:
        """Settled spans of the gate → the endpoint rules (and the speech-time count)."""
        for span in spans:
            if span.is_speech:
                self.stats.speech_samples += span.duration_samples
            self._decisions(self.endpoint.push(span.is_speech, span.duration_samples))

    def close_stream(self, reason: EndpointReason) -> None:
        """End of stream or forced final: settle what the gate holds and close the utterance.

        A forced final first ends a run of speech whose silence has begun (as the gate would
        once the silence lasted), so the final keeps its end pad; speech still going on is cut
        where the audio is, and what follows continues it (``EndpointDetector``)."""
        if reason is EndpointReason.END_OF_STREAM:
            self._label(self.gate.flush())
            decision = self.endpoint.end_of_stream()
        else:
            self._label(self.gate.end_speech())
            decision = self.endpoint.force()
        if decision is not None:
            self._decisions((decision,))
        self._track_open_utterance()

    def _decisions(self, decisions: tuple[EndpointDecision, ...]) -> None:
        for decision in decisions:
            end_samples = decision.end_samples
            if self.received_end_samples is not None:
                # The end-of-stream padding is scored, but is not audio the caller sent.
                end_samples = min(end_samples, self.received_end_samples)
            if decision.discarded or end_samples <= decision.start_samples:
                # A blip, or a piece (after a max-length cut) that lies wholly in the padding.
                self.utterance = None
                continue
            index = self.next_index
            self.next_index += 1
            self.utterance = None
            start_samples = decision.start_samples
            finals_end_ms = self.finals_end_ms
            by_position = finals_end_ms is not None
            if finals_end_ms is not None:
                # Numbered after the last final whatever the replay's VAD made of the audio
                # before (a split or a merge there renumbers nothing), and begun where the
                # finalized audio ends (a VAD that drifted may straddle it).
                index = max(index, self.finals_through + 1)
                start_samples = max(start_samples, finals_end_ms * SAMPLES_PER_MS)
            if self._finalized_before(index, start_samples, end_samples):
                # Finalized before a failover: replayed only to rebuild state.
                self.stats.utterances += 1
                if by_position:
                    self.next_index = self.finals_through + 1
                continue
            if by_position:
                self.next_index = index + 1
            self.final_jobs.append(
                FinalJob(
                    index,
                    start_samples,
                    end_samples,
                    # The VAD position when the rule fired (the endpoint's own timeline lags it
                    # by the gate's pad): the audio that had to arrive for this final.
                    max(decision.decided_at_samples, self.gate.position_samples),
                    decision.reason,
                    decision.start_is_onset and start_samples == decision.start_samples,
                    # Cut at the end-of-stream padding: where the audio stopped, not speech.
                    decision.end_is_offset and end_samples == decision.end_samples,
                )
            )

    def _finalized_before(self, index: int, start_samples: int, end_samples: int) -> bool:
        """Whether an utterance the replay decided was finalized before a failover. By position
        when the checkpoint gave one: it ends within the finalized audio, or it straddles the
        end of that audio and what is left past there is shorter than a blip. By index otherwise
        (a checkpoint written before the position was recorded): the same VAD segments the same
        audio the same way."""
        if self.finals_end_ms is None:
            return index <= self.finals_through
        if end_samples // SAMPLES_PER_MS <= self.finals_end_ms:
            return True
        straddles = start_samples == self.finals_end_ms * SAMPLES_PER_MS
        short = end_samples - start_samples < self.endpoint.config.min_utterance_samples
        return straddles and short  # a short piece of its own (a max-length cut's tail) stays

    def _track_open_utterance(self) -> None:
        start = self.endpoint.utterance_start_samples
        if start is None:
            self.utterance = None
        elif self.utterance is None or self.utterance.start_samples != start:
            self.utterance = OpenUtterance(self.next_index, start)

    # -- decoding ----------------------------------------------------------------------------

    def audio(self, start_samples: int, end_samples: int) -> npt.NDArray[np.float32]:
        """A view of buffered audio ``[start, end)`` (absolute sample positions)."""
        offset = self.buffer_start_samples
        return self.buffer[max(start_samples - offset, 0) : max(end_samples - offset, 0)]

    def undecoded_samples(self) -> int:
        """Audio of the open utterance heard since its last decode (0 without one)."""
        utterance = self.utterance
        if utterance is None:
            return 0
        return self.gate.position_samples - max(
            utterance.decoded_to_samples, utterance.start_samples
        )

    def early_final_span(self, min_silence_samples: int) -> tuple[int, int] | None:
        """The span a final of the open utterance would have if it closed now, once its trailing
        (labelled) silence reaches ``min_silence_samples``; None before, or without one."""
        utterance = self.utterance
        end = self.endpoint.last_speech_end_samples
        if utterance is None or utterance.index <= self.finals_through or end is None:
            return None
        if self.endpoint.trailing_silence_samples < min_silence_samples:
            return None
        return utterance.start_samples, end

    def due_partial(self, hop_samples: int, min_samples: int) -> bool:
        """Whether the open utterance should be re-decoded now."""
        utterance = self.utterance
        if utterance is None or utterance.index <= self.finals_through:
            return False
        heard = self.gate.position_samples - utterance.start_samples
        return (
            heard >= min_samples
            and self.undecoded_samples() >= hop_samples
            and not self._may_be_blip(utterance)
        )

    def _may_be_blip(self, utterance: OpenUtterance) -> bool:
        """Whether the open utterance's speech is still shorter than a blip: it may yet be
        discarded (and its index reused), so it gets no partials."""
        end = self.endpoint.last_speech_end_samples
        return (
            end is None
            or end - utterance.start_samples < self.endpoint.config.min_utterance_samples
        )

    def capture_ms_at(self, position_samples: int) -> int | None:
        """Capture time (epoch ms) of a sample, from the newest mark at or before it."""
        best: tuple[int, int] | None = None
        for mark in self.capture_marks:
            if mark[0] <= position_samples:
                best = mark
            else:
                break
        if best is None:
            return None
        return best[1] + (position_samples - best[0]) // SAMPLES_PER_MS

    # -- memory ------------------------------------------------------------------------------

    def trim(self, pad_samples: int) -> None:
        """Drop audio no open or queued utterance, nor the gate's unsettled part, can need."""
        keep = self.gate.settled_samples - pad_samples
        if self.utterance is not None:
            keep = min(keep, self.utterance.start_samples)
        if self.endpoint.utterance_start_samples is not None:
            keep = min(keep, self.endpoint.utterance_start_samples)
        for job in self.final_jobs:
            keep = min(keep, job.start_samples)
        keep = max(keep, self.buffer_start_samples)
        drop = keep - self.buffer_start_samples
        if drop > 0:
            remaining = self._length - drop
            self._store[:remaining] = self._store[drop : self._length]
            self._length = remaining
            self.buffer_start_samples = keep
            if len(self._store) > _MIN_STORE_SAMPLES and 4 * remaining < len(self._store):
                # A long utterance grew the store; between utterances it needs little again
                # (2 MiB kept per session after one 20 s utterance, for the rest of the call).
                self._store = self._store[: max(_MIN_STORE_SAMPLES, 2 * remaining)].copy()
        while len(self.capture_marks) > 1 and self.capture_marks[1][0] <= keep:
            self.capture_marks.popleft()

    # -- checkpoints -------------------------------------------------------------------------

    @property
    def quiescent(self) -> bool:
        """No utterance open or queued and no speech pending: a snapshot loses nothing."""
        gate = self.gate.snapshot()
        return (
            self._denoiser is None  # RNNoise's C state cannot be snapshotted
            and self.utterance is None
            and not self.final_jobs
            and self.endpoint.utterance_start_samples is None
            and not gate.in_speech
            and gate.candidate_start_samples is None
            and not self.end_pending
            and not self.flush_pending
        )

    def snapshot(self, vad_state: tuple[tuple[float, ...], tuple[float, ...]]) -> SessionSnapshot:
        """The session's state for a checkpoint; only valid while :attr:`quiescent`."""
        gate = self.gate.snapshot()
        mark = self.capture_marks[-1] if self.capture_marks else None
        upsampler = self._upsampler.snapshot().history if self._upsampler else ()
        return SessionSnapshot(
            tenant=self.tenant,
            input_rate_hz=self.input_rate_hz,
            total_samples=self.total_samples,
            tail=tuple(self.audio(gate.settled_samples, self.total_samples).tolist()),
            vad_state=vad_state,
            gate=gate,
            endpoint=self.endpoint.snapshot(),
            upsampler=tuple(upsampler),
            next_index=self.next_index,
            capture_mark=mark,
            last_position=self.last_position,
            stats=(
                self.stats.audio_samples,
                self.stats.speech_samples,
                self.stats.utterances,
                self.stats.suppressed,
            ),
        )

    def start_at(self, samples: int, next_index: int) -> None:
        """Before its first chunk: the stream begins at sample ``samples`` (16 kHz) of the call
        and its next utterance is ``next_index``, as after a snapshot whose state is lost (the
        VAD, gate and endpoint start afresh there; times stay the call's)."""
        self.total_samples = samples
        self.buffer_start_samples = samples
        self.gate = SpeechGate.from_snapshot(
            self.gate.config, SpeechGateSnapshot(samples, samples, False, None, None)
        )
        self.endpoint = EndpointDetector.from_snapshot(
            self.endpoint.config, EndpointSnapshot(samples, None, None)
        )
        self.next_index = next_index

    def restore(self, snapshot: SessionSnapshot) -> None:
        """Resume from a snapshot (the VAD state is restored by the engine)."""
        self.tenant = snapshot.tenant
        self.input_rate_hz = snapshot.input_rate_hz
        self._upsampler = (
            Upsampler2x(UpsamplerState(snapshot.upsampler))
            if snapshot.input_rate_hz == 8000
            else None
        )
        self.gate = SpeechGate.from_snapshot(self.gate.config, snapshot.gate)
        self.endpoint = EndpointDetector.from_snapshot(self.endpoint.config, snapshot.endpoint)
        self.total_samples = snapshot.total_samples
        tail = np.asarray(snapshot.tail, dtype=np.float32)
        self._length = 0
        self._append(tail)
        self.buffer_start_samples = snapshot.total_samples - len(tail)
        self.next_index = snapshot.next_index
        self.capture_marks = deque([snapshot.capture_mark] if snapshot.capture_mark else [])
        self.last_position = snapshot.last_position
        self.stats = SessionStats(*snapshot.stats)
        self.utterance = None
        self.final_jobs.clear()
        self.early_final = None
