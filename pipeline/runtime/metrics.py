"""Every Prometheus metric of a Streamscribe worker, declared once.

``CATALOGUE`` is the machine-readable list (name, type, labels, help, buckets) from which
``WorkerMetrics`` builds its collectors, the operations docs render their table
(``catalogue_markdown``) and the deploy tests check every PromQL expression of the alert rules and
the dashboard. Names are the *exposed* ones: counters end in ``_total``, the info metric in
``_info``, histograms expose ``_bucket``/``_sum``/``_count`` series.

Label cardinality is bounded by construction: every label takes its values from a closed enum
(``ChunkOutcome``, ``DurationKind``, ``RejectReason``, …) or from a small physical set (the
partitions of ``audio.chunks``, the GPUs of a node). A label whose values are the domain's takes
the domain enum itself (``RejectReason``, the guards' ``Guard``, the hotword lists' ``Scope``),
never a copy that could drift from what the producers emit. Call ids, tenants and utterances
never become labels. The ``WorkerMetrics`` methods take the enums and reject anything else.

``asr_*`` metrics describe the recognition work; ``streamscribe_*`` metrics describe the process
and what it depends on (dependencies, model, GPU).

GPU gauges are filled by ``WorkerMetrics.sample_gpu`` from ``read_gpu_samples``, which reads
``torch.cuda`` (memory) and NVML through ``torch.cuda.utilization`` (only when ``pynvml`` is
importable); without CUDA it reads nothing and the GPU series stay absent.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    gc_collector,
    platform_collector,
    process_collector,
)

from pipeline.asr.guards import Guard
from pipeline.contracts import RejectReason
from pipeline.contracts.messages import EntityType
from pipeline.hotwords.model import Scope
from pipeline.settings import MetricsSettings

__all__ = [
    "BATCH_SIZE_BUCKETS",
    "CATALOGUE",
    "DURATION_BUCKETS_S",
    "REAL_TIME_FACTOR_BUCKETS",
    "ChunkOutcome",
    "CudaApi",
    "Dependency",
    "DurationKind",
    "EarlyFinalOutcome",
    "GpuSample",
    "LabelSpec",
    "MetricSpec",
    "MetricType",
    "RewindCause",
    "WorkerMetrics",
    "catalogue_markdown",
    "new_counter",
    "new_gauge",
    "new_histogram",
    "new_process_registry",
    "read_gpu_samples",
]


class MetricType(enum.StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    INFO = "info"


class ChunkOutcome(enum.StrEnum):
    """What became of a consumed audio chunk."""

    OK = "ok"
    """Decoded and fed to its session."""
    REJECTED = "rejected"
    """Broke the contract: sent to ``audio.dlq``."""
    DUPLICATE = "duplicate"
    """A sequence number already seen: dropped idempotently."""


class DurationKind(enum.StrEnum):
    """What an ``asr_duration_seconds`` observation measures."""

    CHUNK_TO_PARTIAL = "chunk_to_partial"
    """Capture time of the newest audio a partial covers → that partial produced."""
    ENDPOINT_TO_FINAL = "endpoint_to_final"
    """Capture time of the audio that closed the utterance → its final committed."""
    STEP = "step"
    """Wall time of one batched recognizer step (all due sessions, one forward pass)."""
    VAD = "vad"
    """Wall time of the VAD in one worker step (its batched passes over every ready frame)."""
    COMMIT = "commit"
    """Wall time of one Kafka transaction commit (finals + checkpoints + offsets)."""


class EarlyFinalOutcome(enum.StrEnum):
    """What became of the work of finals decoded ahead (``EngineConfig.early_final_ms``)."""

    DECODED = "decoded"
    """A final was decoded during its utterance's trailing silence."""
    USED = "used"
    """A final was published from such a decode (the difference was wasted: speech resumed)."""


class RewindCause(enum.StrEnum):
    """Why a worker threw away its uncommitted work and rewound to its committed offsets."""

    FAILED = "failed"
    """Kafka refused or timed out a transactional call; the transaction was aborted."""
    STUCK = "stuck"
    """A transactional call did not return within its bound (a librdkafka hang while the
    group coordinator is unreachable); the transactional producer was replaced."""
    FATAL = "fatal"
    """The transactional producer hit a fatal error other than being fenced (an invalid
    transaction state after a broker restart); it was replaced."""


class Dependency(enum.StrEnum):
    """External systems a worker needs: the ``streamscribe_dependency_up`` label and the
    ``dependency`` of ``dependency_up``/``dependency_down`` events."""

    KAFKA = "kafka"
    REDIS = "redis"


# Dense between 0.2 s and 2 s, where the 400 ms latency objective and its P99 live, so
# histogram_quantile interpolates within 50–100 ms there; the small buckets serve VAD and steps.
DURATION_BUCKETS_S: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
    0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0,
)  # fmt: skip
REAL_TIME_FACTOR_BUCKETS: tuple[float, ...] = (
    0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0,
)  # fmt: skip
BATCH_SIZE_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)


@dataclass(frozen=True, slots=True)
class LabelSpec:
    """One label of a metric and why its cardinality is bounded.

    ``values`` is the closed set of values when there is one (the collectors are pre-created with
    each, so ``rate()`` sees zeros before the first event); ``doc`` says what the value is when the
    set is physical (partitions, GPUs) or long.
    """

    name: str
    values: tuple[str, ...] = ()
    doc: str = ""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric as exposed on ``/metrics``."""

    name: str
    type: MetricType
    labels: tuple[LabelSpec, ...]
    help: str
    buckets: tuple[float, ...] = ()

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(label.name for label in self.labels)

    @property
    def series_names(self) -> tuple[str, ...]:
        """Names of the exposed series (what PromQL selects)."""
        if self.type is MetricType.HISTOGRAM:
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


def enum_values(kind: type[enum.StrEnum]) -> tuple[str, ...]:
    """The values of a label's closed set, in declaration order."""
    return tuple(member.value for member in kind)


REQUEST_TOTAL = MetricSpec(
    "asr_request_total",
    MetricType.COUNTER,
    (LabelSpec("outcome", enum_values(ChunkOutcome)),),
    "Audio chunks consumed from audio.chunks, by outcome (counted once their commit succeeds).",
)
DURATION_SECONDS = MetricSpec(
    "asr_duration_seconds",
    MetricType.HISTOGRAM,
    (LabelSpec("kind", enum_values(DurationKind)),),
    "Latencies and stage durations in seconds, by kind "
    "(chunk_to_partial and endpoint_to_final are the user-facing latencies).",
    DURATION_BUCKETS_S,
)
REAL_TIME_FACTOR = MetricSpec(
    "asr_real_time_factor",
    MetricType.HISTOGRAM,
    (),
    "Recognizer compute seconds per second of new audio, per step (above 1: falling behind).",
    REAL_TIME_FACTOR_BUCKETS,
)
BATCH_SIZE = MetricSpec(
    "asr_batch_size",
    MetricType.HISTOGRAM,
    (),
    "Sessions decoded together in one recognizer step.",
    BATCH_SIZE_BUCKETS,
)
ACTIVE_SESSIONS = MetricSpec(
    "asr_active_sessions",
    MetricType.GAUGE,
    (),
    "Open (call, channel) sessions held in memory by this worker.",
)
ASSIGNED_PARTITIONS = MetricSpec(
    "asr_assigned_partitions",
    MetricType.GAUGE,
    (),
    "Partitions of audio.chunks currently assigned to this worker.",
)
CONSUMER_LAG = MetricSpec(
    "asr_consumer_lag_records",
    MetricType.GAUGE,
    (LabelSpec("partition", doc="an assigned partition of audio.chunks"),),
    "Records between a partition's high watermark and this worker's fetch position "
    "(not the committed offset, which trails by the open utterances).",
)
PAUSED_PARTITIONS = MetricSpec(
    "asr_paused_partitions",
    MetricType.GAUGE,
    (),
    "Assigned partitions paused by backpressure.",
)
DLQ_TOTAL = MetricSpec(
    "asr_dlq_total",
    MetricType.COUNTER,
    (
        LabelSpec(
            "reason", enum_values(RejectReason), doc="a `RejectReason` (the `dlq-reason` header)"
        ),
    ),
    "Records written to audio.dlq, by reason (counted once their commit succeeds).",
)
HALLUCINATIONS_SUPPRESSED = MetricSpec(
    "asr_hallucinations_suppressed_total",
    MetricType.COUNTER,
    (LabelSpec("guard", enum_values(Guard)),),
    "Hypotheses thrown away by a hallucination guard, by guard (the decoder's repetition and "
    "words-per-second cuts shorten a hypothesis and are not counted here).",
)
HOTWORD_UPDATES = MetricSpec(
    "asr_hotword_updates_total",
    MetricType.COUNTER,
    (LabelSpec("scope", enum_values(Scope)),),
    "Hotword list updates applied (from Redis pub/sub or a reload), by scope.",
)
PARTIALS_THINNED = MetricSpec(
    "asr_partials_thinned_total",
    MetricType.COUNTER,
    (),
    "Partials skipped under load (finals go first; a due partial counts once however long it "
    "waits) or dropped on a full producer queue.",
)
EARLY_FINALS = MetricSpec(
    "asr_early_finals_total",
    MetricType.COUNTER,
    (LabelSpec("outcome", enum_values(EarlyFinalOutcome)),),
    "Finals decoded ahead in their utterance's trailing silence, and those of them published "
    "(decoded minus used: work wasted because speech resumed).",
)
LOOPS_TRIMMED = MetricSpec(
    "asr_loops_trimmed_total",
    MetricType.COUNTER,
    (),
    "Finals whose decoding loop (a tail repeating the words before it, aligned at almost no "
    "time) was cut off; published as the text before the loop.",
)
TRANSACTION_REWINDS = MetricSpec(
    "asr_transaction_rewinds_total",
    MetricType.COUNTER,
    (LabelSpec("cause", enum_values(RewindCause)),),
    "Commits that failed and rewound the worker to its committed offsets (the work is "
    "replayed, finals stay exactly once), by cause.",
)
RESTORE_DISAGREEMENTS = MetricSpec(
    "asr_restore_disagreements_total",
    MetricType.COUNTER,
    (),
    "Partitions restored although their checkpoints and committed offsets still came from "
    "different transactions after every re-read (an offset reset, or expired group offsets).",
)
VAD_CHANGES = MetricSpec(
    "asr_vad_changes_total",
    MetricType.COUNTER,
    (),
    "Sessions resumed from checkpoints that another VAD (device, weights or version) wrote: "
    "their replay may segment the audio a little differently.",
)
REDACTIONS = MetricSpec(
    "asr_redactions_total",
    MetricType.COUNTER,
    (LabelSpec("entity", enum_values(EntityType)),),
    "Values redacted from published finals under the tenants' redaction policies, by entity "
    "type (docs/redaction.md; the value is never a label).",
)
REDACTION_HELD_FINALS = MetricSpec(
    "asr_redaction_held_finals_total",
    MetricType.COUNTER,
    (),
    "Finals held for an unfinished number until the channel's next final or the hold bound "
    "(STREAMSCRIBE_REDACTION_HOLD_MS, audio time).",
)
REDACTION_HOLD_SECONDS = MetricSpec(
    "asr_redaction_hold_seconds",
    MetricType.HISTOGRAM,
    (),
    "Wall time a held final waited before it was published.",
    DURATION_BUCKETS_S,
)
LATENCY_OBJECTIVE = MetricSpec(
    "asr_latency_objective_seconds",
    MetricType.GAUGE,
    (),
    "The P99 latency objective of chunk_to_partial and endpoint_to_final that the latency "
    "alerts compare with (STREAMSCRIBE_LATENCY_OBJECTIVE_MS).",
)
DEPENDENCY_UP = MetricSpec(
    "streamscribe_dependency_up",
    MetricType.GAUGE,
    (LabelSpec("dependency", enum_values(Dependency)),),
    "1 when the dependency answered last (Kafka: the readiness probe or the last commit; Redis: "
    "the hotword registry's connection), else 0.",
)
MODEL_INFO = MetricSpec(
    "streamscribe_model_info",
    MetricType.INFO,
    (
        LabelSpec("model_id", doc="the loaded model (one per process)"),
        LabelSpec(
            "device", doc="`cpu`, `cuda` or `cuda:N` (`STREAMSCRIBE_DEVICE`, `auto` resolved)"
        ),
        LabelSpec("dtype", doc="`float32`, `float16` or `int8` (weights)"),
    ),
    "The recognizer model this process serves (value always 1).",
)
GPU_UTILIZATION = MetricSpec(
    "streamscribe_gpu_utilization_ratio",
    MetricType.GAUGE,
    (LabelSpec("device", doc="CUDA device index as this process sees it"),),
    "GPU busy ratio 0–1 over NVML's last sample period (only with CUDA and pynvml).",
)
GPU_MEMORY_USED = MetricSpec(
    "streamscribe_gpu_memory_used_bytes",
    MetricType.GAUGE,
    (LabelSpec("device", doc="CUDA device index as this process sees it"),),
    "Device memory in use by every process on the GPU (or MIG slice).",
)
GPU_MEMORY_TOTAL = MetricSpec(
    "streamscribe_gpu_memory_total_bytes",
    MetricType.GAUGE,
    (LabelSpec("device", doc="CUDA device index as this process sees it"),),
    "Device memory of the GPU (or MIG slice).",
)
GPU_MEMORY_RESERVED = MetricSpec(
    "streamscribe_gpu_memory_reserved_bytes",
    MetricType.GAUGE,
    (LabelSpec("device", doc="CUDA device index as this process sees it"),),
    "Device memory held by this process's torch caching allocator.",
)

CATALOGUE: tuple[MetricSpec, ...] = (
    REQUEST_TOTAL,
    DURATION_SECONDS,
    REAL_TIME_FACTOR,
    BATCH_SIZE,
    ACTIVE_SESSIONS,
    ASSIGNED_PARTITIONS,
    CONSUMER_LAG,
    PAUSED_PARTITIONS,
    DLQ_TOTAL,
    HALLUCINATIONS_SUPPRESSED,
    HOTWORD_UPDATES,
    PARTIALS_THINNED,
    LOOPS_TRIMMED,
    EARLY_FINALS,
    TRANSACTION_REWINDS,
    RESTORE_DISAGREEMENTS,
    VAD_CHANGES,
    REDACTIONS,
    REDACTION_HELD_FINALS,
    REDACTION_HOLD_SECONDS,
    LATENCY_OBJECTIVE,
    DEPENDENCY_UP,
    MODEL_INFO,
    GPU_UTILIZATION,
    GPU_MEMORY_USED,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_RESERVED,
)


def catalogue_markdown(catalogue: Iterable[MetricSpec] = CATALOGUE) -> str:
    """The catalogue as a Markdown table (docs/operations.md holds exactly this text)."""
    lines = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for spec in catalogue:
        labels = "; ".join(_label_markdown(label) for label in spec.labels) or "—"
        lines.append(f"| `{spec.name}` | {spec.type} | {labels} | {spec.help} |")
    return "\n".join(lines) + "\n"


def _label_markdown(label: LabelSpec) -> str:
    described = label.doc or ", ".join(f"`{value}`" for value in label.values)
    return f"`{label.name}`: {described}"


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of one CUDA device. ``utilization_ratio`` is None without NVML."""

    device: str
    memory_used_bytes: int
    memory_total_bytes: int
    memory_reserved_bytes: int
    utilization_ratio: float | None


class CudaApi(Protocol):
    """The part of ``torch.cuda`` the sampler reads (the module itself satisfies it)."""

    def is_available(self) -> bool: ...

    def is_initialized(self) -> bool: ...

    def device_count(self) -> int: ...

    def mem_get_info(self, device: int, /) -> tuple[int, int]: ...

    def memory_reserved(self, device: int, /) -> int: ...

    def utilization(self, device: int, /) -> int: ...


def read_gpu_samples(cuda: CudaApi | None = None) -> tuple[GpuSample, ...]:
    """Read memory and utilization of every CUDA device torch has already initialised.

    Reads nothing (returns ``()``) when CUDA is unavailable or not yet initialised in this process,
    so that sampling never creates a CUDA context of its own. ``cuda`` defaults to ``torch.cuda``.
    """
    if cuda is None:
        import torch.cuda

        cuda = torch.cuda
    if not cuda.is_available() or not cuda.is_initialized():
        return ()
    samples = []
    for index in range(cuda.device_count()):
        free_bytes, total_bytes = cuda.mem_get_info(index)
        samples.append(
            GpuSample(
                device=str(index),
                memory_used_bytes=total_bytes - free_bytes,
                memory_total_bytes=total_bytes,
                memory_reserved_bytes=cuda.memory_reserved(index),
                utilization_ratio=_utilization_ratio(cuda, index),
            )
        )
    return tuple(samples)


def _utilization_ratio(cuda: CudaApi, index: int) -> float | None:
    try:
        return cuda.utilization(index) / 100.0
    # Utilization comes from NVML: pynvml may be missing (ModuleNotFoundError), and NVML raises
    # its own error tree (e.g. "not supported" on a MIG slice). A gauge must never stop a worker.
    except Exception:
        return None


class WorkerMetrics:
    """The collectors of one worker process, built from ``CATALOGUE`` on one registry.

    ``registry=None`` creates a private one (``new_process_registry``: what the worker serves);
    tests pass a fresh ``CollectorRegistry``.
    Every label value goes through its enum, so an unknown value raises ``ValueError`` instead of
    growing a new series. Thread-safe (prometheus-client collectors are).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        if registry is None:
            registry = new_process_registry()
        self.registry = registry
        self._request_total = new_counter(REQUEST_TOTAL, registry)
        # Resolved once: ``labels()`` costs more than the rest of a chunk's bookkeeping.
        self._chunks_by_outcome = {
            outcome.value: self._request_total.labels(outcome.value) for outcome in ChunkOutcome
        }
        self._duration = new_histogram(DURATION_SECONDS, registry)
        self._real_time_factor = new_histogram(REAL_TIME_FACTOR, registry)
        self._batch_size = new_histogram(BATCH_SIZE, registry)
        self._active_sessions = new_gauge(ACTIVE_SESSIONS, registry)
        self._assigned_partitions = new_gauge(ASSIGNED_PARTITIONS, registry)
        self._consumer_lag = new_gauge(CONSUMER_LAG, registry)
        self._paused_partitions = new_gauge(PAUSED_PARTITIONS, registry)
        self._dlq_total = new_counter(DLQ_TOTAL, registry)
        self._hallucinations = new_counter(HALLUCINATIONS_SUPPRESSED, registry)
        self._hotword_updates = new_counter(HOTWORD_UPDATES, registry)
        self._partials_thinned = new_counter(PARTIALS_THINNED, registry)
        self._loops_trimmed = new_counter(LOOPS_TRIMMED, registry)
        self._early_finals = new_counter(EARLY_FINALS, registry)
        self._transaction_rewinds = new_counter(TRANSACTION_REWINDS, registry)
        self._restore_disagreements = new_counter(RESTORE_DISAGREEMENTS, registry)
        self._vad_changes = new_counter(VAD_CHANGES, registry)
        self._redactions = new_counter(REDACTIONS, registry)
        self._redaction_held = new_counter(REDACTION_HELD_FINALS, registry)
        self._redaction_hold = new_histogram(REDACTION_HOLD_SECONDS, registry)
        self._latency_objective = new_gauge(LATENCY_OBJECTIVE, registry)
        # Never 0 (the alerts would fire on any latency); the worker command sets its own.
        self.set_latency_objective(MetricsSettings().latency_objective_ms / 1000)
        self._dependency_up = new_gauge(DEPENDENCY_UP, registry)
        self._model_info: Info | None = None  # registered by set_model: no empty series
        self._gpu_utilization = new_gauge(GPU_UTILIZATION, registry)
        self._gpu_memory_used = new_gauge(GPU_MEMORY_USED, registry)
        self._gpu_memory_total = new_gauge(GPU_MEMORY_TOTAL, registry)
        self._gpu_memory_reserved = new_gauge(GPU_MEMORY_RESERVED, registry)

    def count_chunk(self, outcome: ChunkOutcome | str, count: int = 1) -> None:
        """``count`` consumed chunks ended as ``outcome``."""
        child = self._chunks_by_outcome.get(outcome)
        if child is None:
            raise ValueError(f"{outcome!r} is not a ChunkOutcome")
        child.inc(count)

    def observe_duration(self, kind: DurationKind | str, seconds: float) -> None:
        self._duration.labels(DurationKind(kind).value).observe(seconds)

    def observe_step(self, batch_size: int, step_seconds: float, new_audio_seconds: float) -> None:
        """One batched recognizer step: its batch size, duration and real-time factor.

        The real-time factor is skipped when the step covered no new audio (e.g. a forced final).
        """
        self._batch_size.observe(batch_size)
        self._duration.labels(DurationKind.STEP.value).observe(step_seconds)
        if new_audio_seconds > 0:
            self._real_time_factor.observe(step_seconds / new_audio_seconds)

    def set_active_sessions(self, count: int) -> None:
        self._active_sessions.set(count)

    def set_assignment(self, partitions: Iterable[int]) -> None:
        """The partitions now owned; lag series of partitions no longer owned are removed.

        Removing them keeps a revoked partition from being reported by two workers at once.
        """
        owned = {str(partition) for partition in partitions}
        self._assigned_partitions.set(len(owned))
        for (partition,) in _label_sets(self._consumer_lag, CONSUMER_LAG.label_names):
            if partition not in owned:
                self._consumer_lag.remove(partition)

    def set_partition_lag(self, partition: int, lag_records: int) -> None:
        self._consumer_lag.labels(str(partition)).set(max(lag_records, 0))

    def set_paused_partitions(self, count: int) -> None:
        self._paused_partitions.set(count)

    def count_dead_letter(self, reason: RejectReason | str, count: int = 1) -> None:
        self._dlq_total.labels(RejectReason(reason).value).inc(count)

    def count_suppressed_hallucination(self, guard: Guard | str) -> None:
        self._hallucinations.labels(Guard(guard).value).inc()

    def count_hotword_update(self, scope: Scope | str) -> None:
        self._hotword_updates.labels(Scope(scope).value).inc()

    def count_thinned_partials(self, count: int = 1) -> None:
        self._partials_thinned.inc(count)

    def count_loops_trimmed(self, count: int = 1) -> None:
        self._loops_trimmed.inc(count)

    def count_early_finals(self, outcome: EarlyFinalOutcome | str, count: int = 1) -> None:
        self._early_finals.labels(EarlyFinalOutcome(outcome).value).inc(count)

    def count_transaction_rewind(self, cause: RewindCause | str) -> None:
        self._transaction_rewinds.labels(RewindCause(cause).value).inc()

    def count_restore_disagreements(self, partitions: int) -> None:
        self._restore_disagreements.inc(partitions)

    def count_vad_changes(self, sessions: int) -> None:
        self._vad_changes.inc(sessions)

    def count_redactions(self, entities: Iterable[EntityType | str]) -> None:
        """One redaction per entry (a published final's ``redactions``, by entity type)."""
        for entity in entities:
            self._redactions.labels(EntityType(entity).value).inc()

    def count_held_final(self) -> None:
        self._redaction_held.inc()

    def observe_hold(self, seconds: float) -> None:
        """Wall time a held final waited before it was published."""
        self._redaction_hold.observe(seconds)

    def set_latency_objective(self, seconds: float) -> None:
        """The P99 objective the latency alerts compare with (``LATENCY_OBJECTIVE``)."""
        self._latency_objective.set(seconds)

    def set_dependency_up(self, dependency: Dependency | str, up: bool) -> None:
        self._dependency_up.labels(Dependency(dependency).value).set(1 if up else 0)

    def set_model(self, model_id: str, device: str, dtype: str) -> None:
        """The model now served; replaces the previous one (one series per process)."""
        if self._model_info is None:
            # Registered only now: before a model is loaded it would export a series without
            # labels, an empty row in the "Models served" table.
            self._model_info = Info(
                MODEL_INFO.name.removesuffix("_info"), MODEL_INFO.help, registry=self.registry
            )
        self._model_info.info({"model_id": model_id, "device": device, "dtype": dtype})

    def record_gpu(self, samples: Iterable[GpuSample]) -> None:
        for sample in samples:
            self._gpu_memory_used.labels(sample.device).set(sample.memory_used_bytes)
            self._gpu_memory_total.labels(sample.device).set(sample.memory_total_bytes)
            self._gpu_memory_reserved.labels(sample.device).set(sample.memory_reserved_bytes)
            if sample.utilization_ratio is not None:
                self._gpu_utilization.labels(sample.device).set(sample.utilization_ratio)

    def sample_gpu(self, cuda: CudaApi | None = None) -> tuple[GpuSample, ...]:
        """Read the GPUs (``read_gpu_samples``) and record what was read; returns the samples."""
        samples = read_gpu_samples(cuda)
        self.record_gpu(samples)
        return samples


def new_process_registry() -> CollectorRegistry:
    """A private registry carrying the standard process, platform and GC collectors (what a
    process serves on ``/metrics``; the global default registry is never used)."""
    registry = CollectorRegistry()
    process_collector.ProcessCollector(registry=registry)
    platform_collector.PlatformCollector(registry=registry)
    gc_collector.GCCollector(registry=registry)
    return registry


def new_counter(spec: MetricSpec, registry: CollectorRegistry) -> Counter:
    """The counter ``spec`` declares, on ``registry``, its closed label set pre-created."""
    counter = Counter(spec.name, spec.help, spec.label_names, registry=registry)
    _precreate(counter, spec)
    return counter


def new_gauge(spec: MetricSpec, registry: CollectorRegistry) -> Gauge:
    """The gauge ``spec`` declares, on ``registry`` (no series until set: see ``_precreate``)."""
    gauge = Gauge(spec.name, spec.help, spec.label_names, registry=registry)
    _precreate(gauge, spec)
    return gauge


def new_histogram(spec: MetricSpec, registry: CollectorRegistry) -> Histogram:
    """The histogram ``spec`` declares, on ``registry``, its closed label set pre-created."""
    histogram = Histogram(
        spec.name, spec.help, spec.label_names, registry=registry, buckets=spec.buckets
    )
    _precreate(histogram, spec)
    return histogram


def _precreate(metric: Counter | Gauge | Histogram, spec: MetricSpec) -> None:
    """Create the series of a single closed-set label, so dashboards see zeros from the start.

    Gauges of dependencies are left absent until probed: a 0 there would claim "down".
    """
    if len(spec.labels) != 1 or not spec.labels[0].values or isinstance(metric, Gauge):
        return
    for value in spec.labels[0].values:
        metric.labels(value)


def _label_sets(gauge: Gauge, names: tuple[str, ...]) -> list[tuple[str, ...]]:
    # prometheus-client keeps no public list of a metric's children; collect() yields the samples.
    return sorted(
        {
            tuple(sample.labels[name] for name in names)
            for family in gauge.collect()
            for sample in family.samples
        }
    )
