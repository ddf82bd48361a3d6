"""Regenerate the generated sections of README.md (the configuration table).

Run by `make readme`; tests/unit/test_readme.py fails when the README is out of date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pipeline.cli.config import settings_markdown

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(<!-- settings:begin -->\n).*?(<!-- settings:end -->)", re.S)


def render(text: str) -> str:
    """The README text with its settings block regenerated."""
    return BLOCK.sub(lambda m: m.group(1) + settings_markdown() + "\n" + m.group(2), text)


def main() -> int:
    current = README.read_text()
    updated = render(current)
    if updated != current:
        README.write_text(updated)
        print("README.md: configuration table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
