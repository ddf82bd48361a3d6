"""The docs say what is true: the generated settings table is current, the README is a short front
door whose command table, reading order and links match the code, and every excerpt of the
settings table agrees with the settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.update_configuration import CONFIGURATION, render

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md")), REPO / "bench" / "README.md"]


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a markdown file, and its explicit ``<a id>`` ones."""
    anchors = set(ANCHOR.findall(path.read_text()))
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return anchors


def test_configuration_table_lists_every_setting() -> None:
    text = CONFIGURATION.read_text()
    assert render(text) == text, "run `make readme` to regenerate docs/configuration.md's table"


def test_quickstart_names_the_two_commands() -> None:
    quickstart = _section(README.read_text(), "Quickstart")
    assert "make demo" in quickstart
    assert "make test" in quickstart


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "<!-- settings:begin -->" not in text  # the generated table lives in the docs
    longest = max(len(line) for line in text.splitlines())
    assert longest < 300, "a README table cell that long belongs in the docs or bench/"


def test_the_readmes_command_table_names_every_subcommand() -> None:
    import argparse

    from pipeline.cli import build_parser

    parser = build_parser()
    (subparsers,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    table = _section(README.read_text(), "Command line")
    named = set(re.findall(r"^\| `streamscribe (\w+)", table, re.M))
    assert named == set(subparsers.choices), "one row per `streamscribe` subcommand"


def test_the_reading_order_names_functions_that_exist() -> None:
    reading = _section(README.read_text(), "Reading order")
    items = re.split(r"\n(?=\d+\. )", reading)[1:]
    assert len(items) >= 5
    for item in items:
        files = [REPO / link for link in LINK.findall(item) if link.endswith(".py")]
        sources = "\n".join(path.read_text() for path in files)
        for name in re.findall(r"`(?:\w+\.)?(\w+)\(\)`", item):
            assert f"def {name}(" in sources, f"reading order: no `{name}` in {files}"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve(path: Path) -> None:
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        assert linked.exists(), f"{path.name}: {target} does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{path.name}: no #{anchor} in {linked.name}"


def test_settings_tables_in_the_docs_agree_with_the_settings() -> None:
    # docs/*.md keep excerpts of the configuration table next to the feature they configure;
    # an excerpt row names a setting, its variable and its default, and must say what is true.
    from pipeline.settings import Settings, describe_settings

    truth = {row.name: row for row in describe_settings(Settings())}
    row_pattern = re.compile(
        r"^\| `([a-z_]+\.[a-z_]+)` \| `(STREAMSCRIBE_[A-Z_]+)` \| `([^`]*)` \|"
    )
    checked = 0
    for path in sorted(DOCS.glob("*.md")):
        if path == CONFIGURATION:
            continue  # generated: checked whole above
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            found = row_pattern.match(line)
            if found is None or found.group(1) not in truth:
                continue
            name, env, default = found.groups()
            row = truth[name]
            where = f"{path.name}:{number}"
            assert env == row.env, f"{where}: {name} is read from {row.env}"
            unquoted = row.value.strip("'")
            assert default.strip("'\"") == unquoted, f"{where}: default {row.value}"
            checked += 1
    assert checked >= 27  # hotwords, monitor, operations and qa keep excerpts
