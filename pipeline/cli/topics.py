"""``streamscribe topics apply|list``: align the cluster with ``topics/topics.toml``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.cli.options import add_env_option, settings_from_args
from pipeline.runtime.admin import TopicAdmin
from pipeline.topics import load_topic_specs, plan_topics

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("topics", help="create / align / inspect the Kafka topics")
    actions = parser.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    for name, help_text, handler in (
        ("apply", "create missing topics, raise partitions, align configs", _apply),
        ("list", "show declared topics and their drift from the cluster", _list),
    ):
        action = actions.add_parser(name, help=help_text)
        add_env_option(
            action,
            "--file",
            env="STREAMSCRIBE_TOPICS_FILE",
            help="topics file",
            type=Path,
            metavar="TOML",
        )
        action.set_defaults(handler=handler)


def _apply(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    specs = load_topic_specs(args.file, settings.kafka.topic_prefix)
    report = TopicAdmin(settings.kafka).apply(specs)
    if not report.changes:
        print(f"topics in sync: {len(specs)} topics, no change")
    for line in report.changes:
        print(line)
    return 0


def _list(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    specs = load_topic_specs(args.file, settings.kafka.topic_prefix)
    observed = TopicAdmin(settings.kafka).observe([spec.name for spec in specs])
    plan = plan_topics(specs, observed)
    print(f"{'topic':<28} {'partitions':>10}  drift")
    for spec in specs:
        have = observed.get(spec.name)
        partitions = f"{have.partitions if have else '-'}/{spec.partitions}"
        drift = [a.describe() for a in plan.actions if a.topic == spec.name]
        drift += [r for r in plan.refusals if r.startswith(spec.name + ":")]
        print(f"{spec.name:<28} {partitions:>10}  {'; '.join(drift) or 'in sync'}")
    return 0 if plan.in_sync else 3
