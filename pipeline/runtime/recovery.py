"""Where a worker resumes the partitions it takes: committed offsets first, then checkpoints.

A partition's committed offset and its checkpoints are written in one transaction, and a
restore must read both from the *same* transaction. The previous owner's last transaction may
still be open or committing when the new owner starts (it was paused after
``send_offsets_to_transaction``, by a GC or VM pause, ``SIGSTOP`` or a network cut, and wakes
before the broker's abort sweep: the transaction coordinator does not re-check the group
generation at ``EndTxn``). So the order is:

1. **The committed offsets, stable.** A ``read_committed`` consumer's ``committed()`` asks for
   stable offsets (KIP-447): the group coordinator answers only once no transaction holds
   pending offsets for those partitions, so the last transaction that sent offsets for them
   is resolved, committed or aborted, when this returns.
2. **The checkpoints, to the high watermark** (``read_checkpoints``): every record of a
   resolved transaction is read, whether or not its markers are written yet (reading to the
   last stable offset missed the checkpoints of a transaction whose offsets were already
   visible); a transaction still open is waited for until it resolves.
3. **They must agree.** The partition checkpoint records the offset committed with it. If the
   group's differs, a transaction resolved between 1 and 2: both are read again
   (``MAX_TRIES`` in all). If they still differ, the group's offset is taken (an operator
   reset it on purpose), or, when the group has none (its offsets expired while the
   checkpoints, compacted, stayed), the checkpoint's; the worker reports the partition.

The worker then assigns (or seeks to) exactly the offsets returned here, never letting the
client fetch them again after the checkpoints were read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING

from pipeline.runtime.checkpoint_reader import Checkpoints
from pipeline.worker.checkpoint import PartitionCheckpoint

__all__ = ["MAX_TRIES", "RestorePoint", "disagreeing", "recover", "start_offset"]

logger = logging.getLogger(__name__)

MAX_TRIES = 3
"""Reads of offsets + checkpoints before a disagreement is settled by ``start_offset``."""

CommittedOffsets = dict[int, int | None]
"""Partition → the group's committed offset (None: the group has none)."""


@dataclass(frozen=True, slots=True)
class RestorePoint:
    """What a restore read: where each partition resumes, and the checkpoints to rebuild from."""

    offsets: dict[int, int]
    """Partition → the offset to consume from (``OFFSET_BEGINNING`` when nothing is known)."""
    checkpoints: Checkpoints
    disagreed: tuple[int, ...] = ()
    """Partitions whose checkpoint and group offset still differed after ``MAX_TRIES``."""
    tries: int = 1


def _checkpointed_offset(checkpoints: Checkpoints, partition: int) -> int | None:
    for record in checkpoints.get(partition, ()):
        if isinstance(record, PartitionCheckpoint):
            return record.committed_offset
    return None


def disagreeing(
    committed: Mapping[int, int | None], checkpoints: Checkpoints, partitions: Sequence[int]
) -> list[int]:
    """Partitions whose partition checkpoint names another committed offset than the group's.
    A checkpoint that names none (written before the offset was recorded, or never) agrees."""
    out = []
    for partition in partitions:
        recorded = _checkpointed_offset(checkpoints, partition)
        if recorded is not None and recorded != committed.get(partition):
            out.append(partition)
    return out


def start_offset(committed: int | None, checkpointed: int | None) -> int:
    """Where a partition resumes: the group's offset; the checkpoint's when the group has none
    (expired); the beginning when neither is known."""
    if committed is not None:
        return committed
    if checkpointed is not None:
        return checkpointed
    return int(OFFSET_BEGINNING)


def recover(
    partitions: Sequence[int],
    *,
    read_offsets: Callable[[Sequence[int]], CommittedOffsets],
    read_checkpoints: Callable[[Sequence[int]], Checkpoints],
    between: Callable[[], None] = lambda: None,
    max_tries: int = MAX_TRIES,
) -> RestorePoint:
    """Read the restore point of ``partitions`` in the order of the module docstring.

    ``read_offsets`` must return stable committed offsets (it waits for pending transactional
    offsets); ``read_checkpoints`` must read to the high watermark. ``between`` runs after each
    offsets read, before the checkpoints are read (a fault point). Whatever the readers raise
    propagates.
    """
    if not partitions:
        return RestorePoint({}, {})
    tries = 0
    while True:
        tries += 1
        committed = read_offsets(partitions)
        between()
        checkpoints = read_checkpoints(partitions)
        differing = disagreeing(committed, checkpoints, partitions)
        if not differing or tries >= max_tries:
            break
        logger.warning(
            "partition(s) %s: checkpoints and committed offsets of different transactions; "
            "reading both again",
            differing,
        )
    offsets = {
        p: start_offset(committed.get(p), _checkpointed_offset(checkpoints, p)) for p in partitions
    }
    if differing:
        logger.error(
            "partition(s) %s: checkpoints and committed offsets still disagree after %d reads; "
            "resuming from %s",
            differing,
            tries,
            {p: offsets[p] for p in differing},
        )
    return RestorePoint(offsets, checkpoints, tuple(differing), tries)
