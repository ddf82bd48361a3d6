"""Voice activity: speech probabilities per frame, batched across streams, and a speech gate.

Two layers, both pure (no I/O beyond loading weights once, no clock):

* a :class:`Vad` turns 32 ms frames of 16 kHz audio into speech probabilities, for many streams in
  one call, each stream carrying its own recurrent :class:`VadStreamState`. :class:`SileroVad` is
  the real one (silero VAD v6, TorchScript weights bundled in the ``silero-vad`` wheel);
  :class:`EnergyVad` is a deterministic, weight-free stand-in for unit tests.
* a :class:`SpeechGate` per stream turns that probability sequence into settled speech /
  non-speech spans of samples, with hysteresis, a minimum speech length and padding.

Frames: ``frame_samples`` (512) consecutive samples, float32 in [-1, 1], stream order, no gaps.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from pipeline.errors import ConfigError, ModelLoadError

__all__ = [
    "EnergyVad",
    "EnergyVadState",
    "GatedSpan",
    "SileroVad",
    "SpeechGate",
    "SpeechGateConfig",
    "SpeechGateSnapshot",
    "Vad",
    "VadStreamState",
    "silero_jit_path",
]

VAD_SAMPLE_RATE_HZ = 16_000
VAD_FRAME_SAMPLES = 512

StateT = TypeVar("StateT")

Frames = npt.NDArray[np.float32]
Probabilities = npt.NDArray[np.float32]


class Vad(Protocol[StateT]):
    """Speech probabilities for a batch of streams, one frame each.

    ``speech_probs(frames, states)``: row ``i`` of ``frames`` (shape ``(B, frame_samples)``) is
    the next frame of the stream whose state is ``states[i]``. Returns ``(B,)`` float32
    probabilities in [0, 1] and advances every state in place by one frame. The result for a
    stream depends only on its own frames and state: which other streams share the batch, and
    in what order, does not matter. The caller owns ``frames`` (it is read, never kept); the VAD
    owns what is inside a state, the caller owns the state object and must not pass one state
    twice in a call.
    """

    @property
    def sample_rate_hz(self) -> int: ...

    @property
    def frame_samples(self) -> int: ...

    def new_state(self) -> StateT: ...

    def speech_probs(self, frames: Frames, states: Sequence[StateT]) -> Probabilities: ...


def _check_batch(frames: Frames, states: Sequence[object], frame_samples: int) -> None:
    if frames.ndim != 2 or frames.shape[1] != frame_samples:
        raise ValueError(f"frames must have shape (B, {frame_samples}), got {frames.shape}")
    if frames.shape[0] != len(states):
        raise ValueError(f"{frames.shape[0]} frames for {len(states)} states")
    if len({id(state) for state in states}) != len(states):
        raise ValueError("one stream state appears twice in a batch")


def silero_jit_path() -> Path:
    """Where the ``silero-vad`` wheel keeps its TorchScript weights (``data/silero_vad.jit``).

    Found without importing ``silero_vad``: its ``__init__`` calls ``torch.set_num_threads(1)``
    for the whole process, which would throttle every other torch model in the worker.
    """
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the silero-vad package is not installed")
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "silero_vad.jit"
        if path.is_file():
            return path
    raise ModelLoadError("silero-vad is installed but data/silero_vad.jit is missing")


class VadStreamState:
    """Recurrent state of one stream in :class:`SileroVad`: LSTM (h, c) and the audio context.

    Opaque to callers. Owned by one stream; :meth:`SileroVad.speech_probs` replaces its tensors
    (it never mutates tensors in place, so an old reference a caller kept stays valid).
    """

    __slots__ = ("_context", "_lstm", "frames_processed")

    def __init__(self, lstm: torch.Tensor, context: torch.Tensor) -> None:
        self._lstm = lstm  # (2, hidden) float64: h and c
        self._context = context  # (context_samples,) float32: the tail of the previous frame
        self.frames_processed = 0


class SileroVad:
    """Silero VAD v6 (16 kHz), batched over streams with explicit per-stream state.

    The TorchScript wrapper in the wheel keeps a single recurrent state for "the" batch and
    resets it whenever the batch size changes, so it cannot serve a changing set of streams.
    This class runs the wrapper's inner 16 kHz model in two parts with the state passed
    explicitly: its STFT and convolutional encoder as they are, then the LSTM cell and output
    layer, computed here from the same weights. It also does the wrapper's bookkeeping: each
    frame is prefixed with the last ``context_samples`` of the stream's previous frame (zeros
    before the first frame).

    Batch invariance, so that a replay with other batches reproduces live decisions: on CPU a
    stream's probabilities come out bit-for-bit the same whatever shares its batch (measured
    and held by the integration tests, not promised by PyTorch). The encoder's convolutions
    (oneDNN) round each sample alike for every batch of two or more, but a batch of one takes
    another kernel, so it is run as a batch of two. The recurrent step's matrix product does
    round by batch size, and the recurrence amplifies ~1e-7 float32 differences into ~1e-5 at
    speech onsets; it runs in float64, which keeps them near 1e-16, for about the cost of the
    float32 step. On CUDA results agree with CPU to about 1e-5. Loading checks the split model
    against the wrapper's own forward.

    Not thread-safe; one instance can serve every stream of a worker. Weights load once, from
    the wheel (no download). ``device`` may be ``"cuda"``; states then live on that device.
    """

    sample_rate_hz = VAD_SAMPLE_RATE_HZ
    frame_samples = VAD_FRAME_SAMPLES

    def __init__(self, device: str | torch.device = "cpu", jit_path: Path | None = None) -> None:
        self._device = torch.device(device)
        path = jit_path if jit_path is not None else silero_jit_path()
        try:
            with warnings.catch_warnings():
                # torch >= 2.9 deprecates TorchScript loading with a FutureWarning; the wheel
                # ships nothing else loadable in torch, and tests turn warnings into errors.
                warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit")
                wrapper = torch.jit.load(str(path), map_location=self._device)
        except (RuntimeError, OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot load silero VAD weights from {path}: {exc}") from exc
        wrapper.eval()
        try:
            model = wrapper._model
            self.context_samples = int(model.context_size_samples)
            self._stft = model.stft
            self._encoder = model.encoder
            rnn = model.decoder.rnn
            output_conv = getattr(model.decoder.decoder, "2")
            with torch.inference_mode():
                # One (B, input + hidden) @ (input + hidden, 4 * hidden) product per frame.
                self._gate_weight = torch.cat([rnn.weight_ih, rnn.weight_hh], dim=1).double().T
                self._gate_bias = rnn.bias_ih.double() + rnn.bias_hh.double()
                self._output_weight = output_conv.weight.double().reshape(-1)
                self._output_bias = output_conv.bias.double().reshape(())
        except (AttributeError, RuntimeError) as exc:
            raise ModelLoadError(f"{path} is not the silero VAD v5/v6 TorchScript layout") from exc
        self._hidden_size = int(rnn.weight_hh.shape[1])
        self._check_against_wrapper(model, path)

    @property
    def model_id(self) -> str:
        """Which VAD this is, weights and device (``silero-vad-6.2.0/cpu``): checkpoints record
        it, since another VAD may segment the same audio a little differently."""
        return f"silero-vad-{_silero_version()}/{self._device.type}"

    @property
    def device(self) -> torch.device:
        return self._device

    def new_state(self) -> VadStreamState:
        """The state of a stream before its first frame."""
        return VadStreamState(
            lstm=torch.zeros(2, self._hidden_size, dtype=torch.float64, device=self._device),
            context=torch.zeros(self.context_samples, device=self._device),
        )

    def export_state(self, state: VadStreamState) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """A stream's state as plain floats (LSTM h and c, then the audio context), for
        checkpoints; :meth:`import_state` restores it bit for bit."""
        lstm = state._lstm.detach().to("cpu", torch.float64).reshape(-1).tolist()
        context = state._context.detach().to("cpu", torch.float64).reshape(-1).tolist()
        return tuple(lstm), tuple(context)

    def import_state(self, data: tuple[tuple[float, ...], tuple[float, ...]]) -> VadStreamState:
        """The inverse of :meth:`export_state`. ``ValueError`` for a state of another shape
        (exported by another model version): it would fail the whole batch at its first frame."""
        lstm, context = data
        if len(lstm) != 2 * self._hidden_size or len(context) != self.context_samples:
            raise ValueError(
                f"a state of {len(lstm)} LSTM and {len(context)} context values; this VAD "
                f"has {2 * self._hidden_size} and {self.context_samples}"
            )
        return VadStreamState(
            lstm=torch.tensor(lstm, dtype=torch.float64, device=self._device).reshape(2, -1),
            context=torch.tensor(context, dtype=torch.float32, device=self._device),
        )

    def speech_probs(self, frames: Frames, states: Sequence[VadStreamState]) -> Probabilities:
        """See :class:`Vad`. One forward pass for the whole batch."""
        _check_batch(frames, states, self.frame_samples)
        if not states:
            return np.zeros(0, dtype=np.float32)
        audio = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.float32))
        with torch.inference_mode():
            audio = audio.to(self._device, non_blocking=True)
            context = torch.stack([state._context for state in states])
            window = torch.cat([context, audio], dim=1)
            lstm = torch.stack([state._lstm for state in states])
            probs, next_lstm = self._forward(window, lstm)
            # One copy for the batch; each state then holds a row view of it.
            next_context = window[:, -self.context_samples :].clone()
        for state, lstm_row, context_row in zip(
            states, next_lstm.unbind(0), next_context.unbind(0), strict=True
        ):
            state._lstm = lstm_row
            state._context = context_row
            state.frames_processed += 1
        result: Probabilities = probs.float().cpu().numpy()
        return result

    def _forward(
        self, window: torch.Tensor, lstm: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``window`` (B, context + frame) float32, ``lstm`` (B, 2, hidden) float64.

        Returns probabilities (B,) float64 and the next LSTM state (B, 2, hidden) float64.
        """
        rows = window.shape[0]
        if rows == 1:
            # A batch of one takes another convolution kernel, which rounds differently; the
            # duplicate row costs ~0.5 ms, paid only by callers that do not batch.
            window = window.repeat(2, 1)
        features = self._encoder(self._stft(window)).squeeze(-1)[:rows].double()
        hidden, cell = lstm[:, 0], lstm[:, 1]
        gates = torch.addmm(
            self._gate_bias, torch.cat([features, hidden], dim=1), self._gate_weight
        )
        input_gate, forget_gate, cell_gate, output_gate = gates.chunk(4, dim=1)
        cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(cell_gate)
        hidden = torch.sigmoid(output_gate) * torch.tanh(cell)
        logits = torch.relu(hidden) @ self._output_weight + self._output_bias
        return torch.sigmoid(logits), torch.stack([hidden, cell], dim=1)

    def _check_against_wrapper(self, model: torch.jit.ScriptModule, path: Path) -> None:
        """Fail at load, not in production, if the split model is not the wrapper's model."""
        generator = torch.Generator().manual_seed(0)
        window = 0.1 * torch.randn(
            3, self.context_samples + self.frame_samples, generator=generator
        )
        lstm = 0.5 * torch.randn(2, 3, self._hidden_size, generator=generator)
        with torch.inference_mode():
            window, lstm = window.to(self._device), lstm.to(self._device)
            expected_probs, expected_lstm = model(window, lstm)
            probs, next_lstm = self._forward(window, lstm.double().transpose(0, 1))
        probs_error = (probs - expected_probs[:, 0].double()).abs().max().item()
        lstm_error = (next_lstm.transpose(0, 1) - expected_lstm.double()).abs().max().item()
        if max(probs_error, lstm_error) > 1e-4:
            raise ModelLoadError(
                f"{path}: the batched silero VAD disagrees with the packaged model "
                f"(probability error {probs_error:.2e}, state error {lstm_error:.2e})"
            )


class EnergyVadState:
    """:class:`EnergyVad` keeps no history; the object only gives each stream an identity."""

    __slots__ = ("frames_processed",)

    def __init__(self) -> None:
        self.frames_processed = 0


class EnergyVad:
    """A weight-free stand-in for :class:`SileroVad` in unit tests: loudness, not speech.

    The probability rises linearly from 0 at ``floor_dbfs`` to 1 at ``ceiling_dbfs`` (RMS level
    of the frame), so a test can script probabilities by scaling its audio. Deterministic.
    """

    sample_rate_hz = VAD_SAMPLE_RATE_HZ
    frame_samples = VAD_FRAME_SAMPLES
    model_id = "energy"

    def __init__(self, floor_dbfs: float = -50.0, ceiling_dbfs: float = -20.0) -> None:
        if ceiling_dbfs <= floor_dbfs:
            raise ConfigError("ceiling_dbfs must exceed floor_dbfs")
        self._floor_dbfs = floor_dbfs
        self._ceiling_dbfs = ceiling_dbfs

    def new_state(self) -> EnergyVadState:
        return EnergyVadState()

    def export_state(self, state: EnergyVadState) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return (float(state.frames_processed),), ()

    def import_state(self, data: tuple[tuple[float, ...], tuple[float, ...]]) -> EnergyVadState:
        if len(data[0]) != 1 or data[1]:
            raise ValueError("not an EnergyVad state (one frame count, no context)")
        state = EnergyVadState()
        state.frames_processed = int(data[0][0])
        return state

    def speech_probs(self, frames: Frames, states: Sequence[EnergyVadState]) -> Probabilities:
        _check_batch(frames, states, self.frame_samples)
        rms = np.sqrt(np.mean(np.square(frames, dtype=np.float64), axis=1))
        level_dbfs = 20.0 * np.log10(np.maximum(rms, 1e-10))
        span = self._ceiling_dbfs - self._floor_dbfs
        probs: Probabilities = np.clip((level_dbfs - self._floor_dbfs) / span, 0.0, 1.0).astype(
            np.float32
        )
        for state in states:
            state.frames_processed += 1
        return probs


def _ms_to_samples(duration_ms: int, sample_rate_hz: int) -> int:
    return math.ceil(duration_ms * sample_rate_hz / 1000)


@dataclass(frozen=True, slots=True)
class SpeechGateConfig:
    """How a probability sequence becomes speech (defaults after silero's ``VADIterator``).

    * Speech starts on a frame with probability ``>= threshold`` and is confirmed once it has
      lasted ``min_speech_ms`` without a frame below ``neg_threshold`` (shorter runs are blips).
    * Speech ends once probabilities stay below ``neg_threshold`` for ``min_silence_ms``
      (frames between the two thresholds neither start nor end anything: hysteresis).
    * Confirmed speech is widened by ``speech_pad_ms`` at its end and by ``start_pad_ms``
      (``None``: ``speech_pad_ms``) before its start, never into earlier speech.

    ``neg_threshold`` ``None`` means ``max(threshold - 0.15, 0.01)``, as silero does.
    The pad is 60 ms, not silero's 30: onsets of unvoiced consonants score low, and clipping
    them costs the recognizer a word, while a little extra silence costs nothing. The start pad
    is a pre-roll: on band-limited (telephone) audio silero confirms a start late, often after
    the first syllables (docs/accuracy.md), and a longer pre-roll costs only the start's audio,
    where a longer end pad would also lengthen every utterance's end and the silence rule.
    """

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech_ms: int = 250
    min_silence_ms: int = 100
    speech_pad_ms: int = 60
    start_pad_ms: int | None = None
    sample_rate_hz: int = VAD_SAMPLE_RATE_HZ
    frame_samples: int = VAD_FRAME_SAMPLES

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"threshold must be in (0, 1], got {self.threshold}")
        if not 0.0 <= self.effective_neg_threshold <= self.threshold:
            raise ConfigError(
                f"neg_threshold must be in [0, threshold], got {self.effective_neg_threshold}"
            )
        if min(self.min_speech_ms, self.min_silence_ms, self.speech_pad_ms) < 0:
            raise ConfigError("min_speech_ms, min_silence_ms and speech_pad_ms must be >= 0")
        if self.start_pad_ms is not None and self.start_pad_ms < 0:
            raise ConfigError(f"start_pad_ms must be >= 0 or None, got {self.start_pad_ms}")
        if self.speech_pad_ms > self.min_silence_ms:
            # The end pad is applied when the end is decided, min_silence_ms after the last
            # speech frame; a longer pad would reach into audio not yet seen.
            raise ConfigError(
                f"speech_pad_ms ({self.speech_pad_ms}) must not exceed "
                f"min_silence_ms ({self.min_silence_ms})"
            )
        if self.sample_rate_hz <= 0 or self.frame_samples <= 0:
            raise ConfigError("sample_rate_hz and frame_samples must be positive")

    @property
    def effective_neg_threshold(self) -> float:
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(self.threshold - 0.15, 0.01)

    @property
    def min_speech_samples(self) -> int:
        return _ms_to_samples(self.min_speech_ms, self.sample_rate_hz)

    @property
    def min_silence_samples(self) -> int:
        return _ms_to_samples(self.min_silence_ms, self.sample_rate_hz)

    @property
    def speech_pad_samples(self) -> int:
        """The end pad (and the start pad, unless ``start_pad_ms`` is set)."""
        return _ms_to_samples(self.speech_pad_ms, self.sample_rate_hz)

    @property
    def effective_start_pad_ms(self) -> int:
        return self.speech_pad_ms if self.start_pad_ms is None else self.start_pad_ms

    @property
    def start_pad_samples(self) -> int:
        return _ms_to_samples(self.effective_start_pad_ms, self.sample_rate_hz)

    @property
    def max_pending_samples(self) -> int:
        """Upper bound on audio pushed but not yet settled (see :attr:`SpeechGate.pending_samples`).

        A session that keeps this much recent audio can always recover the start of speech.
        """
        return max(self.min_speech_samples + self.start_pad_samples, self.min_silence_samples)


@dataclass(frozen=True, slots=True)
class GatedSpan:
    """Samples ``[start_samples, end_samples)`` of the stream, settled as speech or not."""

    start_samples: int
    end_samples: int
    is_speech: bool

    @property
    def duration_samples(self) -> int:
        return self.end_samples - self.start_samples


@dataclass(frozen=True, slots=True)
class SpeechGateSnapshot:
    """Everything a :class:`SpeechGate` needs to resume; small enough to checkpoint."""

    position_samples: int
    settled_samples: int
    in_speech: bool
    candidate_start_samples: int | None
    silence_start_samples: int | None


class SpeechGate:
    """Per-stream speech segmentation of a probability sequence, causal and sample-exact.

    Each :meth:`push` takes the probability of the next frame and returns the spans that became
    *settled* by it: contiguous and in order (within one return, kinds alternate), tiling
    the stream from sample 0 up to :attr:`settled_samples`. A settled label never changes.
    Labels lag the audio by at most ``config.max_pending_samples`` (the time needed to confirm a
    speech start or end); :meth:`flush` settles everything at the end of the stream. Times are
    sample counts derived from the frames, never a clock.

    The spans feed :class:`~pipeline.asr.endpoint.EndpointDetector` as they come
    (``push(span.is_speech, span.duration_samples)``); give its config the same
    ``speech_pad_ms`` so that its silence rule measures real silence.
    """

    __slots__ = (
        "_candidate_start",
        "_config",
        "_in_speech",
        "_position",
        "_settled",
        "_silence_start",
    )

    def __init__(self, config: SpeechGateConfig | None = None) -> None:
        self._config = config if config is not None else SpeechGateConfig()
        self._position = 0
        self._settled = 0
        self._in_speech = False
        # Silence mode: first frame of an unconfirmed run of speech.
        self._candidate_start: int | None = None
        # Speech mode: first frame of the current run below neg_threshold.
        self._silence_start: int | None = None

    @classmethod
    def from_snapshot(cls, config: SpeechGateConfig, snapshot: SpeechGateSnapshot) -> SpeechGate:
        gate = cls(config)
        gate._position = snapshot.position_samples
        gate._settled = snapshot.settled_samples
        gate._in_speech = snapshot.in_speech
        gate._candidate_start = snapshot.candidate_start_samples
        gate._silence_start = snapshot.silence_start_samples
        return gate

    def snapshot(self) -> SpeechGateSnapshot:
        return SpeechGateSnapshot(
            position_samples=self._position,
            settled_samples=self._settled,
            in_speech=self._in_speech,
            candidate_start_samples=self._candidate_start,
            silence_start_samples=self._silence_start,
        )

    @property
    def config(self) -> SpeechGateConfig:
        return self._config

    @property
    def position_samples(self) -> int:
        """Samples pushed so far."""
        return self._position

    @property
    def settled_samples(self) -> int:
        """Samples whose label is final; every span returned so far ends at or before this."""
        return self._settled

    @property
    def pending_samples(self) -> int:
        return self._position - self._settled

    @property
    def in_speech(self) -> bool:
        """Whether confirmed speech is going on (its end not yet decided)."""
        return self._in_speech

    def push(self, speech_prob: float) -> tuple[GatedSpan, ...]:
        """Take the probability of the next frame; return the spans it settled."""
        config = self._config
        frame_start = self._position
        self._position += config.frame_samples
        spans: list[GatedSpan] = []
        if self._in_speech:
            self._push_in_speech(speech_prob, frame_start, spans)
        else:
            self._push_in_silence(speech_prob, frame_start, spans)
        return tuple(spans)

    def flush(self) -> tuple[GatedSpan, ...]:
        """End of stream: settle everything pushed. An unconfirmed speech start is a blip."""
        spans: list[GatedSpan] = []
        if self._in_speech:
            end = self._position
            if self._silence_start is not None:
                end = min(self._silence_start + self._config.speech_pad_samples, end)
            self._settle(end, True, spans)
        self._settle(self._position, False, spans)
        self._in_speech = False
        self._candidate_start = None
        self._silence_start = None
        return tuple(spans)

    def end_speech(self) -> tuple[GatedSpan, ...]:
        """A forced end of the utterance: a run of speech whose silence has begun ends now,
        as it would once the silence lasted ``min_silence_ms`` (speech up to the silence start
        plus the pad, non-speech after it as far as the pad allows); returns the spans that
        settled. Speech still going on, or no speech, is left as it is."""
        spans: list[GatedSpan] = []
        silence_start = self._silence_start
        if self._in_speech and silence_start is not None:
            pad = self._config.speech_pad_samples
            self._settle(min(silence_start + pad, self._position), True, spans)
            self._in_speech = False
            self._silence_start = None
            self._settle(self._position - self._config.start_pad_samples, False, spans)
        return tuple(spans)

    def _push_in_silence(
        self, speech_prob: float, frame_start: int, spans: list[GatedSpan]
    ) -> None:
        config = self._config
        if self._candidate_start is None:
            if speech_prob >= config.threshold:
                self._candidate_start = frame_start
        elif speech_prob < config.effective_neg_threshold:
            self._candidate_start = None
        candidate = self._candidate_start
        pad = config.start_pad_samples
        if candidate is not None and self._position - candidate >= config.min_speech_samples:
            self._settle(max(candidate - pad, 0), False, spans)
            self._settle(self._position, True, spans)
            self._in_speech = True
            self._candidate_start = None
            self._silence_start = None
        else:
            # Audio more than a pad before any possible speech start can only be silence.
            horizon = self._position if candidate is None else candidate
            self._settle(horizon - pad, False, spans)

    def _push_in_speech(self, speech_prob: float, frame_start: int, spans: list[GatedSpan]) -> None:
        config = self._config
        if speech_prob >= config.threshold:
            self._silence_start = None
        elif speech_prob < config.effective_neg_threshold and self._silence_start is None:
            self._silence_start = frame_start
        silence_start = self._silence_start
        if silence_start is None:
            self._settle(self._position, True, spans)
        elif self._position - silence_start >= config.min_silence_samples:
            self._settle(silence_start + config.speech_pad_samples, True, spans)
            self._in_speech = False
            self._silence_start = None
            # The next run's start pad may claim the audio before the frontier.
            self._settle(self._position - config.start_pad_samples, False, spans)
        else:
            self._settle(silence_start, True, spans)

    def _settle(self, end_samples: int, is_speech: bool, spans: list[GatedSpan]) -> None:
        """Label ``[settled, end_samples)``; a no-op when ``end_samples`` is not ahead."""
        if end_samples <= self._settled:
            return
        if spans and spans[-1].is_speech == is_speech:
            spans[-1] = GatedSpan(spans[-1].start_samples, end_samples, is_speech)
        else:
            spans.append(GatedSpan(self._settled, end_samples, is_speech))
        self._settled = end_samples


@functools.cache
def _silero_version() -> str:
    try:
        return importlib.metadata.version("silero-vad")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
