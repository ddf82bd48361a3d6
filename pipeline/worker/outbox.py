"""What the worker's next commit publishes, atomically, and what it counts once committed.

Pure. Finals, events, checkpoints and dead letters are staged here while the loop handles
records and steps the engine; a commit produces them all in one Kafka transaction with the
consumer offsets. The outcome of each chunk is counted only when its commit succeeds (a rewind
handles the records again, and they must count once), and the finals are kept to observe their
endpoint → committed latency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.contracts.audio_chunk import RejectReason
from pipeline.contracts.messages import Final

__all__ = ["ChunkCounts", "Outbox", "StagedRecord"]


@dataclass(frozen=True, slots=True)
class StagedRecord:
    """A record for the next transaction (``partition`` -1: the producer's partitioner)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None = None
    partition: int = -1


@dataclass(slots=True)
class ChunkCounts:
    """Chunk outcomes handled since the last commit."""

    admitted: int = 0
    duplicates: int = 0
    dead_letters: dict[RejectReason, int] = field(default_factory=dict)

    def dead_letter(self, reason: RejectReason) -> None:
        self.dead_letters[reason] = self.dead_letters.get(reason, 0) + 1


class Outbox:
    """Records, finals and chunk counts since the last commit, in staging order."""

    def __init__(self) -> None:
        self.records: list[StagedRecord] = []
        self.finals: list[Final] = []  # the finals among ``records``
        self.counts = ChunkCounts()

    def stage(
        self,
        topic: str,
        *,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int = -1,
    ) -> None:
        """Stage a record for the next transaction (after those staged before it)."""
        self.records.append(StagedRecord(topic, key, value, headers, partition))

    def stage_final(self, topic: str, final: Final, value: bytes) -> None:
        """A final, keyed by its call (``value`` is its encoding)."""
        self.stage(topic, key=final.call_id.encode(), value=value)
        self.finals.append(final)

    def count_admitted(self) -> None:
        """A chunk was admitted into a session."""
        self.counts.admitted += 1

    def count_duplicate(self) -> None:
        """A chunk was dropped as a duplicate."""
        self.counts.duplicates += 1

    def count_dead_letter(self, reason: RejectReason) -> None:
        """A chunk was dead-lettered (its record staged with the DLQ reason)."""
        self.counts.dead_letter(reason)

    def committed(self) -> tuple[list[Final], ChunkCounts]:
        """The commit succeeded: its finals and chunk counts, handed over once; empty after."""
        finals, counts = self.finals, self.counts
        self.records, self.finals, self.counts = [], [], ChunkCounts()
        return finals, counts

    def discard(self, keep: Callable[[StagedRecord], bool] = lambda _: False) -> None:
        """Nothing staged will be committed (a failed commit, lost partitions): drop it all,
        the finals and counts too, except the records ``keep`` selects (the worker's own
        events, which belong to no partition and would otherwise never be published)."""
        self.records = [record for record in self.records if keep(record)]
        self.finals = []
        self.counts = ChunkCounts()
