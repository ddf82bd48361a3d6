"""The QA app's producer: an offset commit waits until the changelog writes it covers are acked.

faust's own ``flush`` (stubbed here as returning at once, which it does when its buffer drain
sees no message sent for 0.1 s) is not enough; ``_DurableFlushProducer.flush`` also waits for
every message handed to ``send_soon``. The real path (a SIGKILL right after a commit, then a
restart from the changelogs) is tested against the broker in tests/integration/test_qa_app.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faust.exceptions import ProducerSendError
from faust.transport.drivers import aiokafka as aiokafka_driver

from pipeline.qa import app as qa_app


@pytest.fixture
def producer(monkeypatch: pytest.MonkeyPatch) -> Any:
    buffered: list[asyncio.Future[Any]] = []

    async def faust_flush(self: Any) -> None:  # gives up with messages still in flight
        return None

    monkeypatch.setattr(aiokafka_driver.Producer, "flush", faust_flush)
    monkeypatch.setattr(
        aiokafka_driver.Producer, "send_soon", lambda self, fut: buffered.append(fut)
    )
    made = object.__new__(qa_app._DurableFlushProducer)
    made._unacknowledged = set()
    made.flush_timeout_s = 0.5
    made.buffered = buffered
    return made


def test_flush_returns_only_once_every_buffered_message_is_acknowledged(producer: Any) -> None:
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        producer.send_soon(first)
        producer.send_soon(second)
        order: list[str] = []

        async def acknowledge() -> None:
            await asyncio.sleep(0.05)
            first.set_result("acked")
            await asyncio.sleep(0.05)
            order.append("second acknowledged")
            second.set_result("acked")

        task = asyncio.ensure_future(acknowledge())
        await producer.flush()
        order.append("flushed")
        await task
        return order

    assert asyncio.run(scenario()) == ["second acknowledged", "flushed"]
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
