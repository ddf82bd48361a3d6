"""/metrics, /healthz, /readyz over a real socket on 127.0.0.1 (no broker needed)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import orjson
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from pipeline.errors import ConfigError, InfrastructureError
from pipeline.runtime.health import (
    HealthServer,
    KafkaProbe,
    Readiness,
    ReadinessCheck,
    start_health_server,
)
from pipeline.runtime.metrics import ChunkOutcome, WorkerMetrics
from pipeline.settings import KafkaSettings, MetricsSettings


class Switch:
    """A readiness callable the test flips."""

    def __init__(self) -> None:
        self.model_loaded = False
        self.fail_with: Exception | None = None

    def __call__(self) -> Readiness:
        if self.fail_with is not None:
            raise self.fail_with
        return Readiness.of(
            ReadinessCheck("kafka", True, "1 broker(s)"),
            model_loaded=self.model_loaded,
            partitions_assigned=True,
        )


@pytest.fixture
def metrics() -> WorkerMetrics:
    return WorkerMetrics(CollectorRegistry())


@pytest.fixture
def switch() -> Switch:
    return Switch()


@pytest.fixture
def server(metrics: WorkerMetrics, switch: Switch) -> Iterator[HealthServer]:
    with HealthServer(metrics.registry, switch, host="127.0.0.1", port=0) as running:
        yield running


def _get(url: str, accept: str = "") -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["Content-Type"], error.read()


def test_readiness_lists_what_is_not_ready() -> None:
    readiness = Readiness.of(ReadinessCheck("kafka", False, "timed out"), model_loaded=True)
    assert not readiness.ready
    assert readiness.not_ready == ("kafka",)
    body = orjson.loads(readiness.to_json())
    assert body["checks"]["kafka"] == {"ok": False, "detail": "timed out"}
    assert Readiness(()).ready


def test_metrics_endpoint_serves_the_registry(server: HealthServer, metrics: WorkerMetrics) -> None:
    metrics.count_chunk(ChunkOutcome.DUPLICATE, 2)
    status, content_type, body = _get(server.url + "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert {"asr_request", "asr_duration_seconds", "asr_dlq", "asr_active_sessions"} <= set(
        families
    )
    duplicates = [
        s.value
        for s in families["asr_request"].samples
        if s.name == "asr_request_total" and s.labels == {"outcome": "duplicate"}
    ]
    assert duplicates == [2.0]


def test_metrics_endpoint_speaks_openmetrics_when_asked(server: HealthServer) -> None:
    status, content_type, body = _get(
        server.url + "/metrics", accept="application/openmetrics-text; version=1.0.0"
    )
    assert status == 200
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_healthz_is_200_while_alive(server: HealthServer, switch: Switch) -> None:
    switch.fail_with = RuntimeError("model exploded")
    status, _, body = _get(server.url + "/healthz")
    assert status == 200
    assert orjson.loads(body) == {"alive": True, "detail": ""}


def test_healthz_follows_the_liveness_callable(metrics: WorkerMetrics, switch: Switch) -> None:
    stalled: list[str | None] = [None]
    with HealthServer(metrics.registry, switch, liveness=lambda: stalled[0]) as running:
        assert _get(running.url + "/healthz")[0] == 200
        stalled[0] = "the worker loop finished no iteration for 400 s"
        status, _, body = _get(running.url + "/healthz")
    assert status == 503
    assert orjson.loads(body) == {"alive": False, "detail": stalled[0]}


def test_readyz_follows_the_readiness_callable(server: HealthServer, switch: Switch) -> None:
    status, content_type, body = _get(server.url + "/readyz")
    assert status == 503
    assert content_type == "application/json"
    assert orjson.loads(body)["not_ready"] == ["model_loaded"]

    switch.model_loaded = True
    status, _, body = _get(server.url + "/readyz")
    assert status == 200
    assert orjson.loads(body)["ready"] is True


def test_readyz_is_503_when_the_readiness_callable_raises(
    server: HealthServer, switch: Switch
) -> None:
    switch.fail_with = RuntimeError("consumer closed")
    status, _, body = _get(server.url + "/readyz")
    assert status == 503
    answer = orjson.loads(body)
    assert answer["not_ready"] == ["readiness"]
    assert "consumer closed" in answer["checks"]["readiness"]["detail"]


def test_unknown_paths_are_404_and_head_has_no_body(server: HealthServer) -> None:
    assert _get(server.url + "/nope")[0] == 404
    request = urllib.request.Request(server.url + "/healthz", method="HEAD")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        assert response.read() == b""


def test_stop_closes_the_socket_and_is_idempotent(metrics: WorkerMetrics, switch: Switch) -> None:
    server = HealthServer(metrics.registry, switch)
    server.start()
    port = server.port
    server.stop()
    server.stop()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 2):
        pass


def test_a_taken_port_is_an_infrastructure_error(server: HealthServer, switch: Switch) -> None:
    other = HealthServer(CollectorRegistry(), switch, port=server.port)
    with pytest.raises(InfrastructureError, match="STREAMSCRIBE_METRICS_PORT"):
        other.start()


def test_settings_port_zero_means_off(metrics: WorkerMetrics, switch: Switch) -> None:
    assert start_health_server(MetricsSettings(port=0), metrics.registry, switch) is None


@pytest.mark.parametrize("port", [70000, -1])
def test_a_port_outside_the_tcp_range_is_a_config_error_not_an_overflow(port: int) -> None:
    server = HealthServer(CollectorRegistry(), Switch(), port=port)
    with pytest.raises(ConfigError, match=rf"port {port}: ports are 0\.\.65535"):
        server.start()
    server.stop()  # nothing was started: a no-op


def test_a_kafka_probe_on_client_settings_librdkafka_refuses_is_a_config_error() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", client={"no.such.prop": "1"})
    with pytest.raises(ConfigError, match="invalid Kafka client settings"):
        KafkaProbe(settings, timeout_s=1.0)
