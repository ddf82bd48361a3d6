"""Soak: continuous simulated calls through Kafka and a worker process; memory, latency, lag.

    .venv/bin/python -m bench.soak --minutes 30 [--calls 4]   (quick: 3 minutes)

The declared topics are created under a run-specific prefix (``bench-soak-<random>.``) and
deleted at the end. A worker runs as a subprocess (``python -m pipeline worker``, its own
consumer group, ``/metrics`` on a free port, ``--threads`` torch threads: the benchmarks'
default 1); ``python -m pipeline simulate`` keeps ``--calls`` calls (two channels each) going at
once, in real time, cycling over the fixture calls (``tests/fixtures/calls``; a new call starts
when one ends). Every ``sample_s`` seconds the benchmark records:

- the worker's resident memory (``psutil`` on its pid) and CPU;
- consumer lag: the worker's ``asr_consumer_lag_records`` (records between the high watermark
  and its fetch position, summed over partitions), its paused partitions and open sessions, and
  the group's committed lag (which also counts the audio of open utterances: the committed offset
  is the low watermark);
- latency over the window just ended, from the records themselves (a reader consumes partials
  and finals, ``read_committed``): chunk → partial = ``emit_ms − capture_ms`` over the partials
  that came (a drift indicator over time; the live view's latency with every chunk counted is
  ``bench.e2e``'s and ``bench.peer_sweep``'s capture→view); endpoint → final =
  the final's ``latency_ms``, and *delivered* = when the reader received it − capture time
  (includes the transaction commit).

Memory must be flat after the warm-up (5 minutes, or a third of a shorter run): the report gives
the RSS growth from the warm-up's end to the end of the run (medians of the first and last
minute after warm-up) and the slope of a least-squares line through the post-warm-up samples.
Lag must not grow: the slope of the worker's lag after warm-up, and its end value.

Reading the committed results (bench/results/soak.md and, with ``--malloc-arena-max 2``,
soak_malloc_arena2.md): 30 min of 4 live calls through Kafka; worker RSS +15.6 MiB (1.6 %)
after the 5-min warm-up, in steps (+8.9 MiB at 12 min; at 21.5 min −11.7 then +15.7 MiB) and
flat between: the issue's < 5 % is met, our own ≤ 16 MiB/h slope is not in this run
(44.6 MiB/h; the run before: −3.7 MiB, −5.0 MiB/h); consumer lag flat (−0.003 records/s); P95
chunk → partial 0.48 s (emitted partials only, blind to chunks no partial showed). With glibc's
``MALLOC_ARENA_MAX=2`` the same steps (about 12 MiB) go down as often as up: +5.4 MiB,
2.6 MiB/h, range 991–1010 MiB after the warm-up: this points to the allocator keeping and
returning blocks rather than growth (one 30-min run each).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.common import (
    DEFAULT_TORCH_THREADS,
    FIXTURES,
    REPO,
    SHARED_MACHINE_NOTE,
    Target,
    bench_parser,
    fmt,
    markdown_table,
    percentiles,
    write_results,
)
from bench.infra import TopicReader, committed_lag, declared_topics, free_port, new_prefix
from pipeline.topics import TopicRole, topic_name

NAME = "soak"
QUICK_MINUTES = 3.0
FULL_MINUTES = 30.0
DEFAULT_CALLS = 4
WARMUP_MINUTES = 5.0
READY_TIMEOUT_S = 180.0
DRAIN_TIMEOUT_S = 90.0
LATENCY_WINDOW_S = 30.0
MIN_SLOPE_SPAN_MINUTES = 10.0
TARGET_RSS_GROWTH_MIB = 32.0
TARGET_RSS_SLOPE_MIB_PER_H = 16.0
TARGET_LAG_SLOPE_PER_S = 1.0
MIB = 2**20
LOG_ROOT = Path(tempfile.gettempdir()) / "streamscribe-bench"  # as the other benchmarks


# -- pure helpers ---------------------------------------------------------------------------------


def slope_per_s(times_s: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of ``values`` over ``times_s`` (units per second); None if < 3
    points or no spread in time."""
    if len(times_s) < 3:
        return None
    t = np.asarray(times_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if np.ptp(t) == 0:
        return None
    return float(np.polyfit(t - t[0], v, 1)[0])


def window_median(
    times_s: Sequence[float], values: Sequence[float], start_s: float, end_s: float
) -> float | None:
    """Median of the values sampled in ``[start_s, end_s)``."""
    picked = [v for t, v in zip(times_s, values, strict=True) if start_s <= t < end_s]
    return float(np.median(picked)) if picked else None


def scrape(text: str) -> dict[str, float]:
    """The worker metrics the soak follows, from a Prometheus text exposition."""
    found = {"lag_records": 0.0, "paused_partitions": 0.0, "active_sessions": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "asr_consumer_lag_records":
                found["lag_records"] += sample.value
            elif sample.name == "asr_paused_partitions":
                found["paused_partitions"] = sample.value
            elif sample.name == "asr_active_sessions":
                found["active_sessions"] = sample.value
            elif sample.name == "asr_partials_thinned_total":
                found["partials_thinned_total"] = sample.value
    return found


@dataclass
class Sample:
    """One observation of the run, ``t_s`` seconds after the load started."""

    t_s: float
    rss_bytes: int
    worker_cores: float
    lag_records: float | None
    committed_lag_records: float | None
    paused_partitions: float | None
    active_sessions: float | None
    partial_p95_s: float | None
    final_p95_s: float | None
    final_delivered_p95_s: float | None
    partials: int
    finals: int

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class RollingLatencies:
    """Latencies of the records a reader received, over a trailing window of wall time."""

    window_s: float
    partials_topic: str
    seen: int = 0
    recent: list[tuple[int, str, float]] = field(default_factory=list)

    def update(self, reader: TopicReader) -> tuple[list[float], list[float], list[float]]:
        """Add what arrived since the last call; return the window's partial, final and
        delivered-final latencies (s)."""
        records = reader.snapshot()
        new, self.seen = records[self.seen :], len(records)
        for record in new:
            value = record.value
            capture_ms = value.get("capture_ms")
            if capture_ms is None:
                continue
            if record.topic == self.partials_topic:
                self.recent.append(
                    (record.received_ms, "partial", (value["emit_ms"] - capture_ms) / 1000)
                )
                continue
            if value.get("latency_ms") is not None:
                self.recent.append((record.received_ms, "final", value["latency_ms"] / 1000))
            self.recent.append(
                (record.received_ms, "delivered", (record.received_ms - capture_ms) / 1000)
            )
        horizon_ms = time.time_ns() // 1_000_000 - self.window_s * 1000
        self.recent = [entry for entry in self.recent if entry[0] >= horizon_ms]
        partial = [value for _, kind, value in self.recent if kind == "partial"]
        final = [value for _, kind, value in self.recent if kind == "final"]
        delivered = [value for _, kind, value in self.recent if kind == "delivered"]
        return partial, final, delivered


# -- processes ------------------------------------------------------------------------------------


def _env(bootstrap: str, prefix: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "STREAMSCRIBE_KAFKA_BOOTSTRAP": bootstrap,
        "STREAMSCRIBE_TOPIC_PREFIX": prefix,
        **extra,
    }


def _http_get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), ""
    except OSError:
        return 0, ""


def _wait_ready(worker: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited ({worker.returncode}): {log.read_text()[-2000:]}")
        status, _ = _http_get(f"http://127.0.0.1:{port}/readyz", 2.0)
        if status == 200:
            return
        time.sleep(1.0)
    raise RuntimeError(f"worker not ready after {READY_TIMEOUT_S:.0f} s: {log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> int | None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
    return process.returncode


# -- the run --------------------------------------------------------------------------------------


def soak(
    minutes: float,
    calls: int,
    threads: int,
    sample_s: float,
    warmup_minutes: float,
    logs: Path,
    malloc_arena_max: int | None = None,
) -> dict[str, Any]:
    """Run the soak; returns config-independent results (samples and their analysis)."""
    prefix = new_prefix("soak")
    group = f"bench-soak-{uuid.uuid4().hex[:8]}"
    port = free_port()
    logs.mkdir(parents=True, exist_ok=True)
    worker_log, sim_log = logs / "soak-worker.log", logs / "soak-simulate.log"
    with declared_topics(prefix) as kafka:
        bootstrap = kafka.bootstrap_servers
        chunks_topic = topic_name(TopicRole.AUDIO_CHUNKS, prefix)
        partials_topic = topic_name(TopicRole.PARTIALS, prefix)
        finals_topic = topic_name(TopicRole.FINALS, prefix)
        worker_env = _env(
            bootstrap,
            prefix,
            STREAMSCRIBE_GROUP_ID=group,
            STREAMSCRIBE_METRICS_PORT=str(port),
            STREAMSCRIBE_TORCH_THREADS=str(threads),
            STREAMSCRIBE_DEVICE="cpu",
            **({} if malloc_arena_max is None else {"MALLOC_ARENA_MAX": str(malloc_arena_max)}),
        )
        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "worker", "--worker-id", group],
                env=worker_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        simulate: subprocess.Popen[bytes] | None = None
        reader = TopicReader(bootstrap, [partials_topic, finals_topic]).start()
        try:
            _wait_ready(worker, port, worker_log)
            process = psutil.Process(worker.pid)
            with sim_log.open("wb") as out:
                simulate = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "pipeline",
                        "simulate",
                        "--audio-dir",
                        str(FIXTURES / "calls"),
                        "--calls",
                        str(calls),
                        "--duration-s",
                        str(minutes * 60),
                        "--call-prefix",
                        f"soak-{uuid.uuid4().hex[:6]}",
                        "--json",
                    ],
                    env=_env(bootstrap, prefix),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                )
            samples = _sample_until_done(
                simulate,
                worker,
                process,
                reader,
                port,
                sample_s,
                group,
                chunks_topic,
                partials_topic,
            )
            simulate_rc = simulate.wait(30)
            drained_s = _drain(port, worker)
        finally:
            if simulate is not None and simulate.poll() is None:
                simulate.kill()
                simulate.wait(30)
            worker_rc = _stop(worker)
            reader.stop()
        all_records = reader.snapshot()
    return analyze(
        samples,
        load_s=minutes * 60,
        warmup_s=warmup_minutes * 60,
        extra={
            "topic_prefix": prefix,
            "simulate_exit_code": simulate_rc,
            "worker_exit_code": worker_rc,
            "drain_s": drained_s,
            "partials": sum(r.topic == partials_topic for r in all_records),
            "finals": sum(r.topic == finals_topic for r in all_records),
            "chunk_to_partial_s": percentiles(
                (r.value["emit_ms"] - r.value["capture_ms"]) / 1000
                for r in all_records
                if r.topic == partials_topic and r.value.get("capture_ms") is not None
            ),
            "endpoint_to_final_s": percentiles(
                r.value["latency_ms"] / 1000
                for r in all_records
                if r.topic == finals_topic and r.value.get("latency_ms") is not None
            ),
            "simulate_summary": _simulate_summary(sim_log),
            "logs": str(logs),
        },
    )


def _sample_until_done(
    simulate: subprocess.Popen[bytes],
    worker: subprocess.Popen[bytes],
    process: psutil.Process,
    reader: TopicReader,
    port: int,
    sample_s: float,
    group: str,
    chunks_topic: str,
    partials_topic: str,
) -> list[Sample]:
    samples: list[Sample] = []
    latencies = RollingLatencies(LATENCY_WINDOW_S, partials_topic)
    started = time.monotonic()
    cpu_before = sum(process.cpu_times()[:2])
    last = started
    while simulate.poll() is None:
        time.sleep(max(0.0, started + (len(samples) + 1) * sample_s - time.monotonic()))
        if simulate.poll() is not None:
            break  # the load is over: what follows is the drain, not the soak
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited during the soak ({worker.returncode})")
        now = time.monotonic()
        cpu_now = sum(process.cpu_times()[:2])
        status, text = _http_get(f"http://127.0.0.1:{port}/metrics")
        metrics = scrape(text) if status == 200 else {}
        lag = committed_lag(reader.bootstrap, group, chunks_topic)
        partial, final, delivered = latencies.update(reader)
        samples.append(
            Sample(
                t_s=round(now - started, 2),
                rss_bytes=int(process.memory_info().rss),
                worker_cores=(cpu_now - cpu_before) / max(now - last, 1e-9),
                lag_records=metrics.get("lag_records"),
                committed_lag_records=None if lag is None else lag["lag"],
                paused_partitions=metrics.get("paused_partitions"),
                active_sessions=metrics.get("active_sessions"),
                partial_p95_s=percentiles(partial)["p95"],
                final_p95_s=percentiles(final)["p95"],
                final_delivered_p95_s=percentiles(delivered)["p95"],
                partials=len(partial),
                finals=len(final),
            )
        )
        cpu_before, last = cpu_now, now
    return samples


def _simulate_summary(log: Path) -> dict[str, Any] | None:
    """The JSON summary ``simulate --json`` prints last (progress lines come before it)."""
    text = log.read_text(errors="replace")
    start = text.rfind("\n{")
    try:
        summary: dict[str, Any] = json.loads(text[start + 1 :] if start >= 0 else text)
    except ValueError:
        return None
    return summary


def _drain(port: int, worker: subprocess.Popen[bytes]) -> float | None:
    """After the last call ended: seconds until the worker holds no session (None: timeout)."""
    started = time.monotonic()
    while time.monotonic() - started < DRAIN_TIMEOUT_S and worker.poll() is None:
        status, text = _http_get(f"http://127.0.0.1:{port}/metrics")
        if status == 200 and scrape(text)["active_sessions"] == 0:
            return round(time.monotonic() - started, 1)
        time.sleep(1.0)
    return None


def analyze(
    samples: Sequence[Sample],
    warmup_s: float,
    extra: dict[str, Any],
    load_s: float | None = None,
) -> dict[str, Any]:
    """Memory flatness and lag growth after ``warmup_s`` (samples after ``load_s``, when the
    load had ended, are left out); the samples themselves."""
    if load_s is not None:
        samples = [s for s in samples if s.t_s <= load_s]
    after = [s for s in samples if s.t_s >= warmup_s]
    end_s = samples[-1].t_s if samples else 0.0
    times = [s.t_s for s in after]
    rss = [s.rss_bytes / MIB for s in after]
    # Medians over a minute (less in a short run) at each end of the post-warm-up span.
    span_s = min(60.0, max(end_s - warmup_s, 0.0) / 4)
    first = window_median(times, rss, warmup_s, warmup_s + span_s)
    last = window_median(times, rss, end_s - span_s, end_s + 1)
    rss_slope = slope_per_s(times, rss)
    lag_points = [(s.t_s, s.lag_records) for s in after if s.lag_records is not None]
    lag_slope = slope_per_s([t for t, _ in lag_points], [v for _, v in lag_points])
    lag_values = [v for _, v in lag_points]
    partial_p95 = [s.partial_p95_s for s in after if s.partial_p95_s is not None]
    return {
        "duration_s": end_s,
        "warmup_s": warmup_s,
        "samples": [s.to_dict() for s in samples],
        "rss_mib_at_warmup": first,
        "rss_mib_at_end": last,
        "rss_growth_mib": None if first is None or last is None else last - first,
        "rss_slope_mib_per_hour": None if rss_slope is None else rss_slope * 3600,
        "rss_peak_mib": max((s.rss_bytes / MIB for s in samples), default=None),
        "post_warmup_minutes": max(end_s - warmup_s, 0.0) / 60,
        "lag_slope_records_per_s": lag_slope,
        "lag_records_max_after_warmup": max(lag_values, default=None),
        "lag_records_end": window_median(
            [t for t, _ in lag_points], lag_values, end_s - span_s, end_s + 1
        ),
        "lag_records_median_after_warmup": float(np.median(lag_values)) if lag_values else None,
        "window_partial_p95_s_max_after_warmup": max(partial_p95, default=None),
        "worker_cores_mean": float(np.mean([s.worker_cores for s in samples])) if samples else None,
        **extra,
    }


# -- report ---------------------------------------------------------------------------------------


def markdown(results: dict[str, Any], config: dict[str, Any]) -> str:
    partial, final = results["chunk_to_partial_s"], results["endpoint_to_final_s"]
    minutes = fmt(results["duration_s"] / 60, 1)
    warmup = fmt(results["warmup_s"] / 60, 1)
    rss_range = f"{fmt(results['rss_mib_at_warmup'], 1)} → {fmt(results['rss_mib_at_end'], 1)}"
    lag = " / ".join(
        fmt(results[key], 0)
        for key in (
            "lag_records_median_after_warmup",
            "lag_records_max_after_warmup",
            "lag_records_end",
        )
    )
    rows = [
        ["sampled under load", f"{minutes} min (warm-up {warmup} min)"],
        ["load", f"{config['calls']} calls at once (2 channels each), real time"],
        ["worker RSS, end of warm-up → end", f"{rss_range} MiB"],
        ["RSS growth after warm-up", f"{fmt(results['rss_growth_mib'], 1)} MiB"],
        ["RSS slope after warm-up", f"{fmt(results['rss_slope_mib_per_hour'], 1)} MiB/h"],
        ["RSS peak", f"{fmt(results['rss_peak_mib'], 1)} MiB"],
        ["consumer lag (fetch position): median / max / last span", f"{lag} records"],
        ["lag slope after warm-up", f"{fmt(results['lag_slope_records_per_s'], 3)} records/s"],
        [
            "chunk → partial P50 / P95 / P99 (emitted partials only)",
            f"{_triple(partial)} s ({partial['n']} partials)",
        ],
        ["endpoint → final P50 / P95 / P99", f"{_triple(final)} s ({final['n']} finals)"],
        [
            "worst window P95 chunk → partial after warm-up",
            f"{fmt(results['window_partial_p95_s_max_after_warmup'])} s",
        ],
        ["worker CPU (mean)", f"{fmt(results['worker_cores_mean'], 2)} cores"],
        ["drain after the last call", f"{fmt(results['drain_s'], 1)} s"],
    ]
    arenas = config.get("malloc_arena_max")
    allocator = "" if arenas is None else f", glibc `MALLOC_ARENA_MAX={arenas}`"
    title = "Soak: continuous calls through Kafka and a worker process"
    return "\n\n".join(
        [
            f"## {title}" + ("" if arenas is None else f" (MALLOC_ARENA_MAX={arenas})"),
            f"`streamscribe simulate` → Kafka → `streamscribe worker` (CPU, "
            f"{config['torch_threads']} torch thread(s){allocator}, other settings default); "
            "worker RSS by psutil, lag from its /metrics, latency from the partial and final "
            "records.",
            markdown_table(["", "measured"], rows),
        ]
    )


def _triple(stats: dict[str, Any]) -> str:
    return f"{fmt(stats['p50'])} / {fmt(stats['p95'])} / {fmt(stats['p99'])}"


def plot(results: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    samples = results["samples"]
    minutes = [s["t_s"] / 60 for s in samples]
    figure, (memory, latency, lag) = pyplot.subplots(3, 1, figsize=(8, 8), sharex=True)
    memory.plot(minutes, [s["rss_bytes"] / MIB for s in samples], color="tab:blue")
    memory.set_ylabel("worker RSS, MiB")
    memory.set_title("Soak: worker memory, latency and consumer lag over time")

    def values(key: str) -> list[float]:
        return [np.nan if s[key] is None else s[key] for s in samples]

    latency.plot(minutes, values("partial_p95_s"), label="chunk → partial P95")
    latency.plot(minutes, values("final_p95_s"), label="endpoint → final P95")
    latency.plot(minutes, values("final_delivered_p95_s"), ":", label="final delivered P95")
    latency.set_ylabel("latency per window, s")
    latency.legend(fontsize=8)
    lag.plot(minutes, values("lag_records"), label="worker fetch lag")
    lag.plot(minutes, values("committed_lag_records"), ":", label="group committed lag")
    lag.set_ylabel("records")
    lag.set_xlabel("minutes since the load started")
    lag.legend(fontsize=8)
    for axes in (memory, latency, lag):
        axes.axvline(results["warmup_s"] / 60, color="grey", linestyle="--", linewidth=0.8)
    figure.tight_layout()
    return figure


def targets(results: dict[str, Any]) -> list[Target]:
    """Growth and lag always; the slope per hour only from ≥ 10 minutes after warm-up (a
    shorter line extrapolates allocator steps into MiB per hour)."""
    long_enough = results["post_warmup_minutes"] >= MIN_SLOPE_SPAN_MINUTES
    return [
        Target("RSS growth after warm-up", results["rss_growth_mib"], TARGET_RSS_GROWTH_MIB, "MiB"),
        Target(
            "RSS slope after warm-up (runs ≥ 10 min after warm-up)",
            results["rss_slope_mib_per_hour"] if long_enough else None,
            TARGET_RSS_SLOPE_MIB_PER_H,
            "MiB/h",
        ),
        Target(
            "consumer lag slope after warm-up",
            results["lag_slope_records_per_s"],
            TARGET_LAG_SLOPE_PER_S,
            "records/s",
        ),
    ]


# -- entry points ---------------------------------------------------------------------------------


def result_name(malloc_arena_max: int | None) -> str:
    """``soak``, or ``soak_malloc_arena<N>`` for the variant run with glibc's
    ``MALLOC_ARENA_MAX=N`` in the worker (how many malloc arenas its threads share)."""
    return NAME if malloc_arena_max is None else f"{NAME}_malloc_arena{malloc_arena_max}"


def measure(
    quick: bool,
    minutes: float | None = None,
    calls: int = DEFAULT_CALLS,
    threads: int = DEFAULT_TORCH_THREADS,
    out: Path | None = None,
    malloc_arena_max: int | None = None,
) -> dict[str, Any]:
    started = time.monotonic()
    minutes = minutes or (QUICK_MINUTES if quick else FULL_MINUTES)
    warmup_minutes = min(WARMUP_MINUTES, minutes / 3)
    sample_s = 5.0 if minutes <= 5 else 10.0
    LOG_ROOT.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="soak-", dir=LOG_ROOT))
    results = soak(minutes, calls, threads, sample_s, warmup_minutes, logs, malloc_arena_max)
    config = {
        "minutes": minutes,
        "calls": calls,
        "channels": 2 * calls,
        "torch_threads": threads,
        "sample_s": sample_s,
        "warmup_minutes": warmup_minutes,
        "audio": "tests/fixtures/calls (closed loop: a new call when one ends)",
        "malloc_arena_max": malloc_arena_max,
    }
    found = targets(results)
    write_results(
        result_name(malloc_arena_max),
        quick=quick,
        config=config,
        results=results,
        markdown=markdown(results, config),
        targets=found,
        figures={"": plot(results)},
        notes=[
            SHARED_MACHINE_NOTE,
            "Targets chosen here for 'flat': growth and slope small against the worker's "
            "size; lag slope near zero (a worker falling 10 % behind would add ~40 records/s).",
        ],
        started_s=started,
        **({} if out is None else {"out": out}),
    )
    return _numbers(results, found)


def _numbers(results: dict[str, Any], found: Sequence[Target]) -> dict[str, Any]:
    return {
        "minutes": results["duration_s"] / 60,
        "rss_growth_mib": results["rss_growth_mib"],
        "rss_slope_mib_per_hour": results["rss_slope_mib_per_hour"],
        "lag_slope_records_per_s": results["lag_slope_records_per_s"],
        "lag_records_end": results["lag_records_end"],
        "chunk_to_partial_p95_s": results["chunk_to_partial_s"]["p95"],
        "endpoint_to_final_p95_s": results["endpoint_to_final_s"]["p95"],
        "targets": [target.to_dict() for target in found],
    }


def rerender(out: Path, malloc_arena_max: int | None = None) -> dict[str, Any]:
    """Re-analyze the samples in ``<out>/<result_name>.json`` and rebuild its markdown and figure
    (machine, configuration and measurements kept as they were)."""
    name = result_name(malloc_arena_max)
    path = out / f"{name}.json"
    report = json.loads(path.read_text())
    config, old = report["config"], report["results"]
    derived = set(analyze([], 0.0, {}))
    results = analyze(
        [Sample(**sample) for sample in old["samples"]],
        warmup_s=config["warmup_minutes"] * 60,
        extra={key: value for key, value in old.items() if key not in derived},
        load_s=config["minutes"] * 60,
    )
    found = targets(results)
    report["results"], report["targets"] = results, [t.to_dict() for t in found]
    path.write_text(json.dumps(report, indent=2) + "\n")
    plot(results).savefig(out / f"{name}.png", dpi=110, bbox_inches="tight")
    parts = [
        markdown(results, config),
        markdown_table(["target", "limit", "measured", ""], (t.row() for t in found)),
        "\n".join(f"- {note}" for note in report["notes"]),
    ]
    (out / f"{name}.md").write_text("\n\n".join(parts) + "\n")
    return _numbers(results, found)


def run(quick: bool) -> dict[str, Any]:
    """For ``bench.run``: 3 minutes quick, 30 minutes full."""
    return measure(quick)


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, (__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, help="soak length (default 30; quick 3)")
    parser.add_argument(
        "--calls", type=int, default=DEFAULT_CALLS, help="calls at once (2 channels each)"
    )
    parser.add_argument(
        "--malloc-arena-max",
        type=int,
        metavar="N",
        help="run the worker with glibc's MALLOC_ARENA_MAX=N; results as soak_malloc_arena<N>",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="re-analyze the samples in the existing results JSON, measure nothing",
    )
    args = parser.parse_args(argv)
    if args.report_only:
        print(rerender(args.out, args.malloc_arena_max))
        return 0
    summary = measure(
        args.quick, args.minutes, args.calls, args.threads, args.out, args.malloc_arena_max
    )
    print((args.out / f"{result_name(args.malloc_arena_max)}.md").read_text())
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
