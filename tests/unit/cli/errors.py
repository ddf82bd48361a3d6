"""What the CLI tests expect of a user mistake: one line on stderr, ``streamscribe: error: …``."""

from __future__ import annotations

import pytest

NO_BROKER = ["--bootstrap", "127.0.0.1:9"]
"""Nothing listens here: a command that reached Kafka would fail differently (exit 1)."""


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single line the command wrote to stderr (asserted to be one error line)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("streamscribe: error: ")
    return err[0]
