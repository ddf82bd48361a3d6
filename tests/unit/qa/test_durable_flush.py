"""The QA app's producer: an offset commit waits until the writes it covers are acked.

faust's own ``flush`` (stubbed here as returning at once, which it does when its buffer drain
sees no message sent for 0.1 s) is not enough; ``_DurableFlushProducer.flush`` also waits for
every message handed to ``send_soon`` (table changelogs) or ``send`` (``Topic.send``: the
forwarders' re-keyed records), and fails once any of them failed. The real path (a SIGKILL
right after a commit, then a restart from the changelogs) is tested against the broker in
tests/integration/test_faust_compat.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faust.exceptions import ProducerSendError
from faust.transport.drivers import aiokafka as aiokafka_driver

from pipeline.qa import faust_compat


@pytest.fixture
def producer(monkeypatch: pytest.MonkeyPatch) -> Any:
    buffered: list[asyncio.Future[Any]] = []
    sent: list[asyncio.Future[Any]] = []

    async def faust_flush(self: Any) -> None:  # gives up with messages still in flight
        return None

    async def aiokafka_send(self: Any, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        delivery: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        sent.append(delivery)
        return delivery

    monkeypatch.setattr(aiokafka_driver.Producer, "flush", faust_flush)
    monkeypatch.setattr(
        aiokafka_driver.Producer, "send_soon", lambda self, fut: buffered.append(fut)
    )
    monkeypatch.setattr(aiokafka_driver.Producer, "send", aiokafka_send)
    made = object.__new__(faust_compat.DurableFlushProducer)
    made._unacknowledged = set()
    made._undelivered = []
    made.flush_timeout_s = 0.5
    made.buffered = buffered
    made.sent = sent
    return made


async def _send(producer: Any) -> asyncio.Future[Any]:
    """What ``Topic.send`` does: hand one record to the producer, get its delivery."""
    delivery: asyncio.Future[Any] = await producer.send(
        "streamscribe-qa-input", b"call-1", b"{}", None, None, None
    )
    return delivery


def test_flush_returns_only_once_every_message_is_acknowledged(producer: Any) -> None:
    """A changelog write (``send_soon``) and a forwarder's re-keyed record (``Topic.send``,
    whose delivery the forwarder does not await) are both covered."""

    async def scenario() -> list[str]:
        changelog = asyncio.get_running_loop().create_future()
        producer.send_soon(changelog)
        forwarded = await _send(producer)
        order: list[str] = []

        async def acknowledge() -> None:
            await asyncio.sleep(0.05)
            changelog.set_result("acked")
            await asyncio.sleep(0.05)
            order.append("forwarded record acknowledged")
            forwarded.set_result("acked")

        task = asyncio.ensure_future(acknowledge())
        await producer.flush()
        order.append("flushed")
        await task
        return order

    assert asyncio.run(scenario()) == ["forwarded record acknowledged", "flushed"]
    assert not producer._unacknowledged


def test_flush_with_nothing_buffered_returns_at_once(producer: Any) -> None:
    asyncio.run(producer.flush())


@pytest.mark.parametrize("outcome", ["failed", "never acknowledged"])
def test_a_failed_or_unacknowledged_message_stops_the_commit(producer: Any, outcome: str) -> None:
    async def scenario() -> None:
        fut = asyncio.get_running_loop().create_future()
        producer.send_soon(fut)
        if outcome == "failed":
            fut.set_exception(RuntimeError("broker said no"))
        await producer.flush()

    with pytest.raises(ProducerSendError, match="not committing"):
        asyncio.run(scenario())


@pytest.mark.parametrize("via", ["send", "send_soon"])
def test_a_message_that_failed_before_the_flush_stops_every_later_commit(
    producer: Any, via: str
) -> None:
    async def scenario() -> list[str]:
        if via == "send":
            delivery = await _send(producer)
        else:
            delivery = asyncio.get_running_loop().create_future()
            producer.send_soon(delivery)
        delivery.set_exception(RuntimeError("NotLeaderForPartition"))
        await asyncio.sleep(0)  # its done-callbacks run long before the next commit
        outcomes = []
        for _ in range(2):
            try:
                await producer.flush()
                outcomes.append("committed")
            except ProducerSendError as error:
                outcomes.append(str(error))
        return outcomes

    outcomes = asyncio.run(scenario())
    assert len(outcomes) == 2
    assert all("NotLeaderForPartition" in outcome for outcome in outcomes)


def test_a_message_its_sender_answers_for_does_not_stop_the_commit(producer: Any) -> None:
    async def scenario() -> None:
        with faust_compat.sender_answers():
            delivery = await _send(producer)
        delivery.set_exception(RuntimeError("qa.calls: not authorized"))
        await asyncio.sleep(0)
        await producer.flush()
        forwarded = await _send(producer)  # the block is over: tracked again
        forwarded.set_exception(RuntimeError("timed out"))
        with pytest.raises(ProducerSendError, match="timed out"):
            await producer.flush()

    asyncio.run(scenario())
