"""Ingress capacity: concurrent real-time G.711 calls one gateway process carries on one core.

    .venv/bin/python -m bench.ingress [--quick] [--calls 50 100 200 500] [--duration-s 20]

For each step of N calls, a fresh ``streamscribe ingress`` process is started pinned to core 0
(``taskset -c 0`` when available; the results say whether it was), against the local Kafka with
this run's own topics. N two-party calls are allocated over the control API (PCMU, 8 kHz, one
RTP port per party). This process, pinned to the other core, is the phone system: one asyncio
loop sends every stream's 20 ms packets (160 bytes of μ-law, a 440 Hz tone) in real time from
one UDP socket, each stream at its own random phase within the 20 ms, for ``--duration-s``
seconds. Each step runs twice: clean, and impaired (3 % of packets dropped at random before
sending, and every packet delayed by a uniform random 0–30 ms, which reorders neighbours).

Measured over the window after a 2 s warm-up, from the gateway's own ``/metrics`` scraped at
its start and end (the bucket counts' differences):

- **P95 arrival → acked**: ``ingress_arrival_to_ack_seconds``, from the gateway's event loop
  reading the datagram that completed a 100 ms record to the broker's acknowledgement of that
  record (``acks=all``, the producer's settings). It starts when the loop reads the datagram,
  not when the kernel received it: time a datagram waits in the socket's receive queue is not
  in it. That wait shows as **queued** (the largest receive queue of the gateway's sockets in
  ``/proc/net/udp``, sampled every 0.5 s) and, when the queue overflows, as **kernel drops**.
- **Dropped by the gateway**: datagrams sent that the gateway never counted (kernel drops,
  read from ``/proc/net/udp`` too) plus those it counted and threw away as late
  (``ingress_rtp_packets_late_total``). Packets the impairment dropped are not sent, so they are
  not the gateway's: they show as lost (filled with silence) in ``ingress_rtp_packets_lost``.
- **CPU per call**: the gateway process's CPU seconds over the window (psutil, user + system,
  all threads: the event loop and librdkafka's) per wall second and call.
- **Sender lateness**: P95 of how late this process sent a packet against its schedule; when
  it is large, the step measured the sender, not the gateway.

A record released by the reorder buffer's timer (a lost packet waited for, at most
``reorder_wait_ms`` = 60 ms) is timed from the last datagram read before that release, so that
wait is not in the figure: it is a chosen delay, the same for any load.

Reading the committed results (bench/results/ingress.md; 2 cores shared with a fault-injection
benchmark running its own broker and three workers, load average 4–10): the 500-call target is
**not met**. 50 calls meet it clean (P95 arrival → acked 30 ms, nothing dropped) and nearly with
3 % loss and 30 ms jitter (P95 36 ms, 9 packets of 97 k dropped as late). From 100 calls on, the
gateway got 0.2–0.6 of its pinned core and the sender ran seconds behind its schedule, so the
sockets' receive queues (about 200 KiB each, the kernel default) overflowed: those rows measure
the machine's contention, not a bound on the gateway. What does bound it: 8.4 ms of CPU per
call-second at 50 calls (about 84 µs per packet, event loop and librdkafka together), so a whole
core would carry about 120 calls, a quarter of the target; send → acked is nearly all of
arrival → acked at every step (the broker's acknowledgement, not the gateway's queueing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.common import (
    REPO,
    SHARED_MACHINE_NOTE,
    Target,
    bench_parser,
    fmt,
    markdown_table,
    new_figure,
    percentiles,
    write_results,
)
from bench.infra import declared_topics, free_port, new_prefix

NAME = "ingress"
TOKEN = "bench-ingress-token"
PACKET_MS = 20
SAMPLES_PER_PACKET = 160  # 20 ms at 8 kHz, one μ-law byte each
WARMUP_S = 2.0
PORT_MIN = 42000
LATENCY_TARGET_S = 0.050
TARGET_CALLS = 500


@dataclass(frozen=True, slots=True)
class Impairment:
    """What the network does to each packet before the gateway sees it."""

    loss_ratio: float = 0.0
    jitter_ms: float = 0.0
    """Each packet is delayed by a uniform random 0..jitter_ms (peak to peak)."""

    @property
    def label(self) -> str:
        if not self.loss_ratio and not self.jitter_ms:
            return "clean"
        return f"{self.loss_ratio:.0%} loss, {self.jitter_ms:g} ms jitter"


CLEAN = Impairment()
IMPAIRED = Impairment(loss_ratio=0.03, jitter_ms=30.0)


def rtp_packet(seq: int, timestamp: int, ssrc: int, payload: bytes, payload_type: int = 0) -> bytes:
    """An RTP packet (RFC 3550): version 2, no padding, extension or CSRC, marker clear."""
    header = bytes([0x80, payload_type & 0x7F])
    header += (seq & 0xFFFF).to_bytes(2, "big") + (timestamp & 0xFFFFFFFF).to_bytes(4, "big")
    return header + ssrc.to_bytes(4, "big") + payload


def send_plan(
    streams: int, packets: int, impairment: Impairment, rng: random.Random
) -> list[tuple[float, int, int]]:
    """``(send_at_s, stream, packet_index)`` for every packet the network delivers, sorted by
    send time (seconds from the start): stream ``s`` sends packet ``i`` at
    ``phase_s + i × 20 ms`` plus its jitter delay; lost packets are left out. The phases are
    random within one packet time, so the streams do not send in one burst."""
    plan = []
    for stream in range(streams):
        phase_s = rng.random() * PACKET_MS / 1000
        for index in range(packets):
            if impairment.loss_ratio and rng.random() < impairment.loss_ratio:
                continue
            delay_s = rng.random() * impairment.jitter_ms / 1000 if impairment.jitter_ms else 0.0
            plan.append((phase_s + index * PACKET_MS / 1000 + delay_s, stream, index))
    plan.sort()
    return plan


def parse_udp_table(text: str, ports: range) -> dict[str, int]:
    """``{"rx_queue_bytes": max, "drops": sum}`` over the sockets of ``/proc/net/udp`` (and
    udp6) bound to a port in ``ports``."""
    rx_max = 0
    drops = 0
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 13 or ":" not in fields[1]:
            continue
        port = int(fields[1].rsplit(":", 1)[1], 16)
        if port not in ports:
            continue
        rx_max = max(rx_max, int(fields[4].split(":")[1], 16))
        drops += int(fields[-1])
    return {"rx_queue_bytes": rx_max, "drops": drops}


def samples_of(text: str) -> dict[str, float]:
    """Every sample of a Prometheus exposition, by ``name{labels}`` (labels sorted)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    """How much the unlabelled sample ``name`` grew between two scrapes."""
    key = f"{name}{{}}"
    return after.get(key, 0.0) - before.get(key, 0.0)


def bucket_deltas(
    before: dict[str, float], after: dict[str, float], histogram: str
) -> list[tuple[float, float]]:
    """``(le, cumulative count)`` of ``histogram``'s observations between two scrapes."""
    points = []
    prefix = f"{histogram}_bucket{{le="
    for key, value in after.items():
        if key.startswith(prefix):
            le = float(key[len(prefix) : -1])
            points.append((le, value - before.get(key, 0.0)))
    return sorted(points)


def bucket_quantile(points: Sequence[tuple[float, float]], q: float) -> float | None:
    """The ``q`` quantile of cumulative buckets, interpolated linearly within the bucket as
    Prometheus' ``histogram_quantile`` does; None without observations; the highest finite
    bound when it falls in the +Inf bucket."""
    if not points or points[-1][1] <= 0:
        return None
    rank = q * points[-1][1]
    lower_le, lower_count = 0.0, 0.0
    for le, count in points:
        if count >= rank:
            if math.isinf(le):
                return lower_le
            if count == lower_count:
                return le
            return lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count)
        lower_le, lower_count = le, count
    return lower_le


def dropped_by_gateway(sent: float, received: float, kernel_drops: float, late: float) -> float:
    """Datagrams the gateway lost: those sent that it never read (its sockets' receive queues
    overflowed; the kernel's drop counter says the same, whichever is larger counts) plus those
    it read and threw away as late."""
    return max(sent - received, kernel_drops, 0) + late


def highest_passing(steps: Sequence[dict[str, Any]], impairment: str) -> int | None:
    """The most calls of a step of ``impairment`` that met P95 ≤ 50 ms with nothing dropped by
    the gateway (and every smaller step of it did too); None when the smallest did not."""
    best = None
    for step in sorted(
        (s for s in steps if s["impairment"] == impairment), key=lambda s: s["calls"]
    ):
        p95 = step["arrival_to_ack_s"]["p95"]
        if p95 is None or p95 > LATENCY_TARGET_S or step["dropped_by_gateway"] > 0:
            break
        best = step["calls"]
    return best


# -- the run ---------------------------------------------------------------------------------


def _mulaw_tone() -> bytes:
    """One packet of a 440 Hz tone at -12 dBFS in G.711 μ-law (every packet of every stream:
    the gateway passes G.711 through, its content costs nothing)."""
    import numpy as np

    from pipeline.contracts import Encoding
    from pipeline.producer.chunking import encode_samples

    t = np.arange(SAMPLES_PER_PACKET) / 8000
    return encode_samples((0.25 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), Encoding.MULAW)


class Gateway:
    """A ``streamscribe ingress`` subprocess (pinned to core 0 when ``taskset`` exists)."""

    def __init__(self, prefix: str, bootstrap: str, calls: int) -> None:
        self.port = free_port()
        self.ports = range(PORT_MIN, PORT_MIN + 2 * calls + 20)
        env = {
            **os.environ,
            "STREAMSCRIBE_KAFKA_BOOTSTRAP": bootstrap,
            "STREAMSCRIBE_TOPIC_PREFIX": prefix,
            "STREAMSCRIBE_INGRESS_BIND": "127.0.0.1",
            "STREAMSCRIBE_INGRESS_PORT": str(self.port),
            "STREAMSCRIBE_INGRESS_RTP_BIND": "127.0.0.1",
            "STREAMSCRIBE_INGRESS_RTP_PORT_MIN": str(self.ports.start),
            "STREAMSCRIBE_INGRESS_RTP_PORT_MAX": str(self.ports.stop - 1),
            "STREAMSCRIBE_INGRESS_MAX_CALLS": str(calls + 10),
            "STREAMSCRIBE_INGRESS_AUTH_TOKEN": TOKEN,
            "STREAMSCRIBE_INGRESS_SIP_ENABLED": "false",
            "STREAMSCRIBE_INGRESS_IDLE_TIMEOUT_MS": "60000",
            "STREAMSCRIBE_LOG_LEVEL": "WARNING",
        }
        command = [sys.executable, "-m", "pipeline", "ingress"]
        self.pinned = shutil.which("taskset") is not None
        if self.pinned:
            command = ["taskset", "-c", "0", *command]
        log_dir = Path(tempfile.gettempdir()) / "streamscribe-bench"
        log_dir.mkdir(parents=True, exist_ok=True)
        self._log = (log_dir / f"ingress-{calls}.log").open("w")
        self.process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the gateway exited with {self.process.returncode}")
            ready = f"{self.url}/readyz"
            with contextlib.suppress(OSError), urllib.request.urlopen(ready, timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.3)
        raise RuntimeError("the gateway did not get ready")

    def scrape(self) -> dict[str, float]:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            return samples_of(response.read().decode())

    def cpu_s(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def _udp_table(ports: range) -> dict[str, int]:
    text = ""
    for path in ("/proc/net/udp", "/proc/net/udp6"):
        with contextlib.suppress(OSError), open(path) as table:
            text += table.read()
    return parse_udp_table(text, ports)


async def _allocate(gateway: Gateway, calls: int) -> list[int]:
    """Allocate the calls; the RTP ports of their streams, agent then customer per call."""
    import aiohttp

    ports: list[int] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for index in range(calls):
            body = {"call_id": f"bench-{index}", "channels": ["agent", "customer"], "codec": "PCMU"}
            async with session.post(f"{gateway.url}/v1/calls", json=body) as response:
                if response.status != 201:
                    raise RuntimeError(
                        f"allocation {index}: {response.status} {await response.text()}"
                    )
                channels = (await response.json())["channels"]
                ports += [channels["agent"]["port"], channels["customer"]["port"]]
    return ports


async def _end_calls(gateway: Gateway, calls: int) -> None:
    import aiohttp

    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for index in range(calls):
            async with session.delete(f"{gateway.url}/v1/calls/bench-{index}") as response:
                await response.read()


async def _send(
    ports: Sequence[int], plan: Sequence[tuple[float, int, int]], payload: bytes
) -> tuple[list[float], int]:
    """Send ``plan`` in real time from one socket: how late each packet went (seconds), and
    how many this side could not send (its socket buffer full: not the gateway's drops)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
    sock.setblocking(False)
    lateness = []
    unsent = 0
    start = loop.time() + 0.05
    position = 0
    try:
        while position < len(plan):
            now = loop.time() - start
            while position < len(plan) and plan[position][0] <= now:
                at_s, stream, index = plan[position]
                packet = rtp_packet(index, index * SAMPLES_PER_PACKET, 0x1000 + stream, payload)
                try:
                    sock.sendto(packet, ("127.0.0.1", ports[stream]))
                except BlockingIOError:
                    unsent += 1
                lateness.append(now - at_s)
                position += 1
            if position < len(plan):
                await asyncio.sleep(max(plan[position][0] - (loop.time() - start), 0.0))
    finally:
        sock.close()
    return lateness, unsent


def run_step(
    bootstrap: str, prefix: str, calls: int, duration_s: float, impairment: Impairment, seed: int
) -> dict[str, Any]:
    gateway = Gateway(prefix, bootstrap, calls)
    try:
        gateway.wait_ready()
        ports = asyncio.run(_allocate(gateway, calls))
        packets = int(duration_s * 1000 / PACKET_MS)
        plan = send_plan(2 * calls, packets, impairment, random.Random(seed))
        payload = _mulaw_tone()
        window: dict[str, Any] = {}
        queue_max = [0]

        async def measure() -> None:
            await asyncio.sleep(WARMUP_S)
            window["before"] = gateway.scrape()
            window["cpu0"], window["t0"] = gateway.cpu_s(), time.monotonic()
            while "stop" not in window:
                queue_max[0] = max(queue_max[0], _udp_table(gateway.ports)["rx_queue_bytes"])
                await asyncio.sleep(0.5)

        async def main() -> tuple[list[float], int]:
            watcher = asyncio.create_task(measure())
            sent = await _send(ports, plan, payload)
            window["cpu1"], window["t1"] = gateway.cpu_s(), time.monotonic()
            await asyncio.sleep(0.5)  # the last records' acks
            window["after"] = gateway.scrape()
            window["stop"] = True
            await watcher
            return sent

        udp_before = _udp_table(gateway.ports)
        lateness, unsent = asyncio.run(main())
        load_1m = os.getloadavg()[0]
        udp_after = _udp_table(gateway.ports)
        before, after = window["before"], window["after"]
        wall_s = window["t1"] - window["t0"]
        cores = (window["cpu1"] - window["cpu0"]) / wall_s
        asyncio.run(_end_calls(gateway, calls))
        totals = gateway.scrape()
        received = totals.get("ingress_rtp_packets_total{}", 0.0)
        kernel_drops = udp_after["drops"] - udp_before["drops"]
        late = totals.get("ingress_rtp_packets_late_total{}", 0.0)
        arrival = bucket_deltas(before, after, "ingress_arrival_to_ack_seconds")
        publish = bucket_deltas(before, after, "ingress_publish_latency_seconds")
        return {
            "calls": calls,
            "streams": 2 * calls,
            "impairment": impairment.label,
            "duration_s": duration_s,
            "packets_sent": len(plan) - unsent,
            "packets_unsent_by_sender": unsent,
            "packets_received": received,
            "kernel_drops": kernel_drops,
            "late_dropped": late,
            "dropped_by_gateway": dropped_by_gateway(
                len(plan) - unsent, received, kernel_drops, late
            ),
            "lost_filled": totals.get("ingress_rtp_packets_lost_total{}", 0.0),
            "records_acked": delta(before, after, "ingress_arrival_to_ack_seconds_count"),
            "publish_failures": totals.get("ingress_publish_failures_total{}", 0.0),
            "arrival_to_ack_s": {
                "p50": bucket_quantile(arrival, 0.50),
                "p95": bucket_quantile(arrival, 0.95),
                "p99": bucket_quantile(arrival, 0.99),
            },
            "send_to_ack_p95_s": bucket_quantile(publish, 0.95),
            "gateway_cores": cores,
            "cpu_ms_per_call_second": 1000 * cores / calls,
            "max_rx_queue_bytes": queue_max[0],
            "sender_late_s": percentiles(lateness),
            "pinned": gateway.pinned,
            "load_1m_at_end": load_1m,
        }
    finally:
        gateway.stop()


@contextlib.contextmanager
def _sender_core() -> Iterator[None]:
    """This process (the sender) on the core the gateway does not use, when there are two."""
    original = os.sched_getaffinity(0)
    if len(original) > 1 and 1 in original:
        os.sched_setaffinity(0, {1})
    try:
        yield
    finally:
        os.sched_setaffinity(0, original)


def _markdown(steps: Sequence[dict[str, Any]], config: dict[str, Any]) -> str:
    rows = [
        [
            s["calls"],
            s["impairment"],
            fmt(_ms(s["arrival_to_ack_s"]["p50"]), 1),
            fmt(_ms(s["arrival_to_ack_s"]["p95"]), 1),
            fmt(_ms(s["arrival_to_ack_s"]["p99"]), 1),
            fmt(_ms(s["send_to_ack_p95_s"]), 1),
            int(s["dropped_by_gateway"]),
            int(s["lost_filled"]),
            fmt(s["gateway_cores"], 2),
            fmt(s["cpu_ms_per_call_second"], 2),
            s["max_rx_queue_bytes"],
            fmt(_ms(s["sender_late_s"]["p95"]), 1),
            fmt(s["load_1m_at_end"], 1),
        ]
        for s in steps
    ]
    table = markdown_table(
        [
            "calls",
            "network",
            "arrival → acked p50 ms",
            "p95 ms",
            "p99 ms",
            "send → acked p95 ms",
            "dropped by gateway",
            "lost (filled)",
            "gateway cores",
            "CPU ms per call-second",
            "max socket queue B",
            "sender late p95 ms",
            "load (1 min)",
        ],
        rows,
    )
    pinned = (
        "pinned to core 0 with `taskset -c 0`" if config["pinned"] else "not pinned (no taskset)"
    )
    clean = highest_passing(steps, CLEAN.label)
    impaired = highest_passing(steps, IMPAIRED.label)
    return (
        f"# Ingress: concurrent G.711 calls on one gateway core\n\n"
        f"One `streamscribe ingress` process, {pinned}; the sender on the other core. "
        f"{config['duration_s']:g} s per step, 2 RTP streams per call, 20 ms packets.\n\n"
        f"{table}\n\n"
        f"Most calls at P95 arrival → acked ≤ 50 ms with nothing dropped by the gateway: "
        f"{clean if clean is not None else 'none of the steps'} clean, "
        f"{impaired if impaired is not None else 'none of the steps'} with 3 % loss and 30 ms "
        f"jitter (target {TARGET_CALLS}).\n"
    )


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _figure(steps: Sequence[dict[str, Any]]) -> Any:
    figure, axes = new_figure()
    for label in (CLEAN.label, IMPAIRED.label):
        chosen = sorted((s for s in steps if s["impairment"] == label), key=lambda s: s["calls"])
        xs = [s["calls"] for s in chosen if s["arrival_to_ack_s"]["p95"] is not None]
        ys = [s["arrival_to_ack_s"]["p95"] * 1000 for s in chosen if s["arrival_to_ack_s"]["p95"]]
        axes.plot(xs, ys, marker="o", label=f"P95 arrival → acked, {label}")
    axes.axhline(LATENCY_TARGET_S * 1000, linestyle="--", color="grey", label="50 ms target")
    axes.set_xlabel("concurrent calls (2 RTP streams each)")
    axes.set_ylabel("ms")
    axes.legend()
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, (__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, nargs="+", help="steps of N calls")
    parser.add_argument("--duration-s", type=float, help="seconds of media per step")
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args(argv)
    started_s = time.monotonic()
    steps_n = args.calls or ([20] if args.quick else [50, 100, 200, 500])
    duration_s = args.duration_s or (8.0 if args.quick else 20.0)
    prefix = new_prefix(NAME)
    steps: list[dict[str, Any]] = []
    with declared_topics(prefix) as kafka, _sender_core():
        for calls in steps_n:
            for impairment in (CLEAN, IMPAIRED):
                step = run_step(
                    kafka.bootstrap_servers, prefix, calls, duration_s, impairment, args.seed
                )
                steps.append(step)
                shown = ("calls", "impairment", "arrival_to_ack_s", "dropped_by_gateway")
                print(json.dumps({key: step[key] for key in shown}), flush=True)
    config = {
        "calls": steps_n,
        "duration_s": duration_s,
        "warmup_s": WARMUP_S,
        "codec": "PCMU 8 kHz, 20 ms packets, 2 streams per call",
        "impairments": [CLEAN.label, IMPAIRED.label],
        "record_ms": 100,
        "pinned": all(s["pinned"] for s in steps),
        "seed": args.seed,
    }
    largest = max(steps_n)
    at = {s["impairment"]: s for s in steps if s["calls"] == largest}
    targets = []
    for label, step in at.items():
        p95 = step["arrival_to_ack_s"]["p95"]
        targets.append(
            Target(f"P95 arrival → acked at {largest} calls, {label}", _ms(p95), 50, "ms")
        )
        targets.append(
            Target(
                f"packets dropped by the gateway at {largest} calls, {label}",
                step["dropped_by_gateway"],
                0,
                "packets",
            )
        )
    notes = [
        SHARED_MACHINE_NOTE,
        "2 CPU cores in all: the gateway on one, this process (the sender, 50 packets a second "
        "per stream from Python) on the other, Kafka (one local broker) on whichever is free; "
        "a long fault-injection benchmark ran on the same machine during the committed run.",
        "arrival → acked starts when the gateway's loop reads the datagram; the socket queue "
        "column shows whether datagrams waited before that (0 = never seen waiting).",
    ]
    write_results(
        NAME,
        quick=args.quick,
        config=config,
        results={"steps": steps},
        markdown=_markdown(steps, config),
        targets=targets,
        figures={"": _figure(steps)},
        notes=notes,
        started_s=started_s,
        out=args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
