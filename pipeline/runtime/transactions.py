"""Transactional Kafka calls that can neither hang the worker's loop nor give up too early.

librdkafka's transactional calls (``init_transactions``, ``send_offsets_to_transaction``,
``commit_transaction``, ``abort_transaction``) take a timeout, retry nothing themselves, and one
of them can block far past its timeout. :func:`transactional` runs such a call bounded
(:func:`bounded`: on a helper thread, given up as :class:`StuckCallError`) and retried while
Kafka calls its error retriable (:func:`retrying`: a broker restarting), never past a cut-off
(a shutdown's bound). :data:`FENCED` and :func:`raise_if_fenced` say when a producer must not be
used again; :data:`UNREACHABLE` when the brokers cannot be reached at all.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

from pipeline.errors import InfrastructureError

__all__ = [
    "COORDINATOR_MOVING",
    "FENCED",
    "RETRY_DEADLINE_S",
    "STUCK_GRACE_S",
    "TRANSACTION_TIMEOUT_S",
    "UNREACHABLE",
    "StuckCallError",
    "bounded",
    "commit_budget_s",
    "raise_if_fenced",
    "retrying",
    "transactional",
]

logger = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_S = 30.0
RETRY_DEADLINE_S = 120.0
"""How long a transactional call is retried on retriable errors (a broker restarting), except
while shutting down, when the rest of the shutdown bound is all there is."""
COMMIT_MARGIN_S = 1.0
"""How long before the broker's transaction timeout a commit gives up its retries."""


def commit_budget_s(transaction_timeout_ms: int) -> float:
    """How long the calls of one commit (and of the abort after it) are retried.

    The broker aborts a transaction that has been open for ``transaction.timeout.ms`` and bumps
    its producer's epoch, which fences the producer: a commit still retrying then would read
    its own timeout as another worker taking over. So a commit gives up ``COMMIT_MARGIN_S``
    before that (at least 0.5 s), and is aborted and rewound, or its producer replaced; a broker
    outage longer than that costs a rewind, not the worker.
    """
    return max(0.5, transaction_timeout_ms / 1000 - COMMIT_MARGIN_S)


# How long past its own timeout a transactional call may block before the producer is given up
# as stuck (see ``bounded``).
STUCK_GRACE_S = 5.0


FENCED = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
"""Error codes after which this worker must not produce again (a newer instance with its
transactional id took over, or it may not use that id)."""


def raise_if_fenced(error: KafkaError) -> None:
    if error.code() in FENCED:
        raise InfrastructureError(f"fatal Kafka transaction error: {error}")


COORDINATOR_MOVING = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
    }
)
"""Error codes of a coordinator that is moving or still loading (a broker restarting): worth
waiting for, though librdkafka does not always flag them retriable."""


UNREACHABLE = frozenset(
    {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._TIMED_OUT}
)
"""Error codes that mean the brokers cannot be reached (not a refusal)."""


def retrying(
    operation: Callable[[], object],
    deadline_s: float = RETRY_DEADLINE_S,
    cut_off: Callable[[], float | None] = lambda: None,
    progress: Callable[[], None] = lambda: None,
    also: Callable[[KafkaError], bool] = lambda error: False,
) -> None:
    """Run a transactional call, repeating it while Kafka calls its error retriable (a broker
    restarting), or ``also(error)`` says so, for ``deadline_s``, and never past ``cut_off()``
    (monotonic s, asked after each failure: a shutdown that begins meanwhile ends the retries);
    other errors propagate. ``progress()`` is called after every try that returned or raised a
    Kafka error."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            operation()
            progress()
            return
        except KafkaException as error:
            progress()
            cut = cut_off()
            last = deadline if cut is None else min(deadline, cut)
            retry = error.args[0].retriable() or also(error.args[0])
            if not retry or time.monotonic() > last:
                raise
            logger.warning("retrying after a retriable Kafka error: %s", error.args[0])
            time.sleep(0.5)


def transactional(
    call: Callable[[float], object],
    *,
    timeout_s: Callable[[], float] = lambda: TRANSACTION_TIMEOUT_S,
    cut_off: Callable[[], float | None] = lambda: None,
    progress: Callable[[], None] = lambda: None,
    also: Callable[[KafkaError], bool] = lambda error: False,
) -> None:
    """A transactional librdkafka call, given ``timeout_s()`` (asked at each try) as its
    timeout: each try bounded (``bounded``), retriable errors (and those ``also`` accepts)
    retried (``retrying``, which reports each try to ``progress``)."""

    def attempt() -> None:
        bound_s = timeout_s()
        bounded(lambda: call(bound_s), bound_s)

    retrying(attempt, cut_off=cut_off, progress=progress, also=also)


class StuckCallError(InfrastructureError):
    """A transactional call that did not return within its timeout plus ``STUCK_GRACE_S``."""


def bounded(operation: Callable[[], object], bound_s: float = TRANSACTION_TIMEOUT_S) -> None:
    """Run ``operation`` (a librdkafka call given ``bound_s`` as its own timeout) on a helper
    thread; raise ``StuckCallError`` when it is still running ``STUCK_GRACE_S`` after that.

    librdkafka's ``send_offsets_to_transaction`` can block far past its timeout while the group
    coordinator is unreachable (confluentinc/librdkafka#5456: the coordinator request's timeout
    is never checked), which would freeze the loop past ``max.poll.interval.ms``. A stuck call
    keeps running on its daemon thread; the caller must give up the producer it was using.
    Whatever ``operation`` raises is raised here.
    """
    failure: list[BaseException] = []

    def call() -> None:
        try:
            operation()
        except BaseException as error:  # handed to the waiting thread
            failure.append(error)

    thread = threading.Thread(target=call, name="kafka-transaction-call", daemon=True)
    thread.start()
    wait_s = bound_s + min(STUCK_GRACE_S, bound_s)  # a short call (shutting down) waits less
    thread.join(wait_s)
    if thread.is_alive():
        raise StuckCallError(f"a transactional Kafka call is stuck after {wait_s:.1f} s")
    if failure:
        raise failure[0]
