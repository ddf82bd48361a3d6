"""``/metrics``, ``/healthz`` and ``/readyz`` of a process, on a small threaded HTTP server.

- ``/metrics``: the injected ``CollectorRegistry`` in the format the scraper asks for
  (Prometheus text or OpenMetrics, by ``Accept`` header).
- ``/healthz``: 200 while the process can answer HTTP at all (liveness: restart when it cannot).
- ``/readyz``: the injected readiness callable decides: 200 when every check passes, else 503;
  both answer a JSON body ``{"ready": bool, "not_ready": [names], "checks": {name: {...}}}``.
  A readiness callable that raises counts as not ready (check ``readiness``), never as a crash.

The worker supplies readiness (partitions assigned, model loaded, broker reachable);
``KafkaProbe`` is its check of the broker, whose result the worker's readiness callable also
writes to ``streamscribe_dependency_up{dependency="kafka"}``. Redis is no readiness check (a
worker transcribes without hotwords while it is down): its gauge follows the hotword registry's
``on_dependency`` callback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from pipeline.errors import ConfigError, InfrastructureError
from pipeline.runtime.admin import admin_client
from pipeline.settings import KafkaSettings, MetricsSettings

__all__ = [
    "HealthServer",
    "KafkaProbe",
    "LivenessProbe",
    "Readiness",
    "ReadinessCheck",
    "ReadinessProbe",
    "start_health_server",
]

logger = logging.getLogger(__name__)

MAX_PORT = 65535
STOP_TIMEOUT_S = 5.0
# How often the serving thread looks for a stop request: bounds how long ``stop`` waits.
SHUTDOWN_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class ReadinessCheck:
    """One named condition of readiness; ``detail`` says why when it fails."""

    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Readiness:
    """The result of a readiness probe: ready when every check is ok (and vacuously when none)."""

    checks: tuple[ReadinessCheck, ...]

    @classmethod
    def of(cls, *checks: ReadinessCheck, **conditions: bool) -> Readiness:
        """``Readiness.of(kafka_check, model_loaded=True, partitions_assigned=False)``."""
        named = tuple(ReadinessCheck(name, ok) for name, ok in conditions.items())
        return cls(checks + named)

    @property
    def ready(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def not_ready(self) -> tuple[str, ...]:
        return tuple(check.name for check in self.checks if not check.ok)

    def to_json(self) -> bytes:
        checks: dict[str, Mapping[str, Any]] = {
            check.name: {"ok": check.ok, "detail": check.detail} for check in self.checks
        }
        return orjson.dumps({"ready": self.ready, "not_ready": self.not_ready, "checks": checks})


ReadinessProbe = Callable[[], Readiness]

LivenessProbe = Callable[[], str | None]
"""``/healthz``: None while the process is alive and working, else why not (then 503: restart
it). Without one, ``/healthz`` answers 200 while the HTTP thread runs."""


class KafkaProbe:
    """Is the Kafka cluster answering metadata requests within ``timeout_s``
    (``metrics.probe_timeout_ms``)? One admin client, reused per check.

    Raises (on construction):
        ConfigError: librdkafka refuses the client settings (``admin_client``).
    """

    def __init__(self, settings: KafkaSettings, timeout_s: float) -> None:
        self._bootstrap = settings.bootstrap_servers
        self._timeout_s = timeout_s
        self._client = admin_client(settings)

    def check(self) -> ReadinessCheck:
        try:
            metadata = self._client.list_topics(timeout=self._timeout_s)
        except KafkaException as error:
            return ReadinessCheck("kafka", False, f"{self._bootstrap}: {error}")
        finally:
            self._client.poll(0)  # its librdkafka log lines, queued until served
        return ReadinessCheck("kafka", True, f"{len(metadata.brokers)} broker(s)")


class HealthServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` from a daemon thread.

    ``port=0`` binds a free port (read it back from ``port`` after ``start``). ``start`` raises
    ``ConfigError`` for a port outside 0..65535 and ``InfrastructureError`` when the address
    cannot be bound; ``stop`` is idempotent and returns once the socket is closed. Usable as a
    context manager (start on enter, stop on exit).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        readiness: ReadinessProbe,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        liveness: LivenessProbe | None = None,
    ) -> None:
        self._registry = registry
        self._readiness = readiness
        self._liveness = liveness
        self._host = host
        self._requested_port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("HealthServer already started")
        if not 0 <= self._requested_port <= MAX_PORT:
            # socket.bind would raise OverflowError, which is no OSError.
            raise ConfigError(
                f"cannot serve /metrics on port {self._requested_port}: ports are 0..{MAX_PORT}"
                " (STREAMSCRIBE_METRICS_PORT)"
            )
        try:
            server = _Server((self._host, self._requested_port), _Handler)
        except OSError as error:
            raise InfrastructureError(
                f"cannot serve /metrics on {self._host}:{self._requested_port}: {error}"
                " (STREAMSCRIBE_METRICS_PORT / STREAMSCRIBE_METRICS_HOST)"
            ) from None
        server.registry = self._registry
        server.readiness = self._readiness
        server.liveness = self._liveness
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_S},
            name="health-http",
            daemon=True,
        )
        self._thread.start()
        logger.info("serving /metrics, /healthz, /readyz on %s", self.url)

    @property
    def port(self) -> int:
        """The bound port (the chosen one when started with ``port=0``)."""
        if self._server is None:
            raise RuntimeError("HealthServer not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        thread.join(STOP_TIMEOUT_S)
        self._server = self._thread = None

    def __enter__(self) -> HealthServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def start_health_server(
    settings: MetricsSettings,
    registry: CollectorRegistry,
    readiness: ReadinessProbe,
    liveness: LivenessProbe | None = None,
) -> HealthServer | None:
    """Start the endpoints on ``settings.host:settings.port``; None when ``port`` is 0 (off)."""
    if settings.port == 0:
        return None
    server = HealthServer(
        registry, readiness, host=settings.host, port=settings.port, liveness=liveness
    )
    server.start()
    return server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    readiness: ReadinessProbe
    liveness: LivenessProbe | None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._respond(include_body=True)

    def do_HEAD(self) -> None:
        self._respond(include_body=False)

    def _respond(self, include_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            status, body = HTTPStatus.OK, encoder(self.server.registry)
        elif path == "/healthz":
            problem = self._liveness()
            status = HTTPStatus.OK if problem is None else HTTPStatus.SERVICE_UNAVAILABLE
            body = orjson.dumps({"alive": problem is None, "detail": problem or ""})
            content_type = "application/json"
        elif path == "/readyz":
            readiness = self._readiness()
            status = HTTPStatus.OK if readiness.ready else HTTPStatus.SERVICE_UNAVAILABLE
            body, content_type = readiness.to_json(), "application/json"
        else:
            status, body, content_type = HTTPStatus.NOT_FOUND, b"not found\n", "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if include_body:
            self.wfile.write(body)

    def _readiness(self) -> Readiness:
        try:
            return self.server.readiness()
        # The readiness callable is the worker's code: whatever it raises means "not ready",
        # and the probe endpoint itself must keep answering.
        except Exception as error:
            logger.exception("readiness probe failed")
            return Readiness((ReadinessCheck("readiness", False, repr(error)),))

    def _liveness(self) -> str | None:
        probe = self.server.liveness
        if probe is None:
            return None
        try:
            return probe()
        # A liveness callable that raises is a bug in it, not a dead process: stay alive.
        except Exception:
            logger.exception("liveness probe failed")
            return None

    def log_message(self, format: str, *args: Any) -> None:
        # Probes and scrapes arrive every few seconds; keep them out of the default stderr log.
        logger.debug("%s " + format, self.address_string(), *args)
