"""Flags from environment variables: converted and checked like command-line values."""

from __future__ import annotations

import argparse

import pytest

from pipeline.cli import build_parser, main
from pipeline.cli.options import InvalidEnv, add_env_option, invalid_env


def _parse(
    monkeypatch: pytest.MonkeyPatch, value: str, argv: list[str], **kwargs: object
) -> object:
    monkeypatch.setenv("SS_TEST_FLAG", value)
    parser = argparse.ArgumentParser()
    add_env_option(parser, "--flag", env="SS_TEST_FLAG", help="a flag", **kwargs)
    return parser.parse_args(argv).flag


def test_a_valid_value_is_converted_like_a_command_line_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _parse(monkeypatch, "40", [], type=int) == 40
    assert _parse(monkeypatch, "fixed", [], choices=["poisson", "fixed"]) == "fixed"
    assert _parse(monkeypatch, "Yes", [], action="store_true") is True
    assert _parse(monkeypatch, "off", [], action="store_true") is False


@pytest.mark.parametrize(
    ("value", "kwargs", "reason"),
    [
        ("abc", {"type": int}, "not a valid int"),
        ("burst", {"choices": ["poisson", "fixed"]}, "choose from poisson, fixed"),
        ("y", {"action": "store_true"}, "use one of"),
    ],
)
def test_an_unusable_value_is_held_not_raised(
    monkeypatch: pytest.MonkeyPatch, value: str, kwargs: dict[str, object], reason: str
) -> None:
    held = _parse(monkeypatch, value, [], **kwargs)
    assert isinstance(held, InvalidEnv)
    assert held.message().startswith(f"SS_TEST_FLAG={value!r}: {reason}")
    assert invalid_env(argparse.Namespace(flag=held, other=1)) == held


def test_the_command_line_overrides_an_unusable_value(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _parse(monkeypatch, "abc", ["--flag", "7"], type=int) == 7


def test_an_unusable_value_fails_only_the_command_that_reads_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STREAMSCRIBE_REPLAY_STEP_MS", "fast")
    assert main(["replay", "--calls", "c1"]) == 2
    assert "STREAMSCRIBE_REPLAY_STEP_MS='fast': not a valid int" in capsys.readouterr().err
    assert main(["metrics"]) == 0  # another command is not affected


def test_help_and_errors_hide_the_password_of_a_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SS_TEST_URL", "rediss://svc:hunter2@redis:6380/0")
    parser = argparse.ArgumentParser()
    add_env_option(parser, "--url", env="SS_TEST_URL", help="a URL")
    shown = " ".join(parser.format_help().split())
    assert "hunter2" not in shown
    assert "default 'rediss://svc:***@redis:6380/0'" in shown
    assert parser.parse_args([]).url == "rediss://svc:hunter2@redis:6380/0"  # used as given
    held = InvalidEnv("SS_TEST_URL", "redis://:hunter2@redis:x/0", "bad port")
    assert held.message() == "SS_TEST_URL='redis://:***@redis:x/0': bad port"


def test_help_shows_a_default_of_zero() -> None:
    # Review finding: 0 == False hid "default 0" (simulate's --seed and --bad-rate).
    simulate = build_parser()._subparsers._group_actions[0].choices["simulate"]  # type: ignore[union-attr]
    helps = {action.dest: action.help or "" for action in simulate._actions}
    assert helps["seed"].endswith("default 0)")
    assert helps["bad_rate"].endswith("default 0.0)")


def test_help_shows_a_value_with_a_percent_sign(monkeypatch: pytest.MonkeyPatch) -> None:
    # Review finding: argparse read the value's % as a format and --help crashed.
    monkeypatch.setenv("SS_TEST_PATH", "/etc/rules%20v2.toml")
    parser = argparse.ArgumentParser()
    add_env_option(parser, "--path", env="SS_TEST_PATH", help="a path")
    assert "default '/etc/rules%20v2.toml'" in " ".join(parser.format_help().split())
