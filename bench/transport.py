"""Transport ceiling: how many 20 ms chunks per second the worker moves with no model.

    .venv/bin/python -m bench.transport [--quick] [--chunks N] [--rounds N] [--no-profile]

A topic is pre-filled with N chunk records (fixture call audio, 16 kHz stereo, 20 ms = 640 B
per record) through ``AudioPublisher``. Then, in the same run and in turns:

- a **bare consumer**: a confluent-kafka ``Consumer`` with the worker's own consumer settings
  (``pipeline.runtime.kafka.consumer_config``, read_committed, batches of ``poll_batch``),
  touching each value, nothing else;
- two more readers with the same loop, to split the gap: **fields read** reads what any reader
  of this contract must (partition, offset, key, headers, samples as float32) and nothing
  else, the ceiling of a Python reader; **decoded** adds the contract's validation
  (``decode_chunk``);
- the **worker**: ``AsrWorker`` in this process with a ``StreamingEngine`` whose recognizer
  returns empty hypotheses and whose VAD returns 0 (no model): every record goes through
  chunk validation, admission, the session's buffering and VAD gate, ``engine.step``,
  checkpoints, events and transactional commits, as in production.

Each gets a fresh consumer group and reads all N records; its rate is records / (time of the
last record − time of the first), so group joins are left out. The publisher's own rate is
reported too. A last worker round runs under cProfile (unless ``--no-profile``) and reports the
functions with the most own time: where a chunk's time goes.

Reading the committed results (bench/results/transport.md): 16 k chunks/s (313 channels'
worth), 0.13 of a bare consumer that only reads values (medians of runs: 14–25 k and 0.04–0.16;
the bare consumer itself ran at 122–360 k across rounds). A reader that only reads each record's
fields, with no logic, reaches 0.64 of it in the same run (0.37 in another): the ceiling of any
Python reader of this contract, near or below the 0.5 target.
"""

from __future__ import annotations

import cProfile
import dataclasses
import pstats
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from confluent_kafka import Consumer

from bench.common import (
    REPO,
    SHARED_MACHINE_NOTE,
    CpuMeter,
    Target,
    bench_parser,
    call_clips,
    fmt,
    markdown_table,
    new_figure,
    plain_log_axis,
    write_results,
)
from bench.infra import declared_topics, new_prefix, recreate_topics
from pipeline.asr.engine import EngineConfig, StreamingEngine
from pipeline.asr.recognizer import Recognition, RecognitionRequest
from pipeline.asr.session import SessionKey
from pipeline.contracts import decode_chunk
from pipeline.producer import AudioPublisher
from pipeline.runtime.kafka import consumer_config
from pipeline.runtime.metrics import WorkerMetrics
from pipeline.settings import KafkaSettings, Settings, WorkerSettings
from pipeline.topics import TopicRole, topic_name
from pipeline.worker.loop import AsrWorker

NAME = "transport"
CHUNK_MS = 20
TARGET_RATIO = 0.5
TARGET_RATE = 10_000.0
READ_TIMEOUT_S = 600.0
WORKER = "worker (no-op model)"


class NoopRecognizer:
    """A ``Recognizer`` that hears nothing: one empty hypothesis per request."""

    model_id = "noop"

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Recognition]:
        return [Recognition((), "", 0.0, 0.0, 0.0) for _ in requests]


class NoopVad:
    """A VAD that says "no speech" to every frame; its state is nothing."""

    frame_samples = 512

    def new_state(self) -> object:
        return None

    def speech_probs(self, frames: npt.NDArray[np.float32], states: Sequence[Any]) -> Any:
        return np.zeros(len(states), dtype=np.float32)

    def export_state(self, state: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return (), ()

    def import_state(self, data: tuple[tuple[float, ...], tuple[float, ...]]) -> object:
        return None


class CountingEngine(StreamingEngine):
    """The real engine, counting accepted chunks and when the first and last arrived."""

    def __init__(self) -> None:
        super().__init__(NoopRecognizer(), NoopVad(), EngineConfig())
        self.accepted = 0
        self.first_s: float | None = None
        self.last_s: float | None = None

    def accept(self, key: SessionKey, samples: Any, sample_rate_hz: int, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self.first_s is None:
            self.first_s = now
        self.last_s = now
        self.accepted += 1
        super().accept(key, samples, sample_rate_hz, **kwargs)


def prefill(kafka: KafkaSettings, chunks: int) -> dict[str, Any]:
    """Publish about ``chunks`` records: whole fixture calls (both channels), as fast as
    possible. Returns the exact count and the publisher's rate."""
    clips = call_clips(include_8k=False)
    calls = [(clips[i], clips[i + 1]) for i in range(0, len(clips), 2)]
    publisher = AudioPublisher.connect(Settings(kafka=kafka))
    sent = 0
    started = time.perf_counter()
    index = 0
    while sent < chunks:
        agent, customer = calls[index % len(calls)]
        with publisher.open_call(
            f"transport-{index:05d}", channels=("agent", "customer"), sample_rate_hz=16_000
        ) as call:
            call.push("agent", agent.samples)
            call.push("customer", customer.samples)
        sent += call.summary().records
        index += 1
    publisher.flush(120)
    elapsed = time.perf_counter() - started
    publisher.close(60)
    return {"records": sent, "calls": index, "publish_s": elapsed, "publish_rate": sent / elapsed}


def _touch_value(message: Any) -> None:
    """What the bare consumer does with a record: read its value."""
    len(message.value() or b"")


def _read_fields(message: Any) -> None:
    """What any reader of this contract must do with a record, and no more: read where it came
    from, its key and headers, and its samples into float32."""
    message.partition()
    message.offset()
    message.key()
    message.headers()
    np.frombuffer(message.value() or b"", dtype="<i2").astype(np.float32)


def _decode(message: Any) -> None:
    """The fields read and validated by the contract's codec (``decode_chunk``)."""
    message.partition()
    message.offset()
    decode_chunk(message.key(), message.value(), message.headers()).samples_float32()


# The readers below the worker, from least to most work per record: the gap between neighbours
# is what that layer costs.
READERS: dict[str, Callable[[Any], None]] = {
    "bare consumer": _touch_value,
    "fields read": _read_fields,
    "decoded": _decode,
}


def bare_consumer(
    kafka: KafkaSettings, records: int, round_index: int, label: str = "bare consumer"
) -> dict[str, Any]:
    """A consumer with the worker's settings that does ``READERS[label]`` to every record."""
    touch = READERS[label]
    name = label.replace(" ", "-")
    worker = dataclasses.replace(
        WorkerSettings(), group_id=f"{kafka.topic_prefix}{name}-{round_index}"
    )
    consumer = Consumer(consumer_config(kafka, worker, f"{name}-{round_index}"))
    consumer.subscribe([topic_name(TopicRole.AUDIO_CHUNKS, kafka.topic_prefix)])
    count = 0
    first_s = last_s = 0.0
    cpu = CpuMeter()
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while count < records and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=worker.poll_batch, timeout=0.1)
            for message in batch:
                if message.error() is not None:
                    continue
                touch(message)
                count += 1
            if batch and count:
                last_s = time.perf_counter()
                if not first_s:
                    first_s = last_s
                    cpu.restart()  # CPU from the first record on, as the rate
    finally:
        usage = cpu.read()
        consumer.close()
    return _rate(label, count, first_s, last_s, usage)


def worker_run(
    kafka: KafkaSettings, records: int, round_index: int, profile: cProfile.Profile | None = None
) -> dict[str, Any]:
    """The worker reads every record once; with ``profile``, its thread runs under it."""
    # A worker restores progress from asr.checkpoints: an earlier round's checkpoints would
    # make this one skip the records as already handled.
    recreate_topics(kafka, [TopicRole.CHECKPOINTS])
    worker_settings = dataclasses.replace(
        WorkerSettings(),
        group_id=f"{kafka.topic_prefix}worker-{round_index}",
        worker_id=f"bench-transport-{round_index}",
    )
    engine = CountingEngine()
    worker = AsrWorker(
        Settings(kafka=kafka, worker=worker_settings), engine, metrics=WorkerMetrics()
    )

    def run() -> None:
        if profile is None:
            worker.run()
            return
        profile.enable()  # cProfile follows the thread that enables it
        try:
            worker.run()
        finally:
            profile.disable()

    thread = threading.Thread(target=run, name="asr-worker", daemon=True)
    cpu = CpuMeter()
    thread.start()
    deadline = time.monotonic() + READ_TIMEOUT_S
    measuring = False
    try:
        while engine.accepted < records and time.monotonic() < deadline and thread.is_alive():
            if not measuring and engine.accepted:
                cpu.restart()  # CPU from the first record on, as the rate
                measuring = True
            time.sleep(0.05)
    finally:
        usage = cpu.read()
        worker.stop()
        thread.join(60)
    return _rate(
        WORKER,
        engine.accepted,
        engine.first_s or 0.0,
        engine.last_s or 0.0,
        usage,
        commits=worker.status.commits,
    )


def _rate(
    label: str, count: int, first_s: float, last_s: float, usage: dict[str, float], **extra: Any
) -> dict[str, Any]:
    span_s = max(last_s - first_s, 1e-9)
    return {
        "reader": label,
        "records": count,
        "span_s": span_s,
        "chunks_per_s": count / span_s if count > 1 else None,
        "audio_x_real_time": (count * CHUNK_MS / 1000) / span_s if count > 1 else None,
        "process_cores": usage["process_cores"],
        "machine_cpu_percent": usage["machine_cpu_percent"],
        **extra,
    }


def profile_top(profile: cProfile.Profile, count: int) -> list[dict[str, Any]]:
    """The ``count`` functions with the most own time in a profile."""
    stats = pstats.Stats(profile)
    rows = []
    for (path, line, function), entry in stats.stats.items():  # type: ignore[attr-defined]
        _, calls, own_s, cumulative_s, _ = entry
        where = path.replace(str(REPO) + "/", "")
        if "site-packages/" in where:
            where = where.split("site-packages/", 1)[1]
        rows.append(
            {
                "function": f"{where}:{line}({function})",
                "calls": calls,
                "own_s": own_s,
                "cumulative_s": cumulative_s,
            }
        )
    rows.sort(key=lambda row: row["own_s"], reverse=True)
    return rows[:count]


def measure(chunks: int, rounds: int, profile: bool = False) -> dict[str, Any]:
    with declared_topics(new_prefix(NAME)) as kafka:
        fill = prefill(kafka, chunks)
        print(f"pre-filled {fill['records']} records at {fill['publish_rate']:.0f}/s", flush=True)
        runs: list[dict[str, Any]] = []
        for round_index in range(rounds):
            for label in READERS:
                runs.append(bare_consumer(kafka, fill["records"], round_index, label))
            runs.append(worker_run(kafka, fill["records"], round_index))
            for result in runs[-len(READERS) - 1 :]:
                result["round"] = round_index
                print(f"{result['reader']}: {fmt(result['chunks_per_s'], 0)} chunks/s", flush=True)
        profiled = None
        if profile:
            profiler = cProfile.Profile()
            profiled = worker_run(kafka, fill["records"], rounds, profiler)
            profiled["profile_top"] = profile_top(profiler, 15)
    complete = all(r["records"] >= fill["records"] for r in runs)
    return {
        "prefill": fill,
        "runs": runs,
        "profiled_worker": profiled,
        "complete": complete,
        "bare_chunks_per_s_median": _median_rate(runs, "bare consumer"),
        "fields_chunks_per_s_median": _median_rate(runs, "fields read"),
        "decoded_chunks_per_s_median": _median_rate(runs, "decoded"),
        "worker_chunks_per_s_median": _median_rate(runs, WORKER),
        "worker_over_bare_median": _median_ratio(runs, WORKER, "bare consumer"),
        "fields_over_bare_median": _median_ratio(runs, "fields read", "bare consumer"),
        "decoded_over_bare_median": _median_ratio(runs, "decoded", "bare consumer"),
        "worker_over_fields_median": _median_ratio(runs, WORKER, "fields read"),
    }


def _median_rate(runs: list[dict[str, Any]], reader: str) -> float | None:
    rates = [r["chunks_per_s"] for r in runs if r["reader"] == reader and r["chunks_per_s"]]
    return float(np.median(rates)) if rates else None


def _median_ratio(runs: list[dict[str, Any]], reader: str, baseline: str) -> float | None:
    """Median over rounds of ``reader``'s rate over ``baseline``'s in the same round."""
    rates: dict[tuple[int, str], float] = {
        (r["round"], r["reader"]): r["chunks_per_s"] for r in runs if r["chunks_per_s"]
    }
    ratios = [
        rates[(round_index, reader)] / rates[(round_index, baseline)]
        for round_index in sorted({r["round"] for r in runs})
        if (round_index, reader) in rates and (round_index, baseline) in rates
    ]
    return float(np.median(ratios)) if ratios else None


def plot(results: dict[str, Any]) -> Any:
    """Chunks per second of each reader, one bar group per round (log scale: they span 10×)."""
    figure, axes = new_figure()
    readers = [*READERS, WORKER]
    rounds = sorted({r["round"] for r in results["runs"]})
    width = 0.8 / len(rounds)
    for index, round_index in enumerate(rounds):
        rates = {
            r["reader"]: r["chunks_per_s"] for r in results["runs"] if r["round"] == round_index
        }
        axes.bar(
            [position + index * width for position in range(len(readers))],
            [rates.get(reader, 0.0) for reader in readers],
            width,
            label=f"round {round_index}",
        )
    axes.set_xticks([position + 0.4 - width / 2 for position in range(len(readers))], readers)
    plain_log_axis(axes)
    axes.set_ylabel("chunks per second (20 ms each)")
    axes.set_title("Readers of one topic, least to most work per record")
    axes.legend()
    return figure


def markdown(results: dict[str, Any]) -> str:
    rows = [
        [
            r["round"],
            r["reader"],
            r["records"],
            fmt(r["span_s"], 2),
            fmt(r["chunks_per_s"], 0),
            fmt(r["audio_x_real_time"], 0),
            fmt(r["process_cores"], 2),
        ]
        for r in results["runs"]
    ]
    fill = results["prefill"]
    return "\n\n".join(
        [
            "## Transport: worker with a no-op model vs a bare consumer",
            f"{fill['records']} records of 20 ms (640 B, 16 kHz PCM) from {fill['calls']} "
            f"stereo calls, pre-filled by `AudioPublisher` at {fmt(fill['publish_rate'], 0)} "
            "records/s. Same topic, same consumer settings, turns in one run.",
            markdown_table(
                [
                    "round",
                    "reader",
                    "records",
                    "s",
                    "chunks/s",
                    "× real time (one channel)",
                    "CPU cores (process)",
                ],
                rows,
            ),
            f"Median: worker {fmt(results['worker_chunks_per_s_median'], 0)} chunks/s, bare "
            f"consumer {fmt(results['bare_chunks_per_s_median'], 0)} chunks/s, ratio "
            f"{fmt(results['worker_over_bare_median'], 3)}. A reader that only reads each "
            "record's partition, offset, key, headers and samples (float32), with no logic, "
            f"runs at {fmt(results['fields_over_bare_median'], 3)} of the bare consumer: the "
            "ceiling of any Python reader of this contract; the worker runs at "
            f"{fmt(results['worker_over_fields_median'], 3)} of that ceiling. `decoded` adds "
            "the contract's validation (`decode_chunk`) and alone runs at "
            f"{fmt(results['decoded_over_bare_median'], 3)} of the bare consumer: a worker that "
            "validated each record and did nothing else would stay below that.",
            *_profile_section(results.get("profiled_worker")),
        ]
    )


def _profile_section(profiled: dict[str, Any] | None) -> list[str]:
    if not profiled:
        return []
    rows = [
        [f"`{r['function']}`", r["calls"], fmt(r["own_s"], 3), fmt(r["cumulative_s"], 3)]
        for r in profiled["profile_top"]
    ]
    return [
        f"Where the worker's time goes (one more worker round under cProfile, "
        f"{fmt(profiled['chunks_per_s'], 0)} chunks/s with the profiler's overhead), by own "
        "time:",
        markdown_table(["function", "calls", "own s", "cumulative s"], rows),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, (__doc__ or "").splitlines()[0])
    parser.add_argument("--chunks", type=int, help="records to pre-fill")
    parser.add_argument("--rounds", type=int, help="turns of the readers and the worker")
    parser.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="skip the extra worker round under cProfile (top functions)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    chunks = args.chunks or (100_000 if args.quick else 200_000)
    rounds = args.rounds or (1 if args.quick else 3)
    results = measure(chunks, rounds, args.profile)
    write_results(
        NAME,
        quick=args.quick,
        config={"chunks": chunks, "rounds": rounds, "chunk_ms": CHUNK_MS, "profile": args.profile},
        results=results,
        markdown=markdown(results),
        figures={"": plot(results)},
        targets=[
            Target(
                "worker rate / bare consumer rate",
                results["worker_over_bare_median"],
                TARGET_RATIO,
                "",
                higher_is_better=True,
            ),
            Target(
                "worker chunks per second",
                results["worker_chunks_per_s_median"],
                TARGET_RATE,
                "chunks/s",
                higher_is_better=True,
            ),
        ],
        notes=[
            SHARED_MACHINE_NOTE,
            "The worker runs in the benchmark's process (a thread); the model is replaced, "
            "everything else (validation, admission, sessions, VAD gate, checkpoints, "
            "transactions) is the production code.",
            "The `fields read` reader bounds the ratio target: it reads only what any reader of "
            "this contract must read (the headers carry the chunk's metadata), so its ratio to "
            f"the bare consumer ({fmt(results['fields_over_bare_median'], 3)} in this run) is "
            "the most a Python reader of this topic can reach.",
        ],
        started_s=started,
        out=args.out,
    )
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
