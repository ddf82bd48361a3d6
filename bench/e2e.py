"""End to end through Kafka: live calls in, partials and finals out, and a kill -9 failover.

    .venv/bin/python -m bench.e2e [--quick] [--calls 4 8 16]

(a)/(b) Latency and lag. One ``streamscribe worker`` subprocess (the real command: Whisper
tiny.en + silero on CPU) and N concurrent stereo fixture calls (2N channels) published in real
time through ``AudioPublisher``: every 20 ms of audio becomes one record per channel, sent once
that audio is complete and stamped with the capture time of its first sample; calls start at
random offsets within 2 s. A reader (``read_committed``) follows the partials, finals and
events topics and stamps each record with the wall time it arrived.

- capture→view: every 20 ms chunk of the utterances shown, from its capture until a subscriber
  received the first partial or final of its utterance that shows it
  (``bench.common.chunk_to_view_ms``): what a reader of the live transcript waits, chunks that
  no partial covered included (an utterance never shown is not counted; it costs WER).
- chunk-capture→partial: partial received − ``partial.capture_ms`` (capture time of the newest
  audio the partial covers), over the partials that came only. The worker-side figure (emit −
  capture, before Kafka) is reported beside it.
- endpoint→final: final received − ``final.capture_ms`` (capture time of the audio that decided
  the endpoint), including the transaction that makes the final visible. Worker side:
  ``final.latency_ms``.
- consumer lag: high watermark − the group's committed offset on ``audio.chunks``, sampled every
  2 s. The committed offset is the low watermark of open utterances (DESIGN §3), so this lag
  includes the audio of utterances still open by design. Beside it, the worker's own
  fetch-position lag gauge ``asr_consumer_lag_records`` when its /metrics exports one.
- the worker's own ``asr_duration_seconds`` histogram (scraped from its /metrics at the end):
  P50/P95 estimated from the buckets, as Prometheus would.

(c) Recovery. Two workers in one group, M calls in real time; once every session has started,
the worker owning more calls gets SIGKILL. A call the dead worker owned has recovered at its
first partial after the kill (by emit time), which only the survivor can produce; recovery is
judged on the slowest such call (kill → the last affected call's first partial), the fastest is
reported beside it. Then every final is compared with the same calls' finals from the
failure-free run (same audio, so the same utterance ids and texts): lost and duplicated finals
must both be 0.

Reading the committed results (bench/results/e2e.md; one worker with 2 torch threads on the
shared 2-core machine): 4 calls (8 channels): P95 capture → view received 2.4 s, endpoint → final
0.40 s; 8 calls (16 channels): 5.2 s / 1.96 s (targets 1.2 s / 0.7 s not met; over the three
runs of 2026-11-30 1.3–3.6 s and 4.2–5.4 s to the view): the worker gets about 1.4 of the 2 cores
beside broker, publisher and reader, and sheds partials first.

Recovery after ``kill -9`` of a worker: every affected call had a partial again 16.4 s after the
kill (14.1–16.4 s over the runs of 2026-11-30; the fastest call 11.1–11.4 s; survivor assigned
after 8.8 s, session timeout 10 s; the backlog is read with the VAD only, then live partials go
before its finals); 0 finals lost or duplicated. Before the VAD-only catch-up: 15.4–18.4 s
(docs/decisions/0005-catch-up-after-a-takeover.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.common import (
    FIXTURES,
    REPO,
    SHARED_MACHINE_NOTE,
    Target,
    ViewUpdate,
    bench_parser,
    chunk_to_view_ms,
    fmt,
    markdown_table,
    new_figure,
    percentiles,
    plain_log_axis,
    plot_latency_percentiles,
    write_results,
)
from bench.infra import (
    ReceivedRecord,
    TopicReader,
    committed_lag,
    declared_topics,
    free_port,
    new_prefix,
)
from pipeline.audio.files import CallAudio, read_call_audio
from pipeline.producer import AudioPublisher
from pipeline.settings import KafkaSettings, Settings, WorkerSettings
from pipeline.topics import TopicRole, topic_name

NAME = "e2e"
CHUNK_MS = 20
START_SPREAD_S = 2.0
QUICK_CALLS = (4,)
FULL_CALLS = (4, 8, 16)
RECOVERY_CALLS = 4
KILL_AFTER_S = 8.0
TARGET_CALLS = 8
TARGET_PARTIAL_P95_S = 1.2
TARGET_FINAL_P95_S = 0.7
RECOVERY_MARGIN_S = 3.0
WORKER_READY_TIMEOUT_S = 240.0
LOG_DIR = Path(tempfile.gettempdir()) / "streamscribe-bench"
"""Worker logs (outside the repository; named by topic prefix and worker id)."""


# -- processes -----------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    """A ``streamscribe worker`` subprocess; its log goes to a file in ``LOG_DIR``."""

    worker_id: str
    env: dict[str, str]
    log_path: Path
    metrics_port: int
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "worker", "--worker-id", self.worker_id],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> int:
        """SIGKILL; returns the wall time (epoch ms) it was sent."""
        assert self.process is not None
        killed_ms = time.time_ns() // 1_000_000
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        return killed_ms

    def terminate(self, timeout_s: float = 30) -> float | None:
        """SIGTERM and wait; seconds until it exited (None if it had to be killed)."""
        if not self.alive():
            return None
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
            return None
        return time.monotonic() - started

    def scrape(self) -> str | None:
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                text: str = response.read().decode()
                return text
        except OSError:
            return None


def worker_env(kafka: KafkaSettings, group_id: str, threads: int, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "STREAMSCRIBE_KAFKA_BOOTSTRAP": kafka.bootstrap_servers,
        "STREAMSCRIBE_TOPIC_PREFIX": kafka.topic_prefix,
        "STREAMSCRIBE_GROUP_ID": group_id,
        "STREAMSCRIBE_METRICS_PORT": str(port),
        "STREAMSCRIBE_TORCH_THREADS": str(threads),
        "STREAMSCRIBE_DEVICE": "cpu",
        "STREAMSCRIBE_LOG_LEVEL": os.environ.get("BENCH_WORKER_LOG_LEVEL", "WARNING"),
    }


@contextlib.contextmanager
def workers(
    kafka: KafkaSettings, group_id: str, ids: Sequence[str], threads: int
) -> Iterator[list[WorkerProcess]]:
    """Worker subprocesses, always stopped on exit (SIGTERM, then SIGKILL)."""
    started: list[WorkerProcess] = []
    try:
        for worker_id in ids:
            port = free_port()
            started.append(
                WorkerProcess(
                    worker_id,
                    worker_env(kafka, group_id, threads, port),
                    LOG_DIR / f"{kafka.topic_prefix}{worker_id}.log",
                    port,
                ).start()
            )
        yield started
    finally:
        for worker in started:
            worker.terminate()


# -- calls ---------------------------------------------------------------------------------


@dataclass
class _LiveCall:
    call_id: str
    fixture: str
    audio: CallAudio
    start_s: float  # monotonic time its first sample is captured
    next_chunk: int = 0
    stream: Any = None
    anchor_capture_ms: int | None = None  # capture time (epoch ms) of its first sample

    @property
    def chunk_samples(self) -> int:
        return self.audio.sample_rate_hz * CHUNK_MS // 1000

    @property
    def chunks(self) -> int:
        longest = max(len(s) for s in self.audio.channels.values())
        return -(-longest // self.chunk_samples)


def fixture_calls() -> list[tuple[str, CallAudio]]:
    paths = sorted((FIXTURES / "calls").glob("*.flac"))
    return [(p.stem, read_call_audio(p)) for p in paths]


@dataclass
class PacedPublisher:
    """Publishes calls in real time from a thread (see the module docstring for the timing)."""

    kafka: KafkaSettings
    calls: list[_LiveCall]
    delivery_timeout_ms: int | None = None
    """How long a chunk may wait for the broker (default: the publisher setting's): the
    chaos bench's broker outages, slower to recover on a loaded machine, must not lose audio
    at the source (that would be the publisher's loss, not the workers')."""
    error: list[BaseException] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    records: int = 0
    lateness_ms: list[float] = field(default_factory=list)
    _thread: threading.Thread | None = None

    def start(self) -> PacedPublisher:
        self._thread = threading.Thread(target=self._run, daemon=True, name="paced-publisher")
        self._thread.start()
        return self

    def _run(self) -> None:
        epoch_offset_s = time.time() - time.monotonic()
        settings = Settings(kafka=self.kafka)
        if self.delivery_timeout_ms is not None:
            settings = dataclasses.replace(
                settings,
                publisher=dataclasses.replace(
                    settings.publisher, delivery_timeout_ms=self.delivery_timeout_ms
                ),
            )
        publisher = AudioPublisher.connect(settings)
        try:
            for call in self.calls:
                call.anchor_capture_ms = round((call.start_s + epoch_offset_s) * 1000)
                call.stream = publisher.open_call(
                    call.call_id,
                    channels=tuple(call.audio.channels),
                    sample_rate_hz=call.audio.sample_rate_hz,
                )
            active = list(self.calls)
            while active:
                now = time.monotonic()
                for call in active:
                    size = call.chunk_samples
                    while call.next_chunk < call.chunks:
                        k = call.next_chunk
                        due_s = call.start_s + (k + 1) * CHUNK_MS / 1000
                        if due_s > now:
                            break
                        capture_ms = round(
                            (call.start_s + k * CHUNK_MS / 1000 + epoch_offset_s) * 1000
                        )
                        for label, samples in call.audio.channels.items():
                            piece = samples[k * size : (k + 1) * size]
                            if len(piece):
                                self.records += call.stream.push(label, piece, capture_ms)
                        self.lateness_ms.append(1000 * (now - due_s))
                        call.next_chunk += 1
                    if call.next_chunk >= call.chunks:
                        self.records += call.stream.end()
                active = [c for c in active if c.next_chunk < c.chunks]
                publisher.transport.poll(0)
                upcoming = [c.start_s + (c.next_chunk + 1) * CHUNK_MS / 1000 for c in active]
                if upcoming:
                    time.sleep(max(0.0, min(upcoming) - time.monotonic()))
            publisher.flush(self._flush_timeout_s())
        except BaseException as error:  # surfaced by join()
            self.error.append(error)
        finally:
            try:
                publisher.close(self._flush_timeout_s())
            except BaseException as error:  # a failed delivery seen only now: join() raises it
                self.error.append(error)
            self.done.set()

    def _flush_timeout_s(self) -> float:
        """How long the end of a wave waits for its deliveries: a minute, or the delivery
        timeout and a margin when that is longer (seed 3 of a chaos run ended with 5,848
        records still unconfirmed after 60 s, the broker restarting on a loaded machine)."""
        if self.delivery_timeout_ms is None:
            return 60.0
        return max(60.0, self.delivery_timeout_ms / 1000 + 10)

    def join(self, timeout_s: float = 600) -> None:
        assert self._thread is not None
        self._thread.join(timeout_s)
        if self.error:
            raise self.error[0]


def live_calls(count: int, tag: str, seed: int) -> list[_LiveCall]:
    fixtures = fixture_calls()
    rng = np.random.default_rng(seed)
    t0 = time.monotonic() + 0.5
    calls = []
    for i in range(count):
        name, audio = fixtures[i % len(fixtures)]
        calls.append(
            _LiveCall(f"{tag}-{i:02d}-{name}", name, audio, t0 + rng.uniform(0, START_SPREAD_S))
        )
    return calls


# -- reading results -----------------------------------------------------------------------


def _values(records: Sequence[ReceivedRecord], kind: str | None = None) -> list[dict[str, Any]]:
    return [r.value for r in records if kind is None or r.value.get("type") == kind]


def _events(reader: TopicReader, kafka: KafkaSettings) -> list[dict[str, Any]]:
    return _values(reader.snapshot(topic_name(TopicRole.EVENTS, kafka.topic_prefix)))


def _count_events(kind: str, source: str | None = None) -> Callable[[list[dict[str, Any]]], int]:
    return lambda events: sum(
        e["type"] == kind and (source is None or e["source"] == source) for e in events
    )


def wait_assigned(
    reader: TopicReader, kafka: KafkaSettings, worker_ids: Sequence[str], timeout_s: float
) -> bool:
    def ready(_: TopicReader) -> bool:
        events = _events(reader, kafka)
        return all(_count_events("partitions_assigned", w)(events) for w in worker_ids)

    return reader.wait_for(ready, timeout_s)


def histogram_quantiles(text: str | None, metric: str = "asr_duration_seconds") -> dict[str, Any]:
    """P50/P95 per ``kind`` estimated from a Prometheus histogram's buckets."""
    if not text:
        return {}
    from prometheus_client.parser import text_string_to_metric_families

    buckets: dict[str, list[tuple[float, float]]] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != metric:
            continue
        for sample in family.samples:
            kind = sample.labels.get("kind", "")
            if sample.name.endswith("_bucket"):
                buckets.setdefault(kind, []).append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                counts[kind] = sample.value
    result = {}
    for kind, points in buckets.items():
        points.sort()
        total = counts.get(kind, points[-1][1] if points else 0.0)
        result[kind] = {
            "count": total,
            **{f"p{q}_s": _bucket_quantile(points, total, q / 100) for q in (50, 95)},
        }
    return result


def counter_totals(text: str | None, metric: str, label: str = "") -> dict[str, float]:
    """A counter's ``<metric>_total`` samples by the value of ``label`` ("" for unlabelled)."""
    if not text:
        return {}
    from prometheus_client.parser import text_string_to_metric_families

    return {
        sample.labels.get(label, ""): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == f"{metric}_total"
    }


def gauge_sum(text: str | None, metric: str) -> float | None:
    """The sum of a gauge's samples in a Prometheus exposition; None when it has none."""
    if not text:
        return None
    from prometheus_client.parser import text_string_to_metric_families

    values = [
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == metric
        for sample in family.samples
    ]
    return sum(values) if values else None


def _bucket_quantile(points: list[tuple[float, float]], total: float, q: float) -> float | None:
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in points:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            span = count - lower_count
            fraction = 0.0 if span <= 0 else (rank - lower_count) / span
            return lower_bound + (bound - lower_bound) * fraction
        lower_bound, lower_count = bound, count
    return lower_bound


@dataclass
class LagSampler:
    """Samples, every ``every_s``, the group's committed-offset lag on ``audio.chunks`` and,
    when the worker exports it, its fetch-position lag gauge (``asr_consumer_lag_records``
    summed over partitions, from ``scrape``)."""

    bootstrap: str
    group_id: str
    topic: str
    scrape: Callable[[], str | None]
    every_s: float = 2.0
    samples: list[int] = field(default_factory=list)
    fetch_samples: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LagSampler:
        self._thread = threading.Thread(target=self._run, daemon=True, name="lag-sampler")
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            lag = committed_lag(self.bootstrap, self.group_id, self.topic)
            if lag is not None and lag["partitions_committed"]:
                self.samples.append(lag["lag"])
            fetch = gauge_sum(self.scrape(), "asr_consumer_lag_records")
            if fetch is not None:
                self.fetch_samples.append(fetch)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)


# -- scenarios -----------------------------------------------------------------------------


def latency_run(calls: int, threads: int, seed: int) -> dict[str, Any]:
    prefix = new_prefix(f"{NAME}-{calls}")
    group_id = f"{prefix}asr"
    with declared_topics(prefix) as kafka:
        topics = [topic_name(r, prefix) for r in (TopicRole.PARTIALS, TopicRole.FINALS)]
        reader = TopicReader(
            kafka.bootstrap_servers, [*topics, topic_name(TopicRole.EVENTS, prefix)]
        ).start()
        try:
            with workers(kafka, group_id, ["w-e2e"], threads) as (worker,):
                startup = time.monotonic()
                if not wait_assigned(reader, kafka, ["w-e2e"], WORKER_READY_TIMEOUT_S):
                    raise RuntimeError(f"worker never got partitions; log: {worker.log_path}")
                startup_s = time.monotonic() - startup
                live = live_calls(calls, f"lat{calls}", seed)
                sessions = sum(len(c.audio.channels) for c in live)
                process = psutil.Process(worker.pid)
                cpu_before = process.cpu_times()
                wall_before = time.monotonic()
                lag = LagSampler(
                    kafka.bootstrap_servers,
                    group_id,
                    topic_name(TopicRole.AUDIO_CHUNKS, prefix),
                    worker.scrape,
                ).start()
                publisher = PacedPublisher(kafka, live).start()
                publisher.join()
                published_s = time.monotonic() - wall_before
                drained = reader.wait_for(
                    lambda r: _count_events("session_ended")(_events(r, kafka)) >= sessions,
                    120 + 10 * calls,
                )
                drain_s = time.monotonic() - wall_before - published_s
                lag.stop()
                cpu_after = process.cpu_times()
                cpu_s = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
                rss = process.memory_info().rss
                exposition = worker.scrape()
                histogram = histogram_quantiles(exposition)
                counters = {
                    "early_finals": counter_totals(exposition, "asr_early_finals", "outcome"),
                    "partials_thinned": counter_totals(exposition, "asr_partials_thinned").get(""),
                }
                shutdown_s = worker.terminate()
        finally:
            reader.stop()
        partials = reader.snapshot(topics[0])
        finals = reader.snapshot(topics[1])
    audio_s = sum(c.chunks * CHUNK_MS / 1000 for c in live)
    final_ids = Counter(r.value["utterance_id"] for r in finals)
    return {
        "calls": calls,
        "channels": sessions,
        "worker_startup_s": startup_s,
        "published_s": published_s,
        "drain_after_publish_s": drain_s,
        "all_sessions_ended": drained,
        "records_published": publisher.records,
        "publisher_lateness_ms": percentiles(publisher.lateness_ms),
        "partials": len(partials),
        "finals": len(finals),
        "duplicate_finals": sum(n - 1 for n in final_ids.values() if n > 1),
        "chunk_to_view_ms": percentiles(chunk_to_view_ms(view_updates(live, partials, finals))),
        "chunk_to_partial_ms": percentiles(
            r.received_ms - r.value["capture_ms"] for r in partials if r.value.get("capture_ms")
        ),
        "chunk_to_partial_worker_ms": percentiles(
            r.value["emit_ms"] - r.value["capture_ms"]
            for r in partials
            if r.value.get("capture_ms")
        ),
        "endpoint_to_final_ms": percentiles(
            r.received_ms - r.value["capture_ms"] for r in finals if r.value.get("capture_ms")
        ),
        "endpoint_to_final_worker_ms": percentiles(
            r.value["latency_ms"] for r in finals if r.value.get("latency_ms") is not None
        ),
        "consumer_lag_records": percentiles(lag.samples),
        "fetch_lag_records": percentiles(lag.fetch_samples) if lag.fetch_samples else None,
        "worker_cpu_cores": cpu_s / max(published_s + drain_s, 1e-9),
        "worker_cpu_s_per_audio_s": cpu_s / audio_s,
        "worker_rss_bytes": rss,
        "worker_histogram": histogram,
        "worker_counters": counters,
        "worker_sigterm_exit_s": shutdown_s,
        "finals_by_key": {_stable_key(r.value): r.value["text"] for r in finals},
    }


def view_updates(
    live: Sequence[_LiveCall],
    partials: Sequence[ReceivedRecord],
    finals: Sequence[ReceivedRecord],
) -> list[ViewUpdate]:
    """The partials and finals as a subscriber's screen shows them (received time, capture
    times of the audio they cover), for ``chunk_to_view_ms``."""
    anchors = {c.call_id: c.anchor_capture_ms for c in live}
    updates = []
    shown = [(r, False) for r in partials] + [(r, True) for r in finals]
    for record, is_final in shown:
        value = record.value
        anchor = anchors.get(value["call_id"])
        if anchor is None:
            continue
        updates.append(
            ViewUpdate(
                f"{value['call_id']}/{value['channel']}",
                value["utterance_index"],
                record.received_ms,
                anchor + value["start_ms"],
                anchor + value["end_ms"],
                is_final,
            )
        )
    return updates


def _stable_key(final: dict[str, Any]) -> str:
    """An utterance's id without the run's tag: ``<index>-<fixture>:<channel>:<n>``."""
    call = final["call_id"].split("-", 1)[1]
    return f"{call}:{final['channel']}:{final['utterance_index']}"


def recovery_run(calls: int, threads: int, seed: int) -> dict[str, Any]:
    prefix = new_prefix(f"{NAME}-recovery")
    group_id = f"{prefix}asr"
    session_timeout_s = WorkerSettings().session_timeout_ms / 1000
    with declared_topics(prefix) as kafka:
        topics = [topic_name(r, prefix) for r in (TopicRole.PARTIALS, TopicRole.FINALS)]
        events_topic = topic_name(TopicRole.EVENTS, prefix)
        reader = TopicReader(kafka.bootstrap_servers, [*topics, events_topic]).start()
        try:
            with workers(kafka, group_id, ["w-a", "w-b"], threads) as pair:
                if not wait_assigned(reader, kafka, ["w-a", "w-b"], WORKER_READY_TIMEOUT_S):
                    raise RuntimeError("workers never got partitions; logs in " + str(LOG_DIR))
                time.sleep(3)  # let the cooperative rebalance settle
                live = live_calls(calls, f"rec{calls}", seed)
                sessions = sum(len(c.audio.channels) for c in live)
                publisher = PacedPublisher(kafka, live).start()
                started = time.monotonic()
                reader.wait_for(
                    lambda r: _count_events("session_started")(_events(r, kafka)) >= sessions,
                    60,
                )
                time.sleep(max(0.0, KILL_AFTER_S - (time.monotonic() - started)))
                owners = {
                    e["call_id"]: e["source"]
                    for e in _events(reader, kafka)
                    if e["type"] == "session_started"
                }
                per_worker = Counter(owners.values())
                victim = max(pair, key=lambda w: per_worker.get(w.worker_id, 0))
                survivor = next(w for w in pair if w is not victim)
                affected = sorted(c for c, owner in owners.items() if owner == victim.worker_id)
                killed_ms = victim.kill9()
                publisher.join()
                drained = reader.wait_for(
                    lambda r: _count_events("session_ended")(_events(r, kafka)) >= sessions,
                    180,
                )
                survivor.terminate()
        finally:
            reader.stop()
        partials = [r.value for r in reader.snapshot(topics[0])]
        finals = [r.value for r in reader.snapshot(topics[1])]
        events = _events(reader, kafka)
    recovery = recovery_after_kill(partials, affected, killed_ms)
    first_final = min(
        (f["emit_ms"] for f in finals if f["call_id"] in affected and f["emit_ms"] > killed_ms),
        default=None,
    )
    takeover_ms = min(
        (
            e["emit_ms"]
            for e in events
            if e["type"] == "partitions_assigned"
            and e["source"] == survivor.worker_id
            and e["emit_ms"] > killed_ms
        ),
        default=None,
    )
    counts = Counter(f["utterance_id"] for f in finals)
    return {
        "calls": calls,
        "channels": sessions,
        "victim": victim.worker_id,
        "calls_per_worker": dict(per_worker),
        "affected_calls": affected,
        "all_sessions_ended": drained,
        "session_timeout_s": session_timeout_s,
        "transaction_timeout_s": WorkerSettings().transaction_timeout_ms / 1000,
        "recovery_max_s": recovery["slowest_s"],
        "recovery_min_s": recovery["fastest_s"],
        "recovery_s_per_call": recovery["per_call_s"],
        "affected_calls_without_partial": recovery["without_partial"],
        "survivor_assigned_after_kill_s": None
        if takeover_ms is None
        else (takeover_ms - killed_ms) / 1000,
        "first_final_after_kill_s": None
        if first_final is None
        else (first_final - killed_ms) / 1000,
        "finals": len(finals),
        "duplicate_finals": sum(n - 1 for n in counts.values() if n > 1),
        "finals_by_key": {_stable_key(f): f["text"] for f in finals},
    }


def recovery_after_kill(
    partials: Iterable[Mapping[str, Any]], affected: Sequence[str], killed_ms: int
) -> dict[str, Any]:
    """How long each call the dead worker owned (``affected``) went without a partial after the
    kill at ``killed_ms`` (epoch ms): kill → its first partial emitted after the kill, in s.

    Returns ``per_call_s`` (call id → s, the calls that got one), ``fastest_s`` and
    ``slowest_s`` over every affected call, and ``without_partial`` (affected calls with none
    after the kill). A call without one has not recovered within the run, so then ``slowest_s``
    is None (not the slowest of the others); ``fastest_s`` is None only when no call recovered.
    """
    first_ms: dict[str, int] = {}
    for partial in partials:
        call, emit_ms = partial["call_id"], partial["emit_ms"]
        if call in affected and emit_ms > killed_ms:
            first_ms[call] = min(first_ms.get(call, emit_ms), emit_ms)
    per_call_s = {call: (first_ms[call] - killed_ms) / 1000 for call in sorted(first_ms)}
    without = sorted(set(affected) - set(first_ms))
    return {
        "per_call_s": per_call_s,
        "fastest_s": min(per_call_s.values(), default=None),
        "slowest_s": None if without or not per_call_s else max(per_call_s.values()),
        "without_partial": without,
    }


def compare_finals(baseline: dict[str, str], observed: dict[str, str]) -> dict[str, Any]:
    lost = sorted(set(baseline) - set(observed))
    extra = sorted(set(observed) - set(baseline))
    changed = sorted(k for k in set(baseline) & set(observed) if baseline[k] != observed[k])
    return {"lost": lost, "extra": extra, "text_differs": changed}


def measure(levels: Sequence[int], threads: int, recovery_calls: int) -> dict[str, Any]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"levels": {}}
    for seed, calls in enumerate(levels):
        level = latency_run(calls, threads, seed)
        results["levels"][str(calls)] = level
        print(
            f"{calls} calls: partial p95 {fmt(level['chunk_to_partial_ms']['p95'], 0)} ms, "
            f"final p95 {fmt(level['endpoint_to_final_ms']['p95'], 0)} ms",
            flush=True,
        )
    if recovery_calls:
        # The failure-free run of at least as many calls saw the same audio for its first
        # ``recovery_calls`` calls (same fixtures in the same order), under other call ids.
        bigger = [int(n) for n in results["levels"] if int(n) >= recovery_calls]
        baseline_level = (
            results["levels"][str(min(bigger))]
            if bigger
            else latency_run(recovery_calls, threads, 0)
        )
        baseline = {
            key: text
            for key, text in baseline_level["finals_by_key"].items()
            if int(key.split("-", 1)[0]) < recovery_calls
        }
        run = recovery_run(recovery_calls, threads, 0)
        run["compared_with_failure_free_run"] = compare_finals(baseline, run["finals_by_key"])
        results["recovery"] = run
        print(
            f"recovery: slowest call {fmt(run['recovery_max_s'], 1)} s, fastest "
            f"{fmt(run['recovery_min_s'], 1)} s, victim {run['victim']}",
            flush=True,
        )
    return results


# -- report --------------------------------------------------------------------------------


def _triple(stats: dict[str, Any]) -> str:
    return f"{fmt(stats['p50'], 0)} / {fmt(stats['p95'], 0)} / {fmt(stats['p99'], 0)}"


def markdown(results: dict[str, Any], threads: int) -> str:
    rows = []
    for level in results["levels"].values():
        histogram = level["worker_histogram"]
        rows.append(
            [
                f"{level['calls']} ({level['channels']})",
                _triple(level["chunk_to_view_ms"]) if "chunk_to_view_ms" in level else "—",
                _triple(level["chunk_to_partial_ms"]),
                fmt(level["chunk_to_partial_worker_ms"]["p95"], 0),
                _triple(level["endpoint_to_final_ms"]),
                fmt(level["endpoint_to_final_worker_ms"]["p95"], 0),
                f"{level['partials']} / {level['finals']}",
                f"{fmt(level['consumer_lag_records']['p50'], 0)} / "
                f"{fmt(level['consumer_lag_records']['max'], 0)}",
                _fetch_lag_cell(level.get("fetch_lag_records")),
                fmt(level["worker_cpu_cores"], 2),
                fmt(level["drain_after_publish_s"], 1),
                _histogram_cell(histogram),
            ]
        )
    parts = [
        "## End to end through Kafka",
        f"One `streamscribe worker` subprocess ({threads} torch thread(s), CPU), N stereo "
        "calls in real time. Latencies in ms as P50 / P95 / P99, measured where a subscriber "
        "receives the record (worker-side P95, before Kafka, beside it).",
        markdown_table(
            [
                "calls (channels)",
                "capture→view received",
                "capture→partial received (emitted partials only)",
                "worker P95",
                "endpoint→final received",
                "worker P95",
                "partials / finals",
                "committed lag P50 / max (records)",
                "fetch lag P50 / max (worker gauge)",
                "worker CPU cores",
                "drain after last chunk s",
                "worker histogram P95 partial / final s",
            ],
            rows,
        ),
    ]
    recovery = results.get("recovery")
    if recovery:
        compared = recovery["compared_with_failure_free_run"]
        parts.append(
            f"Recovery: {recovery['calls']} calls on two workers, `kill -9` of "
            f"`{recovery['victim']}` (owned {len(recovery['affected_calls'])} calls) "
            f"{KILL_AFTER_S:g} s into the calls; "
            + (
                "every affected call had its first partial "
                if not recovery["affected_calls_without_partial"]
                else "the affected calls that recovered had their first partial "
            )
            + f"from the survivor after {fmt(recovery['recovery_max_s'], 1)} s (the slowest "
            f"call; the fastest after {fmt(recovery['recovery_min_s'], 1)} s; calls with none "
            f"after the kill: {len(recovery['affected_calls_without_partial'])}; session timeout "
            f"{recovery['session_timeout_s']:g} s; the survivor was assigned the partitions "
            f"after {fmt(recovery['survivor_assigned_after_kill_s'], 1)} s), first final after "
            f"{fmt(recovery['first_final_after_kill_s'], 1)} s. Finals: {recovery['finals']}; "
            f"lost {len(compared['lost'])}, duplicated {recovery['duplicate_finals']}, "
            f"text different from the failure-free run {len(compared['text_differs'])}."
        )
    return "\n\n".join(parts)


def _fetch_lag_cell(stats: dict[str, Any] | None) -> str:
    if not stats:
        return "not exported"
    return f"{fmt(stats['p50'], 0)} / {fmt(stats['max'], 0)}"


def _histogram_cell(histogram: dict[str, Any]) -> str:
    partial = histogram.get("chunk_to_partial", {}).get("p95_s")
    final = histogram.get("endpoint_to_final", {}).get("p95_s")
    return f"{fmt(partial, 2)} / {fmt(final, 2)}"


def plot(results: dict[str, Any]) -> Any:
    levels = list(results["levels"].values())
    channels = [level["channels"] for level in levels]
    figure, axes = new_figure(7, 4)
    plot_latency_percentiles(
        axes,
        levels,
        channels,
        "capture→view",
        TARGET_PARTIAL_P95_S,
        TARGET_FINAL_P95_S,
        partial_metric="chunk_to_view_ms",
    )
    axes.set_xticks(channels, [str(c) for c in channels])
    plain_log_axis(axes)
    axes.set_xlabel("concurrent channels (2 per call)")
    axes.set_ylabel("latency, s (received by a subscriber)")
    axes.set_title("End-to-end latency through Kafka, one worker")
    axes.legend(fontsize=7, ncol=2)
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, (__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, nargs="+", help="concurrent calls per level")
    parser.add_argument(
        "--recovery-calls",
        type=int,
        default=RECOVERY_CALLS,
        help=f"calls of the kill -9 run (default {RECOVERY_CALLS}; 0 skips it)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    levels = args.calls or (QUICK_CALLS if args.quick else FULL_CALLS)
    results = measure(levels, args.threads, args.recovery_calls)
    at_target = results["levels"].get(str(TARGET_CALLS))
    recovery = results.get("recovery")
    targets = [
        Target(
            f"{TARGET_CALLS} calls: P95 capture→view (every chunk of the utterances shown, until "
            "a partial or final shows it)",
            None if not at_target else _s(at_target["chunk_to_view_ms"]["p95"]),
            TARGET_PARTIAL_P95_S,
            "s",
        ),
        Target(
            f"{TARGET_CALLS} calls: P95 capture→partial (emitted partials only)",
            None if not at_target else _s(at_target["chunk_to_partial_ms"]["p95"]),
            TARGET_PARTIAL_P95_S,
            "s",
        ),
        Target(
            f"{TARGET_CALLS} calls: P95 endpoint→final",
            None if not at_target else _s(at_target["endpoint_to_final_ms"]["p95"]),
            TARGET_FINAL_P95_S,
            "s",
        ),
    ]
    if recovery:
        compared = recovery["compared_with_failure_free_run"]
        targets += [
            Target(
                "recovery after kill -9: kill → first partial of the slowest affected call",
                recovery["recovery_max_s"],
                recovery["session_timeout_s"] + RECOVERY_MARGIN_S,
                "s",
            ),
            Target(
                "affected calls with no partial after the kill",
                float(len(recovery["affected_calls_without_partial"])),
                0,
                "",
            ),
            Target("lost finals", float(len(compared["lost"])), 0, ""),
            Target("duplicated finals", float(recovery["duplicate_finals"]), 0, ""),
        ]
    notes = [
        SHARED_MACHINE_NOTE,
        "Publisher, reader, broker and worker share the machine's cores.",
    ]
    if not at_target:
        notes.append(
            f"The {TARGET_CALLS}-call level did not run in this mode (quick runs "
            f"{', '.join(map(str, QUICK_CALLS))} call(s)); `python -m bench.run --only e2e` "
            "runs it."
        )
    write_results(
        NAME,
        quick=args.quick,
        config={
            "calls": list(levels),
            "torch_threads": args.threads,
            "recovery_calls": args.recovery_calls or None,
            "kill_after_s": KILL_AFTER_S,
            "worker": "streamscribe worker, settings defaults (session timeout 10 s)",
        },
        results=results,
        markdown=markdown(results, args.threads),
        targets=targets,
        figures={"": plot(results)},
        notes=notes,
        started_s=started,
        out=args.out,
    )
    print(markdown(results, args.threads))
    return 0


def _s(value_ms: float | None) -> float | None:
    return None if value_ms is None else value_ms / 1000


if __name__ == "__main__":
    raise SystemExit(main())
