"""A Jepsen-style nemesis: calls through three workers while workers are frozen, killed, stopped
and restarted and the broker is restarted; every final is checked against a fault-free decode.

    .venv/bin/python -m bench.chaos [--minutes 10] [--seed 1] [--quick]

The run has its own broker (``deploy/local/kafka.sh`` on ``CHAOS_KAFKA_PORT``, its own data), so
restarting it disturbs nothing else. Three ``streamscribe worker`` processes share a group
(session timeout 6 s, transaction timeout 10 s); waves of fixture calls are published in real
time, one wave after another, for ``--minutes``. Meanwhile the nemesis, from a seeded plan
(``plan_faults``), every 6–15 s does one of:

- **freeze** a worker (``SIGSTOP``, every thread, heartbeats too) for 8–14 s, past the session
  timeout, then ``SIGCONT``: it wakes as a zombie whose partitions moved on;
- **kill** a worker (``SIGKILL``) and start it again 1–8 s later;
- **stop** a worker (``SIGTERM``: a graceful hand-over) and start it again;
- **restart the broker** (down for 3–12 s);
- restart a worker **armed with a fault point** (``pipeline/worker/faults.py``): killed or
  crashed after ``send_offsets_to_transaction``, before a commit, between recognizer batches, or
  frozen there (woken by the nemesis after 8–14 s), at a random pass.

A worker that exits is started again (unarmed) 2 s later. After the nemesis stops, every worker
is woken and restarted unarmed, and the run waits for every channel's ``session_ended``. Then
each final published is compared with what the engine alone makes of the same audio (finals are a
function of the audio: ``docs/decisions/0002``): **lost** (expected, never published),
**duplicated** (an utterance id published twice), **renumbered** (an id the fault-free decode does
not have), **text differs**; a final of a channel whose session never ended is **not drained**
(the workers had not got through its audio: the drain waits 5 min more each time a channel ends,
then stops). The targets are 0 for each.

``--quick``: 1.5 minutes; ``make test`` runs about that in ``tests/integration/test_chaos.py``.
Writes ``bench/results/chaos.json`` and ``.md``; the worker logs go to ``LOG_DIR``, and for a
post-mortem each run leaves there ``<prefix>records.json`` (finals, events, the expected finals,
the plan) and ``<prefix>topics.json`` (every audio record's key, headers and offset, every
checkpoint and dead letter, committed or not). ``CHAOS_KAFKA_PORT`` moves the run's broker
(default 19292) and ``CHAOS_WORKER_LOG_LEVEL`` sets the workers' log level (default INFO). The
publisher waits up to 5 minutes for a delivery: a broker restart on a loaded machine takes far
longer than the 30 s default, and audio lost at the source would be no worker's loss (a publisher
that still fails ends the run with its error).
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.common import REPO, Target, bench_parser, markdown_table, write_results
from bench.e2e import (
    LOG_DIR,
    PacedPublisher,
    WorkerProcess,
    live_calls,
    worker_env,
)
from bench.embedded import embedded_finals
from bench.infra import TopicReader, free_port
from pipeline.audio.files import CallAudio
from pipeline.runtime.admin import TopicAdmin
from pipeline.settings import KafkaSettings
from pipeline.topics import TopicRole, load_topic_specs, topic_name

__all__ = ["Fault", "Nemesis", "OwnBroker", "plan_faults", "process_stopped", "run", "verdict"]

NAME = "chaos"
PUBLISH_DELIVERY_TIMEOUT_MS = 300_000
"""The publisher's delivery timeout (librdkafka's default): a broker restart takes well over
the 30 s default on a loaded machine, and audio lost at the source is no worker's loss."""
CHAOS_KAFKA_PORT = int(os.environ.get("CHAOS_KAFKA_PORT", "19292"))
WORKERS = ("w-1", "w-2", "w-3")
CALLS_PER_WAVE = 3
FULL_MINUTES = 10.0
QUICK_MINUTES = 1.5
SESSION_TIMEOUT_MS = 6000
TRANSACTION_TIMEOUT_MS = 10000
GAP_S = (6.0, 15.0)
FREEZE_S = (8.0, 14.0)
DOWN_S = (1.0, 8.0)
BROKER_DOWN_S = (3.0, 12.0)
RESTART_AFTER_EXIT_S = 2.0
DRAIN_TIMEOUT_S = 300.0
ARMED_POINTS = ("after_send_offsets", "before_commit", "recognizer_batch")
ARMED_ACTIONS = ("kill", "raise", "stop")
ACTIONS = ("freeze", "kill", "stop", "broker", "armed")


@dataclass(frozen=True, slots=True)
class Fault:
    """One nemesis action: at ``at_s`` into the run, ``action`` on ``worker`` (None: the
    broker) for ``hold_s`` (frozen, down, or before the restart); ``armed``: the fault point a
    restarted worker gets (``STREAMSCRIBE_FAULTS``)."""

    at_s: float
    action: str
    worker: str | None
    hold_s: float
    armed: str = ""


def plan_faults(
    rng: random.Random, duration_s: float, workers: Sequence[str], *, broker: bool = True
) -> list[Fault]:
    """A seeded schedule of nemesis actions over ``duration_s``, one every ``GAP_S``."""
    actions = [a for a in ACTIONS if broker or a != "broker"]
    plan = []
    at_s = rng.uniform(*GAP_S) / 2
    while at_s < duration_s:
        action = rng.choice(actions)
        worker = None if action == "broker" else rng.choice(list(workers))
        if action == "freeze":
            hold_s = rng.uniform(*FREEZE_S)
        elif action == "broker":
            hold_s = rng.uniform(*BROKER_DOWN_S)
        else:
            hold_s = rng.uniform(*DOWN_S)
        armed = ""
        if action == "armed":
            point, how = rng.choice(ARMED_POINTS), rng.choice(ARMED_ACTIONS)
            armed = f"{point}={how}@{rng.randint(3, 30)}"
        plan.append(Fault(round(at_s, 2), action, worker, round(hold_s, 2), armed))
        at_s += rng.uniform(*GAP_S)
    return plan


def verdict(
    expected: Mapping[str, str],
    finals: Sequence[Mapping[str, Any]],
    ended: set[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """Every published final (each record once: ``run`` drops a record read again at the same
    offset) against the fault-free decode (``expected``: id → text). With ``ended`` (the
    (call, channel) pairs whose ``session_ended`` was published), an expected final of a channel
    that never ended is **not drained** (the workers had not got through its audio when the run
    stopped waiting: no verdict on it), not lost."""
    counts = Counter(str(f["utterance_id"]) for f in finals)
    texts = {str(f["utterance_id"]): str(f["text"]) for f in finals}
    missing = sorted(set(expected) - set(texts))
    undrained = [] if ended is None else [u for u in missing if _channel(u) not in ended]
    return {
        "expected": len(expected),
        "published": len(finals),
        "lost": [u for u in missing if u not in set(undrained)],
        "not_drained": undrained,
        "duplicated": sorted(uid for uid, n in counts.items() if n > 1),
        "renumbered": sorted(set(texts) - set(expected)),
        "text_differs": sorted(u for u in set(expected) & set(texts) if expected[u] != texts[u]),
    }


def _channel(utterance_id: str) -> tuple[str, str]:
    """(call, channel) of an utterance id ``call:channel:index``."""
    call, channel, _ = utterance_id.rsplit(":", 2)
    return call, channel


class OwnBroker:
    """A broker of the run's own on ``port`` (fresh data), started, stopped and restarted
    with ``deploy/local/kafka.sh``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._env = {**os.environ, "KAFKA_PORT": str(port)}
        cache = Path(os.environ.get("STREAMSCRIBE_CACHE", Path.home() / ".cache" / "streamscribe"))
        self._data = cache / "run" / f"kafka-{port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _script(self, action: str) -> None:
        result = subprocess.run(
            ["bash", str(REPO / "deploy" / "local" / "kafka.sh"), action],
            env=self._env,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kafka.sh {action} (port {self.port}): {result.stderr[-2000:]}")

    def up(self) -> None:
        self._script("up")

    def down(self) -> None:
        self._script("down")

    @contextmanager
    def running(self) -> Iterator[OwnBroker]:
        self.down()  # one left by an interrupted run, before its folder goes
        shutil.rmtree(self._data, ignore_errors=True)
        self.up()
        try:
            yield self
        finally:
            self.down()
            shutil.rmtree(self._data, ignore_errors=True)


@dataclass
class _Member:
    """One worker slot: its process now, and what the nemesis is doing to it."""

    worker_id: str
    kafka: KafkaSettings
    group_id: str
    process: WorkerProcess | None = None
    frozen_until: float | None = None
    restart_at: float | None = None
    armed: str = ""  # the fault point the running process has armed
    next_armed: str = ""  # and the one its next start gets
    starts: int = 0
    exits: Counter[str] = field(default_factory=Counter)

    def start(self, armed: str = "") -> None:
        port = free_port()
        env = worker_env(self.kafka, self.group_id, 1, port)
        env |= {
            "STREAMSCRIBE_KAFKA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
            "STREAMSCRIBE_TRANSACTION_TIMEOUT_MS": str(TRANSACTION_TIMEOUT_MS),
            "STREAMSCRIBE_LOG_LEVEL": os.environ.get("CHAOS_WORKER_LOG_LEVEL", "INFO"),
        }
        if armed:
            env["STREAMSCRIBE_FAULTS"] = armed
        self.starts += 1
        log = LOG_DIR / f"{self.kafka.topic_prefix}{self.worker_id}-{self.starts}.log"
        self.process = WorkerProcess(self.worker_id, env, log, port).start()
        self.armed, self.frozen_until, self.restart_at = armed, None, None

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.process is not None and self.alive():
            self.process.process.send_signal(sig)

    def frozen(self) -> bool:
        """Stopped (state T): by the nemesis, or by a ``stop`` fault point."""
        if not self.alive():
            return False
        assert self.process is not None
        return process_stopped(self.process.pid)

    def reap(self) -> None:
        """Note an exit and schedule the restart."""
        if self.process is None or self.process.process is None or self.restart_at is not None:
            return
        code = self.process.process.returncode
        self.exits[str(code)] += 1
        self.restart_at = time.monotonic() + RESTART_AFTER_EXIT_S
        self.next_armed = ""


def process_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T in ``/proc``, as ``SIGSTOP`` leaves it);
    False when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


class Nemesis:
    """Applies a plan of faults to the members and the broker; keeps the cluster alive."""

    def __init__(self, members: Sequence[_Member], broker: OwnBroker, plan: Sequence[Fault]):
        self.members = {m.worker_id: m for m in members}
        self.broker = broker
        self.plan = list(plan)
        self.done: Counter[str] = Counter()

    def tick(self, elapsed_s: float) -> None:
        """Apply what is due at ``elapsed_s``; wake, restart what is due."""
        now = time.monotonic()
        while self.plan and self.plan[0].at_s <= elapsed_s:
            self._apply(self.plan.pop(0), now)
        for member in self.members.values():
            self._tend(member, now)

    def _apply(self, fault: Fault, now: float) -> None:
        if fault.action == "broker":
            self.broker.down()
            time.sleep(fault.hold_s)
            self.broker.up()
            self.done["broker"] += 1
            return
        assert fault.worker is not None
        member = self.members[fault.worker]
        if not member.alive() or member.frozen():
            return  # already down: skipped, not counted
        if fault.action == "freeze":
            member.signal(signal.SIGSTOP)
            member.frozen_until = now + fault.hold_s
        elif fault.action in ("kill", "armed"):
            assert member.process is not None
            member.process.kill9()
            member.restart_at = now + fault.hold_s
            member.next_armed = fault.armed
        elif fault.action == "stop":
            assert member.process is not None
            member.process.terminate()
            member.restart_at = now + fault.hold_s
        self.done[fault.action] += 1

    def _tend(self, member: _Member, now: float) -> None:
        if member.frozen():
            if member.frozen_until is None:  # frozen by a stop fault point
                member.frozen_until = now + random.uniform(*FREEZE_S)
                self.done["armed_stop_fired"] += 1
            elif now >= member.frozen_until:
                member.signal(signal.SIGCONT)
                member.frozen_until = None
            return
        if not member.alive():
            member.reap()
            if member.restart_at is not None and now >= member.restart_at:
                member.start(member.next_armed)
                member.next_armed = ""

    def settle(self) -> None:
        """Wake every worker and run every slot unarmed, so that the calls can drain."""
        for member in self.members.values():
            if member.frozen():
                member.signal(signal.SIGCONT)
            if member.armed or not member.alive():
                if member.alive():
                    assert member.process is not None
                    member.process.terminate()
                member.start()


def run(
    minutes: float, seed: int, *, broker_restarts: bool = True, port: int = CHAOS_KAFKA_PORT
) -> dict[str, Any]:
    """One nemesis run; returns its results (``verdict`` and what the nemesis did)."""
    rng = random.Random(seed)
    duration_s = minutes * 60
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    # Not from the seeded generator: a rerun of a seed must not overwrite the last one's logs.
    prefix = f"chaos-{seed}-{uuid.uuid4().hex[:6]}."
    broker = OwnBroker(port)
    with broker.running():
        kafka = KafkaSettings(bootstrap_servers=broker.bootstrap, topic_prefix=prefix)
        TopicAdmin(kafka).apply(load_topic_specs(prefix=prefix))
        group_id = f"{prefix}asr"
        members = [_Member(worker_id, kafka, group_id) for worker_id in WORKERS]
        finals_topic = topic_name(TopicRole.FINALS, prefix)
        events_topic = topic_name(TopicRole.EVENTS, prefix)
        reader = TopicReader(kafka.bootstrap_servers, [finals_topic, events_topic]).start()
        audio: dict[str, CallAudio] = {}
        plan = plan_faults(rng, duration_s, WORKERS, broker=broker_restarts)
        nemesis = Nemesis(members, broker, plan)
        try:
            for member in members:
                member.start()
            _wait_until(lambda: _assigned(reader, events_topic) >= len(WORKERS), 240)
            started = time.monotonic()
            wave = 0
            while time.monotonic() - started < duration_s:
                calls = live_calls(CALLS_PER_WAVE, f"wave{wave}", seed + wave)
                audio |= {call.call_id: call.audio for call in calls}
                publisher = PacedPublisher(
                    kafka, calls, delivery_timeout_ms=PUBLISH_DELIVERY_TIMEOUT_MS
                ).start()
                while not publisher.done.is_set():
                    nemesis.tick(time.monotonic() - started)
                    time.sleep(0.5)
                publisher.join()
                wave += 1
            nemesis_s = time.monotonic() - started
            nemesis.settle()
            channels = sum(len(call.channels) for call in audio.values())
            drained = _drain(reader, events_topic, channels)
            drain_s = time.monotonic() - started - nemesis_s
        finally:
            for member in members:
                if member.frozen():
                    member.signal(signal.SIGCONT)
                if member.process is not None:
                    member.process.terminate()
            reader.stop()
        received = reader.snapshot(finals_topic)
        finals = list({(r.partition, r.offset): r.value for r in received}.values())
        rereads = len(received) - len(finals)
        events = [r.value for r in reader.snapshot(events_topic)]
        dump_topics(kafka, prefix, LOG_DIR / f"{prefix}topics.json")
        TopicAdmin(kafka).delete([spec.name for spec in load_topic_specs(prefix=prefix)])
    expected = embedded_finals(audio)
    # Kept beside the worker logs for a post-mortem: the topics and the broker are gone.
    (LOG_DIR / f"{prefix}records.json").write_bytes(
        orjson.dumps({"finals": finals, "events": events, "expected": expected, "plan": plan})
    )
    return {
        "seed": seed,
        "minutes": minutes,
        "nemesis_s": round(nemesis_s, 1),
        "drain_s": round(drain_s, 1),
        "calls": len(audio),
        "channels": channels,
        "all_sessions_ended": drained,
        # Records the reader was handed again (same partition and offset, after a broker
        # restart reset its position): the client's, not the workers', and not counted.
        "finals_read_again": rereads,
        "actions": dict(sorted(nemesis.done.items())),
        "worker_starts": {m.worker_id: m.starts for m in members},
        "worker_exits": {m.worker_id: dict(m.exits) for m in members},
        **verdict(
            expected,
            finals,
            {
                (str(e["call_id"]), str(e["channel"]))
                for e in events
                if e.get("type") == "session_ended"
            },
        ),
    }


def dump_topics(kafka: KafkaSettings, prefix: str, path: Path) -> None:
    """Every record of the run's audio (key, headers, offset: not the samples), checkpoints
    and dead letters, committed or not, for a post-mortem once the broker is gone."""
    from confluent_kafka import Consumer, TopicPartition

    dumped: dict[str, list[dict[str, Any]]] = {}
    for role in (TopicRole.AUDIO_CHUNKS, TopicRole.CHECKPOINTS, TopicRole.DLQ):
        name = topic_name(role, prefix)
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = Consumer(
                {
                    "bootstrap.servers": kafka.bootstrap_servers,
                    "group.id": f"chaos-dump-{uuid.uuid4().hex}",
                    "enable.auto.commit": False,
                    "isolation.level": isolation,
                }
            )
            try:
                metadata = consumer.list_topics(name, timeout=10).topics[name]
                partitions = [TopicPartition(name, p, 0) for p in metadata.partitions]
                consumer.assign(partitions)
                ends = {
                    p.partition: consumer.get_watermark_offsets(p, timeout=10)[1]
                    for p in partitions
                }
                rows: list[dict[str, Any]] = []
                done: set[int] = {p for p, end in ends.items() if end <= 0}
                deadline = time.monotonic() + 60
                while len(done) < len(ends) and time.monotonic() < deadline:
                    for m in consumer.consume(500, 1.0):
                        if m.error() is not None:
                            continue
                        value = m.value()
                        row: dict[str, Any] = {
                            "partition": m.partition(),
                            "offset": m.offset(),
                            "timestamp_ms": m.timestamp()[1],
                            "key": (m.key() or b"").decode("utf-8", "replace"),
                            "headers": {
                                k: (v or b"").decode("utf-8", "replace")
                                for k, v in (m.headers() or [])
                            },
                        }
                        if role is not TopicRole.AUDIO_CHUNKS and value is not None:
                            row["value"] = value.decode("utf-8", "replace")
                        row["tombstone"] = value is None
                        rows.append(row)
                        if m.offset() + 1 >= ends[m.partition()]:
                            done.add(m.partition())
                    positions = consumer.position(partitions)
                    done |= {p.partition for p in positions if p.offset >= ends[p.partition]}
                dumped[f"{role.value}:{isolation}"] = rows
            finally:
                consumer.close()
    path.write_bytes(orjson.dumps(dumped))


def _drain(reader: TopicReader, events_topic: str, channels: int) -> bool:
    """Wait until every channel's session ended, as long as the workers make progress: each
    channel that ends gives them ``DRAIN_TIMEOUT_S`` more (on a loaded machine they can be
    minutes behind after the nemesis); False once none ended for that long."""
    ended = len(_ended(reader, events_topic))
    while ended < channels:
        more = functools.partial(lambda seen: len(_ended(reader, events_topic)) > seen, ended)
        if not _wait_until(more, DRAIN_TIMEOUT_S):
            return False
        ended = len(_ended(reader, events_topic))
    return True


def _wait_until(predicate: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return bool(predicate())


def _assigned(reader: TopicReader, events_topic: str) -> int:
    return len(
        {
            r.value["source"]
            for r in reader.snapshot(events_topic)
            if r.value.get("type") == "partitions_assigned" and r.value["detail"]["partitions"]
        }
    )


def _ended(reader: TopicReader, events_topic: str) -> set[tuple[str, str]]:
    return {
        (r.value["call_id"], r.value["channel"])
        for r in reader.snapshot(events_topic)
        if r.value.get("type") == "session_ended"
    }


def markdown(runs: Sequence[dict[str, Any]]) -> str:
    rows = [
        [
            str(r["seed"]),
            f"{r['nemesis_s'] / 60:.1f}",
            str(r["calls"]),
            ", ".join(f"{k} {v}" for k, v in r["actions"].items()),
            f"{r['published']} / {r['expected']}",
            str(len(r["lost"])),
            str(len(r.get("not_drained", ()))),
            str(len(r["duplicated"])),
            str(len(r["renumbered"])),
            str(len(r["text_differs"])),
            "yes" if r["all_sessions_ended"] else "**no**",
        ]
        for r in runs
    ]
    header = [
        "seed",
        "minutes",
        "calls",
        "nemesis actions",
        "finals published / expected",
        "lost",
        "not drained",
        "duplicated",
        "renumbered",
        "text differs",
        "all ended",
    ]
    return (
        "## Chaos: finals through a nemesis of frozen, killed and restarted workers and broker\n\n"
        "Three workers (session timeout 6 s, transaction timeout 10 s) on a broker of the run's "
        "own; fixture calls in real time, in waves; every final compared with the engine's "
        "fault-free decode of the same audio (method: `bench/chaos.py`).\n\n"
        + markdown_table(header, rows)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(NAME, "finals through a nemesis of faults, against a fault-free run")
    parser.add_argument("--minutes", type=float, default=None, help="nemesis minutes per run")
    parser.add_argument("--runs", type=int, default=1, help="runs, seeds seed..seed+runs-1")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-broker-restarts", action="store_true")
    args = parser.parse_args(argv)
    minutes = args.minutes or (QUICK_MINUTES if args.quick else FULL_MINUTES)
    started_s = time.monotonic()
    runs = []
    for seed in range(args.seed, args.seed + args.runs):
        result = run(minutes, seed, broker_restarts=not args.no_broker_restarts)
        runs.append(result)
        print(
            f"seed {seed}: {result['published']}/{result['expected']} finals, lost "
            f"{len(result['lost'])}, not drained {len(result['not_drained'])}, duplicated "
            f"{len(result['duplicated'])}, renumbered "
            f"{len(result['renumbered'])}, text differs {len(result['text_differs'])}",
            flush=True,
        )
    total = {
        key: sum(len(r[key]) for r in runs)
        for key in ("lost", "not_drained", "duplicated", "renumbered", "text_differs")
    }
    targets = [
        Target(
            "nemesis minutes, all runs", sum(r["nemesis_s"] for r in runs) / 60, 30, "min", True
        ),
        *(Target(f"{key.replace('_', ' ')} finals", value, 0, "") for key, value in total.items()),
    ]
    write_results(
        NAME,
        quick=args.quick,
        config={
            "minutes": minutes,
            "runs": args.runs,
            "seed": args.seed,
            "workers": len(WORKERS),
            "calls_per_wave": CALLS_PER_WAVE,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS,
            "broker_restarts": not args.no_broker_restarts,
        },
        results={"runs": runs, "totals": total},
        markdown=markdown(runs),
        targets=targets,
        started_s=started_s,
        out=args.out,
    )
    return 0 if not any(total.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
