"""Parsing what to replay: times, call lists, and the user mistakes."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.replay.timerange import ReplayRange, parse_calls, parse_time, replay_range

NOW_MS = 1_717_236_000_000  # 2024-06-01T10:00:00Z


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1717236000000", NOW_MS),
        ("now", NOW_MS),
        ("-15m", NOW_MS - 15 * 60_000),
        ("-2h", NOW_MS - 2 * 3_600_000),
        ("-1d", NOW_MS - 86_400_000),
        ("-90s", NOW_MS - 90_000),
        ("-500ms", NOW_MS - 500),
        ("2024-06-01T10:00:00Z", NOW_MS),
        ("2024-06-01T12:00:00+02:00", NOW_MS),
        ("2024-06-01 10:00:00.250", NOW_MS + 250),
        ("2024-06-01", NOW_MS - 10 * 3_600_000),
        # Review finding: a basic ISO date was read as epoch ms, 1970, replaying everything.
        ("20240601", NOW_MS - 10 * 3_600_000),
    ],
)
def test_times(text: str, expected: int) -> None:
    assert parse_time(text, NOW_MS) == expected


@pytest.mark.parametrize(
    "text",
    ["yesterday", "-5 minutes", "+1h", "2024-13-01", "", "1717236000", "0", "171723600000"],
)
def test_bad_times_name_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="--to"):
        parse_time(text, NOW_MS, "--to")


def test_calls_are_deduplicated_and_sorted() -> None:
    assert parse_calls(" b, a,,b ") == ("a", "b")
    assert parse_calls(None) == ()


def test_a_range_needs_a_start_or_calls_and_must_not_be_empty() -> None:
    assert replay_range(None, None, "c1", NOW_MS) == ReplayRange(None, None, ("c1",))
    assert replay_range("-1h", "now", None, NOW_MS) == ReplayRange(NOW_MS - 3_600_000, NOW_MS, ())
    with pytest.raises(ConfigError, match="say what to replay"):
        replay_range(None, "now", None, NOW_MS)
    with pytest.raises(ConfigError, match="must be after"):
        replay_range("now", "-1h", None, NOW_MS)


def test_epoch_seconds_are_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError, match=r"13 digits \(epoch seconds\? add 000\)"):
        parse_time("1717236000", NOW_MS)


def test_only_ten_digits_get_the_epoch_seconds_hint() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_time("20241301", NOW_MS)  # a basic ISO date that does not exist
    assert "epoch seconds" not in str(refused.value)
