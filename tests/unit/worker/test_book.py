"""The partition book: owned partitions, each session's partition, ended sessions remembered."""

from __future__ import annotations

from pipeline.asr.session import SessionKey
from pipeline.worker.book import PartitionBook
from pipeline.worker.progress import PartitionProgress

A, B, C = (SessionKey(f"call:{n}", "agent") for n in "abc")
RETENTION_MS = 1000


def _book(*partitions: int) -> PartitionBook:
    book = PartitionBook()
    for partition in partitions:
        progress = PartitionProgress(partition)
        progress.consumed(99)  # everything up to offset 99 read: nothing needed below 100
        book.add(progress)
    return book


def test_a_session_is_owned_through_its_partition() -> None:
    book = _book(0)
    assert book.session(A) is None  # not owned yet
    book.own(A, 0)
    progress = book.session(A)
    assert progress is not None
    assert book.partitions[0].sessions[A] is progress
    book.own(B, 7)  # a partition not owned (revoked meanwhile)
    assert book.session(B) is None


def test_an_ended_session_is_remembered_with_its_newest_offset() -> None:
    book = _book(0)
    book.own(A, 0)
    session = book.session(A)
    assert session is not None
    session.last_offset = 41
    book.end(A, 0, now_ms=5000)
    assert A not in book.partitions[0].sessions
    assert book.session(A) is None
    assert book.ended[A].last_offset == 41
    book.refused_late(A, 60)  # a late chunk, refused: the session's records reach that far
    book.refused_late(A, 50)
    book.refused_late(B, 70)  # not an ended session: nothing to remember
    assert book.ended[A].last_offset == 60
    assert B not in book.ended


def test_ended_sessions_expire_after_the_retention_oldest_first() -> None:
    book = _book(0)
    book.remember_ended(A, 0, now_ms=0, last_offset=1)
    book.remember_ended(B, 0, now_ms=500, last_offset=2)
    assert book.expire_ended(now_ms=999, retention_ms=RETENTION_MS) == []
    assert book.expire_ended(now_ms=1000, retention_ms=RETENTION_MS) == [(A, 0)]
    assert list(book.ended) == [B]
    assert book.expire_ended(now_ms=1500, retention_ms=RETENTION_MS) == [(B, 0)]


def test_an_ended_session_a_replay_would_still_read_is_kept_past_the_retention() -> None:
    book = _book(0)
    book.remember_ended(A, 0, now_ms=0, last_offset=150)  # beyond the low watermark (100)
    book.remember_ended(B, 0, now_ms=0, last_offset=10)
    assert book.expire_ended(now_ms=5000, retention_ms=RETENTION_MS) == [(B, 0)]
    assert list(book.ended) == [A]


def test_forgetting_partitions_hands_back_their_sessions_and_ended_sessions() -> None:
    book = _book(0, 1)
    book.own(A, 0)
    book.own(B, 1)
    book.remember_ended(C, 0, now_ms=0, last_offset=3)
    forgotten = book.forget([0])
    assert forgotten.sessions == (A,)
    assert forgotten.ended == (C,)
    assert list(book.partitions) == [1]
    assert book.session(A) is None
    assert book.session(B) is not None
    assert not book.ended
