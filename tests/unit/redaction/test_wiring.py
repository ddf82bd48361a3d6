"""What surrounds the stage: settings and ``streamscribe config``, the final/1 contract, the
metrics, and engine outputs through ``redact_outputs``."""

from __future__ import annotations

import copy
import json

import orjson
import pytest
from jsonschema import Draft202012Validator
from prometheus_client import CollectorRegistry

from pipeline.asr.engine import SessionEnded, Suppressed
from pipeline.asr.guards import Guard
from pipeline.asr.session import SessionKey
from pipeline.cli import main
from pipeline.contracts.messages import EntityType, to_json
from pipeline.contracts.reading import RecordRejectedError, parse_final
from pipeline.errors import ConfigError
from pipeline.redaction import PCI, Redactor, RedactorConfig, TenantPolicies
from pipeline.redaction.outputs import redact_outputs
from pipeline.runtime.metrics import WorkerMetrics
from pipeline.settings import load_settings
from tests.conftest import load_schema
from tests.unit.cli.errors import NO_BROKER, one_error_line
from tests.unit.redaction.test_stage import final


def test_settings_give_the_redactor_its_policies() -> None:
    settings = load_settings(
        env={
            "STREAMSCRIBE_REDACTION_POLICY": "pci",
            "STREAMSCRIBE_REDACTION_TENANT_POLICIES": "globex:ssn+email",
            "STREAMSCRIBE_REDACTION_HOLD_MS": "2000",
        }
    )
    config = RedactorConfig.from_settings(settings.redaction)
    assert config.policies.default is PCI
    assert config.policies.for_tenant("globex").entities == {EntityType.SSN, EntityType.EMAIL}
    assert config.hold_ms == 2000
    assert load_settings(env={}).redaction.policy == "off"


def test_a_bad_policy_is_refused_when_settings_load() -> None:
    with pytest.raises(ConfigError, match="STREAMSCRIBE_REDACTION_POLICY"):
        load_settings(env={"STREAMSCRIBE_REDACTION_POLICY": "cards"})
    with pytest.raises(ConfigError, match="STREAMSCRIBE_REDACTION_HOLD_MS"):
        load_settings(env={"STREAMSCRIBE_REDACTION_HOLD_MS": "60000"})


def test_config_shows_the_redaction_block_and_checks_tenant_policies(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STREAMSCRIBE_CONFIG", raising=False)
    monkeypatch.setenv("STREAMSCRIBE_REDACTION_POLICY", "pii")
    assert main([*NO_BROKER, "config"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[:3] for line in out.splitlines() if line.startswith("redaction.")]
    assert ["redaction.policy", "STREAMSCRIBE_REDACTION_POLICY", "'pii'"] in rows
    assert len(rows) == 4
    monkeypatch.setenv("STREAMSCRIBE_REDACTION_TENANT_POLICIES", "acme:everything")
    assert main([*NO_BROKER, "config"]) == 2
    assert "STREAMSCRIBE_REDACTION_TENANT_POLICIES" in one_error_line(capsys)


def test_final_1_stays_backward_compatible() -> None:
    """A final without redactions has no ``redactions`` key: the schema as it was before the
    field validates it. The field's entity types are exactly ``EntityType``."""
    schema = load_schema("final")
    old = copy.deepcopy(schema)
    del old["properties"]["redactions"]
    plain = orjson.loads(to_json(final("two items please")))
    assert "redactions" not in plain
    Draft202012Validator(old).validate(plain)
    entities = schema["properties"]["redactions"]["items"]["properties"]["entity"]["enum"]
    assert entities == [entity.value for entity in EntityType]
    assert "redactions" not in schema["required"]


def test_parse_final_refuses_a_bad_redaction() -> None:
    [redacted] = Redactor(RedactorConfig(TenantPolicies(PCI))).final(
        final("card 4111 1111 1111 1111")
    )
    data = json.loads(to_json(redacted))
    data["redactions"][0]["entity"] = "password"
    with pytest.raises(RecordRejectedError, match="bad redaction"):
        parse_final(json.dumps(data).encode())


def test_metrics_count_redactions_by_entity_and_holds() -> None:
    metrics = WorkerMetrics(CollectorRegistry())
    metrics.count_redactions([EntityType.CARD_NUMBER, "cvv"])
    metrics.count_held_final()
    metrics.observe_hold(0.8)
    get = metrics.registry.get_sample_value
    assert get("asr_redactions_total", {"entity": "card_number"}) == 1
    assert get("asr_redactions_total", {"entity": "ssn"}) == 0
    assert get("asr_redaction_held_finals_total", {}) == 1
    assert get("asr_redaction_hold_seconds_count", {}) == 1
    with pytest.raises(ValueError, match="4111"):
        metrics.count_redactions(["4111"])


class _Session:
    def __init__(self, settled_ms: int) -> None:
        self.settled_ms = settled_ms


def test_engine_outputs_through_the_stage() -> None:
    redactor = Redactor(RedactorConfig(TenantPolicies(PCI)))
    key = SessionKey("call-1", "customer")
    held = final("my card number is 4111 1111", 0, 0)
    suppressed = Suppressed(key, "acme", 1, Guard.LOW_LOGPROB, "it is 4111 1111", True)
    sessions = {key: _Session(held.end_ms + 100)}
    shown = redact_outputs(redactor, [held, suppressed], sessions)  # type: ignore[arg-type]
    assert shown == [Suppressed(key, "acme", 1, Guard.LOW_LOGPROB, "it is [DIGITS]", True)]
    assert redactor.held("call-1", "customer") == (held,)
    sessions = {key: _Session(held.end_ms + 3001)}
    [released] = redact_outputs(redactor, [], sessions)  # type: ignore[arg-type]
    assert released.text == "my card number is [CARD_NUMBER]"
    redactor.final(held)
    ended = SessionEnded(key, "acme", 5000, 4000, 1, 0)
    shown = redact_outputs(redactor, [ended], {})
    assert [type(o).__name__ for o in shown] == ["Final", "SessionEnded"]
