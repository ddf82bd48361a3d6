"""The metric catalogue: what WorkerMetrics registers is exactly what CATALOGUE declares."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.asr.guards import Guard
from pipeline.cli import main
from pipeline.contracts import RejectReason
from pipeline.hotwords.model import Scope
from pipeline.runtime.metrics import (
    CATALOGUE,
    DURATION_BUCKETS_S,
    ChunkOutcome,
    Dependency,
    DurationKind,
    GpuSample,
    MetricType,
    WorkerMetrics,
    catalogue_markdown,
    read_gpu_samples,
)
from tests.conftest import REPO

# Labels that would grow one series per call, utterance or customer.
UNBOUNDED_LABELS = {"call", "call_id", "utterance", "utterance_id", "tenant", "key", "offset"}


def _exercised() -> WorkerMetrics:
    """A WorkerMetrics in which every metric has at least one series."""
    metrics = WorkerMetrics(CollectorRegistry())
    metrics.count_chunk(ChunkOutcome.OK, 3)
    for kind in DurationKind:
        metrics.observe_duration(kind, 0.3)
    metrics.observe_step(batch_size=8, step_seconds=0.12, new_audio_seconds=0.4)
    metrics.set_active_sessions(5)
    metrics.set_assignment([0, 1])
    metrics.set_partition_lag(0, 42)
    metrics.set_paused_partitions(1)
    metrics.count_dead_letter(RejectReason.ODD_BYTE_COUNT)
    metrics.count_suppressed_hallucination(Guard.NO_SPEECH)
    metrics.count_hotword_update(Scope.TENANT)
    metrics.count_thinned_partials(2)
    metrics.set_dependency_up(Dependency.KAFKA, True)
    metrics.set_model("whisper-tiny.en", "cpu", "float32")
    metrics.record_gpu([GpuSample("0", 3 * 2**30, 80 * 2**30, 2**30, 0.55)])
    return metrics


def _value(metrics: WorkerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_catalogue_names_are_unique_valid_and_suffixed_by_type() -> None:
    names = [spec.name for spec in CATALOGUE]
    assert len(names) == len(set(names))
    for spec in CATALOGUE:
        assert re.fullmatch(r"(asr|streamscribe)_[a-z0-9_]+", spec.name), spec.name
        assert spec.help.endswith("."), spec.name
        assert spec.name.endswith("_total") == (spec.type is MetricType.COUNTER), spec.name
        assert spec.name.endswith("_info") == (spec.type is MetricType.INFO), spec.name
        assert bool(spec.buckets) == (spec.type is MetricType.HISTOGRAM), spec.name


def test_every_label_is_bounded_and_documented() -> None:
    for spec in CATALOGUE:
        for label in spec.labels:
            assert label.name not in UNBOUNDED_LABELS, (spec.name, label.name)
            assert label.values or label.doc, (spec.name, label.name)


def test_registered_metrics_match_the_catalogue_exactly() -> None:
    exposed = text_string_to_metric_families(generate_latest(_exercised().registry).decode())
    families = {family.name: family for family in exposed if not family.name.endswith("_created")}
    # The text parser names a counter's family without ``_total``; an info metric is a gauge there.
    declared = {spec.name.removesuffix("_total"): spec for spec in CATALOGUE}
    assert set(families) == set(declared)
    for name, family in families.items():
        spec = declared[name]
        assert family.documentation == spec.help
        expected_type = "gauge" if spec.type is MetricType.INFO else spec.type.value
        assert family.type == expected_type, name
        series_labels = {
            key for sample in family.samples for key in sample.labels if key not in ("le",)
        }
        assert series_labels == set(spec.label_names), name


def test_closed_label_sets_are_exposed_at_zero_before_any_event() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    for outcome in ChunkOutcome:
        assert _value(metrics, "asr_request_total", outcome=outcome.value) == 0
    for reason in RejectReason:
        assert _value(metrics, "asr_dlq_total", reason=reason.value) == 0
    assert _value(metrics, "asr_duration_seconds_count", kind="chunk_to_partial") == 0
    # "down" must not be claimed before the first probe.
    assert _value(metrics, "streamscribe_dependency_up", dependency="kafka") is None


def test_domain_labels_take_exactly_the_values_their_producers_can_emit() -> None:
    # A label copied from a domain enum drifts: series that can never move (always 0) are
    # pre-created and documented, and a value the domain adds is refused at run time.
    labels = {(spec.name, label.name): label.values for spec in CATALOGUE for label in spec.labels}
    assert labels["asr_hallucinations_suppressed_total", "guard"] == tuple(g.value for g in Guard)
    assert labels["asr_hotword_updates_total", "scope"] == tuple(s.value for s in Scope)
    metrics = WorkerMetrics(CollectorRegistry())
    for guard in Guard:
        assert _value(metrics, "asr_hallucinations_suppressed_total", guard=guard.value) == 0
    assert _value(metrics, "asr_hallucinations_suppressed_total", guard="vad_gate") is None


def test_label_values_outside_their_enum_are_refused() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    with pytest.raises(ValueError, match="call-123"):
        metrics.count_chunk("call-123")
    with pytest.raises(ValueError, match="latency"):
        metrics.observe_duration("latency", 0.1)
    with pytest.raises(ValueError, match="nope"):
        metrics.count_dead_letter("nope")
    metrics.count_dead_letter("odd_byte_count")
    assert _value(metrics, "asr_dlq_total", reason="odd_byte_count") == 1


def test_duration_buckets_resolve_the_latency_objective() -> None:
    dense = [b for b in DURATION_BUCKETS_S if 0.2 <= b <= 2.0]
    assert 0.4 in DURATION_BUCKETS_S
    assert max(b - a for a, b in itertools.pairwise(dense)) <= 0.25
    assert DURATION_BUCKETS_S[0] <= 0.05
    assert DURATION_BUCKETS_S[-1] >= 5.0


def test_step_observes_batch_duration_and_real_time_factor() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    metrics.observe_step(batch_size=8, step_seconds=0.1, new_audio_seconds=0.5)
    metrics.observe_step(batch_size=1, step_seconds=0.05, new_audio_seconds=0.0)
    assert _value(metrics, "asr_batch_size_sum") == 9
    assert _value(metrics, "asr_duration_seconds_count", kind="step") == 2
    assert _value(metrics, "asr_real_time_factor_count") == 1
    assert _value(metrics, "asr_real_time_factor_sum") == pytest.approx(0.2)


def test_revoked_partitions_stop_reporting_lag() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    metrics.set_assignment([0, 1, 2])
    for partition in (0, 1, 2):
        metrics.set_partition_lag(partition, 10 * partition)
    metrics.set_partition_lag(0, -5)
    metrics.set_assignment([2, 3])
    assert _value(metrics, "asr_assigned_partitions") == 2
    assert _value(metrics, "asr_consumer_lag_records", partition="0") is None
    assert _value(metrics, "asr_consumer_lag_records", partition="1") is None
    assert _value(metrics, "asr_consumer_lag_records", partition="2") == 20


def test_model_info_replaces_the_previous_model() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    # Review finding: before a model was loaded, a series without labels showed as an empty row.
    assert "streamscribe_model_info" not in generate_latest(metrics.registry).decode()
    metrics.set_model("a", "cpu", "float32")
    metrics.set_model("b", "cuda:0", "float16")
    text = generate_latest(metrics.registry).decode()
    assert 'streamscribe_model_info{device="cuda:0",dtype="float16",model_id="b"} 1.0' in text
    assert 'model_id="a"' not in text


def test_default_registry_carries_process_metrics() -> None:
    text = generate_latest(WorkerMetrics().registry).decode()
    assert "process_cpu_seconds_total" in text or "python_info" in text
    assert "asr_request_total" in text


class FakeCuda:
    """A ``CudaApi`` with one device; NVML can be missing."""

    def __init__(self, *, initialized: bool = True, nvml: bool = True) -> None:
        self._initialized = initialized
        self._nvml = nvml

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self._initialized

    def device_count(self) -> int:
        return 1

    def mem_get_info(self, device: int, /) -> tuple[int, int]:
        return (6 * 2**30, 10 * 2**30)

    def memory_reserved(self, device: int, /) -> int:
        return 2**30

    def utilization(self, device: int, /) -> int:
        if not self._nvml:
            raise ModuleNotFoundError("pynvml")
        return 37


def test_gpu_sampler_reads_memory_and_utilization() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    (sample,) = metrics.sample_gpu(FakeCuda())
    assert sample == GpuSample("0", 4 * 2**30, 10 * 2**30, 2**30, 0.37)
    assert _value(metrics, "streamscribe_gpu_utilization_ratio", device="0") == 0.37
    assert _value(metrics, "streamscribe_gpu_memory_used_bytes", device="0") == 4 * 2**30
    assert _value(metrics, "streamscribe_gpu_memory_total_bytes", device="0") == 10 * 2**30
    assert _value(metrics, "streamscribe_gpu_memory_reserved_bytes", device="0") == 2**30


def test_gpu_sampler_without_nvml_or_cuda_context_leaves_series_absent() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    (sample,) = metrics.sample_gpu(FakeCuda(nvml=False))
    assert sample.utilization_ratio is None
    assert _value(metrics, "streamscribe_gpu_utilization_ratio", device="0") is None
    assert read_gpu_samples(FakeCuda(initialized=False)) == ()


def test_operations_doc_holds_the_generated_metrics_table() -> None:
    doc = (REPO / "docs" / "operations.md").read_text()
    assert catalogue_markdown() in doc, "regenerate with `streamscribe metrics`"


def test_cli_prints_the_catalogue_as_markdown_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metrics"]) == 0
    assert capsys.readouterr().out == catalogue_markdown()
    assert main(["metrics", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in rows] == [spec.name for spec in CATALOGUE]
    request = rows[0]
    assert request["type"] == "counter"
    assert request["labels"] == [
        {"name": "outcome", "values": ["ok", "rejected", "duplicate"], "doc": ""}
    ]
