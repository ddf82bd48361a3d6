"""Admission of audio chunks into sessions: sequence numbers, ended calls, limits.

Pure and per (call, channel). Decisions, for a chunk with sequence number ``seq`` when the
session expects ``next_seq``:

- ``seq == next_seq`` → ``ADMIT``.
- ``seq > next_seq`` → ``ADMIT`` with a gap ``[next_seq, seq)`` (a ``sequence_gap`` event); the
  missing numbers are remembered (bounded) so that one arriving later is ``out_of_order``.
- ``seq < next_seq`` and ``seq`` is a remembered gap → ``REJECT`` (``out_of_order``): audio can't be
  put back in time.
- ``seq < next_seq`` otherwise → ``DUPLICATE``: dropped idempotently and counted (a producer retry
  or a replay after failover).
- after the session's end-of-stream, ``seq >= next_seq`` → ``REJECT`` (``call_already_ended``).
- audio beyond ``max_call_ms`` → ``REJECT`` (``call_too_long``); a new session beyond
  ``max_open_sessions`` → ``REJECT`` (``too_many_sessions``), unless the chunk is *replayed*: an
  earlier owner of the partition handled it, so the call was admitted there and its audio must
  not be lost to this worker's load (the limit bounds new calls, not a takeover).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field

from pipeline.contracts.audio_chunk import RejectReason
from pipeline.settings import WorkerSettings

__all__ = [
    "Admission",
    "AdmissionLimits",
    "AdmissionState",
    "Decision",
    "Verdict",
]

MAX_REMEMBERED_GAPS = 64
"""Gap ranges remembered per session; older ones are forgotten (a late chunk is a duplicate)."""


class Verdict(enum.StrEnum):
    ADMIT = "admit"
    DUPLICATE = "duplicate"
    REJECT = "reject"


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict for one chunk; ``gap`` is the skipped ``[first, end)`` range when admitted."""

    verdict: Verdict
    reason: RejectReason | None = None
    detail: str = ""
    gap: tuple[int, int] | None = None
    new_session: bool = False


_WORKER_DEFAULTS = WorkerSettings()


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """Per-worker limits (0 = unlimited); the defaults are ``WorkerSettings``'s."""

    max_call_ms: int = _WORKER_DEFAULTS.max_call_ms
    max_open_sessions: int = _WORKER_DEFAULTS.max_open_sessions

    @classmethod
    def of(cls, worker: WorkerSettings) -> AdmissionLimits:
        """The limits ``worker`` sets."""
        return cls(worker.max_call_ms, worker.max_open_sessions)


@dataclass(slots=True)
class AdmissionState:
    """Admission bookkeeping of one session; small and JSON-serialisable (checkpointed)."""

    next_seq: int = 0
    ended: bool = False
    audio_ms: float = 0.0
    gaps: list[tuple[int, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "next_seq": self.next_seq,
            "ended": self.ended,
            "audio_ms": self.audio_ms,
            "gaps": [list(gap) for gap in self.gaps],
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> AdmissionState:
        gaps = data.get("gaps", [])
        assert isinstance(gaps, list)
        return cls(
            next_seq=int(data["next_seq"]),  # type: ignore[call-overload]
            ended=bool(data["ended"]),
            audio_ms=float(data["audio_ms"]),  # type: ignore[arg-type]
            gaps=[(int(a), int(b)) for a, b in gaps],
        )


class Admission:
    """Admission decisions for every session of one worker (owned by the run loop's thread)."""

    def __init__(self, limits: AdmissionLimits | None = None) -> None:
        self._limits = limits or AdmissionLimits()
        self._sessions: OrderedDict[tuple[str, str], AdmissionState] = OrderedDict()
        self._open: set[tuple[str, str]] = set()  # keys of sessions not ended (O(1) count)

    @property
    def open_sessions(self) -> int:
        return len(self._open)

    @property
    def known_sessions(self) -> int:
        """Open and ended sessions still remembered (ended ones until ``forget``)."""
        return len(self._sessions)

    def state(self, key: tuple[str, str]) -> AdmissionState | None:
        return self._sessions.get(key)

    def restore(self, key: tuple[str, str], state: AdmissionState) -> None:
        self._sessions[key] = state
        self._track(key, state)

    def forget(self, key: tuple[str, str]) -> None:
        self._sessions.pop(key, None)
        self._open.discard(key)

    def _track(self, key: tuple[str, str], state: AdmissionState) -> None:
        if state.ended:
            self._open.discard(key)
        else:
            self._open.add(key)

    def decide(
        self,
        key: tuple[str, str],
        seq: int,
        duration_ms: float,
        end_of_stream: bool,
        *,
        replaying: bool = False,
    ) -> Decision:
        """Decide one chunk and, when admitted, advance the session's state. ``replaying``: an
        earlier owner already handled the chunk (``max_open_sessions`` does not apply)."""
        state = self._sessions.get(key)
        new_session = state is None
        if state is None:
            limit = self._limits.max_open_sessions
            if limit and not replaying and self.open_sessions >= limit:
                return Decision(
                    Verdict.REJECT,
                    RejectReason.TOO_MANY_SESSIONS,
                    f"{self.open_sessions} sessions open, limit {limit}",
                )
            state = AdmissionState()
        if seq < state.next_seq:
            if any(first <= seq < end for first, end in state.gaps):
                return Decision(
                    Verdict.REJECT,
                    RejectReason.OUT_OF_ORDER,
                    f"seq {seq} arrived after seq {state.next_seq - 1}",
                )
            return Decision(Verdict.DUPLICATE, detail=f"seq {seq} already processed")
        if state.ended:
            return Decision(
                Verdict.REJECT,
                RejectReason.CALL_ALREADY_ENDED,
                f"seq {seq} after the end of stream (last seq {state.next_seq - 1})",
            )
        max_ms = self._limits.max_call_ms
        if max_ms and state.audio_ms + duration_ms > max_ms:
            return Decision(
                Verdict.REJECT,
                RejectReason.CALL_TOO_LONG,
                f"call exceeds {max_ms} ms of audio on this channel",
            )
        gap = (state.next_seq, seq) if seq > state.next_seq else None
        if gap:
            state.gaps.append(gap)
            del state.gaps[:-MAX_REMEMBERED_GAPS]
        state.next_seq = seq + 1
        state.audio_ms += duration_ms
        state.ended = end_of_stream
        self._sessions[key] = state
        self._sessions.move_to_end(key)
        self._track(key, state)
        return Decision(Verdict.ADMIT, gap=gap, new_session=new_session)

    def end(self, key: tuple[str, str]) -> None:
        """Mark a session ended without an end-of-stream record (idle timeout, too long)."""
        state = self._sessions.get(key)
        if state is not None:
            state.ended = True
            self._open.discard(key)
