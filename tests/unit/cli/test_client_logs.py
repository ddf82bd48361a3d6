"""A command that fails on an unreachable broker: librdkafka's line once, the count of its repeats,
then the command's own error line, last."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import pytest

from pipeline.cli import main
from pipeline.cli import topics as topics_command
from pipeline.clock import ManualClock
from pipeline.errors import InfrastructureError
from pipeline.runtime.client_logs import LOGGER, LogThrottle, RepeatFilter
from pipeline.topics import ObservedTopic
from tests.unit.cli.errors import NO_BROKER

REFUSED = "Connect to ipv4#127.0.0.1:9 failed: Connection refused (after 0ms in state CONNECT)"


class _UnreachableAdmin:
    """What ``TopicAdmin`` does against no broker: its client's lines, then the error."""

    def __init__(self, settings: object) -> None:
        pass

    def observe(self, names: Sequence[str]) -> dict[str, ObservedTopic]:
        for _ in range(5):
            LOGGER.error("%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
        raise InfrastructureError("Kafka at 127.0.0.1:9 did not answer")


def test_repeats_are_counted_before_the_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STREAMSCRIBE_CONFIG", raising=False)
    monkeypatch.setattr(topics_command, "TopicAdmin", _UnreachableAdmin)
    monkeypatch.setattr(LOGGER, "filters", [RepeatFilter(LogThrottle(ManualClock()))])
    # As Python's last-resort handler prints them when no logging is configured (pytest's own
    # capture handler would otherwise take the records).
    handler = logging.StreamHandler(sys.stderr)
    monkeypatch.setattr(LOGGER, "handlers", [handler])
    monkeypatch.setattr(LOGGER, "propagate", False)
    assert main([*NO_BROKER, "topics", "list"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"FAIL [rdkafka#producer-1] {REFUSED}",
        "4 repeated librdkafka line(s) suppressed (each is shown at most once per 60 s)",
        "streamscribe: error: Kafka at 127.0.0.1:9 did not answer",
    ]
