"""Admission: sequence numbers, duplicates, gaps, ended calls and limits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.contracts.audio_chunk import RejectReason
from pipeline.worker.admission import Admission, AdmissionLimits, AdmissionState, Verdict

KEY = ("call-1", "agent")


def test_in_order_chunks_are_admitted_and_the_first_opens_the_session() -> None:
    admission = Admission()
    first = admission.decide(KEY, 0, 20.0, False)
    assert first.verdict is Verdict.ADMIT
    assert first.new_session
    second = admission.decide(KEY, 1, 20.0, False)
    assert second.verdict is Verdict.ADMIT
    assert not second.new_session


def test_a_repeated_sequence_number_is_a_duplicate() -> None:
    admission = Admission()
    for seq in range(3):
        admission.decide(KEY, seq, 20.0, False)
    assert admission.decide(KEY, 1, 20.0, False).verdict is Verdict.DUPLICATE
    assert admission.decide(KEY, 3, 20.0, False).verdict is Verdict.ADMIT


def test_a_gap_is_admitted_and_its_late_chunks_are_out_of_order() -> None:
    admission = Admission()
    admission.decide(KEY, 0, 20.0, False)
    jump = admission.decide(KEY, 4, 20.0, False)
    assert jump.verdict is Verdict.ADMIT
    assert jump.gap == (1, 4)
    late = admission.decide(KEY, 2, 20.0, False)
    assert late.verdict is Verdict.REJECT
    assert late.reason is RejectReason.OUT_OF_ORDER


def test_audio_after_the_end_of_stream_is_rejected_but_replays_are_duplicates() -> None:
    admission = Admission()
    admission.decide(KEY, 0, 20.0, False)
    admission.decide(KEY, 1, 0.0, True)
    after = admission.decide(KEY, 2, 20.0, False)
    assert after.verdict is Verdict.REJECT
    assert after.reason is RejectReason.CALL_ALREADY_ENDED
    assert admission.decide(KEY, 0, 20.0, False).verdict is Verdict.DUPLICATE


def test_limits_reject_long_calls_and_too_many_sessions() -> None:
    admission = Admission(AdmissionLimits(max_call_ms=50, max_open_sessions=1))
    admission.decide(KEY, 0, 40.0, False)
    too_long = admission.decide(KEY, 1, 20.0, False)
    assert too_long.reason is RejectReason.CALL_TOO_LONG
    other = admission.decide(("call-2", "agent"), 0, 20.0, False)
    assert other.reason is RejectReason.TOO_MANY_SESSIONS
    admission.end(KEY)
    assert admission.decide(("call-2", "agent"), 0, 20.0, False).verdict is Verdict.ADMIT


def test_a_replayed_chunk_opens_its_session_past_the_session_limit() -> None:
    # An earlier owner admitted the call; the takeover must not lose its audio to the limit.
    admission = Admission(AdmissionLimits(max_open_sessions=1))
    admission.decide(KEY, 0, 20.0, False)
    other = ("call-2", "agent")
    assert admission.decide(other, 0, 20.0, False, replaying=True).verdict is Verdict.ADMIT
    assert admission.decide(other, 1, 20.0, False).verdict is Verdict.ADMIT  # known from now on
    assert admission.open_sessions == 2
    third = admission.decide(("call-3", "agent"), 0, 20.0, False)
    assert third.reason is RejectReason.TOO_MANY_SESSIONS


def test_state_survives_a_dict_round_trip() -> None:
    state = AdmissionState(next_seq=7, ended=True, audio_ms=140.0, gaps=[(2, 4)])
    assert AdmissionState.from_dict(state.to_dict()) == state


@given(st.lists(st.integers(0, 30), max_size=60))
def test_each_sequence_number_is_admitted_at_most_once(seqs: list[int]) -> None:
    admission = Admission()
    admitted = [s for s in seqs if admission.decide(KEY, s, 20.0, False).verdict is Verdict.ADMIT]
    assert len(admitted) == len(set(admitted))
    assert admitted == sorted(admitted)


def test_open_sessions_are_counted_through_ends_restores_and_forgets() -> None:
    admission = Admission(AdmissionLimits(max_open_sessions=2))
    admission.decide(("a", "mono"), 0, 20.0, False)
    admission.decide(("b", "mono"), 0, 20.0, True)  # ends at once
    admission.restore(("c", "mono"), AdmissionState(next_seq=3))
    admission.restore(("d", "mono"), AdmissionState(next_seq=9, ended=True))
    assert (admission.open_sessions, admission.known_sessions) == (2, 4)
    assert admission.decide(("e", "mono"), 0, 20.0, False).reason is RejectReason.TOO_MANY_SESSIONS
    admission.end(("a", "mono"))
    admission.forget(("c", "mono"))
    assert (admission.open_sessions, admission.known_sessions) == (0, 3)
    assert admission.decide(("e", "mono"), 0, 20.0, False).verdict is Verdict.ADMIT
