"""Prometheus metrics of the ingress gateway, on a registry of their own (one per gateway)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["IngressMetrics"]

_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_JITTER_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2)


class IngressMetrics:
    """Every series the gateway exports (docs/ingress.md lists them)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.calls_open = Gauge("ingress_calls_open", "calls open now", ["transport"], registry=r)
        self.calls = Counter("ingress_calls", "calls opened", ["transport"], registry=r)
        self.packets = Counter("ingress_rtp_packets", "RTP datagrams received", registry=r)
        self.packets_late = Counter(
            "ingress_rtp_packets_late", "RTP packets after their place was released", registry=r
        )
        self.packets_lost = Counter(
            "ingress_rtp_packets_lost", "RTP packets given up as missing", registry=r
        )
        self.packets_duplicate = Counter(
            "ingress_rtp_packets_duplicate", "RTP packets received twice", registry=r
        )
        self.discontinuities = Counter(
            "ingress_rtp_discontinuities",
            "SSRC changes and sequence or timestamp jumps continued on the same channel",
            registry=r,
        )
        self.jitter = Histogram(
            "ingress_rtp_jitter_seconds",
            "interarrival jitter estimate (RFC 3550) per packet",
            buckets=_JITTER_BUCKETS_S,
            registry=r,
        )
        self.gap_filled = Counter(
            "ingress_gap_filled_seconds",
            "silence inserted for lost packets, silence suppression, late legs and resets",
            ["transport"],
            registry=r,
        )
        self.dtmf_events = Counter(
            "ingress_dtmf_events",
            "telephone events kept out of the audio",
            ["transport"],
            registry=r,
        )
        self.ws_messages = Counter(
            "ingress_ws_messages", "WebSocket frames received", ["protocol"], registry=r
        )
        self.rejected = Counter(
            "ingress_rejected", "inputs refused, by reason", ["reason"], registry=r
        )
        self.records = Counter("ingress_records", "audio.chunks records sent", registry=r)
        self.publish_failures = Counter(
            "ingress_publish_failures", "records whose delivery failed", registry=r
        )
        self.publish_latency = Histogram(
            "ingress_publish_latency_seconds",
            "record sent → acknowledged by the broker",
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
