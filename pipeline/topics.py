"""Topics as data: the declared topic set, and the pure plan that aligns a cluster with it.

``load_topic_specs`` reads ``topics/topics.toml``; ``plan_topics`` compares the declaration with
what the cluster has (``ObservedTopic``) and returns the ``TopicAction``s to take and the drift
that cannot be fixed (partition counts are never lowered: Kafka cannot, and key → partition
mapping would change). The I/O that observes and applies lives in ``pipeline.runtime.admin``.
"""

from __future__ import annotations

import enum
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import ConfigError

__all__ = [
    "DEFAULT_TOPICS_FILE",
    "ActionKind",
    "ObservedTopic",
    "TopicAction",
    "TopicPlan",
    "TopicSpec",
    "checkpoint_partitions_problem",
    "load_topic_specs",
    "plan_topics",
    "topic_name",
]

DEFAULT_TOPICS_FILE = Path(__file__).resolve().parents[1] / "topics" / "topics.toml"


class TopicRole(enum.StrEnum):
    """The logical topics of the pipeline (names before the environment prefix)."""

    AUDIO_CHUNKS = "audio.chunks"
    PARTIALS = "asr.partials"
    FINALS = "asr.finals"
    EVENTS = "asr.events"
    CHECKPOINTS = "asr.checkpoints"
    DLQ = "audio.dlq"
    QA_CALLS = "qa.calls"


def topic_name(role: str, prefix: str = "") -> str:
    """The physical topic name of a logical one in an environment."""
    return f"{prefix}{role}"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One declared topic (physical name, prefix applied)."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True, slots=True)
class ObservedTopic:
    """What the cluster has for one topic: its partition count and its (non-default) configs."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


class ActionKind(enum.StrEnum):
    CREATE = "create"
    ADD_PARTITIONS = "add_partitions"
    ALTER_CONFIG = "alter_config"


@dataclass(frozen=True, slots=True)
class TopicAction:
    """One change to make; ``config`` holds only the keys to set (for create: all declared)."""

    kind: ActionKind
    topic: str
    partitions: int = 0
    config: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind is ActionKind.CREATE:
            return f"create {self.topic} ({self.partitions} partitions)"
        if self.kind is ActionKind.ADD_PARTITIONS:
            return f"raise {self.topic} to {self.partitions} partitions"
        changes = ", ".join(f"{k}={v}" for k, v in sorted(self.config.items()))
        return f"set {self.topic} {changes}"


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """Actions that align the cluster, plus refusals (drift that must not be fixed)."""

    actions: tuple[TopicAction, ...]
    refusals: tuple[str, ...]

    @property
    def in_sync(self) -> bool:
        return not self.actions and not self.refusals


def load_topic_specs(path: Path | None = None, prefix: str = "") -> list[TopicSpec]:
    """Read the declared topics; names get ``prefix``. Raises ConfigError on a malformed file."""
    source = path or DEFAULT_TOPICS_FILE
    try:
        data = tomllib.loads(Path(source).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read topics file {source}: {error}") from None
    specs = []
    for role, body in data.get("topics", {}).items():
        partitions = body.get("partitions")
        if not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"{source}: topic {role!r} needs partitions >= 1")
        config = {str(k): str(v) for k, v in body.get("config", {}).items()}
        specs.append(
            TopicSpec(topic_name(role, prefix), partitions, config, body.get("description", ""))
        )
    if not specs:
        raise ConfigError(f"{source} declares no topics")
    counts = {spec.name: spec.partitions for spec in specs}
    audio = counts.get(topic_name(TopicRole.AUDIO_CHUNKS, prefix))
    checkpoints = counts.get(topic_name(TopicRole.CHECKPOINTS, prefix))
    if audio is not None and checkpoints is not None:
        problem = checkpoint_partitions_problem(audio, checkpoints)
        if problem is not None:
            raise ConfigError(f"{source}: {problem}")
    return specs


def checkpoint_partitions_problem(audio_partitions: int, checkpoint_partitions: int) -> str | None:
    """Why ``asr.checkpoints`` cannot serve ``audio.chunks``, or None when it can.

    A worker keeps the state of audio partition N in checkpoint partition N (a takeover reads
    one partition, not the whole topic), so there must be at least as many checkpoint partitions.
    """
    if checkpoint_partitions >= audio_partitions:
        return None
    return (
        f"{TopicRole.CHECKPOINTS} has {checkpoint_partitions} partitions but "
        f"{TopicRole.AUDIO_CHUNKS} has {audio_partitions}: the checkpoints of audio partition N "
        f"live in checkpoint partition N, so raise both counts together"
    )


def plan_topics(declared: Sequence[TopicSpec], observed: Mapping[str, ObservedTopic]) -> TopicPlan:
    """The actions that make ``observed`` match ``declared`` (pure; same inputs, same plan).

    Only declared config keys are compared; topics the file does not declare are ignored.
    A declared partition count below the observed one is a refusal, not an action. The actions
    on ``asr.checkpoints`` come first, so that applying them in order never passes through a
    cluster with fewer checkpoint partitions than audio partitions, which workers refuse
    (``checkpoint_partitions_problem``), even when the apply stops half-way.
    """
    actions: list[TopicAction] = []
    refusals: list[str] = []
    for spec in declared:
        have = observed.get(spec.name)
        if have is None:
            actions.append(TopicAction(ActionKind.CREATE, spec.name, spec.partitions, spec.config))
            continue
        if spec.partitions > have.partitions:
            actions.append(TopicAction(ActionKind.ADD_PARTITIONS, spec.name, spec.partitions))
        elif spec.partitions < have.partitions:
            refusals.append(
                f"{spec.name}: declared {spec.partitions} partitions but the cluster has "
                f"{have.partitions}; Kafka cannot lower a partition count (and keys would move) "
                f"— raise the number in the topics file or recreate the topic by hand"
            )
        changed = {k: v for k, v in spec.config.items() if have.config.get(k) != v}
        if changed:
            actions.append(TopicAction(ActionKind.ALTER_CONFIG, spec.name, config=changed))
    # Stable: the file's order otherwise. The environment prefix is unknown here: names end with
    # their role.
    checkpoints_first = sorted(actions, key=lambda a: not a.topic.endswith(TopicRole.CHECKPOINTS))
    return TopicPlan(tuple(checkpoints_first), tuple(refusals))
