"""The README's generated parts are current, and its quickstart is the two commands."""

from __future__ import annotations

from scripts.update_readme import README, render


def test_configuration_table_lists_every_setting() -> None:
    text = README.read_text()
    assert render(text) == text, "run `make readme` to regenerate the configuration table"


def test_quickstart_names_the_two_commands() -> None:
    text = README.read_text()
    assert "make demo" in text
    assert "make test" in text
