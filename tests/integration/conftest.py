"""Real infrastructure for integration tests.

Kafka and Redis are the ones named by ``STREAMSCRIBE_KAFKA_BOOTSTRAP`` / ``STREAMSCRIBE_REDIS_URL``
when set; otherwise the project's own scripts start local ones (deploy/local/) and the fixtures
stop them at the end of the session if they started them. Each test gets its own topic prefix,
so tests never see each other's records.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.runtime.admin import TopicAdmin
from pipeline.settings import KafkaSettings
from pipeline.topics import load_topic_specs

REPO = Path(__file__).resolve().parents[2]
LOCAL_KAFKA_PORT = os.environ.get("KAFKA_PORT", "19092")
LOCAL_REDIS_PORT = os.environ.get("REDIS_PORT", "16379")


def _script(name: str, action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "deploy" / "local" / name), action],
        capture_output=True,
        text=True,
        check=False,
    )


def _start_if_needed(name: str) -> bool:
    """Start a local service unless it already runs; True when this session started it."""
    if _script(name, "status").returncode == 0:
        return False
    result = _script(name, "up")
    if result.returncode != 0:
        pytest.fail(f"could not start {name}: {result.stderr}")
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    given = os.environ.get("STREAMSCRIBE_KAFKA_BOOTSTRAP")
    if given:
        yield given
        return
    started = _start_if_needed("kafka.sh")
    yield f"127.0.0.1:{LOCAL_KAFKA_PORT}"
    if started:
        _script("kafka.sh", "down")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    given = os.environ.get("STREAMSCRIBE_REDIS_URL")
    if given:
        yield given
        return
    started = _start_if_needed("redis.sh")
    yield f"redis://127.0.0.1:{LOCAL_REDIS_PORT}/0"
    if started:
        _script("redis.sh", "down")


@pytest.fixture
def topic_prefix() -> str:
    """A prefix no other test uses (topic names stay valid: letters, digits, '.', '-')."""
    return f"test-{uuid.uuid4().hex[:10]}."


@pytest.fixture
def kafka_settings(kafka_bootstrap: str, topic_prefix: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix)


@pytest.fixture
def topics(kafka_settings: KafkaSettings) -> Iterator[KafkaSettings]:
    """The declared topics created under this test's prefix; deleted afterwards."""
    specs = load_topic_specs(prefix=kafka_settings.topic_prefix)
    admin = TopicAdmin(kafka_settings)
    admin.apply(specs)
    yield kafka_settings
    admin.delete([spec.name for spec in specs])
