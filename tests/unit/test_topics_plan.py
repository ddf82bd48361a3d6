"""The pure topic plan: what to create, raise, align, and what to refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.topics import (
    ActionKind,
    ObservedTopic,
    TopicRole,
    TopicSpec,
    load_topic_specs,
    plan_topics,
)

SPEC = TopicSpec("p.audio.chunks", 12, {"retention.ms": "100", "cleanup.policy": "delete"})


def test_missing_topic_is_created_with_its_configs() -> None:
    plan = plan_topics([SPEC], {})
    assert [(a.kind, a.topic, a.partitions) for a in plan.actions] == [
        (ActionKind.CREATE, "p.audio.chunks", 12)
    ]
    assert plan.actions[0].config == SPEC.config


def test_matching_topic_needs_nothing() -> None:
    observed = ObservedTopic(SPEC.name, 12, {**SPEC.config, "segment.ms": "1"})
    assert plan_topics([SPEC], {SPEC.name: observed}).in_sync


def test_partitions_are_raised_and_only_drifted_configs_are_set() -> None:
    observed = ObservedTopic(SPEC.name, 6, {"retention.ms": "5", "cleanup.policy": "delete"})
    plan = plan_topics([SPEC], {SPEC.name: observed})
    assert [(a.kind, a.partitions, dict(a.config)) for a in plan.actions] == [
        (ActionKind.ADD_PARTITIONS, 12, {}),
        (ActionKind.ALTER_CONFIG, 0, {"retention.ms": "100"}),
    ]
    assert not plan.refusals


def test_lowering_partitions_is_refused_with_a_clear_reason() -> None:
    plan = plan_topics([SPEC], {SPEC.name: ObservedTopic(SPEC.name, 24, SPEC.config)})
    assert not plan.actions
    assert len(plan.refusals) == 1
    assert "cannot lower" in plan.refusals[0]
    assert "24" in plan.refusals[0]


def test_declared_file_covers_every_role_and_applies_the_prefix() -> None:
    specs = load_topic_specs(prefix="staging.")
    assert {spec.name for spec in specs} == {f"staging.{role.value}" for role in TopicRole}
    assert all(spec.partitions >= 1 and spec.description for spec in specs)
    compacted = {s.name for s in specs if s.config.get("cleanup.policy") == "compact"}
    assert compacted == {"staging.asr.checkpoints", "staging.qa.calls"}


def test_malformed_topics_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "topics.toml"
    bad.write_text('[topics."x"]\npartitions = 0\n')
    with pytest.raises(ConfigError, match="partitions"):
        load_topic_specs(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_topic_specs(tmp_path / "missing.toml")
