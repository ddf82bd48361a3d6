"""`streamscribe topics apply|list` against the real broker."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from pipeline.cli import main
from pipeline.errors import TopicPlanError
from pipeline.runtime.admin import TopicAdmin
from pipeline.settings import KafkaSettings
from pipeline.topics import load_topic_specs

pytestmark = pytest.mark.integration


def _cli(settings: KafkaSettings, *args: str) -> list[str]:
    return [
        "--bootstrap",
        settings.bootstrap_servers,
        "--topic-prefix",
        settings.topic_prefix,
        *args,
    ]


def test_apply_twice_changes_nothing_the_second_time(
    kafka_settings: KafkaSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = load_topic_specs(prefix=kafka_settings.topic_prefix)
    try:
        assert main(_cli(kafka_settings, "topics", "apply")) == 0
        first = capsys.readouterr().out
        assert first.count("create ") == len(specs)
        assert main(_cli(kafka_settings, "topics", "apply")) == 0
        second = capsys.readouterr().out
        assert "no change" in second
        assert "create" not in second
        observed = TopicAdmin(kafka_settings).observe([s.name for s in specs])
        for spec in specs:
            assert observed[spec.name].partitions == spec.partitions
            for key, value in spec.config.items():
                assert observed[spec.name].config[key] == value
    finally:
        TopicAdmin(kafka_settings).delete([s.name for s in specs])


def test_list_reports_drift_and_apply_repairs_it(
    topics: KafkaSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    chunks = f"{topics.topic_prefix}audio.chunks"
    admin = AdminClient({"bootstrap.servers": topics.bootstrap_servers})
    drifted = ConfigResource(
        ConfigResource.Type.TOPIC,
        chunks,
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([drifted]).values():
        future.result()

    assert main(_cli(topics, "topics", "list")) == 3
    listing = capsys.readouterr().out
    assert f"set {chunks} retention.ms=604800000" in listing

    assert main(_cli(topics, "topics", "apply")) == 0
    assert f"set {chunks} retention.ms=604800000" in capsys.readouterr().out
    assert main(_cli(topics, "topics", "list")) == 0
    assert "in sync" in capsys.readouterr().out


def test_partitions_are_raised_but_never_lowered(topics: KafkaSettings, tmp_path: Path) -> None:
    specs = load_topic_specs(prefix=topics.topic_prefix)
    admin = TopicAdmin(topics)
    raised = [
        dataclasses.replace(s, partitions=s.partitions + 2) if s.name.endswith("audio.dlq") else s
        for s in specs
    ]
    report = admin.apply(raised)
    assert report.changes == (f"raise {topics.topic_prefix}audio.dlq to 5 partitions",)

    with pytest.raises(TopicPlanError, match="cannot lower"):
        admin.apply(specs)
    assert (
        admin.observe([f"{topics.topic_prefix}audio.dlq"])[
            f"{topics.topic_prefix}audio.dlq"
        ].partitions
        == 5
    )


def test_cli_refusal_is_one_clear_line(
    topics: KafkaSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lowered = tmp_path / "topics.toml"
    lowered.write_text('[topics."audio.chunks"]\npartitions = 2\n')
    assert main(_cli(topics, "topics", "apply", "--file", str(lowered))) == 2  # the file's to fix
    err = capsys.readouterr().err
    assert err.startswith("streamscribe: error:")
    assert "cannot lower" in err
    assert "Traceback" not in err


def test_unreachable_broker_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--bootstrap", "127.0.0.1:1", "topics", "list"])
    assert code == 1
    assert "did not answer" in capsys.readouterr().err
