"""Regenerate the generated section of docs/configuration.md (the table of every setting).

Run by `make readme`; tests/unit/test_readme.py fails when the table is out of date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pipeline.cli.config import settings_markdown

CONFIGURATION = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
BLOCK = re.compile(r"(<!-- settings:begin -->\n).*?(<!-- settings:end -->)", re.S)


def render(text: str) -> str:
    """The text with its settings block regenerated."""
    return BLOCK.sub(lambda m: m.group(1) + settings_markdown() + "\n" + m.group(2), text)


def main() -> int:
    current = CONFIGURATION.read_text()
    updated = render(current)
    if updated != current:
        CONFIGURATION.write_text(updated)
        print("docs/configuration.md: settings table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
