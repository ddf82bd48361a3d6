"""faust-streaming and aiokafka, made to keep the QA app's promises: every workaround in one place.

The QA app (``pipeline.qa.app``) reads ``read_committed``, commits an input offset only once the
writes it covers are acknowledged, and never drops fetched input. faust-streaming gets each of
these wrong in its own internals, so this module subclasses them (decisions 0018 and 0019):

- ``ReadCommittedConsumerThread``: the isolation level on the consumer (faust only sets it with
  its exactly-once mode), and a partition without a committed offset rewound to its beginning;
- ``ReadCommittedConsumer``: a gap between fetched offsets that ends *before* the next record;
- ``FlowControl``: ``resume()`` clears the stream buffers only after a suspension;
- ``DurableFlushProducer``: ``flush()`` waits for every write to be acknowledged and fails after
  any failed one (messages sent under ``sender_answers`` excepted);
- ``FaustApp``: the app that uses them.

They override private methods, written against the versions in ``TESTED_VERSIONS``; another
version may have moved or fixed them, so ``check_versions`` refuses to start on one (pyproject
pins the same versions).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.metadata
import logging
from collections.abc import Awaitable, Iterator, Mapping
from typing import Any

import faust
from faust.exceptions import ProducerSendError
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.types import TransportT
from faust.types.core import HeadersArg
from faust.types.tuples import RecordMetadata
from mode.utils.objects import cached_property
from mode.utils.queues import FlowControlEvent

from pipeline.errors import ConfigError

__all__ = [
    "FLUSH_TIMEOUT_S",
    "TESTED_VERSIONS",
    "DurableFlushProducer",
    "FaustApp",
    "FlowControl",
    "ReadCommittedConsumer",
    "ReadCommittedConsumerThread",
    "ReadCommittedTransport",
    "check_versions",
    "sender_answers",
]

logger = logging.getLogger(__name__)

TESTED_VERSIONS: Mapping[str, str] = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0"}
"""The distributions whose internals the workarounds below were written and tested against."""

#: How long an offset commit waits for the table changelog writes it covers to be acknowledged.
FLUSH_TIMEOUT_S = 60.0


def check_versions(installed: Mapping[str, str | None] | None = None) -> None:
    """Refuse to run the QA app on versions of faust-streaming or aiokafka other than
    ``TESTED_VERSIONS`` (``installed``: distribution → version, read from the environment by
    default; None: not installed).

    Raises:
        ConfigError: one line naming the version found and the one tested.
    """
    found = (
        installed if installed is not None else {name: _version(name) for name in TESTED_VERSIONS}
    )
    for name, tested in TESTED_VERSIONS.items():
        have = found.get(name)
        if have != tested:
            raise ConfigError(
                f"{name} {have or '(not installed)'} is not the version the QA app's "
                f"workarounds are tested with ({tested}): install {name}=={tested}"
            )


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


class ReadCommittedConsumerThread(aiokafka_driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # The consumer is not started yet; aiokafka hands the level to its fetcher in start().
        consumer._isolation_level = "read_committed"
        return consumer

    async def seek_to_committed(self) -> Mapping[faust.types.TP, int]:
        result: Mapping[faust.types.TP, int] = await self.call_thread(
            self._seek_to_committed_or_beginning
        )
        return result

    async def _seek_to_committed_or_beginning(self) -> Mapping[Any, int]:
        """Seek every input partition to its committed offset, or to its beginning without one.

        faust rewinds to the committed offsets (``perform_seek``) after table recovery, and
        when it dropped a fetched batch, so that what no agent processed is fetched again. It
        does drop batches: a fetch that starts during table recovery and ends after recovery
        paused the changelog partitions (while the table callbacks run, before the stream
        partitions are resumed) sees an empty set of active partitions, which aiokafka reads
        as "all": it hands over every stream partition's backlog and faust discards it. But
        aiokafka's ``seek_to_committed`` leaves a partition without a committed offset (or at
        offset 0) where it is: after a restart before the app's first commit, a forwarder then
        began at the end of that backlog and the finals in it were never forwarded. Such a
        partition goes back to its beginning (``consumer_auto_offset_reset="earliest"``), as
        the first start of the group did; changelog partitions are left to table recovery.
        """
        consumer = self._ensure_consumer()
        committed: Mapping[Any, int] = await consumer.seek_to_committed()
        assigned = consumer.assignment()
        parent = self.consumer
        rewind = [
            tp
            for tp, offset in committed.items()
            if not offset and tp in assigned and not parent._is_changelog_tp(tp)
        ]
        if rewind:
            logger.debug("no committed offset: seek to the beginning of %s", rewind)
            await consumer.seek_to_beginning(*rewind)
        return committed


class ReadCommittedConsumer(aiokafka_driver.Consumer):
    def _new_consumer_thread(self) -> aiokafka_driver.AIOKafkaConsumerThread:
        return ReadCommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _add_gap(self, tp: faust.types.TP, offset_from: int, offset_to: int) -> None:
        """Record the offsets the broker skipped before the record at ``offset_to``.

        faust calls this when a fetched record's offset jumps past the last one read (the
        offsets between are transaction markers, aborted or compacted records) and counts the
        gap as acknowledged when it commits. faust-streaming 0.15.3 stores ``offset_to``
        inclusive, so the gap also covered the record just fetched, before any agent had
        processed it: after a seek had reset the read position, a commit could then pass a
        record still in flight (lost on a crash). The gap ends before that record.
        """
        await super()._add_gap(tp, offset_from, offset_to - 1)


class FlowControl(FlowControlEvent):
    """The app's flow control: ``resume()`` clears the stream buffers only when flow was
    suspended.

    faust clears every agent's input buffer on ``resume()``, to drop what was read before a
    rebalance. But at the end of table recovery it resumes a flow that recovery has already
    resumed, *after* it resumed the stream partitions and while the fetcher runs: records
    fetched in that window sat in an agent's buffer, were cleared without being processed or
    acknowledged, and were not fetched again (the consumer's read position was past them). A
    forwarder lost a final that way right after a restart (issue #7). A rebalance suspends the
    flow (and clears the buffers) first, so a resume after it still starts empty.
    """

    def resume(self) -> None:
        if self.is_active():
            return
        super().resume()


#: Set while a sender that answers for its own message sends it: ``DurableFlushProducer``
#: leaves that message out of its flush (see ``sender_answers``).
SENDER_ANSWERS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sender_answers", default=False
)


@contextlib.contextmanager
def sender_answers() -> Iterator[None]:
    """Messages sent in this block are the sender's own business, not the next offset commit's:
    a summary (``_publish`` awaits its delivery and processes its record again if it failed) and
    a tick (no data; the sweep sends another). Their failure must not stop the app."""
    token = SENDER_ANSWERS.set(True)
    try:
        yield
    finally:
        SENDER_ANSWERS.reset(token)


class DurableFlushProducer(aiokafka_driver.Producer):
    """A producer whose ``flush()`` returns only when every message sent is acknowledged, and
    raises once any of them failed.

    faust writes table changelogs with ``send_soon`` into a buffer that a background task drains;
    before committing input offsets it calls ``producer.flush()``, whose buffer drain gives up
    after 0.1 s without a message sent and which does not wait for a message the background task
    has taken but not yet handed to the Kafka client. An offset commit could then overtake the
    changelog writes of the records it covers, and a crash at that moment lost table state.
    ``Topic.send`` (the forwarders' re-keyed records, rejection reports) does not wait for the
    delivery either. This flush also waits for every message given to ``send_soon`` or ``send``
    to be acknowledged by the broker, and a message whose delivery failed, even long before the
    flush, fails every later flush, so that nothing is committed past it (except messages sent
    in a ``sender_answers`` block).
    """

    flush_timeout_s = FLUSH_TIMEOUT_S

    def __post_init__(self) -> None:
        super().__post_init__()
        self._unacknowledged: set[asyncio.Future[Any]] = set()
        self._undelivered: list[str] = []

    def send_soon(self, fut: faust.types.tuples.FutureMessage) -> None:
        self._track(fut)
        super().send_soon(fut)

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: float | None,
        headers: HeadersArg | None,
        *,
        transactional_id: str | None = None,
    ) -> Awaitable[RecordMetadata]:
        """``Topic.send`` (and faust's buffer, for ``send_soon``) ends here; the delivery is
        tracked unless the sender answers for it."""
        delivery = asyncio.ensure_future(
            await super().send(
                topic, key, value, partition, timestamp, headers, transactional_id=transactional_id
            )
        )
        if not SENDER_ANSWERS.get():
            self._track(delivery)
        return delivery

    def _track(self, fut: asyncio.Future[Any]) -> None:
        self._unacknowledged.add(fut)
        fut.add_done_callback(self._on_done)

    def _on_done(self, fut: asyncio.Future[Any]) -> None:
        self._unacknowledged.discard(fut)
        if fut.cancelled():
            self._undelivered.append("cancelled")
        elif fut.exception() is not None:
            self._undelivered.append(repr(fut.exception()))

    async def flush(self) -> None:
        """Send everything buffered and wait for the broker's acknowledgement of all of it.

        Raises:
            ProducerSendError: a message was not acknowledged within ``flush_timeout_s``, or a
                message sent since the producer started failed (sticky: every later flush
                raises too); the caller (an offset commit) must not proceed, and faust stops the
                app so that its input is processed again.
        """
        await super().flush()
        pending = list(self._unacknowledged)
        not_done: set[asyncio.Future[Any]] = set()
        if pending:
            _, not_done = await asyncio.wait(pending, timeout=self.flush_timeout_s)
        if not_done or self._undelivered:
            raise ProducerSendError(
                f"{len(not_done)} message(s) not acknowledged in {self.flush_timeout_s} s, "
                f"{len(self._undelivered)} failed (first: "
                f"{self._undelivered[0] if self._undelivered else 'none'}): "
                f"not committing the input they came from"
            )


class ReadCommittedTransport(aiokafka_driver.Transport):
    Consumer = ReadCommittedConsumer
    Producer = DurableFlushProducer


class FaustApp(faust.App):
    """A faust app whose consumers read only committed records."""

    def _new_transport(self) -> TransportT:
        return ReadCommittedTransport(self.conf.broker_consumer, self)

    @cached_property
    def flow_control(self) -> FlowControlEvent:
        return FlowControl(loop=self.loop)
