"""The QA app shell when Kafka fails under it: a summary that cannot be delivered is published
later, never skipped; a tick that never comes back is sent again (no broker: the topics are
fakes, the tables dicts)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from pipeline.clock import ManualClock
from pipeline.contracts.messages import Event, EventType, to_json
from pipeline.qa import app as qa_app
from pipeline.qa import faust_compat
from pipeline.qa.app import QaApp
from pipeline.qa.metrics import QaMetrics
from pipeline.qa.records import InputKind, encode_input
from pipeline.qa.rules import DEFAULT_RULES
from pipeline.qa.state import CallState
from pipeline.runtime.health import Readiness
from pipeline.settings import KafkaSettings, QaSettings, Settings
from tests.qa_builders import CALL, final

NOW_MS = 1_700_000_000_000


class FakeTopic:
    """A topic whose next ``failures`` deliveries fail; records what was delivered, and whether
    each send was one whose sender answers for it (left out of the producer's flush). With
    ``lost``, deliveries never complete."""

    def __init__(self, failures: int = 0, *, lost: bool = False) -> None:
        self.failures = failures
        self.lost = lost
        self.delivered: list[tuple[str | None, bytes]] = []
        self.sender_answers: list[bool] = []

    def get_topic_name(self) -> str:
        return "fake"

    async def send(self, key: str | None, value: bytes) -> asyncio.Future[None]:
        delivery: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sender_answers.append(faust_compat.SENDER_ANSWERS.get())
        if self.lost:
            self.delivered.append((key, value))
        elif self.failures:
            self.failures -= 1
            delivery.set_exception(RuntimeError("KafkaTimeoutError: delivery timed out"))
        else:
            self.delivered.append((key, value))
            delivery.set_result(None)
        return delivery


class Shell:
    """A ``QaApp`` on dict tables and fake topics, ready for an hour; records its waits."""

    def __init__(self, calls_failures: int = 0) -> None:
        self.clock = ManualClock(NOW_MS)
        self.registry = CollectorRegistry()
        settings = Settings(
            kafka=KafkaSettings(), qa=QaSettings(partitions=4, web_port=16095, end_grace_ms=5000)
        )
        app = QaApp(settings, DEFAULT_RULES, clock=self.clock, metrics=QaMetrics(self.registry))
        app.calls, app.finals = {}, {}  # type: ignore[assignment]
        app.calls_topic = FakeTopic(calls_failures)  # type: ignore[assignment]
        app.events_topic = FakeTopic()  # type: ignore[assignment]
        app.input_topic = FakeTopic(lost=True)  # type: ignore[assignment]
        app._ready_since_ms = NOW_MS - 3_600_000
        self.waits_s: list[float] = []

        async def sleep(seconds: float) -> None:
            self.waits_s.append(seconds)
            await asyncio.sleep(0)

        app._sleep = sleep
        self.app = app

    async def handle(self, value: bytes, offset: int = 0) -> None:
        await self.app._handle_input("qa-input", 1, offset, CALL, value)

    def published(self) -> list[dict[str, Any]]:
        return [orjson.loads(value) for _, value in self.app.calls_topic.delivered]  # type: ignore[attr-defined]

    def rejections(self) -> list[dict[str, Any]]:
        return [orjson.loads(value) for _, value in self.app.events_topic.delivered]  # type: ignore[attr-defined]

    def metric(self, line: str) -> bool:
        return line in generate_latest(self.registry).decode()


def _final(index: int) -> bytes:
    record = final("agent", index, "hello there", 2000 * index)
    return encode_input(InputKind.FINAL, to_json(record))


def _ended(utterances: int | None) -> bytes:
    detail: dict[str, Any] = {"tenant": "default", "duration_ms": 5000}
    if utterances is not None:
        detail["utterances"] = utterances
    event = Event(
        type=EventType.SESSION_ENDED,
        emit_ms=NOW_MS,
        source="worker-1",
        call_id=CALL,
        channel="agent",
        detail=detail,
    )
    return encode_input(InputKind.EVENT, to_json(event))


def test_a_summary_not_delivered_is_published_when_its_record_is_processed_again() -> None:
    shell = Shell(calls_failures=2)

    async def scenario() -> None:
        await shell.handle(_final(0), offset=0)
        await shell.handle(_final(1), offset=1)
        await shell.handle(_ended(2), offset=2)  # ends the call: its publication fails twice

    asyncio.run(scenario())
    (summary,) = shell.published()
    assert (summary["revision"], summary["utterances"]) == (1, 2)
    state = CallState.from_json(shell.app.calls[CALL])
    assert (state.revision, len(state.utterance_ids())) == (1, 2)
    assert shell.rejections() == []  # not reported as bad input
    assert shell.waits_s == [qa_app.PUBLISH_RETRY_FIRST_S, 2 * qa_app.PUBLISH_RETRY_FIRST_S]
    assert shell.metric("qa_publish_failures_total 2.0")
    # Its failed deliveries are retried here: they must not also fail the next offset commit.
    assert shell.app.calls_topic.sender_answers == [True, True, True]  # type: ignore[attr-defined]
    assert shell.metric('qa_calls_ended_total{reason="sessions_ended"} 1.0')
    assert shell.metric('qa_records_rejected_total{reason="processing_error"} 0.0')


def test_the_wait_between_attempts_doubles_up_to_its_cap() -> None:
    shell = Shell(calls_failures=9)

    async def scenario() -> None:
        await shell.handle(_final(0))
        await shell.handle(_ended(1))

    asyncio.run(scenario())
    assert shell.waits_s == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert len(shell.published()) == 1


def test_stopping_the_app_ends_the_attempts_without_skipping_the_record() -> None:
    shell = Shell(calls_failures=1_000_000)

    async def scenario() -> None:
        await shell.handle(_final(0))
        attempts = asyncio.ensure_future(shell.handle(_ended(1)))
        for _ in range(100):
            await asyncio.sleep(0)
        assert len(shell.waits_s) > 5
        attempts.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempts

    asyncio.run(scenario())
    assert shell.rejections() == []
    assert CallState.from_json(shell.app.calls[CALL]).revision == 0  # will be published on restart


def test_a_failure_before_the_send_is_still_a_rejected_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shell = Shell()

    def broken(*args: Any) -> Any:
        raise ValueError("bug while building the summary")

    monkeypatch.setattr(shell.app.analytics, "publish", broken)

    async def scenario() -> None:
        await shell.handle(_final(0))
        await shell.handle(_ended(1), offset=7)

    asyncio.run(scenario())
    (rejection,) = shell.rejections()
    assert rejection["detail"]["reason"] == "processing_error"
    assert rejection["detail"]["offset"] == 7
    assert shell.waits_s == []


def test_a_tick_that_never_comes_back_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its delivery failed after it was queued, or another worker took it in a rebalance: the
    call must not be skipped by every later sweep (no publication, no idle end, no expiry)."""
    shell = Shell()
    app = shell.app
    monkeypatch.setattr(app, "readiness", Readiness.of)
    unassigned = SimpleNamespace(assignment=set)  # drop_unowned keeps every call then
    monkeypatch.setattr(faust_compat.FaustApp, "consumer", property(lambda self: unassigned))
    sent: list[tuple[str | None, bytes]] = app.input_topic.delivered  # type: ignore[attr-defined]

    async def scenario() -> list[int]:
        ticks = []

        async def sweep_after(ms: int) -> None:
            shell.clock.advance(ms)
            await app._sweep()
            for _ in range(3):
                await asyncio.sleep(0)
            ticks.append(len(sent))

        await shell.handle(_final(0))
        await shell.handle(_ended(None))  # no finals count: published after the end grace
        for _ in range(3):
            await asyncio.sleep(0)
        ticks.append(len(sent))  # the end grace's tick: never comes back
        await sweep_after(app.analytics.end_grace_ms + qa_app.TICK_PENDING_MAX_MS - 1)
        await sweep_after(1)
        return ticks

    assert asyncio.run(scenario()) == [1, 1, 2]
    assert all(key == CALL for key, _ in sent)
    asyncio.run(shell.handle(sent[-1][1]))  # this one comes back
    assert [summary["revision"] for summary in shell.published()] == [1]
    assert app._ticks_pending == {}


@pytest.mark.parametrize("topic", ["finals_topic", "events_topic"])
def test_a_key_that_is_not_utf8_on_a_source_topic_decodes(topic: str) -> None:
    # Review finding: read as text, such a key raised KeyDecodeError in the forwarder, which
    # crashed and was restarted (every 5 s after the first two): one stall per such record.
    from faust.types.tuples import Message

    settings = Settings(kafka=KafkaSettings(), qa=QaSettings(partitions=4, web_port=16096))
    app = QaApp(settings, DEFAULT_RULES, metrics=QaMetrics(CollectorRegistry()))
    source = getattr(app, topic)
    message = Message("asr.finals", 0, 0, 0.0, 0, [], b"\xff\xfe", b"{}", None)
    event = asyncio.run(source.decode(message, propagate=True))
    assert event.key == b"\xff\xfe"


def test_a_record_too_large_for_the_input_topic_is_rejected_not_a_crash() -> None:
    # Review finding: aiokafka refused it (MessageSizeTooLargeError), the forwarder crashed and
    # the record, acknowledged by then, was lost without a metric or an event.
    shell = Shell()
    app = shell.app
    record = final("agent", 0, "word " * 250_000, 0)  # about 1.25 MB of text
    message = SimpleNamespace(topic="asr.finals", partition=3, offset=41)
    event = SimpleNamespace(message=message, value=to_json(record))
    asyncio.run(app._forward(qa_app.RecordKind.FINAL, event))  # type: ignore[arg-type]
    assert app.input_topic.delivered == []  # type: ignore[attr-defined]
    (rejection,) = shell.rejections()
    assert rejection["call_id"] == CALL
    assert (rejection["detail"]["reason"], rejection["detail"]["offset"]) == ("invalid_field", 41)
    assert "over the" in rejection["detail"]["detail"]
