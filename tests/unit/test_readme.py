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


def test_settings_tables_in_the_docs_agree_with_the_settings() -> None:
    # docs/*.md keep excerpts of the configuration table next to the feature they configure;
    # an excerpt row names a setting, its variable and its default, and must say what is true.
    import re
    from pathlib import Path

    from pipeline.settings import Settings, describe_settings

    truth = {row.name: row for row in describe_settings(Settings())}
    row_pattern = re.compile(
        r"^\| `([a-z_]+\.[a-z_]+)` \| `(STREAMSCRIBE_[A-Z_]+)` \| `([^`]*)` \|"
    )
    checked = 0
    for path in sorted((README.parent / "docs").glob("*.md")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            found = row_pattern.match(line)
            if found is None or found.group(1) not in truth:
                continue
            name, env, default = found.groups()
            row = truth[name]
            where = f"{Path(path).name}:{number}"
            assert env == row.env, f"{where}: {name} is read from {row.env}"
            unquoted = row.value.strip("'")
            assert default.strip("'\"") == unquoted, f"{where}: default {row.value}"
            checked += 1
    assert checked >= 27  # hotwords, monitor, operations and qa keep excerpts
