"""Fixtures of the CLI tests."""

from __future__ import annotations

import faulthandler
import logging
import signal

import pytest


@pytest.fixture
def _worker_leaves_signals_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``worker`` installs process-wide handlers before it reads settings; keep ours."""
    monkeypatch.setattr(signal, "signal", lambda *_: None)
    monkeypatch.setattr(faulthandler, "register", lambda *_, **__: None)
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)
