"""Reconnect backoff, registry config checks, and CLI input validation (no Redis needed)."""

from __future__ import annotations

import random

import pytest

from pipeline.cli import main
from pipeline.errors import ConfigError
from pipeline.hotwords.registry import Backoff, RegistryConfig

# Nothing listens here: a command that got as far as Redis would exit 1, not 2.
UNREACHABLE = "redis://127.0.0.1:1/0"


def test_backoff_doubles_up_to_the_cap_with_jitter_and_resets() -> None:
    backoff = Backoff(0.1, 1.0, random.Random(7))
    delays = [backoff.next_delay_s() for _ in range(8)]
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling
    backoff.reset()
    assert backoff.next_delay_s() <= 0.1


def test_backoff_survives_many_failures() -> None:
    backoff = Backoff(0.1, 5.0, random.Random(1))
    for _ in range(10_000):
        assert backoff.next_delay_s() <= 5.0


def test_registry_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="poll_interval_s"):
        RegistryConfig(poll_interval_s=0)
    with pytest.raises(ConfigError, match="reconnect_max_s"):
        RegistryConfig(reconnect_initial_s=2.0, reconnect_max_s=1.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["add", "--tenant", "acme", ""], "empty hotword phrase"),
        (["add", "--tenant", "acme", "x" * 65], "at most 64"),
        (["add", "--tenant", "acme", "a b c d e f g h i"], "9 words"),
        (["add", "--tenant", "acme", "stop<|endoftext|>"], "special tokens are spelled so"),
        (["add", "--tenant", "acme", "Niamh", "--boost", "5"], "boost must be between"),
        (["add", "--tenant", "acme", "Niamh", "--boost", "lots"], "boost must be a number"),
        (["add", "--tenant", "ac me", "Niamh"], "tenant 'ac me'"),
        (["add", "--tenant", "acme", "--call", "a/b", "Niamh"], "call id 'a/b'"),
        (["remove", "--tenant", "acme", "  "], "empty hotword phrase"),
        (["list"], "--tenant is required"),
        (["clear", "--tenant", ""], "--tenant is required"),
        (["clear", "--tenant", "acme", "--call", ""], "--call (or STREAMSCRIBE_HOTWORDS_CALL) is"),
        (["remove", "--tenant", "acme", "--call", "", "Niamh"], "--call (or STREAMSCRIBE_HOTWORDS"),
    ],
)
def test_user_mistakes_exit_2_with_one_line_before_touching_redis(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STREAMSCRIBE_TENANT", raising=False)
    code = main(["hotwords", *argv, "--redis-url", UNREACHABLE])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.startswith("streamscribe: error: ")
    assert err.count("\n") == 1


def test_an_empty_call_id_from_the_environment_never_means_the_tenant_list(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMSCRIBE_HOTWORDS_CALL", "")
    code = main(["hotwords", "clear", "--tenant", "acme", "--redis-url", UNREACHABLE])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        "streamscribe: error: --call (or STREAMSCRIBE_HOTWORDS_CALL) is empty; give a call id, "
        "or leave it out for the tenant's list\n"
    )


def test_an_empty_redis_url_is_refused_not_read_as_the_configured_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Self-review finding: `--redis-url "$UNSET"` changed the lists of the configured Redis.
    monkeypatch.setenv("STREAMSCRIBE_REDIS_URL", UNREACHABLE)
    monkeypatch.setattr(
        "pipeline.cli.hotwords.connect", lambda url: pytest.fail(f"connected to {url}")
    )
    code = main(["hotwords", "clear", "--tenant", "acme", "--redis-url", ""])
    assert code == 2
    assert "--redis-url (or STREAMSCRIBE_REDIS_URL) is empty" in capsys.readouterr().err


def test_redis_unreachable_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["hotwords", "list", "--tenant", "acme", "--redis-url", UNREACHABLE])
    assert code == 1
    assert "Redis" in capsys.readouterr().err


def test_a_bad_redis_url_is_reported_without_its_password() -> None:
    from pipeline.hotwords.store import connect

    with pytest.raises(ConfigError) as refused:
        connect("redis://:s3cret@host:notaport/0")
    assert "s3cret" not in str(refused.value)
    assert "***" in str(refused.value)
    # Security review: with a raw "/" in the password, the URL went unmasked and redis-py's
    # message quoted the password's first part as a port.
    with pytest.raises(ConfigError) as refused:
        connect("redis://default:Zm9v/YmFy+@redis:6379/0")
    assert "Zm9v" not in str(refused.value)
    assert "percent-encoded" in str(refused.value)
