"""Prometheus metrics of the QA app, declared once (same catalogue shape as the worker's).

Labels take their values from closed enums (``RecordKind``, ``RecordRejectReason``,
``EndReason``, ``Publication``); call ids never become labels. The collectors are built by the
worker's helpers (``pipeline.runtime.metrics``), so both processes expose their catalogues alike.
"""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry

from pipeline.contracts.reading import RecordRejectReason
from pipeline.qa.summary import EndReason
from pipeline.runtime.metrics import (
    LabelSpec,
    MetricSpec,
    MetricType,
    catalogue_markdown,
    enum_values,
    new_counter,
    new_gauge,
    new_process_registry,
)

__all__ = ["QA_CATALOGUE", "Publication", "QaMetrics", "RecordKind", "qa_catalogue_markdown"]


class RecordKind(enum.StrEnum):
    """Which input topic an accepted record came from (``qa_records_total``)."""

    FINAL = "final"
    EVENT = "event"


class Publication(enum.StrEnum):
    FIRST = "first"
    """Revision 1: the call just ended."""
    REVISION = "revision"
    """Revision 2 or later: late input changed a published summary."""


RECORDS = MetricSpec(
    "qa_records_total",
    MetricType.COUNTER,
    (LabelSpec("kind", enum_values(RecordKind)),),
    "Input records accepted from asr.finals / asr.events (events of unused types excluded).",
)
REJECTED = MetricSpec(
    "qa_records_rejected_total",
    MetricType.COUNTER,
    (LabelSpec("reason", enum_values(RecordRejectReason)),),
    "Malformed or unknown-schema input records skipped (each also reported on asr.events).",
)
DUPLICATES = MetricSpec(
    "qa_duplicate_finals_total",
    MetricType.COUNTER,
    (),
    "Finals whose utterance id was already recorded (counted once in summaries).",
)
CALLS_ENDED = MetricSpec(
    "qa_calls_ended_total",
    MetricType.COUNTER,
    (LabelSpec("reason", enum_values(EndReason)),),
    "Calls that ended, by how the end was detected.",
)
SUMMARIES = MetricSpec(
    "qa_summaries_published_total",
    MetricType.COUNTER,
    (LabelSpec("publication", enum_values(Publication)),),
    "Summaries published to qa.calls: first publication or a later revision.",
)
PUBLISH_FAILURES = MetricSpec(
    "qa_publish_failures_total",
    MetricType.COUNTER,
    (),
    "Summaries whose delivery to qa.calls failed; the input record is processed again after a "
    "backoff, never skipped.",
)
OPEN_CALLS = MetricSpec(
    "qa_open_calls",
    MetricType.GAUGE,
    (),
    "Calls in this process's tables that have not ended.",
)
TRACKED_CALLS = MetricSpec(
    "qa_tracked_calls",
    MetricType.GAUGE,
    (),
    "Calls held in this process's tables (open, and ended within the retention).",
)

QA_CATALOGUE: tuple[MetricSpec, ...] = (
    RECORDS,
    REJECTED,
    DUPLICATES,
    CALLS_ENDED,
    SUMMARIES,
    PUBLISH_FAILURES,
    OPEN_CALLS,
    TRACKED_CALLS,
)


def qa_catalogue_markdown() -> str:
    """The QA metrics as a Markdown table (docs/qa.md)."""
    return catalogue_markdown(QA_CATALOGUE)


class QaMetrics:
    """The collectors of one QA app process on one registry (private unless one is given)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        if registry is None:
            registry = new_process_registry()
        self.registry = registry
        self._records = new_counter(RECORDS, registry)
        self._rejected = new_counter(REJECTED, registry)
        self._duplicates = new_counter(DUPLICATES, registry)
        self._ended = new_counter(CALLS_ENDED, registry)
        self._summaries = new_counter(SUMMARIES, registry)
        self._publish_failures = new_counter(PUBLISH_FAILURES, registry)
        self._open_calls = new_gauge(OPEN_CALLS, registry)
        self._tracked_calls = new_gauge(TRACKED_CALLS, registry)

    def count_record(self, kind: RecordKind) -> None:
        self._records.labels(RecordKind(kind).value).inc()

    def count_rejected(self, reason: RecordRejectReason) -> None:
        self._rejected.labels(RecordRejectReason(reason).value).inc()

    def count_duplicate(self) -> None:
        self._duplicates.inc()

    def count_ended(self, reason: EndReason) -> None:
        self._ended.labels(EndReason(reason).value).inc()

    def count_published(self, revision: int) -> None:
        kind = Publication.FIRST if revision == 1 else Publication.REVISION
        self._summaries.labels(kind.value).inc()

    def count_publish_failure(self) -> None:
        self._publish_failures.inc()

    def set_calls(self, open_calls: int, tracked_calls: int) -> None:
        self._open_calls.set(open_calls)
        self._tracked_calls.set(tracked_calls)
