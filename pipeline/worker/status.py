"""What the worker loop tells the outside: readiness, liveness, and a few counts.

Pure. Written by the loop's thread only; ``/readyz``, ``/healthz``, tests and the transport
benchmark (``commits``) read it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["WorkerStatus"]


@dataclass(slots=True)
class WorkerStatus:
    """The loop's state as others read it (see the module docstring)."""

    model_loaded: bool = False
    assigned: frozenset[int] = frozenset()
    paused: bool = False
    thinning: bool = False
    running: bool = False
    last_progress_s: float = 0.0  # monotonic time of the loop's last progress (LOOP_STALL_S)
    commits: int = 0
    dead_letters: int = 0
    # Every broker unreachable, as the consumer last said: the fetch clock stops until records
    # come or a commit passes (``pipeline.worker.flow.FetchClock``).
    brokers_down: bool = False

    def progressed(self) -> None:
        """The loop is not stuck: an iteration finished, or a Kafka call returned."""
        self.last_progress_s = time.monotonic()
