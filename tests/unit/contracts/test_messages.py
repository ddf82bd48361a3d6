"""Utterance ids: built and read back by one pair of functions; event types as published."""

from __future__ import annotations

import json

import pytest

from pipeline.contracts.messages import EventType, utterance_id, utterance_id_parts
from tests.conftest import REPO


@pytest.mark.parametrize(
    ("call_id", "channel", "index"), [("c1", "agent", 0), ("a:b:c", "mono", 12)]
)
def test_an_utterance_id_reads_back_into_its_parts(call_id: str, channel: str, index: int) -> None:
    assert utterance_id_parts(utterance_id(call_id, channel, index)) == (
        call_id,
        channel,
        str(index),
    )


def test_a_malformed_utterance_id_gives_what_it_has() -> None:
    assert utterance_id_parts("c1") == ("c1", "", "")
    assert utterance_id_parts("c1:7") == ("c1", "", "7")


def test_the_event_schema_names_exactly_the_event_types() -> None:
    schema = json.loads((REPO / "schemas" / "event.schema.json").read_text())
    assert schema["properties"]["type"]["enum"] == [kind.value for kind in EventType]
