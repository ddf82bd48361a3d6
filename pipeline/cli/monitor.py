"""``streamscribe monitor``: the live call monitor, a web server for supervisors and QA analysts.

Reads asr.partials, asr.events, asr.finals and qa.calls (no consumer group, no commits) and
serves the live page, the call pages, recent-call search and a health strip (docs/monitor.md).
Runs until SIGTERM / SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
import sys
from typing import Any

from pipeline.cli.options import add_env_option, add_log_level_option, settings_from_args
from pipeline.settings import Settings

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "monitor",
        help="web monitor: live calls, call transcripts with QA summaries, recent-call search",
        description="Serve the live call monitor: calls in progress with live partials, each "
        "call's conversation with word timings and its QA summary, recent-call search, and a "
        "health strip from the workers' /metrics. Reads asr.partials, asr.events, asr.finals "
        "and qa.calls without joining a consumer group.",
    )
    add_env_option(
        parser,
        "--port",
        env="STREAMSCRIBE_MONITOR_PORT",
        help="port of the web pages and JSON APIs",
        type=int,
        metavar="PORT",
    )
    add_env_option(
        parser,
        "--bind",
        env="STREAMSCRIBE_MONITOR_BIND",
        help="address the web server binds",
        metavar="ADDRESS",
    )
    add_env_option(
        parser,
        "--worker-metrics",
        env="STREAMSCRIBE_MONITOR_WORKER_METRICS_URLS",
        help="comma-separated /metrics URLs of the ASR workers (health strip)",
        metavar="URLS",
    )
    add_env_option(
        parser,
        "--max-calls",
        env="STREAMSCRIBE_MONITOR_MAX_CALLS",
        help="most calls held in memory",
        type=int,
        metavar="N",
    )
    add_log_level_option(parser)
    parser.set_defaults(handler=_run)


def _monitor_settings(args: argparse.Namespace) -> Settings:
    settings = settings_from_args(args)
    overrides = {
        "port": args.port,
        "bind": args.bind,
        "worker_metrics_urls": args.worker_metrics,
        "max_calls": args.max_calls,
    }
    given = {name: value for name, value in overrides.items() if value is not None}
    return dataclasses.replace(settings, monitor=dataclasses.replace(settings.monitor, **given))


def _run(args: argparse.Namespace) -> int:
    settings = _monitor_settings(args)
    # Imported here: aiohttp and confluent-kafka load only for the command that runs them.
    from pipeline.monitor.server import MonitorServer, validate_monitor_settings

    validate_monitor_settings(settings.monitor)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.log_level != "debug":  # one line per request (and per stream) only when debugging
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server = MonitorServer(settings)
    asyncio.run(_serve(server))
    return 0


async def _serve(server: Any) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def listening(url: str) -> None:
        print(f"streamscribe monitor: serving {url}", file=sys.stderr, flush=True)

    await server.serve(stop, on_listening=listening)
