"""Where a restore resumes (``runtime.recovery``): offsets first, checkpoints of the same
transaction, re-read when they disagree."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.asr.session import SessionKey
from pipeline.runtime.checkpoint_reader import Checkpoints
from pipeline.runtime.recovery import MAX_TRIES, disagreeing, recover, start_offset
from pipeline.worker.checkpoint import PartitionCheckpoint, SessionCheckpoint

KEY = SessionKey("c1", "agent")


def _checkpoints(offset: int | None, finals_through: int = 0) -> Checkpoints:
    return {
        0: [
            PartitionCheckpoint(handled_through=99, committed_offset=offset),
            SessionCheckpoint(KEY, None, None, finals_through, False, 1, 0),
        ]
    }


def test_offsets_are_read_before_the_checkpoints() -> None:
    order: list[str] = []

    def offsets(partitions: Sequence[int]) -> dict[int, int | None]:
        order.append("offsets")
        return dict.fromkeys(partitions, 40)

    def checkpoints(partitions: Sequence[int]) -> Checkpoints:
        order.append("checkpoints")
        return _checkpoints(40)

    point = recover([0], read_offsets=offsets, read_checkpoints=checkpoints)
    assert order == ["offsets", "checkpoints"]
    assert (point.offsets, point.disagreed, point.tries) == ({0: 40}, (), 1)


def test_checkpoints_of_another_transaction_are_read_again_with_the_offsets() -> None:
    # The previous owner's last transaction resolved between the two reads: the first read got
    # the old offset and the new checkpoints. The second agrees.
    offsets = iter([{0: 40}, {0: 55}])
    point = recover(
        [0], read_offsets=lambda ps: next(offsets), read_checkpoints=lambda ps: _checkpoints(55, 3)
    )
    assert (point.offsets, point.tries, point.disagreed) == ({0: 55}, 2, ())
    [session] = [c for c in point.checkpoints[0] if isinstance(c, SessionCheckpoint)]
    assert session.finals_through == 3


def test_a_lasting_disagreement_is_reported_and_settled() -> None:
    reads: list[int] = []

    def offsets(partitions: Sequence[int]) -> dict[int, int | None]:
        reads.append(1)
        return {0: 10}  # an operator reset the group's offset

    point = recover([0], read_offsets=offsets, read_checkpoints=lambda ps: _checkpoints(55))
    assert len(reads) == MAX_TRIES
    assert (point.offsets, point.disagreed) == ({0: 10}, (0,))


def test_expired_group_offsets_resume_from_the_checkpoint_s() -> None:
    point = recover(
        [0], read_offsets=lambda ps: {0: None}, read_checkpoints=lambda ps: _checkpoints(55)
    )
    assert point.offsets == {0: 55}
    assert point.disagreed == (0,)


def test_old_checkpoints_without_an_offset_agree_with_any() -> None:
    assert disagreeing({0: 12}, _checkpoints(None), [0]) == []
    assert disagreeing({0: 12}, {}, [0]) == []
    assert start_offset(None, None) == -2  # OFFSET_BEGINNING
    assert start_offset(7, 9) == 7


def test_the_between_hook_runs_after_each_offsets_read() -> None:
    seen: list[str] = []
    offsets = iter([{0: 1}, {0: 2}])
    recover(
        [0],
        read_offsets=lambda ps: seen.append("offsets") or next(offsets),
        read_checkpoints=lambda ps: seen.append("checkpoints") or _checkpoints(2),
        between=lambda: seen.append("between"),
    )
    assert seen == ["offsets", "between", "checkpoints"] * 2


def test_no_partitions_reads_nothing() -> None:
    def fail(partitions: Sequence[int]) -> dict[int, int | None]:
        raise AssertionError("nothing to read")

    assert recover([], read_offsets=fail, read_checkpoints=fail).offsets == {}  # type: ignore[arg-type]
