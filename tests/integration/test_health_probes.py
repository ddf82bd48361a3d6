"""Readiness from a real Kafka probe, served over HTTP; GPU sampling on a real device."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import orjson
import pytest
import torch
from prometheus_client import CollectorRegistry

from pipeline.runtime.health import HealthServer, KafkaProbe, Readiness
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


def test_the_kafka_probe_reaches_the_real_broker(kafka_bootstrap: str) -> None:
    kafka = KafkaProbe(KafkaSettings(bootstrap_servers=kafka_bootstrap), timeout_s=2.0).check()
    assert kafka.ok, kafka.detail


def test_the_kafka_probe_reports_an_unreachable_broker() -> None:
    port = _closed_port()
    kafka = KafkaProbe(KafkaSettings(bootstrap_servers=f"127.0.0.1:{port}"), timeout_s=1.0)
    failed = kafka.check()
    assert not failed.ok
    assert failed.detail


def test_readyz_and_the_kafka_gauge_follow_the_real_probe(kafka_bootstrap: str) -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    kafka = KafkaProbe(KafkaSettings(bootstrap_servers=kafka_bootstrap), timeout_s=2.0)

    def readiness() -> Readiness:  # shaped like the worker's; its own: test_worker.py
        check = kafka.check()
        metrics.set_dependency_up(Dependency.KAFKA, check.ok)
        return Readiness.of(check, model_loaded=True)

    with HealthServer(metrics.registry, readiness) as server:
        status, body = _readyz(server.url)
    assert status == 200, body
    assert body["not_ready"] == []
    registry = metrics.registry
    assert registry.get_sample_value("streamscribe_dependency_up", {"dependency": "kafka"}) == 1
    # Redis is no readiness check: its gauge follows the hotword registry, not this probe.
    assert registry.get_sample_value("streamscribe_dependency_up", {"dependency": "redis"}) is None


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
