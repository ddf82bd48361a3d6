"""Endpoint rules: when does the open utterance become a final?

The detector is fed the stream's audio in order as labelled runs of samples (speech or not): one
VAD frame at a time, or the settled spans of :class:`pipeline.asr.vad.SpeechGate`. It groups speech
into utterances and closes them by rule:

* ``silence``: trailing silence after the last speech sample reaches ``trailing_silence_ms``
  (of real silence: see ``EndpointConfig.speech_pad_ms`` for padded input);
* ``silence`` sooner in a long utterance: once its speech span reaches ``long_utterance_ms``,
  trailing silence of ``long_silence_ms`` (a pause between sentences) closes it, so that a long
  turn is finalized at a pause before its window grows too long to decode whole;
* ``max_length``: the utterance's speech span reaches ``max_utterance_ms``; it is cut there and,
  if speech goes on, the next utterance starts at the very next sample (a last resort: the cut
  falls inside speech);
* ``end_of_stream``: :meth:`EndpointDetector.end_of_stream`;
* ``forced``: :meth:`EndpointDetector.force`, a final on request.

Contracts:

* ``EndpointReason`` is the wire enum of ``pipeline.contracts.messages``, re-exported here.
* Positions are samples from the start of the stream (the first sample pushed is 0), at
  ``EndpointConfig.sample_rate_hz``. Time comes only from the audio: no clock is read.
* An utterance spans ``[start_samples, end_samples)``: from its first speech sample to one past its
  last. Pauses shorter than ``trailing_silence_ms`` stay inside it; trailing silence does not.
* Utterances never overlap and come out in stream order; every speech sample pushed belongs to
  exactly one closed or still open utterance.
* An utterance whose span is shorter than ``min_utterance_ms`` still closes (so the tiling holds)
  but its decision has ``discarded=True``: a blip, for which no final is published.
* A decision says which of its edges the labeller drew: ``start_is_onset`` when labelled
  non-speech precedes its start (not a max-length cut, not speech going on after a forced final,
  not the stream's first sample), ``end_is_offset`` when labelled non-speech follows its end (a
  silence endpoint, or an end of stream or force after some silence). Only such edges carry the
  labeller's pads, so only they locate where speech began or ended.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.contracts.messages import EndpointReason
from pipeline.errors import ConfigError

__all__ = [
    "EndpointConfig",
    "EndpointDecision",
    "EndpointDetector",
    "EndpointReason",
    "EndpointSnapshot",
]


def _ms_to_samples(duration_ms: int, sample_rate_hz: int) -> int:
    # Round up so that "at least N ms" never fires a sample early at rates where N ms is fractional.
    return -(-duration_ms * sample_rate_hz // 1000)


MAX_UTTERANCE_LIMIT_MS = 29_000
"""The longest utterance allowed: Whisper hears a 30 s window, and an utterance cut longer would
lose its end silently (the margin covers the padding around it)."""


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """Endpoint rules of one tenant; the defaults are the project's (DESIGN §4).

    ``speech_pad_ms`` is how much the labeller of the input widens each run of speech at its
    end, ``start_pad_ms`` (``None``: the same) before its start: those of
    :class:`~pipeline.asr.vad.SpeechGateConfig` when fed :class:`~pipeline.asr.vad.SpeechGate`
    spans, 0 (the default) for raw per-frame decisions. A real pause of ``P`` ms then reaches
    the detector as ``P - speech_pad_ms - start_pad_ms`` of labelled silence (the end pad of
    one run and the start pad of the next), so the silence rule subtracts both pads and
    ``trailing_silence_ms`` keeps meaning real silence. Utterance spans keep their pads.
    """

    sample_rate_hz: int = 16_000
    trailing_silence_ms: int = 800
    max_utterance_ms: int = 20_000
    min_utterance_ms: int = 200
    speech_pad_ms: int = 0
    start_pad_ms: int | None = None
    long_utterance_ms: int | None = None
    long_silence_ms: int = 200

    def __post_init__(self) -> None:
        if self.sample_rate_hz <= 0:
            raise ConfigError(f"sample_rate_hz must be positive, got {self.sample_rate_hz}")
        if self.trailing_silence_ms <= 0:
            raise ConfigError(
                f"trailing_silence_ms must be positive, got {self.trailing_silence_ms}"
            )
        if self.min_utterance_ms < 0:
            raise ConfigError(f"min_utterance_ms must not be negative, got {self.min_utterance_ms}")
        if not 0 <= 2 * self.speech_pad_ms < self.trailing_silence_ms:
            raise ConfigError(
                f"speech_pad_ms must be >= 0 and less than half of trailing_silence_ms, "
                f"got {self.speech_pad_ms}"
            )
        if self.start_pad_ms is not None and not (
            0 <= self.start_pad_ms < self.trailing_silence_ms - self.speech_pad_ms
        ):
            raise ConfigError(
                f"start_pad_ms must be >= 0 and, with speech_pad_ms, less than "
                f"trailing_silence_ms, got {self.start_pad_ms}"
            )
        if self.max_utterance_ms > MAX_UTTERANCE_LIMIT_MS:
            raise ConfigError(
                f"max_utterance_ms must be at most {MAX_UTTERANCE_LIMIT_MS} (the recognizer "
                f"hears 30 s at a time), got {self.max_utterance_ms}"
            )
        if self.long_utterance_ms is not None and not (
            0 < self.long_utterance_ms < self.max_utterance_ms
        ):
            raise ConfigError(
                f"long_utterance_ms must be positive and less than max_utterance_ms "
                f"({self.max_utterance_ms}), got {self.long_utterance_ms}"
            )
        if self.long_silence_ms <= 0:
            raise ConfigError(f"long_silence_ms must be positive, got {self.long_silence_ms}")
        if self.max_utterance_ms <= self.min_utterance_ms:
            raise ConfigError(
                f"max_utterance_ms ({self.max_utterance_ms}) must exceed "
                f"min_utterance_ms ({self.min_utterance_ms})"
            )

    @property
    def trailing_silence_samples(self) -> int:
        return _ms_to_samples(self.trailing_silence_ms, self.sample_rate_hz)

    @property
    def speech_pad_samples(self) -> int:
        return _ms_to_samples(self.speech_pad_ms, self.sample_rate_hz)

    @property
    def effective_start_pad_ms(self) -> int:
        return self.speech_pad_ms if self.start_pad_ms is None else self.start_pad_ms

    @property
    def start_pad_samples(self) -> int:
        return _ms_to_samples(self.effective_start_pad_ms, self.sample_rate_hz)

    @property
    def silence_rule_samples(self) -> int:
        """Labelled non-speech after the last speech sample that fires the silence rule."""
        return self.trailing_silence_samples - self.speech_pad_samples - self.start_pad_samples

    @property
    def long_utterance_samples(self) -> int | None:
        if self.long_utterance_ms is None:
            return None
        return _ms_to_samples(self.long_utterance_ms, self.sample_rate_hz)

    @property
    def long_silence_rule_samples(self) -> int:
        """Labelled non-speech that closes a long utterance: ``long_silence_ms`` less the pads,
        at least one sample (a pause shorter than the pads leaves no labelled silence at all)."""
        pads = self.speech_pad_samples + self.start_pad_samples
        return max(1, _ms_to_samples(self.long_silence_ms, self.sample_rate_hz) - pads)

    def silence_rule_for(self, speech_span_samples: int) -> int:
        """Labelled non-speech that closes an utterance whose speech spans this long."""
        long = self.long_utterance_samples
        if long is not None and speech_span_samples >= long:
            return min(self.long_silence_rule_samples, self.silence_rule_samples)
        return self.silence_rule_samples

    @property
    def max_utterance_samples(self) -> int:
        return _ms_to_samples(self.max_utterance_ms, self.sample_rate_hz)

    @property
    def min_utterance_samples(self) -> int:
        return _ms_to_samples(self.min_utterance_ms, self.sample_rate_hz)


@dataclass(frozen=True, slots=True)
class EndpointDecision:
    """An utterance closed.

    ``[start_samples, end_samples)`` is its speech span; ``decided_at_samples`` is the input
    position at which the rule fired (``decided_at_samples - end_samples`` is the endpoint's
    own latency in audio; a labeller such as the speech gate adds its lag on top).
    ``discarded`` marks a blip shorter than ``min_utterance_ms``. ``start_is_onset`` and
    ``end_is_offset`` say whether each edge is one the labeller drew (see the module contracts).
    """

    reason: EndpointReason
    start_samples: int
    end_samples: int
    decided_at_samples: int
    discarded: bool
    start_is_onset: bool
    end_is_offset: bool

    @property
    def duration_samples(self) -> int:
        return self.end_samples - self.start_samples


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """Everything an :class:`EndpointDetector` needs to resume; small enough to checkpoint."""

    position_samples: int
    utterance_start_samples: int | None
    last_speech_end_samples: int | None


class EndpointDetector:
    """Endpoint state of one stream (one session channel). Pure and not thread-safe."""

    __slots__ = (
        "_config",
        "_continues_speech",
        "_last_speech_end_samples",
        "_position_samples",
        "_speech_run_end_samples",
        "_start_is_onset",
        "_utterance_start_samples",
    )

    def __init__(self, config: EndpointConfig | None = None) -> None:
        self._config = config if config is not None else EndpointConfig()
        self._position_samples = 0
        self._utterance_start_samples: int | None = None
        self._last_speech_end_samples: int | None = None
        # Where the latest run of speech pushed ended: an utterance starting there continues
        # speech (after a max-length cut or a forced final) rather than starting at an onset,
        # and is never a blip, however short: it is the tail of real speech. (Not in snapshots:
        # a session takes them only outside speech, see ``from_snapshot``.)
        self._speech_run_end_samples: int | None = None
        self._start_is_onset = False
        self._continues_speech = False

    @classmethod
    def from_snapshot(cls, config: EndpointConfig, snapshot: EndpointSnapshot) -> EndpointDetector:
        """A detector that continues where the one that took ``snapshot`` was: exactly, for a
        snapshot taken outside a run of speech (the only time sessions take them). Inside one,
        the facts a snapshot does not carry are guessed: an open utterance started at an onset
        unless it started at sample 0, and the next run of speech does not continue one."""
        if (snapshot.utterance_start_samples is None) != (snapshot.last_speech_end_samples is None):
            raise ConfigError("endpoint snapshot: utterance start and last speech end disagree")
        detector = cls(config)
        detector._position_samples = snapshot.position_samples
        detector._utterance_start_samples = snapshot.utterance_start_samples
        detector._last_speech_end_samples = snapshot.last_speech_end_samples
        detector._start_is_onset = (snapshot.utterance_start_samples or 0) > 0
        return detector

    @property
    def config(self) -> EndpointConfig:
        return self._config

    @property
    def position_samples(self) -> int:
        """Samples pushed so far: the stream position the next push starts at."""
        return self._position_samples

    @property
    def utterance_start_samples(self) -> int | None:
        """First speech sample of the open utterance, or ``None`` when none is open."""
        return self._utterance_start_samples

    @property
    def last_speech_end_samples(self) -> int | None:
        """One past the open utterance's last speech sample: its end if it closed now."""
        return self._last_speech_end_samples

    @property
    def trailing_silence_samples(self) -> int:
        """Non-speech samples since the open utterance's last speech sample (0 when none open)."""
        if self._last_speech_end_samples is None:
            return 0
        return self._position_samples - self._last_speech_end_samples

    def snapshot(self) -> EndpointSnapshot:
        return EndpointSnapshot(
            position_samples=self._position_samples,
            utterance_start_samples=self._utterance_start_samples,
            last_speech_end_samples=self._last_speech_end_samples,
        )

    def push(self, is_speech: bool, duration_samples: int) -> tuple[EndpointDecision, ...]:
        """Feed the next ``duration_samples`` of the stream, all speech or all non-speech.

        Returns the utterances this run closed, in order: usually none, one at most for a run
        shorter than ``max_utterance_ms``. A negative duration is a caller bug (``ValueError``).
        """
        if duration_samples < 0:
            raise ValueError(f"duration_samples must not be negative, got {duration_samples}")
        if is_speech:
            return self._push_speech(duration_samples)
        return self._push_silence(duration_samples)

    def end_of_stream(self) -> EndpointDecision | None:
        """Close the open utterance, if any, because the stream ended."""
        return self._close_if_open(EndpointReason.END_OF_STREAM)

    def force(self) -> EndpointDecision | None:
        """Close the open utterance, if any, on request (e.g. the caller hung up a leg)."""
        return self._close_if_open(EndpointReason.FORCED)

    def _push_speech(self, duration_samples: int) -> tuple[EndpointDecision, ...]:
        max_samples = self._config.max_utterance_samples
        decisions: list[EndpointDecision] = []
        remaining = duration_samples
        while remaining > 0:
            start = self._utterance_start_samples
            if start is not None and start + max_samples <= self._position_samples:
                # A pause shorter than the silence rule carried the utterance past its maximum:
                # more speech cannot join it, so it ends at its last speech sample.
                decisions.append(self._close(EndpointReason.MAX_LENGTH, end_is_offset=True))
                start = None
            if start is None:
                start = self._utterance_start_samples = self._position_samples
                self._continues_speech = start == self._speech_run_end_samples
                self._start_is_onset = start > 0 and not self._continues_speech
            taken = min(remaining, start + max_samples - self._position_samples)
            self._position_samples += taken
            self._last_speech_end_samples = self._speech_run_end_samples = self._position_samples
            remaining -= taken
            if self._position_samples - start >= max_samples:
                decisions.append(self._close(EndpointReason.MAX_LENGTH, end_is_offset=False))
        return tuple(decisions)

    def _push_silence(self, duration_samples: int) -> tuple[EndpointDecision, ...]:
        end_position = self._position_samples + duration_samples
        decision = None
        last_end = self._last_speech_end_samples
        if last_end is not None:
            assert self._utterance_start_samples is not None  # set together
            span = last_end - self._utterance_start_samples
            fires_at = last_end + self._config.silence_rule_for(span)
            if end_position >= fires_at:
                decided_at = max(fires_at, self._position_samples)
                decision = self._close(
                    EndpointReason.SILENCE, end_is_offset=True, decided_at=decided_at
                )
        self._position_samples = end_position
        return () if decision is None else (decision,)

    def _close_if_open(self, reason: EndpointReason) -> EndpointDecision | None:
        if self._utterance_start_samples is None:
            return None
        ended_in_silence = self._position_samples != self._last_speech_end_samples
        return self._close(reason, end_is_offset=ended_in_silence)

    def _close(
        self, reason: EndpointReason, *, end_is_offset: bool, decided_at: int | None = None
    ) -> EndpointDecision:
        start = self._utterance_start_samples
        end = self._last_speech_end_samples
        # Only called with an open utterance; both are set together.
        assert start is not None
        assert end is not None
        self._utterance_start_samples = None
        self._last_speech_end_samples = None
        continues_speech, self._continues_speech = self._continues_speech, False
        return EndpointDecision(
            reason=reason,
            start_samples=start,
            end_samples=end,
            decided_at_samples=self._position_samples if decided_at is None else decided_at,
            discarded=end - start < self._config.min_utterance_samples and not continues_speech,
            start_is_onset=self._start_is_onset,
            end_is_offset=end_is_offset,
        )
