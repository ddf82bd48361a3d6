"""Call timelines, the registry's limits, source policies and the gateway's settings checks."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.ingress.calls import Call, CallRegistry, SourcePolicy
from pipeline.ingress.rtp import Rejected, RejectReason
from pipeline.ingress.server import validate_ingress_settings
from pipeline.settings import IngressSettings


def test_a_leg_that_starts_late_gets_that_much_leading_silence() -> None:
    call = Call("c1", "default", created_ms=0)
    call.add_channel("agent", 8000)
    call.add_channel("customer", 8000)
    assert call.media("agent", 10_000) == 0
    assert call.media("customer", 11_250) == 1250 * 8  # 1.25 s behind the call's start
    assert call.media("customer", 11_270) == 0  # only once
    assert call.idle_since_ms() == 11_270


def test_the_registry_limits_calls_and_hands_out_each_port_once() -> None:
    registry = CallRegistry(max_calls=2, ports=range(4000, 4003))
    assert isinstance(registry.open("a", "t", 0), Call)
    assert registry.open("a", "t", 5) is registry.get("a")
    assert isinstance(registry.open("b", "t", 0), Call)
    refused = registry.open("c", "t", 0)
    assert isinstance(refused, Rejected)
    assert refused.reason is RejectReason.CALL_LIMIT
    ports = [registry.take_port() for _ in range(4)]
    assert ports == [4000, 4001, 4002, None]
    registry.return_port(4001)
    assert registry.free_ports == 1
    assert registry.take_port() == 4001
    registry.close("a")
    assert len(registry) == 1


def test_idle_calls_are_those_without_media_for_the_timeout() -> None:
    registry = CallRegistry(max_calls=10, ports=())
    quiet = registry.open("quiet", "t", 0)
    busy = registry.open("busy", "t", 0)
    assert isinstance(quiet, Call)
    assert isinstance(busy, Call)
    busy.add_channel("mono", 8000)
    busy.media("mono", 9_000)
    assert registry.idle(9_999, 10_000) == []
    assert registry.idle(10_000, 10_000) == ["quiet"]
    assert sorted(registry.idle(19_000, 10_000)) == ["busy", "quiet"]


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("10.1.2.3", True),
        ("10.255.0.1", True),
        ("11.0.0.1", False),
        ("::ffff:10.0.0.7", True),
        ("::1", True),
        ("fe80::1", False),
        ("not an address", False),
    ],
)
def test_a_source_policy_allows_exactly_its_networks(host: str, allowed: bool) -> None:
    assert SourcePolicy.parse("10.0.0.0/8, ::1/128").allows(host) is allowed


def test_the_gateway_refuses_to_start_without_a_token_unless_told_to() -> None:
    with pytest.raises(ConfigError, match="STREAMSCRIBE_INGRESS_AUTH_TOKEN"):
        validate_ingress_settings(IngressSettings())
    validate_ingress_settings(IngressSettings(auth_disabled=True))
    policy = validate_ingress_settings(IngressSettings(auth_token="x", allowed_networks="any"))
    assert policy.allows("203.0.113.9")
    assert policy.allows("2001:db8::1")
    with pytest.raises(ConfigError, match="ALLOWED_NETWORKS"):
        validate_ingress_settings(IngressSettings(auth_token="x", allowed_networks="10.0.0.0/33"))
    with pytest.raises(ConfigError, match="rtp_port_min"):
        validate_ingress_settings(IngressSettings(auth_token="x", rtp_port_min=5, rtp_port_max=4))
