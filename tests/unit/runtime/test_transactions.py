"""The bound on transactional Kafka calls (librdkafka can block past its timeout), and their
retries."""

from __future__ import annotations

import threading
import time

import pytest

from pipeline.errors import InfrastructureError
from pipeline.runtime import transactions


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "STUCK_GRACE_S", 0.05)


def test_a_call_that_returns_in_time_is_transparent() -> None:
    done: list[bool] = []
    transactions.bounded(lambda: done.append(True), bound_s=1.0)
    assert done == [True]


def test_what_the_call_raises_is_raised_to_the_caller() -> None:
    def fail() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        transactions.bounded(fail, bound_s=1.0)


def test_a_call_stuck_past_its_bound_and_the_grace_is_given_up() -> None:
    release = threading.Event()
    try:
        with pytest.raises(InfrastructureError, match="stuck"):
            transactions.bounded(release.wait, bound_s=0.05)
    finally:
        release.set()  # the stuck call's thread ends with the test


def test_retries_stop_at_a_cut_off_that_comes_while_retrying() -> None:
    from confluent_kafka import KafkaError, KafkaException

    tries: list[float] = []
    cut: list[float | None] = [None]

    def restarting_broker() -> None:
        tries.append(time.monotonic())
        if len(tries) == 2:
            cut[0] = time.monotonic() - 1  # SIGTERM: the shutdown bound has already run out
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "down", retriable=True))

    with pytest.raises(KafkaException):
        transactions.retrying(restarting_broker, 120.0, cut_off=lambda: cut[0])
    assert len(tries) == 2


def test_each_try_gets_the_timeout_asked_for_at_that_try() -> None:
    from confluent_kafka import KafkaError, KafkaException

    given: list[float] = []
    timeouts = iter([30.0, 2.0])

    def call(timeout_s: float) -> None:
        given.append(timeout_s)
        if len(given) == 1:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "down", retriable=True))

    transactions.transactional(call, timeout_s=lambda: next(timeouts))
    assert given == [30.0, 2.0]
