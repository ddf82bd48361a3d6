"""The QA app's web views (faust web, aiohttp): one call, recent calls, metrics, health.

``GET /calls/{id}`` answers from the worker that holds the call's tables, or redirects (307) to
it; ``GET /calls?since=<epoch ms>&limit=N`` lists this worker's calls; ``/metrics`` (Prometheus),
``/healthz``, ``/readyz``. The views read the app through ``QaQueries`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import faust
from faust.web import Request, Response, View
from prometheus_client.exposition import choose_encoder

from pipeline.clock import Clock
from pipeline.qa.metrics import QaMetrics
from pipeline.runtime.health import Readiness

__all__ = [
    "DEFAULT_RECENT_LIMIT",
    "MAX_RECENT_LIMIT",
    "RECENT_WINDOW_MS",
    "QaQueries",
    "register_views",
]

DEFAULT_RECENT_LIMIT = 100
MAX_RECENT_LIMIT = 1000
RECENT_WINDOW_MS = 3_600_000


class QaQueries(Protocol):
    """What the views ask of ``pipeline.qa.app.QaApp``."""

    clock: Clock
    metrics: QaMetrics

    def partition_of(self, call_id: str) -> int: ...

    def owns(self, partition: int) -> bool: ...

    def owner_url(self, partition: int) -> str | None: ...

    def call_json(self, call_id: str) -> bytes | None: ...

    def recent_calls(self, since_ms: int, limit: int) -> list[dict[str, Any]]: ...

    def readiness(self) -> Readiness: ...


def register_views(app: faust.App, shell: QaQueries) -> tuple[type[View], ...]:
    """Add the views to ``app``; returns them."""

    @app.page("/calls/{call_id}", name="call")
    class CallView(View):
        async def get(self, request: Request, call_id: str) -> Response:
            partition = shell.partition_of(call_id)
            if not shell.owns(partition):
                owner = shell.owner_url(partition)
                if owner is None or owner.rstrip("/") == str(app.conf.canonical_url):
                    return self.json(
                        {"error": f"partition {partition} is not assigned yet"}, status=503
                    )
                # Another worker holds this call's tables: send the client there.
                location = f"{owner.rstrip('/')}/calls/{call_id}"
                return self.json({"location": location}, status=307, headers={"Location": location})
            body = shell.call_json(call_id)
            if body is None:
                return self.json({"error": f"unknown call {call_id!r}"}, status=404)
            return self.bytes(body, content_type="application/json")

    @app.page("/calls", name="calls")
    class CallsView(View):
        async def get(self, request: Request) -> Response:
            query: Mapping[str, str] = request.query
            try:
                since_ms = int(query.get("since", shell.clock.now_ms() - RECENT_WINDOW_MS))
                limit = int(query.get("limit", DEFAULT_RECENT_LIMIT))
            except ValueError:
                return self.json({"error": "since and limit must be integers"}, status=400)
            limit = max(1, min(limit, MAX_RECENT_LIMIT))
            return self.json({"calls": shell.recent_calls(since_ms, limit)})

    @app.page("/metrics", name="metrics")
    class MetricsView(View):
        async def get(self, request: Request) -> Response:
            accept = request.headers.get("Accept", "")
            encoder, content_type = choose_encoder(accept)
            return self.bytes(
                encoder(shell.metrics.registry), headers={"Content-Type": content_type}
            )

    @app.page("/healthz", name="healthz")
    class HealthView(View):
        async def get(self, request: Request) -> Response:
            return self.json({"ok": True})

    @app.page("/readyz", name="readyz")
    class ReadyView(View):
        async def get(self, request: Request) -> Response:
            readiness = shell.readiness()
            return self.bytes(
                readiness.to_json(),
                content_type="application/json",
                status=200 if readiness.ready else 503,
            )

    return (CallView, CallsView, MetricsView, HealthView, ReadyView)
