"""Per-tenant endpoint rules: parsed from settings, chosen per session by its tenant."""

from __future__ import annotations

import pytest

from pipeline.asr.endpoint import EndpointConfig, EndpointReason
from pipeline.asr.engine import EngineConfig, StreamingEngine
from pipeline.asr.factory import engine_config, parse_tenant_endpoints
from pipeline.asr.session import SessionKey
from pipeline.asr.vad import EnergyVad
from pipeline.clock import ManualClock
from pipeline.errors import ConfigError
from pipeline.settings import AsrSettings, load_settings
from tests.unit.asr.fakes import FakeRecognizer
from tests.unit.asr.test_engine import CHUNK, EMIT_MS, PAD_MS, finals, signal


def test_rules_parse_with_an_optional_maximum() -> None:
    assert parse_tenant_endpoints("") == {}
    assert parse_tenant_endpoints(" acme:1200 , globex.eu:600:15000 ,") == {
        "acme": (1200, None),
        "globex.eu": (600, 15000),
    }


@pytest.mark.parametrize(
    "text",
    [
        "acme",
        "acme:",
        "acme:0",
        "acme:-5",
        "acme:12x",
        "acme:1:2:3",
        "a cme:800",
        ":800",
        "acme:²",
        "acme:800,acme:900",
        "x" * 65 + ":800",
    ],
)
def test_malformed_rules_name_the_setting(text: str) -> None:
    with pytest.raises(ConfigError, match="STREAMSCRIBE_TENANT_ENDPOINTS"):
        parse_tenant_endpoints(text)


def test_engine_config_builds_each_tenant_rule_on_the_process_defaults() -> None:
    settings = load_settings(
        env={
            "STREAMSCRIBE_TENANT_ENDPOINTS": "patient:2000,brisk:500:8000",
            "STREAMSCRIBE_MAX_UTTERANCE_MS": "15000",
        }
    )
    config = engine_config(settings.asr)
    assert config.endpoint_for("patient") == EndpointConfig(
        trailing_silence_ms=2000,
        max_utterance_ms=15000,
        speech_pad_ms=60,
        start_pad_ms=settings.asr.speech_start_pad_ms,
    )
    assert config.endpoint_for("brisk").max_utterance_ms == 8000
    assert config.endpoint_for("anyone-else") is config.endpoint
    assert config.endpoint.trailing_silence_ms == 800


def test_a_rule_the_endpoint_refuses_names_the_tenant() -> None:
    # The silence rule must exceed both speech pads (2 × 60 ms).
    with pytest.raises(ConfigError, match="tenant 'tight'"):
        engine_config(AsrSettings(tenant_endpoints="tight:100"))


def test_each_session_follows_its_tenant_rules() -> None:
    config = EngineConfig(
        min_decode_ms=500,
        endpoint=EndpointConfig(speech_pad_ms=PAD_MS),
        tenant_endpoints={
            "patient": EndpointConfig(trailing_silence_ms=1500, speech_pad_ms=PAD_MS)
        },
    )
    engine = StreamingEngine(FakeRecognizer(), EnergyVad(), config, ManualClock(EMIT_MS))
    audio = signal(10, 40, 32, 40, 50)  # a 1024 ms pause between two runs of speech
    keys = {"default": SessionKey("call-1", "mono"), "patient": SessionKey("call-2", "mono")}
    outputs = []
    for start in range(0, len(audio), CHUNK):
        last = start + CHUNK >= len(audio)
        for tenant, key in keys.items():
            engine.accept(
                key, audio[start : start + CHUNK], 16_000, tenant=tenant, end_of_stream=last
            )
        outputs.extend(engine.step().outputs)
    outputs.extend(engine.step().outputs)
    assert [f.endpoint_reason for f in finals(outputs, keys["default"])] == [
        EndpointReason.SILENCE,
        EndpointReason.SILENCE,
    ]
    [patient] = finals(outputs, keys["patient"])  # 1024 ms is no endpoint at 1500 ms
    assert patient.tenant == "patient"


def test_a_pad_mismatch_is_refused() -> None:
    with pytest.raises(ConfigError, match="patient"):
        EngineConfig(tenant_endpoints={"patient": EndpointConfig(speech_pad_ms=0)})
