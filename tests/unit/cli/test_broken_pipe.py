"""A reader of stdout that leaves early (`streamscribe tail --json | head`) ends the command
quietly: no traceback, status 0."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

# The tail handler replaced by one that prints far more than `head` reads (no broker needed).
SCRIPT = (
    "import sys\n"
    "import pipeline.cli.tail as tail\n"
    "def endless(args):\n"
    "    for n in range(200_000):\n"
    '        print(\'{"type": "final", "n": %d}\' % n)\n'
    "    return 0\n"
    "tail._tail = endless\n"
    "from pipeline.cli import main\n"
    "sys.exit(main(['tail', '--json']))\n"
)


def test_a_reader_that_leaves_early_ends_the_command_without_a_traceback() -> None:
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f'"{sys.executable}" -c "$SCRIPT" | head -n 2'],
        env={"SCRIPT": SCRIPT, "PATH": "/usr/bin:/bin"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.splitlines() == ['{"type": "final", "n": 0}', '{"type": "final", "n": 1}']
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0
