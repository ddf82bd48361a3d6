"""Readiness from real Kafka and Redis probes, served over HTTP; GPU sampling on a real device."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import orjson
import pytest
import torch
from prometheus_client import CollectorRegistry

from pipeline.runtime.health import HealthServer, KafkaProbe, Readiness, RedisProbe
from pipeline.runtime.metrics import Dependency, WorkerMetrics
from pipeline.settings import KafkaSettings

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _readyz(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=30) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, orjson.loads(error.read())


def test_probes_reach_the_real_broker_and_redis(kafka_bootstrap: str, redis_url: str) -> None:
    kafka = KafkaProbe(KafkaSettings(bootstrap_servers=kafka_bootstrap)).check()
    assert kafka.ok, kafka.detail
    redis_probe = RedisProbe(redis_url)
    try:
        assert redis_probe.check().ok
    finally:
        redis_probe.close()


def test_probes_report_unreachable_dependencies() -> None:
    port = _closed_port()
    kafka = KafkaProbe(KafkaSettings(bootstrap_servers=f"127.0.0.1:{port}"), timeout_s=1.0)
    assert not kafka.check().ok
    redis_probe = RedisProbe(f"redis://127.0.0.1:{port}/0", timeout_s=1.0)
    try:
        failed = redis_probe.check()
    finally:
        redis_probe.close()
    assert not failed.ok
    assert failed.detail


def test_readyz_and_dependency_gauges_follow_real_probes(
    kafka_bootstrap: str, redis_url: str
) -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    kafka = KafkaProbe(KafkaSettings(bootstrap_servers=kafka_bootstrap))
    redis_probe = RedisProbe(f"redis://127.0.0.1:{_closed_port()}/0", timeout_s=1.0)

    def readiness() -> Readiness:
        checks = (kafka.check(), redis_probe.check())
        for check in checks:
            metrics.set_dependency_up(Dependency(check.name), check.ok)
        return Readiness.of(checks[0], model_loaded=True)

    try:
        with HealthServer(metrics.registry, readiness) as server:
            status, body = _readyz(server.url)
    finally:
        redis_probe.close()
    assert status == 200, body
    assert body["not_ready"] == []
    registry = metrics.registry
    assert registry.get_sample_value("streamscribe_dependency_up", {"dependency": "kafka"}) == 1
    assert registry.get_sample_value("streamscribe_dependency_up", {"dependency": "redis"}) == 0


def test_readyz_names_an_unreachable_broker() -> None:
    kafka = KafkaProbe(
        KafkaSettings(bootstrap_servers=f"127.0.0.1:{_closed_port()}"), timeout_s=1.0
    )
    with HealthServer(CollectorRegistry(), lambda: Readiness.of(kafka.check())) as server:
        status, body = _readyz(server.url)
    assert status == 503
    assert body["not_ready"] == ["kafka"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_sampler_reads_nothing_without_cuda() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    assert metrics.sample_gpu() == ()
    assert (
        metrics.registry.get_sample_value("streamscribe_gpu_memory_total_bytes", {"device": "0"})
        is None
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_sampler_reads_a_real_device() -> None:
    held = torch.ones(64 * 2**20 // 4, device="cuda")
    metrics = WorkerMetrics(CollectorRegistry())
    samples = metrics.sample_gpu()
    assert samples
    first = samples[0]
    assert first.memory_total_bytes >= first.memory_used_bytes > 0
    assert first.memory_reserved_bytes >= held.numel() * 4
    used = metrics.registry.get_sample_value(
        "streamscribe_gpu_memory_used_bytes", {"device": first.device}
    )
    assert used == first.memory_used_bytes
