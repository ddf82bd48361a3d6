"""``streamscribe qa``: run the QA analytics app (faust) until SIGTERM / SIGINT.

``--check`` validates the settings and the rules file, prints the effective rules and exits
without touching Kafka (useful in CI for a rules file change).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from pipeline.cli.options import add_env_option, add_log_level_option, settings_from_args
from pipeline.qa.rules import QaRules, load_rules
from pipeline.settings import Settings, validate_settings

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "qa",
        help="run the QA analytics app: per-call summaries on qa.calls and a web view",
        description="Consume asr.finals and asr.events (read_committed), keep per-call tables, "
        "publish one summary per ended call (and revisions for late finals) to qa.calls, and "
        "serve /calls/{id}, /calls?since=…, /metrics, /healthz, /readyz.",
    )
    add_env_option(
        parser,
        "--rules",
        env="STREAMSCRIBE_QA_RULES_FILE",
        help="compliance rules file (TOML); built-in rules when empty",
        metavar="TOML",
    )
    add_env_option(
        parser,
        "--web-port",
        env="STREAMSCRIBE_QA_WEB_PORT",
        help="port of the web views and /metrics",
        type=int,
        metavar="PORT",
    )
    add_log_level_option(parser)
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate settings and rules, print the effective rules, and exit",
    )
    parser.set_defaults(handler=_run)


def _qa_settings(args: argparse.Namespace) -> Settings:
    settings = settings_from_args(args)
    qa = settings.qa
    if args.rules is not None:
        qa = dataclasses.replace(qa, rules_file=args.rules)
    if args.web_port is not None:
        qa = dataclasses.replace(qa, web_port=args.web_port)
    # The flags are held to the settings' bounds (port range, non-empty app id, …).
    return validate_settings(dataclasses.replace(settings, qa=qa))


def _describe(rules: QaRules) -> str:
    lines = [
        f"matching: min_score={rules.matching.min_score} "
        f"word_similarity={rules.matching.word_similarity}",
        f"monologue_max_gap_ms: {rules.monologue_max_gap_ms}",
        f"keywords: {', '.join(rules.keywords) or '-'}",
    ]
    for rule in rules.rules:
        where = rule.channel or "any channel"
        deadline = f", by {rule.deadline_ms} ms" if rule.deadline_ms is not None else ""
        phrases = " | ".join(rule.phrases)
        lines.append(f"rule {rule.rule_id}: {rule.kind.value} ({where}{deadline}): {phrases}")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    settings = _qa_settings(args)
    rules = load_rules(settings.qa.rules_file)
    # Imported here: faust and aiokafka load only for the command that runs them.
    from pipeline.qa.app import faust_credentials

    faust_credentials(settings.kafka.client)  # Kafka security the QA app cannot use: refused now
    if args.check:
        print(_describe(rules))
        return 0
    from pipeline.qa.app import QaApp
    from pipeline.runtime.admin import TopicAdmin

    app = QaApp(settings, rules)
    app.prepare_topics(TopicAdmin(settings.kafka))
    return app.run(loglevel=args.log_level)
