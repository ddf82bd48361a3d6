"""Which partitions a worker owns, which partition each of its sessions came from, and the
sessions that ended recently (still remembered so that late chunks are refused).

Pure. The worker keeps the engine's and the admission's per-session state in step with it:
what this book forgets (``forget``, ``expire_ended``) it hands back for them to release.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pipeline.asr.session import SessionKey
from pipeline.worker.progress import PartitionProgress, SessionProgress

__all__ = ["EndedSession", "Forgotten", "PartitionBook"]


@dataclass(slots=True)
class EndedSession:
    """A session whose end was checkpointed (or restored), remembered for a while."""

    partition: int
    ended_ms: int  # when its end was checkpointed or restored (worker clock)
    last_offset: int  # its newest record seen, admitted or refused (-1: none seen yet)


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What ``PartitionBook.forget`` dropped: live sessions, and ended ones remembered."""

    sessions: tuple[SessionKey, ...]
    ended: tuple[SessionKey, ...]


class PartitionBook:
    """The owned partitions' progress, each owned session's partition, and ended sessions.

    Ended sessions are kept oldest end first, so expiring them reads only the expired ones
    (and those a replay would still read), never the whole list.
    """

    def __init__(self) -> None:
        self.partitions: dict[int, PartitionProgress] = {}
        self._session_partition: dict[SessionKey, int] = {}
        self._ended: OrderedDict[SessionKey, EndedSession] = OrderedDict()

    # -- partitions ------------------------------------------------------------------------

    def add(self, progress: PartitionProgress) -> None:
        """Own a partition (its progress restored from its checkpoints)."""
        self.partitions[progress.partition] = progress

    def forget(self, partitions: Iterable[int]) -> Forgotten:
        """Drop these partitions with their sessions and their remembered ended sessions."""
        gone = set(partitions)
        for partition in gone:
            self.partitions.pop(partition, None)
        sessions = tuple(k for k, p in self._session_partition.items() if p in gone)
        for key in sessions:
            del self._session_partition[key]
        ended = tuple(k for k, e in self._ended.items() if e.partition in gone)
        for key in ended:
            del self._ended[key]
        return Forgotten(sessions, ended)

    # -- sessions --------------------------------------------------------------------------

    def own(self, key: SessionKey, partition: int) -> None:
        """The session's records come from ``partition`` (it is owned while that is)."""
        self._session_partition[key] = partition

    def session(self, key: SessionKey) -> SessionProgress | None:
        """The progress of an owned session (created on first use), None if not owned."""
        partition = self._session_partition.get(key)
        progress = self.partitions.get(partition) if partition is not None else None
        return progress.session(key) if progress is not None else None

    def end(self, key: SessionKey, partition: int, now_ms: int) -> None:
        """The session's end is checkpointed: forget its progress, remember that it ended."""
        progress = self.partitions[partition].sessions.pop(key)
        self._session_partition.pop(key, None)
        self.remember_ended(key, partition, now_ms, progress.last_offset)

    # -- ended sessions --------------------------------------------------------------------

    def remember_ended(
        self, key: SessionKey, partition: int, now_ms: int, last_offset: int
    ) -> None:
        """Remember an ended session from ``now_ms`` (the newest end goes last)."""
        self._ended[key] = EndedSession(partition, now_ms, last_offset)
        self._ended.move_to_end(key)

    def refused_late(self, key: SessionKey, offset: int) -> None:
        """A chunk of ``key`` at ``offset`` was refused: if the session ended, its records reach
        this far (a replay from below that offset still reads them)."""
        ended = self._ended.get(key)
        if ended is not None and offset > ended.last_offset:
            ended.last_offset = offset

    def expire_ended(self, now_ms: int, retention_ms: int) -> list[tuple[SessionKey, int]]:
        """Forget the sessions ended ``retention_ms`` ago or more; returns their (key, partition).

        One that a replay from its partition's low watermark would still read stays remembered:
        forgotten, its call would be taken for a new one and its finals published again.
        """
        expired: list[tuple[SessionKey, EndedSession]] = []
        for key, ended in self._ended.items():
            if now_ms - ended.ended_ms < retention_ms:
                break
            progress = self.partitions.get(ended.partition)
            watermark = progress.low_watermark() if progress is not None else None
            if progress is not None and (watermark is None or watermark <= ended.last_offset):
                continue
            expired.append((key, ended))
        for key, _ in expired:
            del self._ended[key]
        return [(key, ended.partition) for key, ended in expired]

    # -- what earlier owners handled (``pipeline.worker.intake.History``) --------------------

    def handled_through(self, partition: int) -> int:
        """The partition's records up to this offset were handled by an earlier owner (or
        here, before a rewind): replayed, they repeat nothing."""
        progress = self.partitions.get(partition)
        return progress.handled_through if progress is not None else -1

    def skip_through(self, partition: int, key: SessionKey) -> int | None:
        """The session's records up to this offset are in its restored snapshot; None when the
        partition holds no progress of the session."""
        progress = self.partitions.get(partition)
        session = progress.sessions.get(key) if progress is not None else None
        return session.skip_through if session is not None else None

    @property
    def ended(self) -> Mapping[SessionKey, EndedSession]:
        """The ended sessions remembered, oldest end first (read only)."""
        return self._ended
