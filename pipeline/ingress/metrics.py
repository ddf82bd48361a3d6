"""Prometheus metrics of the ingress gateway, declared once (same catalogue shape as the
worker's and the QA app's), on a registry of their own (one per gateway).

``INGRESS_CATALOGUE`` is what docs/ingress.md lists and what the alert rules and the dashboard
are checked against. Labels take their values from closed sets (``RejectReason``, the three
transports, the two WebSocket protocols); call ids never become labels.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from pipeline.ingress.rtp import RejectReason
from pipeline.runtime.metrics import (
    LabelSpec,
    MetricSpec,
    MetricType,
    enum_values,
    new_counter,
    new_gauge,
    new_histogram,
)

__all__ = ["INGRESS_CATALOGUE", "IngressMetrics"]

# Dense up to 100 ms, where the 50 ms arrival → acked target and its P95 live.
_LATENCY_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
_JITTER_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2)
_TRANSPORT = LabelSpec("transport", ("rtp", "sip", "siprec", "twilio", "fork"))
_PROTOCOL = LabelSpec("protocol", ("twilio", "fork"))

CALLS_OPEN = MetricSpec(
    "ingress_calls_open", MetricType.GAUGE, (_TRANSPORT,), "Calls open now, by transport."
)
CALLS = MetricSpec("ingress_calls_total", MetricType.COUNTER, (_TRANSPORT,), "Calls opened.")
PACKETS = MetricSpec("ingress_rtp_packets_total", MetricType.COUNTER, (), "RTP datagrams received.")
PACKETS_LATE = MetricSpec(
    "ingress_rtp_packets_late_total",
    MetricType.COUNTER,
    (),
    "RTP packets that arrived after their place was released (dropped).",
)
PACKETS_LOST = MetricSpec(
    "ingress_rtp_packets_lost_total",
    MetricType.COUNTER,
    (),
    "RTP packets given up as missing (their span filled with silence).",
)
PACKETS_DUPLICATE = MetricSpec(
    "ingress_rtp_packets_duplicate_total", MetricType.COUNTER, (), "RTP packets received twice."
)
DISCONTINUITIES = MetricSpec(
    "ingress_rtp_discontinuities_total",
    MetricType.COUNTER,
    (),
    "SSRC changes and sequence or timestamp jumps continued on the same channel.",
)
JITTER = MetricSpec(
    "ingress_rtp_jitter_seconds",
    MetricType.HISTOGRAM,
    (),
    "Interarrival jitter estimate (RFC 3550) per packet.",
    _JITTER_BUCKETS_S,
)
GAP_FILLED = MetricSpec(
    "ingress_gap_filled_seconds_total",
    MetricType.COUNTER,
    (_TRANSPORT,),
    "Silence inserted for lost packets, silence suppression, late legs and resets.",
)
DTMF_EVENTS = MetricSpec(
    "ingress_dtmf_events_total",
    MetricType.COUNTER,
    (_TRANSPORT,),
    "Telephone events (key presses) kept out of the audio.",
)
WS_MESSAGES = MetricSpec(
    "ingress_ws_messages_total", MetricType.COUNTER, (_PROTOCOL,), "WebSocket frames received."
)
REJECTED = MetricSpec(
    "ingress_rejected_total",
    MetricType.COUNTER,
    (LabelSpec("reason", enum_values(RejectReason)),),
    "Inputs refused, by reason (docs/ingress.md, Bad input).",
)
RECORDS = MetricSpec("ingress_records_total", MetricType.COUNTER, (), "audio.chunks records sent.")
PUBLISH_FAILURES = MetricSpec(
    "ingress_publish_failures_total",
    MetricType.COUNTER,
    (),
    "Records whose delivery to audio.chunks failed.",
)
PUBLISH_LATENCY = MetricSpec(
    "ingress_publish_latency_seconds",
    MetricType.HISTOGRAM,
    (),
    "Record sent → acknowledged by the broker.",
    _LATENCY_BUCKETS_S,
)
ARRIVAL_TO_ACK = MetricSpec(
    "ingress_arrival_to_ack_seconds",
    MetricType.HISTOGRAM,
    (),
    "Arrival of the media that completed a record (as the event loop read it) → that record "
    "acknowledged by the broker.",
    _LATENCY_BUCKETS_S,
)

INGRESS_CATALOGUE: tuple[MetricSpec, ...] = (
    CALLS_OPEN,
    CALLS,
    PACKETS,
    PACKETS_LATE,
    PACKETS_LOST,
    PACKETS_DUPLICATE,
    DISCONTINUITIES,
    JITTER,
    GAP_FILLED,
    DTMF_EVENTS,
    WS_MESSAGES,
    REJECTED,
    RECORDS,
    PUBLISH_FAILURES,
    PUBLISH_LATENCY,
    ARRIVAL_TO_ACK,
)


class IngressMetrics:
    """Every series the gateway exports, built from ``INGRESS_CATALOGUE``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.calls_open = new_gauge(CALLS_OPEN, r)
        self.calls = new_counter(CALLS, r)
        self.packets = new_counter(PACKETS, r)
        self.packets_late = new_counter(PACKETS_LATE, r)
        self.packets_lost = new_counter(PACKETS_LOST, r)
        self.packets_duplicate = new_counter(PACKETS_DUPLICATE, r)
        self.discontinuities = new_counter(DISCONTINUITIES, r)
        self.jitter = new_histogram(JITTER, r)
        self.gap_filled = new_counter(GAP_FILLED, r)
        self.dtmf_events = new_counter(DTMF_EVENTS, r)
        self.ws_messages = new_counter(WS_MESSAGES, r)
        self.rejected = new_counter(REJECTED, r)
        self.records = new_counter(RECORDS, r)
        self.publish_failures = new_counter(PUBLISH_FAILURES, r)
        self.publish_latency = new_histogram(PUBLISH_LATENCY, r)
        self.arrival_to_ack = new_histogram(ARRIVAL_TO_ACK, r)
