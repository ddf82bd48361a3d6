"""``streamscribe worker``: a member of the ASR consumer group, until SIGTERM."""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import logging
import signal
import sys
import time
from typing import Any

from pipeline.cli.options import (
    add_env_option,
    add_log_level_option,
    settings_from_args,
    warn_unknown_env_variables,
)
from pipeline.clock import WallClock
from pipeline.settings import validate_settings

LOAD_STALL_S = 600.0
"""A worker still loading its model after this long answers /healthz with 503 (restarted)."""

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "worker", help="consume audio.chunks and publish partials, finals and events"
    )
    add_env_option(
        parser, "--worker-id", env="STREAMSCRIBE_WORKER_ID", help="stable id of this worker"
    )
    add_env_option(
        parser,
        "--metrics-port",
        env="STREAMSCRIBE_METRICS_PORT",
        type=int,
        help="port of /metrics, /healthz, /readyz (0 = off)",
    )
    add_log_level_option(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    # The model and Kafka clients load only for this command.
    from pipeline.asr.factory import build_engine
    from pipeline.asr.whisper.tokenizer import WhisperTokenizer
    from pipeline.hotwords import HotwordRegistry, ListRef
    from pipeline.runtime.health import KafkaProbe, Readiness, start_health_server
    from pipeline.runtime.metrics import Dependency, WorkerMetrics
    from pipeline.worker.loop import AsrWorker

    # SIGTERM before the worker runs (loading the model, waiting for Redis): nothing to hand
    # over yet, so leave at once (as PID 1 in a container the default would ignore it).
    signal.signal(signal.SIGTERM, _leave_now)
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how to see where a worker hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    settings = settings_from_args(args)
    warn_unknown_env_variables()
    if args.worker_id is not None:
        settings = dataclasses.replace(
            settings, worker=dataclasses.replace(settings.worker, worker_id=args.worker_id)
        )
    if args.metrics_port is not None:
        settings = dataclasses.replace(
            settings, metrics=dataclasses.replace(settings.metrics, port=args.metrics_port)
        )
    validate_settings(settings)  # the flags are held to the settings' bounds
    if settings.worker.static_membership and not settings.worker.worker_id:
        # A static member does not leave the group when it stops: with an id that changes at
        # every start, each restart leaves its partitions to wait for the session timeout.
        print(
            "streamscribe: warning: STREAMSCRIBE_STATIC_MEMBERSHIP without STREAMSCRIBE_WORKER_ID "
            "uses host-pid as group.instance.id, which changes when the process restarts (but "
            "not a container's PID 1); set a worker id that survives restarts, such as a "
            "StatefulSet pod name",
            file=sys.stderr,
        )
    metrics = WorkerMetrics()
    metrics.set_latency_objective(settings.metrics.latency_objective_ms / 1000)
    clock = WallClock()  # one clock for the engine's outputs and the worker's events
    registries: list[HotwordRegistry] = []
    worker: AsrWorker | None = None
    probe = KafkaProbe(settings.kafka, timeout_s=settings.metrics.probe_timeout_ms / 1000)

    def readiness() -> Readiness:
        kafka = probe.check()
        metrics.set_dependency_up(Dependency.KAFKA, kafka.ok)
        return Readiness.of(
            kafka,
            model_loaded=worker is not None and worker.status.model_loaded,
            partitions_assigned=worker is not None and bool(worker.status.assigned),
        )

    loading_since_s = time.monotonic()

    def stalled() -> str | None:
        if worker is not None:
            return worker.stalled()
        loading_s = time.monotonic() - loading_since_s
        if loading_s > LOAD_STALL_S:  # a wedged CUDA init or model load: restart the pod
            return f"the model has been loading for {loading_s:.0f} s"
        return None

    # Served from before the model loads: alive (and not ready) while loading, so a liveness
    # probe does not restart a worker whose load is slow.
    server = start_health_server(settings.metrics, metrics.registry, readiness, stalled)

    def on_dependency(up: bool, detail: str) -> None:
        if worker is not None:
            worker.notify_dependency(Dependency.REDIS, up, detail)

    def on_update(ref: ListRef, version: int) -> None:
        if worker is not None:
            worker.notify_hotwords(ref.scope, ref.tenant, ref.call_id, version)

    def hotwords(tokenizer: WhisperTokenizer) -> HotwordRegistry:
        registry = HotwordRegistry.from_settings(
            settings, tokenizer, on_dependency=on_dependency, on_update=on_update
        )
        registries.append(registry)
        return registry

    try:
        logging.getLogger(__name__).info("loading the model (device %s)", settings.asr.device)
        loaded = build_engine(settings.asr, clock, biases=hotwords)
        metrics.set_model(loaded.model_id, loaded.device, loaded.dtype)
        worker = AsrWorker(
            settings,
            loaded.engine,
            metrics=metrics,
            clock=clock,
            model_facts={
                "model_id": loaded.model_id,
                "device": loaded.device,
                "dtype": loaded.dtype,
            },
        )
        for registry in registries:
            # Redis down at start is not fatal: the worker transcribes without hotwords meanwhile.
            registry.start()
            registry.wait_loaded(timeout_s=5)
        worker.install_signal_handlers()
        worker.run()
    finally:
        for registry in registries:
            registry.stop()
        if server is not None:
            server.stop()
    return 0


def _leave_now(signum: int, frame: object) -> None:
    raise SystemExit(0)
