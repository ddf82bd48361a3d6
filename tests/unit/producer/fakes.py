"""A fake ``Transport`` for unit tests: keeps the records, reports deliveries when polled."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.contracts import AudioChunk, decode_chunk
from pipeline.errors import PublishError
from pipeline.producer.publisher import DeliveryCallback


@dataclass(frozen=True, slots=True)
class SentRecord:
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


class FakeTransport:
    """Records what is sent; delivery reports run on the next ``poll``/``flush``.

    ``fail(index)`` returns the error text for the index-th record sent, or None to deliver it;
    ``refuse(index)`` makes the index-th ``send`` raise ``PublishError`` at once (not sent);
    ``stuck`` keeps reports from ever coming (``flush`` then reports every record unconfirmed).
    """

    def __init__(
        self,
        fail: Callable[[int], str | None] = lambda index: None,
        partition: int = 3,
        stuck: bool = False,
        refuse: Callable[[int], bool] = lambda index: False,
    ) -> None:
        self.records: list[SentRecord] = []
        self.closed = False
        self.sends = 0
        self._fail = fail
        self._refuse = refuse
        self._partition = partition
        self._stuck = stuck
        self._pending: list[tuple[DeliveryCallback, str | None]] = []

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes]],
        on_delivery: DeliveryCallback,
    ) -> None:
        index, self.sends = self.sends, self.sends + 1
        if self._refuse(index):
            raise PublishError(f"send {index} refused: Broker: Message size too large")
        self._pending.append((on_delivery, self._fail(len(self.records))))
        self.records.append(SentRecord(topic, key, value, list(headers)))

    def poll(self, timeout_s: float) -> None:
        self._report()

    def flush(self, timeout_s: float) -> int:
        self._report()
        return len(self._pending)

    def close(self) -> None:
        self.closed = True

    def _report(self) -> None:
        if self._stuck:
            return
        pending, self._pending = self._pending, []
        for on_delivery, error in pending:
            on_delivery(error, -1 if error else self._partition)

    def chunks(self) -> list[AudioChunk]:
        """Every record sent, decoded with the contract (raises if one breaks it)."""
        return [decode_chunk(r.key, r.value, r.headers) for r in self.records]
