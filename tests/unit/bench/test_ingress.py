"""bench/ingress.py's pure parts: the RTP packets and the send plan it makes, what it reads
from /proc/net/udp and /metrics, the bucket quantiles and the verdict over the steps."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from bench.ingress import (
    CLEAN,
    IMPAIRED,
    PACKET_MS,
    Impairment,
    bucket_deltas,
    bucket_quantile,
    dropped_by_gateway,
    highest_passing,
    parse_udp_table,
    rtp_packet,
    samples_of,
    send_plan,
)
from pipeline.ingress.rtp import RtpPacket, parse_rtp


def test_rtp_packets_parse_as_the_gateway_reads_them() -> None:
    packet = rtp_packet(70_000, 2**32 + 5, 0x1234, b"\xff" * 160)
    parsed = parse_rtp(packet)
    assert isinstance(parsed, RtpPacket)
    assert parsed.sequence_number == 70_000 & 0xFFFF
    assert parsed.timestamp == 5
    assert parsed.ssrc == 0x1234
    assert parsed.payload_type == 0
    assert not parsed.marker
    assert parsed.payload == b"\xff" * 160


def test_a_clean_plan_sends_every_packet_every_20_ms_at_each_stream_s_own_phase() -> None:
    plan = send_plan(3, 50, CLEAN, random.Random(1))
    assert len(plan) == 150
    assert [at for at, _, _ in plan] == sorted(at for at, _, _ in plan)
    for stream in range(3):
        times = [at for at, s, _ in plan if s == stream]
        assert times[0] < PACKET_MS / 1000
        gaps = {round(b - a, 9) for a, b in itertools.pairwise(times)}
        assert gaps == {PACKET_MS / 1000}
    phases = {round(at, 9) for at, _, index in plan if index == 0}
    assert len(phases) == 3, "the streams do not send in one burst"


def test_an_impaired_plan_drops_about_its_loss_and_delays_within_its_jitter() -> None:
    plan = send_plan(20, 500, IMPAIRED, random.Random(2))
    sent = len(plan)
    assert 0.02 < 1 - sent / 10_000 < 0.04
    for stream in range(20):
        # What is left of a send time once its place in the stream is taken off: the stream's
        # phase (under one packet time) plus that packet's delay (0..jitter).
        offsets = [at - index * PACKET_MS / 1000 for at, s, index in plan if s == stream]
        assert min(offsets) >= 0
        assert max(offsets) < (PACKET_MS + IMPAIRED.jitter_ms) / 1000
        assert max(offsets) - min(offsets) <= IMPAIRED.jitter_ms / 1000
        assert max(offsets) - min(offsets) > IMPAIRED.jitter_ms / 1000 * 0.9  # uniform: spread
    assert Impairment().label == "clean"
    assert IMPAIRED.label == "3% loss, 30 ms jitter"


def test_the_udp_table_gives_the_largest_queue_and_the_drops_of_the_ports_in_range() -> None:
    table = (
        "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode ref pointer drops\n"
        "  1: 0100007F:A410 00000000:0000 07 00000000:00000340 00:00000000 00000000  1000 "
        "0 1 2 ffff 3\n"
        "  2: 0100007F:A411 00000000:0000 07 00000000:00000010 00:00000000 00000000  1000 "
        "0 1 2 ffff 4\n"
        "  3: 0100007F:0035 00000000:0000 07 00000000:00009999 00:00000000 00000000  1000 "
        "0 1 2 ffff 99\n"
    )
    assert parse_udp_table(table, range(42000, 42010)) == {"rx_queue_bytes": 0x340, "drops": 7}
    assert parse_udp_table(table, range(1, 2)) == {"rx_queue_bytes": 0, "drops": 0}


EXPOSITION = """# HELP h x
# TYPE h histogram
h_bucket{{le="0.01"}} {a}
h_bucket{{le="0.05"}} {b}
h_bucket{{le="+Inf"}} {c}
h_count {c}
h_sum 1.0
"""


def test_bucket_deltas_and_quantiles_interpolate_like_prometheus() -> None:
    before = samples_of(EXPOSITION.format(a=10, b=10, c=10))
    after = samples_of(EXPOSITION.format(a=60, b=110, c=110))
    points = bucket_deltas(before, after, "h")
    assert points == [(0.01, 50.0), (0.05, 100.0), (float("inf"), 100.0)]
    assert bucket_quantile(points, 0.5) == pytest.approx(0.01)
    assert bucket_quantile(points, 0.95) == pytest.approx(0.01 + 0.04 * 45 / 50)
    assert bucket_quantile([(0.01, 0.0), (float("inf"), 0.0)], 0.95) is None
    assert bucket_quantile([(0.01, 1.0), (float("inf"), 10.0)], 0.95) == 0.01  # in +Inf


def _step(
    calls: int, p95_s: float | None, dropped: float, impairment: str = "clean"
) -> dict[str, Any]:
    return {
        "calls": calls,
        "impairment": impairment,
        "arrival_to_ack_s": {"p95": p95_s},
        "dropped_by_gateway": dropped,
    }


def test_the_capacity_is_the_last_step_of_a_passing_run_from_the_smallest() -> None:
    steps = [
        _step(50, 0.01, 0),
        _step(100, 0.02, 0),
        _step(200, 0.06, 0),  # too slow
        _step(500, 0.03, 0),  # not counted: a smaller step failed
        _step(50, 0.01, 3, IMPAIRED.label),  # dropped packets
    ]
    assert highest_passing(steps, "clean") == 100
    assert highest_passing(steps, IMPAIRED.label) is None
    assert highest_passing([_step(50, None, 0)], "clean") is None


def test_dropped_by_the_gateway_is_what_it_never_read_plus_what_it_threw_away_late() -> None:
    assert dropped_by_gateway(sent=1000, received=1000, kernel_drops=0, late=0) == 0
    assert dropped_by_gateway(sent=1000, received=990, kernel_drops=10, late=2) == 12
    # Packets still queued when a call ended were never read: the counter of the sockets
    # (gone with them) may say less than the difference.
    assert dropped_by_gateway(sent=1000, received=980, kernel_drops=5, late=0) == 20
