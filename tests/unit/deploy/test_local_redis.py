"""deploy/local/redis.sh against a port held by something that is not Redis (a silent listener).

Found in a setup review: `redis-cli ping` waits forever there, so `status` hung, and `up`
started a redis-server that could not bind and then hung on the same ping (the integration
tests' fixture and `make demo` with it).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "deploy" / "local" / "redis.sh"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


def _run(command: str, port: int, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_PORT": str(port), "STREAMSCRIBE_CACHE": str(cache)}
    # The timeout only keeps a regression from hanging the suite; the script must end by itself.
    return subprocess.run(
        ["bash", str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=30
    )


def test_status_of_a_port_that_is_not_redis_says_not_running(
    silent_port: int, tmp_path: Path
) -> None:
    result = _run("status", silent_port, tmp_path)
    assert result.returncode == 1
    assert result.stdout.strip() == "redis: not running"


def test_up_on_a_port_taken_by_another_process_refuses_at_once(
    silent_port: int, tmp_path: Path
) -> None:
    result = _run("up", silent_port, tmp_path)
    assert result.returncode == 1
    assert f"port {silent_port} is taken by another process" in result.stderr
    assert not (tmp_path / "run" / f"redis-{silent_port}" / "redis.pid").exists()
