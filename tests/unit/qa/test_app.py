"""The faust shell's pure parts: credentials, topic names, topic preparation (no broker)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence

import faust
import orjson
import pytest

from pipeline.clock import ManualClock
from pipeline.contracts.messages import (
    EndpointReason,
    EventType,
    Final,
    Word,
    to_json,
    utterance_id,
)
from pipeline.errors import ConfigError
from pipeline.qa.app import QaApp, faust_credentials
from pipeline.qa.records import InputKind, encode_input
from pipeline.qa.rules import DEFAULT_RULES
from pipeline.runtime.admin import ApplyReport
from pipeline.settings import KafkaSettings, QaSettings, Settings
from pipeline.topics import ObservedTopic, TopicSpec
from tests.qa_builders import CALL, final, session

PREFIX = "env1."


@pytest.fixture
def app() -> QaApp:
    settings = Settings(
        kafka=KafkaSettings(topic_prefix=PREFIX), qa=QaSettings(partitions=4, web_port=16099)
    )
    return QaApp(settings, DEFAULT_RULES)


class FakeAdmin:
    """Topics of a pretend cluster; records what ``apply`` was asked to create."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self.partitions = partitions
        self.applied: list[TopicSpec] = []

    def observe(self, names: Sequence[str]) -> dict[str, ObservedTopic]:
        return {n: ObservedTopic(n, self.partitions[n]) for n in names if n in self.partitions}

    def apply(self, declared: Sequence[TopicSpec]) -> ApplyReport:
        self.applied.extend(declared)
        return ApplyReport(())


def test_topic_names_carry_the_prefix(app: QaApp) -> None:
    assert app.app_id == "env1.streamscribe-qa"
    assert app.external_topics == ("env1.asr.finals", "env1.asr.events", "env1.qa.calls")
    specs = {spec.name: spec for spec in app.internal_topic_specs()}
    assert set(specs) == {
        "env1.streamscribe-qa-input",
        "env1.streamscribe-qa-calls-changelog",
        "env1.streamscribe-qa-finals-changelog",
    }
    assert {spec.partitions for spec in specs.values()} == {4}
    assert specs["env1.streamscribe-qa-calls-changelog"].config["cleanup.policy"] == "compact"


def test_prepare_creates_the_internal_topics(app: QaApp) -> None:
    admin = FakeAdmin(dict.fromkeys(app.external_topics, 12))
    app.prepare_topics(admin)
    assert [spec.name for spec in admin.applied] == [s.name for s in app.internal_topic_specs()]


def test_prepare_refuses_missing_external_topics(app: QaApp) -> None:
    with pytest.raises(ConfigError, match=r"env1\.qa\.calls.*topics apply"):
        app.prepare_topics(FakeAdmin({"env1.asr.finals": 12, "env1.asr.events": 6}))


def test_prepare_refuses_another_partition_count(app: QaApp) -> None:
    admin = FakeAdmin({**dict.fromkeys(app.external_topics, 12), app.app_id + "-input": 6})
    with pytest.raises(ConfigError, match="STREAMSCRIBE_QA_PARTITIONS"):
        app.prepare_topics(admin)
    assert admin.applied == []


def test_calls_spread_over_the_input_partitions(app: QaApp) -> None:
    partitions = {app.partition_of(f"call-{n}") for n in range(200)}
    assert partitions == {0, 1, 2, 3}
    assert app.partition_of("call-7") == app.partition_of("call-7")


def test_plaintext_needs_no_credentials() -> None:
    assert faust_credentials({}) is None
    assert faust_credentials({"security.protocol": "plaintext", "linger.ms": "5"}) is None


def test_sasl_credentials_from_librdkafka_keys() -> None:
    credentials = faust_credentials(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "qa",
            "sasl.password": "secret",
        }
    )
    assert isinstance(credentials, faust.SASLCredentials)
    assert (credentials.username, credentials.password) == ("qa", "secret")
    assert isinstance(credentials.ssl_context, ssl.SSLContext)


@pytest.mark.parametrize(
    "client",
    [
        {"security.protocol": "KERBEROS"},
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"},
    ],
)
def test_unsupported_security_is_a_config_error(client: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        faust_credentials(client)


def _final_input(utterance_index: int, call_id: str = "call-1") -> bytes:
    final = Final(
        call_id=call_id,
        channel="agent",
        utterance_index=utterance_index,
        utterance_id=utterance_id(call_id, "agent", utterance_index),
        text="hello there",
        words=(
            Word(word="hello", start_ms=0, end_ms=300, probability=0.9),
            Word(word="there", start_ms=300, end_ms=600, probability=0.9),
        ),
        start_ms=1000 * utterance_index,
        end_ms=1000 * utterance_index + 600,
        endpoint_reason=EndpointReason.SILENCE,
        model_id="test",
        emit_ms=1_700_000_000_000,
        latency_ms=None,
        capture_ms=None,
        tenant="default",
    )
    return encode_input(InputKind.FINAL, to_json(final))


def test_a_replayed_final_restores_a_final_lost_between_the_two_changelogs(app: QaApp) -> None:
    """A crash can persist the call state (which lists the final) but not the finals table
    entry; the final's replay must put the entry back, not count it as a mere repeat."""
    tables: dict[str, dict[str, bytes]] = {"calls": {}, "finals": {}}
    app.calls, app.finals = tables["calls"], tables["finals"]  # type: ignore[assignment]
    asyncio.run(app._process("call-1", _final_input(0)))
    assert list(tables["finals"]) == ["call-1:agent:0"]
    tables["finals"].clear()  # the calls changelog write made it, the finals one did not
    asyncio.run(app._process("call-1", _final_input(0)))  # replayed from the input topic
    assert list(tables["finals"]) == ["call-1:agent:0"]
    assert app.call_json("call-1") is not None


def test_calls_of_partitions_another_worker_now_holds_are_forgotten_locally(app: QaApp) -> None:
    tables: dict[str, dict[str, bytes]] = {"calls": {}, "finals": {}}
    app.calls, app.finals = tables["calls"], tables["finals"]  # type: ignore[assignment]
    calls = [f"call-{n}" for n in range(12)]
    for call_id in calls:
        asyncio.run(app._process(call_id, _final_input(0, call_id)))
    kept = {app.partition_of(calls[0])}
    assert app.drop_unowned(kept) == sum(app.partition_of(c) not in kept for c in calls)
    assert set(tables["calls"]) == {c for c in calls if app.partition_of(c) in kept}
    assert {uid.split(":")[0] for uid in tables["finals"]} == set(tables["calls"])


def test_the_list_view_counts_the_utterances_the_summary_counts(app: QaApp) -> None:
    """Review finding: ``/calls`` counted blank finals (no speech), the summary did not."""
    tables: dict[str, dict[str, bytes]] = {"calls": {}, "finals": {}}
    app.calls, app.finals = tables["calls"], tables["finals"]  # type: ignore[assignment]
    spoken = final("agent", 0, "hello there", 1000)
    blank = final("agent", 1, "", 3000)
    for item in (spoken, blank, blank):
        asyncio.run(app._process(CALL, encode_input(InputKind.FINAL, to_json(item))))
    body = app.call_json(CALL)
    assert body is not None
    assert orjson.loads(body)["utterances"] == 1
    (listed,) = app.recent_calls(0, 10)
    assert listed["utterances"] == 1


def test_an_expired_call_leaves_the_tables_with_its_finals() -> None:
    clock = ManualClock(1_700_000_000_000)
    settings = Settings(
        kafka=KafkaSettings(),
        qa=QaSettings(partitions=4, web_port=16098, end_grace_ms=0, retention_ms=1000),
    )
    app = QaApp(settings, DEFAULT_RULES, clock=clock)
    tables: dict[str, dict[str, bytes]] = {"calls": {}, "finals": {}}
    app.calls, app.finals = tables["calls"], tables["finals"]  # type: ignore[assignment]
    app._ready_since_ms = clock.now_ms() - 3_600_000

    published: list[bytes] = []

    async def publish(call_id: str, record: bytes) -> None:
        published.append(record)

    app._publish = publish  # type: ignore[method-assign]
    for index in (0, 1, 3):
        item = final("agent", index, "hello there", 1000 * index)
        asyncio.run(app._process(CALL, encode_input(InputKind.FINAL, to_json(item))))
    other = final("agent", 0, "hello there", 0, call_id="call-2")
    asyncio.run(app._process("call-2", encode_input(InputKind.FINAL, to_json(other))))
    ended = session(EventType.SESSION_ENDED, "agent", finals=3)
    asyncio.run(app._process(CALL, encode_input(InputKind.EVENT, to_json(ended))))
    assert len(published) == 1
    assert sorted(tables["finals"]) == [
        "call-1:agent:0",
        "call-1:agent:1",
        "call-1:agent:3",
        "call-2:agent:0",
    ]
    clock.advance(1000)
    asyncio.run(app._process(CALL, encode_input(InputKind.TICK)))
    assert list(tables["calls"]) == ["call-2"]
    assert list(tables["finals"]) == ["call-2:agent:0"]
