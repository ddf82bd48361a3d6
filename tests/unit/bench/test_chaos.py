"""The nemesis benchmark's pure parts: the fault plan and the verdict on the finals."""

from __future__ import annotations

import itertools
import random
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from bench.chaos import ACTIONS, BROKER_DOWN_S, FREEZE_S, GAP_S, plan_faults, verdict
from pipeline.audio.files import CallAudio
from pipeline.errors import PublishError
from pipeline.settings import KafkaSettings


def test_a_plan_is_seeded_spaced_and_uses_every_action() -> None:
    plan = plan_faults(random.Random(7), 600, ["w-1", "w-2", "w-3"])
    assert plan == plan_faults(random.Random(7), 600, ["w-1", "w-2", "w-3"])
    assert {fault.action for fault in plan} == set(ACTIONS)
    gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(plan)]
    assert min(gaps) >= GAP_S[0] - 0.01
    assert max(gaps) <= GAP_S[1] + 0.01
    assert plan[-1].at_s < 600
    for fault in plan:
        assert (fault.worker is None) == (fault.action == "broker")
        if fault.action == "freeze":
            assert FREEZE_S[0] <= fault.hold_s <= FREEZE_S[1]
        if fault.action == "broker":
            assert BROKER_DOWN_S[0] <= fault.hold_s <= BROKER_DOWN_S[1]
        assert bool(fault.armed) == (fault.action == "armed")


def test_a_plan_without_broker_restarts_has_none() -> None:
    plan = plan_faults(random.Random(1), 600, ["w-1"], broker=False)
    assert "broker" not in {fault.action for fault in plan}


def test_the_verdict_names_lost_duplicated_renumbered_and_changed_finals() -> None:
    expected = {"c:agent:0": "hello", "c:agent:1": "world", "c:agent:2": "bye"}
    finals = [
        {"utterance_id": "c:agent:0", "text": "hello"},
        {"utterance_id": "c:agent:0", "text": "hello"},
        {"utterance_id": "c:agent:1", "text": "word"},
        {"utterance_id": "c:agent:3", "text": "bye"},
    ]
    assert verdict(expected, finals) == {
        "expected": 3,
        "published": 4,
        "lost": ["c:agent:2"],
        "not_drained": [],
        "duplicated": ["c:agent:0"],
        "renumbered": ["c:agent:3"],
        "text_differs": ["c:agent:1"],
    }


def test_a_final_of_a_channel_that_never_ended_is_not_drained_rather_than_lost() -> None:
    # Seed 2 on a machine at load 15: the workers were minutes behind when the drain stopped;
    # 64 finals of calls that had not ended yet were counted as lost.
    expected = {"c:agent:0": "hello", "c:customer:0": "hi", "d:agent:0": "bye"}
    finals = [{"utterance_id": "c:agent:0", "text": "hello"}]
    result = verdict(expected, finals, {("c", "agent"), ("c", "customer")})
    assert result["lost"] == ["c:customer:0"]  # its channel ended without it
    assert result["not_drained"] == ["d:agent:0"]


def test_a_publisher_failing_at_close_still_ends_and_reports(monkeypatch: Any) -> None:
    # Seen in a chaos run: a delivery failure raised only by close() killed the publisher
    # thread before it set ``done``, and the run waited for it forever.
    from bench import e2e

    class _Failing:
        transport = SimpleNamespace(poll=lambda timeout: None)

        def open_call(self, *_: Any, **__: Any) -> Any:
            return SimpleNamespace(push=lambda *a: 1, end=lambda: 1)

        def flush(self, timeout_s: float) -> None:
            pass

        def close(self, timeout_s: float) -> None:
            raise PublishError("3 record(s) not delivered")

    monkeypatch.setattr(e2e.AudioPublisher, "connect", lambda settings: _Failing())
    audio = CallAudio("c", 16000, {"mono": np.zeros(320, np.float32)})
    call = e2e._LiveCall("c", "c", audio, time.monotonic())
    publisher = e2e.PacedPublisher(KafkaSettings(), [call], delivery_timeout_ms=1).start()
    assert publisher.done.wait(10)
    with pytest.raises(PublishError, match="not delivered"):
        publisher.join()


def test_the_end_of_a_wave_waits_as_long_as_a_delivery_may_take() -> None:
    # Seed 3 of a chaos run: 5,848 records unconfirmed after the fixed 60 s flush while the
    # broker restarted, although their delivery timeout was 5 minutes.
    from bench import e2e

    assert e2e.PacedPublisher(KafkaSettings(), [])._flush_timeout_s() == 60.0
    chaos_publisher = e2e.PacedPublisher(KafkaSettings(), [], delivery_timeout_ms=300_000)
    assert chaos_publisher._flush_timeout_s() == 310.0
