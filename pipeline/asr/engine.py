"""The streaming engine: every session's audio through batched VAD and batched recognition.

``accept`` appends a chunk to its session (cheap, no model call). ``step`` does the work for all
sessions at once, in flow order, and returns a ``StepReport`` (its outputs and what it cost);
``segment`` does only the first part (a caller catching up on a backlog defers the decodes):

1. VAD: every session with whole frames waiting is scored, one batched VAD call per frame
   position (each stream keeps its own recurrent state); the gate and endpoint rules turn the
   probabilities into utterances and endpoint decisions.
2. Recognition: every session that is due — an endpoint was decided (a final) or its open
   utterance grew by ``hop_ms`` (a partial) — is decoded in batches of at most ``max_batch``,
   finals first. One ``step`` serves every due session, so none waits on others for more than one
   step; ``max_jobs`` lets a caller bound the work of one call (the rest stays due).
3. Outputs: partials (LocalAgreement-2 over the hops: committed + tentative), finals (text, word
   timings and probabilities), suppressed hypotheses (hallucination guards), ended sessions.

Determinism. A final is decoded from its utterance's audio alone (no committed prefix), so it
depends only on the audio and the segmentation, which depend only on the audio: replays, and
sessions rebuilt after a failover, produce the same finals whatever the batching or timing.
Partials use the committed prefix (work is not repeated) and may differ between runs.

Time. Positions, spans and endpoints come from the audio (sample counts). The injected ``Clock``
(epoch ms; the worker's, so events and outputs share one clock) stamps ``emit_ms`` of partials
and finals. The ``timer`` (monotonic seconds, ``time.perf_counter`` by default) measures compute
only: the VAD's time (``StepReport.vad_s``) and the partials' share of a step, from which
``step_budget_ms`` adapts ``partial_cap``; it decides how many partials a step decodes, never
what a final says.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pipeline.asr.endpoint import EndpointConfig, EndpointReason
from pipeline.asr.guards import Guard, GuardConfig, check_hypothesis, squashed_repeat_start
from pipeline.asr.recognizer import Recognition, RecognitionRequest, Recognizer, TokenBias
from pipeline.asr.session import (
    SAMPLES_PER_MS,
    EarlyFinal,
    FinalJob,
    Session,
    SessionKey,
    SessionSnapshot,
    SessionStats,
)
from pipeline.asr.vad import SpeechGateConfig
from pipeline.asr.word_edges import VAD_END_LAG_MS, snap_word_edges
from pipeline.clock import Clock, WallClock
from pipeline.contracts.messages import Final, Partial, Word, utterance_id
from pipeline.errors import ConfigError

__all__ = [
    "BiasSource",
    "EngineConfig",
    "EngineOutput",
    "ResumePoint",
    "Resumed",
    "SessionEnded",
    "StepReport",
    "StreamingEngine",
    "Suppressed",
    "VadModel",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Expected:
    """How a session ``resume`` announced (replayed, or cold) begins once its first chunk comes."""

    finals_through: int
    finals_end_ms: int | None  # where the finalized audio ends (None: skip by index)
    start_samples: int  # its first sample in the call (16 kHz)
    next_index: int
    tenant: str = "default"
    stats: SessionStats | None = None  # what it had heard before ``start_samples``


class BiasSource(Protocol):
    """Hotword biasing for a session: the bias to apply to its next decode, or None."""

    def bias_for(self, tenant: str, call_id: str) -> TokenBias | None: ...


class VadModel(Protocol):
    """The batched VAD the engine needs (``pipeline.asr.vad.SileroVad`` is the real one)."""

    @property
    def frame_samples(self) -> int: ...

    def new_state(self) -> Any: ...

    def speech_probs(self, frames: npt.NDArray[np.float32], states: Sequence[Any]) -> Any: ...

    def export_state(self, state: Any) -> tuple[tuple[float, ...], tuple[float, ...]]: ...

    def import_state(self, data: tuple[tuple[float, ...], tuple[float, ...]]) -> Any:
        """The state ``export_state`` gave; ``ValueError`` for one this VAD cannot take."""
        ...


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Streaming policy. Defaults: DESIGN §4."""

    hop_ms: int = 500
    min_decode_ms: int = 500
    max_batch: int = 16
    gate: SpeechGateConfig = field(default_factory=SpeechGateConfig)
    endpoint: EndpointConfig = field(
        default_factory=lambda: EndpointConfig(speech_pad_ms=SpeechGateConfig().speech_pad_ms)
    )
    tenant_endpoints: Mapping[str, EndpointConfig] = field(default_factory=dict)
    """Endpoint rules of tenants that do not use ``endpoint`` (a session keeps the rules of the
    tenant its first chunk named)."""
    guards: GuardConfig = field(default_factory=GuardConfig)
    emit_partials: bool = True
    denoise: bool = False
    vad_end_lag_ms: int = VAD_END_LAG_MS
    """How long the VAD keeps calling speech after it ends (see ``pipeline.asr.word_edges``)."""
    step_budget_ms: int | None = None
    """Wall-time budget of one step's partial decodes, or ``None`` for none (the engine then
    decodes every due job each step). Under a budget finals are decoded in steps of their own
    (returned at once) before partials, and partials that have waited ``STARVED_HOPS`` hops get
    every other step; a step of partials is capped, the sessions with the most undecoded audio
    first, at a cap that follows the measured time: shrunk in proportion to an overrun, +1
    while one more would fit. A partial's latency is about the length of the step that decodes
    it and a final's about the step it waits for plus its own, so this bounds both when the
    recognizer is short of compute, at the cost of fewer partials per session (see
    bench/results/engine_concurrency.md)."""

    early_final_ms: int | None = 300
    """Silence after an utterance's last speech at which its final is decoded ahead, or
    ``None`` for never. The final's audio is fixed once the speech ended, so it is decoded while
    the endpoint's silence rule (``endpoint.trailing_silence_ms``) still runs, and the decode is
    used when the rule fires (no partials are decoded in between: the speech did not change).
    Speech that resumes before the rule fires makes that decode wasted work. Real silence, like
    ``trailing_silence_ms``: the gate's pads are subtracted. At or beyond
    ``endpoint.trailing_silence_ms`` it never fires (the endpoint comes first)."""

    def __post_init__(self) -> None:
        if self.step_budget_ms is not None and self.step_budget_ms <= 0:
            raise ConfigError(f"step_budget_ms must be > 0 or None, got {self.step_budget_ms}")
        if self.early_final_ms is not None and self.early_final_ms <= 0:
            raise ConfigError(f"early_final_ms must be > 0 or None, got {self.early_final_ms}")
        # The gate widens speech by its pad; the endpoint must know it to measure real silence.
        for name, endpoint in [("endpoint", self.endpoint), *self.tenant_endpoints.items()]:
            if endpoint.speech_pad_ms != self.gate.speech_pad_ms:
                raise ConfigError(
                    f"{name}: endpoint speech_pad_ms ({endpoint.speech_pad_ms}) must equal "
                    f"gate.speech_pad_ms ({self.gate.speech_pad_ms})"
                )
            if endpoint.effective_start_pad_ms != self.gate.effective_start_pad_ms:
                raise ConfigError(
                    f"{name}: endpoint start pad ({endpoint.effective_start_pad_ms} ms) must "
                    f"equal the gate's ({self.gate.effective_start_pad_ms} ms)"
                )

    def endpoint_for(self, tenant: str) -> EndpointConfig:
        """The endpoint rules of ``tenant``: its own, else ``endpoint``."""
        return self.tenant_endpoints.get(tenant, self.endpoint)


STARVED_HOPS = 8
"""Under a step budget, partials that have waited this many hops of audio get the step after a
step of finals (else finals go first)."""


@dataclass(frozen=True, slots=True)
class Suppressed:
    """A hypothesis the guards rejected (counted; an event for finals)."""

    key: SessionKey
    tenant: str
    utterance_index: int
    guard: Guard
    text: str
    final: bool
    end_ms: int | None = None  # a final's: where its audio ends (ms of the call)


@dataclass(frozen=True, slots=True)
class SessionEnded:
    """A stream ended (end of stream or ``close``) and all its finals were emitted."""

    key: SessionKey
    tenant: str
    audio_ms: int
    speech_ms: int
    utterances: int
    suppressed: int


EngineOutput = Partial | Final | Suppressed | SessionEnded


@dataclass(frozen=True, slots=True)
class StepReport:
    """What one ``step`` (or ``segment``) did: its outputs, in order, and what it cost."""

    outputs: tuple[EngineOutput, ...] = ()
    vad_s: float | None = None
    """Time its VAD passes took (the engine's ``timer`` seconds); None without a whole frame."""
    windows: int = 0
    """Recognizer windows decoded (the batch-size metric; a final decoded ahead costs none)."""
    early_finals_decoded: int = 0
    """Finals decoded ahead, during their utterance's trailing silence."""
    early_finals_used: int = 0
    """Finals emitted from a decode made ahead (the others decoded ahead were wasted work)."""
    loops_trimmed: int = 0
    """Finals whose decoding loop was cut off (``guards.squashed_repeat_start``)."""


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a stream's session resumes on a new owner: the engine's part of a checkpoint.

    Utterances ``<= finals_through`` were finalized before and are not emitted again; with
    ``finals_end_ms`` (where the last of them ended, ms of the call), the utterances that end
    there or before are skipped whatever their index. ``snapshot``: the session's state at the
    checkpoint, the records before it released; None: it is replayed from its first record.
    """

    finals_through: int
    finals_end_ms: int | None = None
    snapshot: SessionSnapshot | None = None


class Resumed(enum.StrEnum):
    """How ``resume`` brought a session back."""

    REPLAY = "replay"
    """No snapshot: the session begins with its first chunk, which the replay brings."""
    WARM = "warm"
    """From the snapshot: VAD, gate and endpoint state as they were."""
    COLD = "cold"
    """The snapshot cannot be used (logged): the session begins afresh where it ended, its
    numbering, audio position and counts continued; only a few frames of VAD context are lost
    (its utterances were finalized, and the records it covered are released)."""


@dataclass(frozen=True, slots=True)
class _Job:
    """One decode: a final (``final``), a final decoded ahead (``early_start_samples``: the
    open utterance's ``[early_start_samples, end_samples)``), or else a partial."""

    session: Session
    final: FinalJob | None
    end_samples: int
    early_start_samples: int | None = None

    @property
    def partial(self) -> bool:
        return self.final is None and self.early_start_samples is None


class StreamingEngine:
    """Sessions of many streams sharing one VAD and one recognizer. Single-threaded."""

    def __init__(
        self,
        recognizer: Recognizer,
        vad: VadModel,
        config: EngineConfig | None = None,
        clock: Clock | None = None,
        biases: BiasSource | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``clock`` stamps ``emit_ms`` (a ``WallClock`` when None); ``timer`` (monotonic
        seconds) measures the VAD and the steps for ``EngineConfig.step_budget_ms``."""
        self._recognizer = recognizer
        self._timer = timer
        self._biases = biases
        self._vad = vad
        self._config = config or EngineConfig()
        self._clock = clock or WallClock()
        self._sessions: dict[SessionKey, Session] = {}
        self._expected: dict[SessionKey, _Expected] = {}
        self.partial_cap: int | None = None
        """Most partials a step decodes under ``step_budget_ms`` (``None``: not limited yet)."""
        self._finals_stepped = False

    @property
    def config(self) -> EngineConfig:
        return self._config

    @property
    def model_id(self) -> str:
        return self._recognizer.model_id

    @property
    def vad_id(self) -> str:
        """Which VAD segments the audio (its ``model_id``: weights and device); checkpoints
        record it, as another VAD may segment the same audio a little differently."""
        return str(getattr(self._vad, "model_id", type(self._vad).__name__))

    def wrap_recognizer(self, wrap: Callable[[Recognizer], Recognizer]) -> None:
        """Use ``wrap(recognizer)`` from now on (the worker's fault points, in tests)."""
        self._recognizer = wrap(self._recognizer)

    @property
    def sessions(self) -> dict[SessionKey, Session]:
        """Open sessions (read-only use)."""
        return self._sessions

    # -- input -------------------------------------------------------------------------------

    def _session(self, key: SessionKey, tenant: str) -> Session:
        session = self._sessions.get(key)
        if session is None:
            session = Session(
                key,
                tenant,
                self._vad.new_state(),
                self._config.gate,
                self._config.endpoint_for(tenant),
                self._vad.frame_samples,
                denoise=self._config.denoise,
            )
            expected = self._expected.pop(key, None)
            if expected is not None:
                session.finals_through = expected.finals_through
                session.finals_end_ms = expected.finals_end_ms
                if expected.start_samples or expected.next_index:
                    session.start_at(expected.start_samples, expected.next_index)
                if expected.stats is not None:
                    session.stats = replace(expected.stats)
            self._sessions[key] = session
        return session

    def accept(
        self,
        key: SessionKey,
        samples: npt.NDArray[np.float32],
        sample_rate_hz: int,
        *,
        tenant: str = "default",
        capture_ms: int | None = None,
        position: int | None = None,
        flush: bool = False,
        end_of_stream: bool = False,
    ) -> None:
        """Append one chunk to its session (creating it). No model runs here.

        ``flush`` forces a final of the open utterance after this chunk's audio;
        ``end_of_stream`` ends the session after it. ``position`` is an opaque, increasing
        token of where the chunk came from (a Kafka offset), echoed in snapshots.
        """
        session = self._session(key, tenant)
        if session.flush_pending:
            # A flush must apply before any later audio: settle it now, unbatched (rare).
            self._run_vad([session])
            self._close_pending(session)
        session.accept(samples, sample_rate_hz, capture_ms, position)
        session.flush_pending = session.flush_pending or flush
        session.end_pending = session.end_pending or end_of_stream

    def close(self, key: SessionKey) -> None:
        """End a session that will get no more audio (idle timeout): like an end of stream.
        A cold resume (``Resumed.COLD``) that never got a chunk is begun to be ended
        (its ``SessionEnded`` reports what it had heard before)."""
        session = self._sessions.get(key)
        expected = self._expected.get(key)
        if session is None and expected is not None and expected.stats is not None:
            session = self._session(key, expected.tenant)
        if session is not None:
            session.end_pending = True

    def knows(self, key: SessionKey) -> bool:
        """Open, or resumed cold where a snapshot ended (``Resumed.COLD``): a
        session replayed from its first record gets its chunks, and its tenant, from the replay."""
        expected = self._expected.get(key)
        return key in self._sessions or (expected is not None and expected.stats is not None)

    def drop(self, key: SessionKey) -> None:
        """Forget a session without output (its partition moved to another worker)."""
        session = self._sessions.pop(key, None)
        if session is not None:
            session.close()
        self._expected.pop(key, None)

    def resume(self, key: SessionKey, point: ResumePoint) -> Resumed:
        """Bring back a session a failover moved here, from its checkpoint's ``point``.

        Without a snapshot the session is replayed from its first record (``Resumed.REPLAY``).
        With one, it is recreated from it (``Resumed.WARM``), cold where the snapshot cannot
        carry a state: a denoising engine starts RNNoise afresh (its state lives in C; a
        denoising owner takes no snapshots, but the last owner may not have denoised), and a VAD
        state that does not fit this VAD (another model version) starts from the VAD's initial
        state. A snapshot this engine cannot use at all (it decoded, but does not restore) is
        logged and the session begins afresh where it ended (``Resumed.COLD``): a bad record in
        the compacted checkpoint topic must not stop every worker that takes the partition,
        and replaying instead is impossible, as the snapshot released the records before it.
        """
        snapshot = point.snapshot
        if snapshot is None:
            self._expected[key] = _Expected(point.finals_through, point.finals_end_ms, 0, 0)
            return Resumed.REPLAY
        try:
            self._restore(key, snapshot, point)
        except (ValueError, TypeError, RuntimeError, ConfigError) as error:
            logger.error("snapshot of %s is unusable, resuming it cold: %r", key, error)
            self.drop(key)
            self._expected[key] = _Expected(
                point.finals_through,
                point.finals_end_ms,
                snapshot.total_samples,
                snapshot.next_index,
                snapshot.tenant,
                SessionStats(*snapshot.stats),
            )
            return Resumed.COLD
        return Resumed.WARM

    def _restore(self, key: SessionKey, snapshot: SessionSnapshot, point: ResumePoint) -> None:
        session = self._session(key, snapshot.tenant)
        session.restore(snapshot)
        try:
            session.vad_state = self._vad.import_state(snapshot.vad_state)
        except ValueError as error:
            logger.warning("VAD state of %s does not fit, starting it cold: %s", key, error)
            session.vad_state = self._vad.new_state()
        session.finals_through = point.finals_through
        session.finals_end_ms = point.finals_end_ms

    # -- checkpoints -------------------------------------------------------------------------

    def snapshot(self, key: SessionKey) -> SessionSnapshot | None:
        """The session's resumable state, or None while an utterance is open or queued."""
        session = self._sessions.get(key)
        if session is None or not session.quiescent:
            return None
        return session.snapshot(self._vad.export_state(session.vad_state))

    # -- work --------------------------------------------------------------------------------

    def pending_jobs(self) -> int:
        """Decodes a step would run now: finals queued, finals to decode ahead, partials due."""
        return len(self._due_jobs())

    def due_partials(self) -> list[SessionKey]:
        """Sessions with a partial due now (what a step with ``partials=False`` leaves due)."""
        return [job.session.key for job in self._due_jobs() if job.partial]

    def pending_finals(self) -> int:
        """Finals queued (endpoint decided, not decoded yet)."""
        return sum(len(session.final_jobs) for session in self._sessions.values())

    def step(
        self,
        max_jobs: int | None = None,
        *,
        partials: bool = True,
        partials_first: bool = False,
    ) -> StepReport:
        """Run VAD and recognition for every session that has work; report what it did.

        ``max_jobs`` (at least 1; None: no bound) bounds the decodes; the rest stays due.
        ``partials=False`` decodes finals only (load shedding: partials are thinned before
        finals are delayed); the skipped partials stay due and run in a later step.
        ``partials_first``: under a step budget, a due partial step goes before the finals
        this once (after a backlog, so the live text resumes before the backlog's finals).
        """
        if max_jobs is not None and max_jobs < 1:
            raise ValueError(f"max_jobs must be at least 1 or None, got {max_jobs} (segment()?)")
        return self._step(max_jobs, partials=partials, partials_first=partials_first)

    def segment(self) -> StepReport:
        """Run the VAD only: endpoints are decided and their finals queued, nothing is decoded
        (a caller catching up on a backlog defers the decodes). Finals decoded ahead still go
        out, as they cost no decode, and sessions whose finals are all out end."""
        return self._step(0, partials=False, partials_first=False)

    def _step(self, max_jobs: int | None, *, partials: bool, partials_first: bool) -> StepReport:
        tally: Counter[str] = Counter()  # by the name of their StepReport field
        sessions = list(self._sessions.values())
        vad_started_s = self._timer()
        passes = self._run_vad(sessions)
        vad_s = self._timer() - vad_started_s if passes else None
        for session in sessions:
            self._close_pending(session)
        due = self._due_jobs()
        if not partials:
            due = [job for job in due if not job.partial]
        # Finals decoded ahead go out at once, in a step without a decode; the rest waits one.
        # (Only a session's oldest queued final: a session's finals go out in order.)
        ready = [
            job
            for job in due
            if job.final is not None
            and job.final is job.session.final_jobs[0]
            and self._decoded_ahead(job, self._bias(job.session)) is not None
        ]
        jobs = ready or self._within_budget(due, partials_first=partials_first)
        if max_jobs is not None and not ready:
            jobs = jobs[:max_jobs]
        batch = self._config.max_batch
        started_s = self._timer()
        # Every batch is recognized before any result is applied: a recognizer that fails on a
        # later batch (a CUDA out-of-memory error, say) leaves every job due, as before the
        # step, instead of finals the caller never received marked as done.
        batches = [jobs[first : first + batch] for first in range(0, len(jobs), batch)]
        plans = [self._plan(part) for part in batches]
        results = [self._recognize(plan) for plan in plans]
        outputs: list[EngineOutput] = []
        for part, plan, result in zip(batches, plans, results, strict=True):
            outputs.extend(self._apply(part, plan, result, tally))
        decoded_partials = sum(job.partial for job in jobs)
        if decoded_partials:
            # The partials' share of the step: finals come on top of the budget.
            partials_s = (self._timer() - started_s) * decoded_partials / len(jobs)
            self._adapt_partial_cap(partials_s, decoded_partials, left_out=len(due) > len(jobs))
        pad = self._config.gate.speech_pad_samples
        for session in sessions:
            session.trim(pad)
            if session.end_pending and session.ended and not session.final_jobs:
                outputs.append(self._ended(session))
                session.close()
                del self._sessions[session.key]
        return StepReport(tuple(outputs), vad_s, **tally)

    def _run_vad(self, sessions: Iterable[Session]) -> int:
        """Every ready frame of ``sessions`` through the VAD, one frame per session per batched
        pass; returns the number of passes."""
        passes = 0
        waiting = [s for s in sessions if s.frames_ready() > 0]
        while waiting:
            passes += 1
            if len(waiting) == 1:  # one stream catching up (a backlog): no copy into a batch
                frames = waiting[0].next_vad_frame()[np.newaxis]
            else:
                frames = np.stack([s.next_vad_frame() for s in waiting])
            probs = self._vad.speech_probs(frames, [s.vad_state for s in waiting])
            for session, prob in zip(waiting, probs, strict=True):
                session.apply_vad(float(prob))
            waiting = [s for s in waiting if s.frames_ready() > 0]
        return passes

    def _close_pending(self, session: Session) -> None:
        if session.end_pending and not session.ended:
            session.drain()
            session.pad_to_frame()
            self._run_vad([session])
            session.close_stream(EndpointReason.END_OF_STREAM)
            session.ended = True
        elif session.flush_pending:
            session.close_stream(EndpointReason.FORCED)
            session.flush_pending = False

    def _within_budget(self, due: list[_Job], *, partials_first: bool = False) -> list[_Job]:
        """Under a step budget: every due final alone (returned without waiting for partials),
        except right after such a step when a partial has waited ``STARVED_HOPS`` hops of audio;
        otherwise at most ``partial_cap`` partials, the most undecoded audio first. Finals go
        first and wait for at most one budgeted step of partials; partials are never starved by
        a stream of finals."""
        if self._config.step_budget_ms is None:
            return due
        finals = [job for job in due if not job.partial]
        waiting = [job for job in due if job.partial]
        starved_samples = STARVED_HOPS * self._config.hop_ms * SAMPLES_PER_MS
        starving = any(job.session.undecoded_samples() >= starved_samples for job in waiting)
        # Starving partials get the step after a finals step, never two in a row: a final
        # waits for at most one budgeted step of partials.
        finals_turn = bool(finals) and not (
            (starving and self._finals_stepped) or (partials_first and waiting)
        )
        self._finals_stepped = finals_turn
        if finals_turn:
            return finals
        cap = self.partial_cap
        if cap is not None and len(waiting) > cap:
            waiting.sort(key=lambda job: job.session.undecoded_samples(), reverse=True)
            waiting = waiting[:cap]
        return waiting

    def _adapt_partial_cap(self, partials_s: float, partials: int, *, left_out: bool) -> None:
        """After a step that spent ``partials_s`` on ``partials`` partial decodes: shrink the cap
        in proportion to an overrun; grow it by one when partials had to wait and one more
        would still fit (extrapolated linearly, which overestimates: batching amortizes)."""
        budget_ms = self._config.step_budget_ms
        if budget_ms is None:
            return
        cap = self.partial_cap if self.partial_cap is not None else partials
        budget_s = budget_ms / 1000 + 1e-9  # a step exactly on budget fits
        if partials_s > budget_s:
            self.partial_cap = max(1, int(cap * budget_s / partials_s))
        elif left_out and partials >= cap and partials_s * (cap + 1) / cap <= budget_s:
            self.partial_cap = cap + 1

    def _bias(self, session: Session) -> TokenBias | None:
        if self._biases is None:
            return None
        return self._biases.bias_for(session.tenant, session.key.call_id)

    def _decoded_ahead(self, job: _Job, bias: TokenBias | None) -> Recognition | None:
        """The recognition of a final job decoded ahead for exactly its request (its span and
        ``bias``, the session's current one), if any."""
        early, final = job.session.early_final, job.final
        if early is None or final is None:
            return None
        if not early.serves(final.start_samples, final.end_samples, bias):
            return None
        return early.recognition

    def _early_silence_samples(self) -> int | None:
        """Labelled trailing silence at which a final is decoded ahead (None: never)."""
        if self._config.early_final_ms is None:
            return None
        endpoint = self._config.endpoint
        pads = endpoint.speech_pad_samples + endpoint.start_pad_samples
        return max(0, self._config.early_final_ms * SAMPLES_PER_MS - pads)

    def _due_jobs(self) -> list[_Job]:
        """Finals, then finals to decode ahead, then partials."""
        finals: list[_Job] = []
        early: list[_Job] = []
        partials: list[_Job] = []
        hop = self._config.hop_ms * SAMPLES_PER_MS
        minimum = self._config.min_decode_ms * SAMPLES_PER_MS
        early_silence = self._early_silence_samples()
        for session in self._sessions.values():
            finals.extend(_Job(session, job, job.end_samples) for job in session.final_jobs)
            span = None if early_silence is None else session.early_final_span(early_silence)
            if span is not None:
                # In trailing silence: the final is decoded once, no partial (nothing new said).
                decoded = session.early_final
                if decoded is None or not decoded.serves(*span, self._bias(session)):
                    early.append(_Job(session, None, span[1], early_start_samples=span[0]))
            elif self._config.emit_partials and session.due_partial(hop, minimum):
                partials.append(_Job(session, None, session.vad_position_samples))
        return finals + early + partials

    def _plan(self, jobs: Sequence[_Job]) -> list[RecognitionRequest | Recognition]:
        """Per job: its recognition request, or the recognition of a final decoded ahead (no
        request). Changes nothing."""
        planned: list[RecognitionRequest | Recognition] = []
        for job in jobs:
            session = job.session
            bias = self._bias(session)
            if job.final is not None:
                ahead = self._decoded_ahead(job, bias)
                if ahead is not None:
                    planned.append(ahead)
                    continue
                audio = session.audio(job.final.start_samples, job.final.end_samples)
                request = RecognitionRequest(audio, with_word_timings=True, bias=bias)
            elif job.early_start_samples is not None:
                audio = session.audio(job.early_start_samples, job.end_samples)
                request = RecognitionRequest(audio, with_word_timings=True, bias=bias)
            else:
                utterance = session.utterance
                assert utterance is not None
                audio = session.audio(utterance.start_samples, job.end_samples)
                request = RecognitionRequest(
                    audio, committed=utterance.agreement.committed, bias=bias, partial=True
                )
            planned.append(request)
        return planned

    def _recognize(self, planned: Sequence[RecognitionRequest | Recognition]) -> list[Recognition]:
        """The recognizer's results for the plan's requests, in order (one batched call)."""
        requests = [plan for plan in planned if isinstance(plan, RecognitionRequest)]
        return self._recognizer.recognize(requests) if requests else []

    def _apply(
        self,
        jobs: Sequence[_Job],
        planned: Sequence[RecognitionRequest | Recognition],
        results: Sequence[Recognition],
        tally: Counter[str],
    ) -> list[EngineOutput]:
        """Turn a batch's recognitions into outputs and session progress (counted in ``tally``)."""
        fresh = iter(results)
        tally["windows"] += len(results)
        outputs: list[EngineOutput] = []
        for job, plan in zip(jobs, planned, strict=True):
            result = next(fresh) if isinstance(plan, RecognitionRequest) else plan
            session = job.session
            if job.final is not None:
                tally["early_finals_used"] += not isinstance(plan, RecognitionRequest)
                session.final_jobs.remove(job.final)
                outputs.extend(self._final(session, job.final, result, tally))
            elif job.early_start_samples is not None:
                # Valid for the bias it was decoded with (a hotword update during the decode
                # must not make it serve the new list).
                assert isinstance(plan, RecognitionRequest)
                session.early_final = EarlyFinal(
                    job.early_start_samples, job.end_samples, plan.bias, result
                )
                tally["early_finals_decoded"] += 1
            else:
                outputs.extend(self._partial(session, job.end_samples, result))
        return outputs

    def _partial(
        self, session: Session, end_samples: int, result: Recognition
    ) -> list[EngineOutput]:
        utterance = session.utterance
        assert utterance is not None
        utterance.decoded_to_samples = end_samples
        guard = check_hypothesis(result, self._config.guards)
        if guard is not None:
            return [
                Suppressed(session.key, session.tenant, utterance.index, guard, result.text, False)
            ]
        utterance.agreement.update(result.words)
        committed = "".join(w.text for w in utterance.agreement.committed).strip()
        tentative = "".join(w.text for w in utterance.agreement.tentative).strip()
        partial = Partial(
            call_id=session.key.call_id,
            channel=session.key.channel,
            utterance_index=utterance.index,
            revision=utterance.revision,
            committed_text=committed,
            tentative_text=tentative,
            start_ms=utterance.start_samples // SAMPLES_PER_MS,
            end_ms=end_samples // SAMPLES_PER_MS,
            model_id=self.model_id,
            emit_ms=self._clock.now_ms(),
            capture_ms=session.capture_ms_at(end_samples),
            tenant=session.tenant,
        )
        utterance.revision += 1
        return [partial]

    def _final(
        self, session: Session, job: FinalJob, result: Recognition, tally: Counter[str]
    ) -> list[EngineOutput]:
        session.finals_through = max(session.finals_through, job.utterance_index)
        early = session.early_final
        if early is not None and early.end_samples <= job.end_samples:
            session.early_final = None  # of this utterance or an earlier one: of no more use
        guard = check_hypothesis(result, self._config.guards)
        text = result.text.strip()
        if guard is not None or not text:
            session.stats.suppressed += guard is not None
            if guard is None:
                return []
            return [
                Suppressed(
                    session.key,
                    session.tenant,
                    job.utterance_index,
                    guard,
                    text,
                    True,
                    job.end_samples // SAMPLES_PER_MS,
                )
            ]
        recognized = result.words
        loop_start = squashed_repeat_start(recognized, self._config.guards.max_repeat_word_ms)
        if loop_start is not None:
            # A decoding loop the audio does not hold: the final is the text before it.
            recognized = recognized[:loop_start]
            text = "".join(w.text for w in recognized).strip()
            tally["loops_trimmed"] += 1
        start_ms = job.start_samples // SAMPLES_PER_MS
        end_ms = job.end_samples // SAMPLES_PER_MS
        words = tuple(
            Word(
                word=w.text.strip(),
                start_ms=min(start_ms + (w.start_ms or 0), end_ms),
                end_ms=min(start_ms + (w.end_ms or 0), end_ms),
                probability=round(float(w.probability or 0.0), 4),
            )
            for w in recognized
            if w.text.strip()
        )
        # Where the VAD heard speech begin or end, its edges beat Whisper's (word_edges).
        pad_ms = self._config.gate.speech_pad_ms
        start_pad_ms = self._config.gate.effective_start_pad_ms
        words = snap_word_edges(
            words,
            speech_start_ms=start_ms + start_pad_ms if job.start_is_onset else None,
            speech_end_ms=(
                max(start_ms, end_ms - pad_ms - self._config.vad_end_lag_ms)
                if job.end_is_offset
                else None
            ),
        )
        emit_ms = self._clock.now_ms()
        capture_ms = session.capture_ms_at(job.decided_at_samples)
        session.stats.utterances += 1
        return [
            Final(
                call_id=session.key.call_id,
                channel=session.key.channel,
                utterance_index=job.utterance_index,
                utterance_id=utterance_id(
                    session.key.call_id, session.key.channel, job.utterance_index
                ),
                text=text,
                words=words,
                start_ms=start_ms,
                end_ms=end_ms,
                endpoint_reason=job.reason,
                model_id=self.model_id,
                emit_ms=emit_ms,
                latency_ms=None if capture_ms is None else emit_ms - capture_ms,
                capture_ms=capture_ms,
                tenant=session.tenant,
            )
        ]

    def _ended(self, session: Session) -> SessionEnded:
        stats: SessionStats = session.stats
        return SessionEnded(
            key=session.key,
            tenant=session.tenant,
            audio_ms=stats.audio_samples // SAMPLES_PER_MS,
            speech_ms=stats.speech_samples // SAMPLES_PER_MS,
            utterances=stats.utterances,
            suppressed=stats.suppressed,
        )
