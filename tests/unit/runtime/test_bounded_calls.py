"""The worker's bound on transactional Kafka calls (librdkafka can block past its timeout)."""

from __future__ import annotations

import threading

import pytest

from pipeline.errors import InfrastructureError
from pipeline.runtime import worker


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "STUCK_GRACE_S", 0.05)


def test_a_call_that_returns_in_time_is_transparent() -> None:
    done: list[bool] = []
    worker._bounded(lambda: done.append(True), bound_s=1.0)
    assert done == [True]


def test_what_the_call_raises_is_raised_to_the_caller() -> None:
    def fail() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        worker._bounded(fail, bound_s=1.0)


def test_a_call_stuck_past_its_bound_and_the_grace_is_given_up() -> None:
    release = threading.Event()
    try:
        with pytest.raises(InfrastructureError, match="stuck"):
            worker._bounded(release.wait, bound_s=0.05)
    finally:
        release.set()  # the stuck call's thread ends with the test
