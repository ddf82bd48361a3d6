"""``streamscribe ingress``: a setup the gateway would be unsafe or unable to run with is one
error line and exit 2, before anything binds or connects."""

from __future__ import annotations

import pytest

from pipeline.cli import main
from tests.unit.cli.errors import NO_BROKER, one_error_line


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({}, "STREAMSCRIBE_INGRESS_AUTH_TOKEN"),
        (
            {
                "STREAMSCRIBE_INGRESS_AUTH_TOKEN": "t",
                "STREAMSCRIBE_INGRESS_RTP_PORT_MIN": "50000",
                "STREAMSCRIBE_INGRESS_RTP_PORT_MAX": "40000",
            },
            "rtp_port_min",
        ),
        (
            {
                "STREAMSCRIBE_INGRESS_AUTH_TOKEN": "t",
                "STREAMSCRIBE_INGRESS_ALLOWED_NETWORKS": "10.0.0.0/40",
            },
            "STREAMSCRIBE_INGRESS_ALLOWED_NETWORKS",
        ),
        (
            {"STREAMSCRIBE_INGRESS_AUTH_DISABLED": "true", "STREAMSCRIBE_INGRESS_RECORD_MS": "5"},
            "STREAMSCRIBE_INGRESS_RECORD_MS",
        ),
    ],
)
def test_an_unsafe_or_impossible_setup_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    match: str,
) -> None:
    monkeypatch.delenv("STREAMSCRIBE_INGRESS_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("STREAMSCRIBE_INGRESS_AUTH_DISABLED", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main([*NO_BROKER, "ingress"]) == 2
    assert match in one_error_line(capsys)


def test_the_token_is_masked_where_settings_are_shown(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMSCRIBE_INGRESS_AUTH_TOKEN", "very-secret-token")
    assert main(["config"]) == 0
    shown = capsys.readouterr().out
    assert "STREAMSCRIBE_INGRESS_AUTH_TOKEN" in shown
    assert "very-secret-token" not in shown
