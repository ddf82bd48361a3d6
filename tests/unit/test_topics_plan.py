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


@pytest.mark.parametrize(("audio", "checkpoints", "refused"), [(24, 12, True), (12, 12, False)])
def test_a_file_that_raises_audio_chunks_past_asr_checkpoints_is_refused(
    tmp_path: Path, audio: int, checkpoints: int, refused: bool
) -> None:
    # Audio partition N keeps its checkpoints in checkpoint partition N: raising only
    # audio.chunks leaves the new partitions' sessions without a place to checkpoint.
    raised = tmp_path / "topics.toml"
    raised.write_text(
        f'[topics."audio.chunks"]\npartitions = {audio}\n'
        f'[topics."asr.checkpoints"]\npartitions = {checkpoints}\n'
    )
    if refused:
        with pytest.raises(
            ConfigError, match=r"asr.checkpoints has 12 partitions but audio.chunks has 24"
        ):
            load_topic_specs(raised, prefix="staging.")
    else:
        assert len(load_topic_specs(raised, prefix="staging.")) == 2


def test_checkpoint_partitions_are_raised_before_audio_partitions() -> None:
    # Review finding: in the file's order audio.chunks was raised first, and an apply that
    # stopped between the two left a cluster every worker refuses to start on.
    declared = [
        TopicSpec("staging.audio.chunks", 24),
        TopicSpec("staging.asr.finals", 24),
        TopicSpec("staging.asr.checkpoints", 24),
    ]
    observed = {spec.name: ObservedTopic(spec.name, 12, {}) for spec in declared}
    plan = plan_topics(declared, observed)
    assert [(a.kind, a.topic) for a in plan.actions] == [
        (ActionKind.ADD_PARTITIONS, "staging.asr.checkpoints"),
        (ActionKind.ADD_PARTITIONS, "staging.audio.chunks"),
        (ActionKind.ADD_PARTITIONS, "staging.asr.finals"),
    ]
