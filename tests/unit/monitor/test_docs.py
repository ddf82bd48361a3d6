"""docs/monitor.md stays in step with the settings and the command's flags."""

from __future__ import annotations

from pipeline.cli import build_parser
from pipeline.settings import describe_settings
from tests.conftest import REPO

DOCS = (REPO / "docs" / "monitor.md").read_text()


def test_the_docs_list_every_monitor_setting_with_its_default() -> None:
    rows = [row for row in describe_settings() if row.name.startswith("monitor.")]
    assert rows
    for row in rows:
        shown = row.value.strip("'") if row.value != "''" else '""'
        assert f"| `{row.name}` | `{row.env}` | `{shown}` |" in DOCS, row.name


def test_the_docs_list_every_flag_of_the_command() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    monitor = subparsers.choices["monitor"]  # type: ignore[attr-defined]
    for action in monitor._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}" in DOCS, flag


def test_the_docs_show_the_three_screenshots() -> None:
    for name in ("monitor-live.png", "monitor-call.png", "monitor-recent.png"):
        assert f"]({name})" in DOCS
        assert (REPO / "docs" / name).stat().st_size > 10_000, f"docs/{name} is missing"
