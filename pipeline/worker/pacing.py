"""The levers under load, applied: thin partials first, then pause the fetch (decision 0006).

The decisions are ``pipeline.worker.flow``'s (pure); this applies them to the consumer, the
metrics and the events.
"""

from __future__ import annotations

from pipeline.asr.engine import StreamingEngine
from pipeline.contracts.messages import EventType
from pipeline.runtime.metrics import WorkerMetrics
from pipeline.worker.clients import WorkerClients
from pipeline.worker.flow import PartialThinning, paused_after
from pipeline.worker.staging import Staging
from pipeline.worker.status import WorkerStatus

__all__ = ["Pacing"]


class Pacing:
    """Partial thinning and fetch backpressure (owned by the loop's thread)."""

    def __init__(
        self,
        max_pending_jobs: int,
        *,
        engine: StreamingEngine,
        thinning: PartialThinning,
        clients: WorkerClients,
        staging: Staging,
        status: WorkerStatus,
        metrics: WorkerMetrics,
    ) -> None:
        self._max_pending_jobs = max_pending_jobs
        self._engine = engine
        self._thinning = thinning
        self._clients = clients
        self._staging = staging
        self._status = status
        self._metrics = metrics

    def partials_this_step(self) -> bool:
        """Whether this step may decode partials (``flow.PartialThinning``): the first lever
        under load. If finals still pile up, ``backpressure`` pauses the partitions."""
        step = self._thinning.step(self._engine.due_partials(), self._engine.pending_finals())
        if step.newly_thinned:
            self._metrics.count_thinned_partials(step.newly_thinned)
        self._status.thinning = step.thinning
        if step.changed:
            self._staging.event(
                EventType.PARTIALS_THINNED,
                detail={"thinning": step.thinning, "pending_jobs": step.pending_jobs},
            )
        return step.partials

    def backpressure(self) -> None:
        """Pause fetching while finals pile up, resume once they drain (``flow.paused_after``)."""
        status = self._status
        pending = self._engine.pending_finals()
        paused = paused_after(status.paused, pending, self._max_pending_jobs)
        if paused == status.paused:
            return
        assignment = self._clients.partitions(sorted(status.assigned))
        if paused:
            self._clients.consumer.pause(assignment)
        else:
            self._clients.consumer.resume(assignment)
        status.paused = paused
        self._metrics.set_paused_partitions(len(status.assigned) if status.paused else 0)
        self._staging.event(
            EventType.BACKPRESSURE, detail={"paused": paused, "pending_jobs": pending}
        )
