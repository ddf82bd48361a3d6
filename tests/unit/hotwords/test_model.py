"""Hotword data rules: validation, limits, Redis names, change notices, merging."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.hotwords.model import (
    MAX_ENTRIES_PER_LIST,
    MAX_PHRASE_CHARS,
    ChangeAction,
    ChangeNotice,
    Hotword,
    HotwordKeys,
    ListRef,
    Scope,
    entries_from_hash,
    merge_entries,
    normalize_phrase,
    parse_boost,
    parse_version,
    read_hash,
    validate_call_id,
    validate_tenant,
)


def test_phrases_are_normalized_but_keep_their_case() -> None:
    assert normalize_phrase("  Saoirse \t Okonkwo ") == "Saoirse Okonkwo"
    assert normalize_phrase("iPhone 15") == "iPhone 15"


@pytest.mark.parametrize(
    ("phrase", "message"),
    [
        ("", "empty hotword phrase"),
        ("   ", "empty hotword phrase"),
        ("!!!", "no letter or digit"),
        ("bad\x00byte", "control characters"),
        ("x" * (MAX_PHRASE_CHARS + 1), "at most 64"),
        ("one two three four five six seven eight nine", "9 words, at most 8"),
        ("stop<|endoftext|>", "special tokens are spelled so"),
        ("<|notimestamps|> hello", "special tokens are spelled so"),
        ("a <| b", "special tokens"),
        ("a |> b", "special tokens"),
    ],
)
def test_invalid_phrases_are_refused_with_one_clear_line(phrase: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        normalize_phrase(phrase)
    assert "\n" not in str(caught.value)


def test_limits_are_inclusive() -> None:
    assert normalize_phrase("x" * MAX_PHRASE_CHARS) == "x" * MAX_PHRASE_CHARS
    assert normalize_phrase("a b c d e f g h") == "a b c d e f g h"


@pytest.mark.parametrize("value", ["0", "0.0", "1", "2.0", 1.5])
def test_boosts_in_range(value: str | float) -> None:
    assert parse_boost(value) == float(value)


@pytest.mark.parametrize("value", ["-0.1", "2.01", "nan", "inf", "high", ""])
def test_boosts_out_of_range_or_not_numbers(value: str) -> None:
    with pytest.raises(ConfigError, match="boost must be"):
        parse_boost(value)


@pytest.mark.parametrize("good", ["acme", "tenant-1", "a.b_c", "A" * 64])
def test_tenant_ids_use_the_audio_label_charset(good: str) -> None:
    assert validate_tenant(good) == good


@pytest.mark.parametrize("bad", ["", "ac me", "acme:1", "a/b", "é", "A" * 65])
def test_bad_tenant_ids(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"tenant .* must be 1\.\.64 characters"):
        validate_tenant(bad)


def test_call_ids_allow_128_characters() -> None:
    assert validate_call_id("c" * 128) == "c" * 128
    with pytest.raises(ConfigError, match="call id"):
        validate_call_id("c" * 129)
    with pytest.raises(ConfigError, match="call id"):
        validate_call_id("call 1")


def test_keys_round_trip_and_foreign_keys_are_ignored() -> None:
    keys = HotwordKeys("env1:hw")
    tenant, call = ListRef("acme"), ListRef("acme", "call-7.a")
    assert keys.key(tenant) == "env1:hw:tenant:acme"
    assert keys.key(call) == "env1:hw:call:acme:call-7.a"
    assert keys.parse_key(keys.key(tenant)) == tenant
    assert keys.parse_key(keys.key(call)) == call
    assert keys.channel == "env1:hw:changes"
    assert keys.version == "env1:hw:version"
    for foreign in (
        "env1:hw:version",
        "other:tenant:acme",
        "env1:hw:call:acme",
        "env1:hw:tenant:a b",
    ):
        assert keys.parse_key(foreign) is None


def test_list_refs_know_their_scope() -> None:
    assert ListRef("acme").scope is Scope.TENANT
    assert ListRef("acme", "c1").scope is Scope.CALL
    assert ListRef("acme", "c1").describe() == "tenant acme call c1"


def test_change_notices_round_trip_as_json() -> None:
    for ref in (ListRef("acme"), ListRef("acme", "c1")):
        notice = ChangeNotice(ref, ChangeAction.REMOVE, 42)
        assert ChangeNotice.from_json(notice.to_json()) == notice


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"schema": "other/1", "tenant": "a", "call_id": null, "action": "add", "version": 1}',
        b'{"schema": "hotwords_change/1", "tenant": "a b", "call_id": null, "action": "add",'
        b' "version": 1}',
        b'{"schema": "hotwords_change/1", "tenant": "a", "call_id": null, "action": "zap",'
        b' "version": 1}',
        b'{"schema": "hotwords_change/1", "tenant": "a", "call_id": null, "action": "add",'
        b' "version": "1"}',
        b'{"schema": "hotwords_change/1", "call_id": null, "action": "add", "version": 1}',
    ],
)
def test_malformed_notices_raise_config_error(raw: bytes) -> None:
    with pytest.raises(ConfigError, match="bad hotword change notice"):
        ChangeNotice.from_json(raw)


def test_hash_entries_are_sorted_and_bad_ones_skipped() -> None:
    raw = {"Zyrtec": "1.0", "Niamh": "1.5", "": "1", "bad boost": "9", "Okonkwo": "x"}
    assert entries_from_hash(raw) == (Hotword("Niamh", 1.5), Hotword("Zyrtec", 1.0))


def test_fields_that_are_not_utf8_are_skipped_one_by_one() -> None:
    raw = {b"caf\xe9": b"1", b"Niamh": b"1.5", b"Zyrtec": b"\xff", "Ökonomie".encode(): b"2"}
    reading = read_hash(raw)
    assert reading.entries == (Hotword("Niamh", 1.5), Hotword("Ökonomie", 2.0))
    assert set(reading.skipped) == {
        "field b'caf\\xe9': phrase is not UTF-8",
        "field 'Zyrtec': boost is not UTF-8",
    }


def test_fields_not_in_stored_form_are_skipped_so_a_phrase_is_never_listed_twice() -> None:
    raw = {"Acme  Corp": "1.5", " Acme Corp": "2", "Acme Corp": "0", "Acme Corp\t": "1"}
    reading = read_hash(raw)
    assert reading.entries == (Hotword("Acme Corp", 0.0),)  # the mute is not overridden
    assert len(reading.skipped) == 3
    assert all("not in stored form 'Acme Corp'" in line for line in reading.skipped)


def test_at_most_the_list_limit_is_loaded_in_phrase_order() -> None:
    raw = {f"w{i:05d}": "1" for i in range(MAX_ENTRIES_PER_LIST + 4000)}
    reading = read_hash(raw)
    assert len(reading.entries) == MAX_ENTRIES_PER_LIST
    assert reading.entries[-1].phrase == f"w{MAX_ENTRIES_PER_LIST - 1:05d}"
    assert reading.skipped == (
        f"4000 field(s) from 'w{MAX_ENTRIES_PER_LIST:05d}' on: a list holds at most 1000 entries",
    )


@pytest.mark.parametrize(
    ("raw", "version"),
    [
        *((None, 0), (b"42", 42), ("7", 7), (b"-1", -1)),
        *((b"abc", None), (b"\xff", None), (b" 7", None), (b"1_0", None), ("\u0667", None)),
        (b"1" * 20, None),
    ],
)
def test_a_version_that_is_not_an_integer_is_unknown(
    raw: bytes | str | None, version: int | None
) -> None:
    assert parse_version(raw) == version


def test_call_entries_override_tenant_boosts() -> None:
    tenant = [Hotword("Niamh", 1.0), Hotword("Zyrtec", 1.0)]
    call = [Hotword("Zyrtec", 0.0), Hotword("Ozempic", 2.0)]
    assert merge_entries(tenant, call) == (
        Hotword("Niamh", 1.0),
        Hotword("Ozempic", 2.0),
        Hotword("Zyrtec", 0.0),
    )
