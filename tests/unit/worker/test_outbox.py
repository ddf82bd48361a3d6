"""The outbox: what the next commit publishes and counts."""

from __future__ import annotations

from pipeline.contracts.audio_chunk import RejectReason
from pipeline.worker.outbox import Outbox
from tests.qa_builders import final


def _filled() -> Outbox:
    outbox = Outbox()
    outbox.stage("events", key=b"worker-1", value=b"{}")
    outbox.stage_final("finals", final("agent", 0, "hello", 0, call_id="call:1"), b"final")
    outbox.stage("dlq", key=b"call:2", value=b"raw", headers=[("dlq-reason", b"x")])
    outbox.count_admitted()
    outbox.count_admitted()
    outbox.count_duplicate()
    outbox.count_dead_letter(RejectReason.BAD_SEQUENCE)
    outbox.count_dead_letter(RejectReason.BAD_SEQUENCE)
    return outbox


def test_records_keep_their_staging_order_and_finals_are_keyed_by_call() -> None:
    outbox = _filled()
    assert [(r.topic, r.key) for r in outbox.records] == [
        ("events", b"worker-1"),
        ("finals", b"call:1"),
        ("dlq", b"call:2"),
    ]
    assert [f.call_id for f in outbox.finals] == ["call:1"]


def test_a_commit_hands_its_finals_and_counts_over_once() -> None:
    outbox = _filled()
    finals, counts = outbox.committed()
    assert [f.call_id for f in finals] == ["call:1"]
    assert counts.admitted == 2
    assert counts.duplicates == 1
    assert counts.dead_letters == {RejectReason.BAD_SEQUENCE: 2}
    again_finals, again = outbox.committed()
    assert not outbox.records
    assert not again_finals
    assert again.admitted == 0
    assert not again.dead_letters


def test_discarding_keeps_only_what_is_asked_and_no_finals_or_counts() -> None:
    outbox = _filled()
    outbox.discard(keep=lambda record: record.topic == "events")
    assert [r.topic for r in outbox.records] == ["events"]
    assert not outbox.finals
    assert outbox.counts.admitted == 0
    assert not outbox.counts.dead_letters
    outbox.discard()
    assert not outbox.records
