"""The field readers every consumer of the JSON output topics shares."""

from __future__ import annotations

import orjson
import pytest

from pipeline.contracts.reading import (
    RecordRejectedError,
    RecordRejectReason,
    a_list,
    an_object,
    field,
    load_record,
    non_empty,
    non_negative,
    number,
    optional,
    optional_non_negative,
)


def _reason(call: object) -> RecordRejectReason:
    assert callable(call)
    with pytest.raises(RecordRejectedError) as caught:
        call()
    return caught.value.reason


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, RecordRejectReason.NOT_JSON),
        (b"", RecordRejectReason.NOT_JSON),
        (b"{not json", RecordRejectReason.NOT_JSON),
        (b"[1, 2]", RecordRejectReason.NOT_JSON),
        (b'{"a": 1}', RecordRejectReason.UNKNOWN_SCHEMA),
        (b'{"schema": "final/2"}', RecordRejectReason.UNKNOWN_SCHEMA),
    ],
)
def test_a_record_must_be_an_object_of_the_expected_schema(
    value: bytes | None, reason: RecordRejectReason
) -> None:
    assert _reason(lambda: load_record(value, "final/1")) is reason


def test_a_record_of_the_expected_schema_is_returned_whole() -> None:
    data = {"schema": "final/1", "text": "hello", "extra": [1]}
    assert load_record(orjson.dumps(data), "final/1") == data


def test_fields_are_typed_and_a_boolean_is_never_a_number() -> None:
    data = {"n": 3, "flag": True, "x": 1.5, "s": "", "items": [1], "none": None}
    assert field(data, "n", int) == 3
    assert _reason(lambda: field(data, "flag", int)) is RecordRejectReason.INVALID_FIELD
    assert field(data, "flag", (int, bool)) is True
    assert _reason(lambda: field(data, "missing", int)) is RecordRejectReason.MISSING_FIELD
    assert _reason(lambda: field(data, "s", int)) is RecordRejectReason.INVALID_FIELD
    assert number(data, "x") == 1.5
    assert number(data, "n") == 3.0
    assert a_list(data, "items") == [1]
    assert optional(data, "none", int) is None
    assert optional(data, "missing", int) is None
    assert optional(data, "n", int) == 3


def test_times_are_non_negative_and_identifiers_non_empty() -> None:
    data = {"ms": 0, "neg": -1, "id": "c1", "empty": ""}
    assert non_negative(data, "ms") == 0
    assert _reason(lambda: non_negative(data, "neg")) is RecordRejectReason.INVALID_FIELD
    assert optional_non_negative(data, "missing") is None
    assert non_empty(data, "id") == "c1"
    assert _reason(lambda: non_empty(data, "empty")) is RecordRejectReason.INVALID_FIELD


def test_an_element_that_is_not_an_object_is_named_in_the_error() -> None:
    assert an_object({"a": 1}, "turns[]") == {"a": 1}
    with pytest.raises(RecordRejectedError, match=r"turns\[\] is not an object"):
        an_object([1], "turns[]")
