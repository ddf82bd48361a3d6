"""librdkafka's log lines go through the ``pipeline.librdkafka`` logger, repeats suppressed: while a
broker is unreachable a command shows why once and its own error, not hundreds of FAIL lines."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError

from pipeline.clock import ManualClock
from pipeline.runtime import admin as admin_module
from pipeline.runtime import kafka as kafka_module
from pipeline.runtime.admin import admin_client
from pipeline.runtime.client_logs import (
    LOGGER,
    REPEAT_INTERVAL_MS,
    LogThrottle,
    RepeatFilter,
    report_suppressed,
)
from pipeline.runtime.kafka import new_consumer, new_producer, with_client_logs
from pipeline.settings import KafkaSettings

NO_BROKER = "127.0.0.1:1"
REFUSED = (
    "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
    "Connection refused (after {ms}ms in state CONNECT)"
)


# --- LogThrottle: the pure decision, on a fake clock ---------------------------------------


def test_the_first_line_of_a_key_shows_and_its_repeats_are_counted() -> None:
    clock = ManualClock()
    throttle = LogThrottle(clock, interval_ms=1000)
    assert throttle.admit("refused") == 0
    clock.advance(999)
    assert throttle.admit("refused") is None
    assert throttle.admit("refused") is None
    clock.advance(1)
    assert throttle.admit("refused") == 2  # shown again, with the two held back since
    assert throttle.admit("refused") is None


def test_keys_are_throttled_apart() -> None:
    throttle = LogThrottle(ManualClock(), interval_ms=1000)
    assert throttle.admit("broker 1 refused") == 0
    assert throttle.admit("broker 2 refused") == 0
    assert throttle.admit("broker 1 refused") is None


def test_the_window_restarts_when_a_line_is_shown() -> None:
    clock = ManualClock()
    throttle = LogThrottle(clock, interval_ms=1000)
    throttle.admit("k")
    clock.advance(1500)
    assert throttle.admit("k") == 0
    clock.advance(600)  # 2.1 s after the first, 0.6 s after the last shown
    assert throttle.admit("k") is None


def test_take_suppressed_counts_what_no_shown_line_reported_once() -> None:
    clock = ManualClock()
    throttle = LogThrottle(clock, interval_ms=1000)
    for _ in range(4):
        throttle.admit("a")
    throttle.admit("b")
    throttle.admit("b")
    assert throttle.take_suppressed() == 4
    assert throttle.take_suppressed() == 0
    assert throttle.admit("a") is None  # still within a's window
    clock.advance(1000)
    assert throttle.admit("a") == 1  # only the one held back after the take


def test_forgotten_keys_keep_their_counts() -> None:
    throttle = LogThrottle(ManualClock(), interval_ms=1000, max_keys=2)
    for key in ("a", "a", "a", "b", "c"):
        throttle.admit(key)
    assert throttle.admit("a") == 0  # forgotten (least recently shown): a first line again
    assert throttle.take_suppressed() == 2


@pytest.mark.parametrize(("interval_ms", "max_keys"), [(0, 1), (1, 0)])
def test_nonsense_bounds_are_refused(interval_ms: int, max_keys: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        LogThrottle(ManualClock(), interval_ms=interval_ms, max_keys=max_keys)


# --- RepeatFilter and report_suppressed on the real logger -----------------------------------


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """A fresh filter on ``LOGGER`` (nothing seen yet) whose time moves only when told."""
    manual = ManualClock()
    monkeypatch.setattr(LOGGER, "filters", [RepeatFilter(LogThrottle(manual))])
    return manual


def _librdkafka(level: int, text: str, client: str = "rdkafka#consumer-1") -> None:
    LOGGER.log(level, "%s [%s] %s", "FAIL", client, text)  # as confluent-kafka calls it


def _shown(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER.name]


@pytest.mark.usefixtures("clock")
def test_a_line_differing_only_in_a_duration_is_a_repeat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER.name)
    for ms in (0, 1, 0, 3):
        _librdkafka(logging.ERROR, REFUSED.format(ms=ms))
    _librdkafka(logging.ERROR, REFUSED.format(ms=0), client="rdkafka#producer-2")
    _librdkafka(logging.ERROR, REFUSED.format(ms=0).replace(":1", ":2"))
    assert len(_shown(caplog)) == 3  # one per client and per broker


@pytest.mark.usefixtures("clock")
def test_debug_lines_are_never_suppressed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOGGER.name)
    for _ in range(3):
        _librdkafka(logging.DEBUG, "Sent MetadataRequest")
    assert len(_shown(caplog)) == 3


def test_a_line_shown_again_says_how_many_were_suppressed(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    for _ in range(58):
        _librdkafka(logging.ERROR, REFUSED.format(ms=0))
    clock.advance(REPEAT_INTERVAL_MS)
    _librdkafka(logging.ERROR, REFUSED.format(ms=2))
    first, again = _shown(caplog)
    assert first == f"FAIL [rdkafka#consumer-1] {REFUSED.format(ms=0)}"
    assert again == f"FAIL [rdkafka#consumer-1] {REFUSED.format(ms=2)} (57 more like it suppressed)"


@pytest.mark.usefixtures("clock")
def test_report_suppressed_logs_the_count_not_yet_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    report_suppressed()
    assert _shown(caplog) == []  # nothing suppressed, nothing said
    for _ in range(5):
        _librdkafka(logging.ERROR, REFUSED.format(ms=0))
    report_suppressed()
    report_suppressed()
    shown = _shown(caplog)
    assert len(shown) == 2
    assert shown[1].startswith("4 repeated librdkafka line(s) suppressed")
    assert caplog.records[-1].levelno == logging.WARNING


# --- every client is built with the logger ---------------------------------------------------


class _Recorder:
    """Stands in for a confluent-kafka client class: records the config it was built with."""

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}

    def __call__(self, config: dict[str, Any]) -> _Recorder:
        self.config = config
        return self


@pytest.mark.parametrize(
    ("create", "client_class"), [(new_consumer, "Consumer"), (new_producer, "Producer")]
)
def test_consumers_and_producers_log_through_the_logger(
    monkeypatch: pytest.MonkeyPatch, create: Any, client_class: str
) -> None:
    recorder = _Recorder()
    monkeypatch.setattr(kafka_module, client_class, recorder)
    create({"bootstrap.servers": NO_BROKER, "client.id": "c"})
    assert recorder.config["logger"] is LOGGER
    assert callable(recorder.config["error_cb"])
    assert recorder.config["bootstrap.servers"] == NO_BROKER


def test_admin_clients_log_through_the_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _Recorder()
    monkeypatch.setattr(admin_module, "AdminClient", recorder)
    admin_client(KafkaSettings(bootstrap_servers=NO_BROKER))
    assert recorder.config["logger"] is LOGGER


def test_a_logger_of_the_callers_own_is_kept() -> None:
    own = logging.getLogger("tests.own")
    assert with_client_logs({"logger": own})["logger"] is own


def test_with_librdkafka_debug_on_it_writes_every_line_itself() -> None:
    config = with_client_logs({"debug": "broker"})
    assert "logger" not in config
    assert callable(config["error_cb"])


@pytest.mark.parametrize(
    ("error", "level"),
    [
        (KafkaError(KafkaError._FENCED, "fenced", fatal=True), logging.ERROR),
        (KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"), logging.INFO),
        (KafkaError(KafkaError._TRANSPORT, "Connection refused"), logging.DEBUG),
    ],
)
def test_client_errors_are_logged_by_what_they_add(
    caplog: pytest.LogCaptureFixture, error: KafkaError, level: int
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER.name)
    with_client_logs({"client.id": "streamscribe-tail"})["error_cb"](error)
    (record,) = caplog.records
    assert record.levelno == level
    assert record.getMessage().startswith(f"client error [streamscribe-tail] {error.name()}: ")


@pytest.mark.usefixtures("clock")
def test_a_consumer_of_an_unreachable_broker_writes_nothing_to_stderr_itself(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    consumer = new_consumer(
        {"bootstrap.servers": NO_BROKER, "group.id": "g", "client.id": "unreachable"}
    )
    consumer.subscribe(["anything"])
    deadline = time.monotonic() + 1.0  # a few reconnects: librdkafka retries every 0.1 s or so
    while time.monotonic() < deadline:
        consumer.consume(num_messages=1, timeout=0.1)
    consumer.close()
    assert "%3|" not in capfd.readouterr().err  # librdkafka's own stderr format
    refused = [line for line in _shown(caplog) if "Connection refused" in line]
    assert len(refused) == 1, refused
    assert refused[0].startswith("FAIL [unreachable#consumer-")
