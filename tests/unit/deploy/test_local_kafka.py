"""deploy/local/kafka.sh start-up: how it judges the broker it launched (a fake `java` here).

The integration tests run the real broker through this script; these check the start-up paths a
real broker rarely takes: a child whose command line does not (yet) name the broker, and a broker
that dies at once.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "deploy" / "local" / "kafka.sh"
VERSION = "0.0.0-fake"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def fake_kafka(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """Environment for kafka.sh with jars "already fetched", storage "formatted" and `java` faked
    by tmp_path/bin/java, whose body the test writes (tmp_path/java.body)."""
    cache = tmp_path / "cache"
    pom_hash = hashlib.sha256((SCRIPT.parent / "kafka-pom.xml").read_bytes()).hexdigest()[:8]
    libs = cache / f"kafka-{VERSION}-{pom_hash}" / "libs"
    libs.mkdir(parents=True)
    (libs / ".complete").touch()
    port = _free_port()
    data = cache / "run" / f"kafka-{port}" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text(f'#!/usr/bin/env bash\n. "{tmp_path}/java.body"\n')
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "STREAMSCRIBE_CACHE": str(cache),
        "KAFKA_VERSION": VERSION,
        "KAFKA_PORT": str(port),
        "KAFKA_READY_TIMEOUT_S": "3",
    }
    return env, tmp_path


def _up(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_launched_broker_is_judged_by_its_pid_not_its_command_line(
    fake_kafka: tuple[dict[str, str], Path],
) -> None:
    # A child whose command line does not name the broker: what a starting broker looks like
    # before its fork reaches exec. It must be waited for (and stopped at the timeout), not
    # declared dead at once and left running.
    env, tmp_path = fake_kafka
    pid_file = tmp_path / "child.pid"
    (tmp_path / "java.body").write_text(f'echo $$ > "{pid_file}"\nexec -a not-yet-named sleep 60\n')

    result = _up(env)

    assert result.returncode == 1
    assert "not ready after 3s, stopping it" in result.stderr, result.stderr
    assert "exited during start-up" not in result.stderr
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the timed-out child was left running"
    run = Path(env["STREAMSCRIBE_CACHE"]) / "run" / f"kafka-{env['KAFKA_PORT']}"
    assert not (run / "kafka.pid").exists()


def test_a_broker_that_dies_at_once_is_reported_with_its_output(
    fake_kafka: tuple[dict[str, str], Path],
) -> None:
    env, tmp_path = fake_kafka
    (tmp_path / "java.body").write_text('echo "Error: could not reserve the heap" >&2\nexit 3\n')

    result = _up(env)

    assert result.returncode == 1
    assert "broker exited during start-up with status 3" in result.stderr, result.stderr
    assert "not ready after" not in result.stderr  # not waited for until the timeout
    assert "could not reserve the heap" in result.stderr
