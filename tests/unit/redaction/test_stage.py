"""The redaction stage: tags in text and words, spans from word timings, the per-channel hold
of finals that end in an unfinished number, masked partials, and policies per tenant."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.contracts.messages import EndpointReason, EntityType, Final, Partial, Word, to_json
from pipeline.contracts.reading import parse_final
from pipeline.errors import ConfigError
from pipeline.redaction import (
    OFF,
    PCI,
    PII,
    Redactor,
    RedactorConfig,
    TenantPolicies,
    parse_policy,
    parse_tenant_policies,
)
from pipeline.redaction.dtmf import dtmf_notice
from tests.conftest import validate

E = EntityType


def final(
    text: str,
    start_ms: int = 0,
    index: int = 0,
    *,
    tenant: str = "acme",
    channel: str = "customer",
    word_ms: int = 300,
    reason: EndpointReason = EndpointReason.SILENCE,
) -> Final:
    """A final whose words are ``text`` split on spaces, ``word_ms`` each from ``start_ms``."""
    words = tuple(
        Word(w, start_ms + i * word_ms, start_ms + (i + 1) * word_ms, 0.9)
        for i, w in enumerate(text.split())
    )
    end_ms = start_ms + len(words) * word_ms
    return Final(
        "call-1", channel, index, f"call-1:{channel}:{index}", text, words, start_ms, end_ms,
        reason, "tiny.en", 0, tenant=tenant,
    )  # fmt: skip


def redactor(policy: str = "pci", hold_ms: int = 3000) -> Redactor:
    return Redactor(RedactorConfig(TenantPolicies(parse_policy(policy)), hold_ms=hold_ms))


def test_a_card_number_becomes_its_tag_in_text_and_words_with_its_audio_span() -> None:
    [out] = redactor().final(final("My card number is 4111 1111 1111 1111. Thanks", 1000))
    assert out.text == "My card number is [CARD_NUMBER]. Thanks"
    assert [w.word for w in out.words] == ["My", "card", "number", "is", "[CARD_NUMBER].", "Thanks"]
    tag = out.words[4]
    assert (tag.start_ms, tag.end_ms) == (1000 + 4 * 300, 1000 + 8 * 300)
    assert [(r.entity, r.start_ms, r.end_ms) for r in out.redactions] == [
        (E.CARD_NUMBER, 2200, 3400)
    ]


def test_whispers_glued_words_keep_the_text_as_written() -> None:
    words = ("My", "number", "is", "4,111", ",111", ",111", ",111", ",111", ",1111.")
    text = "My number is 4,111,111,111,111,111,1111."
    record = final("x")
    record = Final(
        **{**{f: getattr(record, f) for f in record.__dataclass_fields__}, "text": text,
           "words": tuple(Word(w, i * 100, (i + 1) * 100, 0.9) for i, w in enumerate(words))}
    )  # fmt: skip
    [out] = redactor().final(record)
    assert out.text == "My number is [CARD_NUMBER]."
    assert out.redactions[0].start_ms == 300


def test_nothing_found_is_the_same_final_and_the_json_has_no_redactions_field() -> None:
    record = final("I ordered two items, order 12, at 3 pm.")
    [out] = redactor("pii").final(record)
    assert out is record
    assert "redactions" not in orjson.loads(to_json(out))


def test_off_changes_nothing() -> None:
    record = final("My card number is 4111 1111 1111 1111.")
    assert redactor("off").final(record) == [record]


def test_pci_keeps_what_only_pii_removes() -> None:
    text = "my social is 078-05-1120 and my email is john dot smith at example dot com"
    [kept] = redactor("pci").final(final(text))
    assert kept.text == text
    [gone] = redactor("pii").final(final(text))
    assert gone.text == "my social is [SSN] and my email is [EMAIL]"
    assert [r.entity for r in gone.redactions] == [E.SSN, E.EMAIL]


def test_an_entity_list_policy_removes_just_those() -> None:
    text = "code 737 and email john at example dot com"
    [out] = redactor("email").final(final(text))
    assert out.text == "code 737 and email [EMAIL]"


def test_a_card_number_split_by_a_pause_is_held_then_redacted_in_both_finals() -> None:
    stage = redactor()
    first = final("My card number is 4111 1111", 0, 0)
    assert stage.final(first) == []
    assert stage.held("call-1", "customer") == (first,)
    assert stage.held_start_ms("call-1", "customer") == 0
    second = final("1111 1111 thank you.", first.end_ms + 1200, 1)
    out = stage.final(second)
    assert [o.utterance_index for o in out] == [0, 1]
    assert out[0].text == "My card number is [CARD_NUMBER]"
    assert out[1].text == "[CARD_NUMBER] thank you."
    assert out[0].redactions[0].end_ms == first.end_ms
    assert out[1].redactions[0].start_ms == second.start_ms
    assert stage.held("call-1", "customer") == ()


def test_a_cued_number_whose_digits_go_on_in_the_next_final_is_held_and_redacted() -> None:
    # tiny.en's words for "My phone number is 4 1 5, [pause] 5 5 5, 2 6 7 1." at 8 kHz: the
    # first final ends in misheard digits, the next one holds the rest of the number.
    stage = redactor("pii")
    first = final("My phone number in 4 -1 time,", 0, 0)
    assert stage.final(first) == []
    second = final("time time, 2 -6 -7 -1", first.end_ms + 700, 1)
    assert stage.final(second) == []  # not a whole phone number yet: the chain waits on
    out = stage.advance("call-1", "customer", second.end_ms + 3001)
    assert [o.text for o in out] == ["My phone number in [PHONE],", "[PHONE]"]
    assert [r.entity for o in out for r in o.redactions] == [E.PHONE, E.PHONE]


def test_a_final_ending_in_its_cue_waits_for_the_value() -> None:
    stage = redactor("pii")
    first = final("My social security number is.", 0, 0)
    assert stage.final(first) == []
    second = final("0 7 8, 0 5, 1 1 2 0.", first.end_ms + 900, 1)
    out = stage.final(second)
    assert [o.text for o in out] == [first.text, "[SSN]."]


def test_the_ssn_and_phone_finals_of_the_8k_call_are_redacted_in_a_chain() -> None:
    stage = redactor("pii")
    ssn = final("My social security number in near -rof -envate, near -rof -ine, 1 -1 -2 -0.")
    assert stage.final(ssn) == []  # a cued value, not whole: the rest may follow
    phone = final("My phone number in 4 -1 time, time time time, 2 -6 -7 -1", ssn.end_ms + 680, 1)
    assert stage.final(phone) == []
    out = stage.flush("call-1", "customer")
    assert [o.text for o in out] == [
        "My social security number in near -rof -envate, near -rof -ine, [SSN].",
        "My phone number in [PHONE]",
    ]


def test_partials_mask_what_a_cue_announces_before_four_digits() -> None:
    out = redactor("pii").partial(
        partial(
            "My social security number in near-rofen grenade, near",
            "-rof time, 1, 1, 2, near-rof.",
        )
    )
    assert out.tentative_text == "-rof time, [SSN], near-rof."
    out = redactor("pii").partial(
        partial("My phone number in", "4 1 time, time, time, time, time, two...")
    )
    assert out.tentative_text == "[PHONE] time, time, time, time, time, two..."


def test_a_next_final_beyond_the_hold_is_not_joined() -> None:
    stage = redactor(hold_ms=3000)
    first = final("My card number is 4111 1111", 0, 0)
    assert stage.final(first) == []
    second = final("1111 1111 thank you.", first.end_ms + 3001, 1)
    out = stage.final(second)
    assert [o.utterance_index for o in out] == [0, 1]
    assert out[0].text == "My card number is [CARD_NUMBER]"  # card context, 8 digits
    assert out[1].text == second.text  # 8 digits and no context of its own


def test_the_hold_runs_out_in_audio_time_and_flushes_at_end_of_stream() -> None:
    stage = redactor(hold_ms=3000)
    first = final("My card number is 4111 1111", 0, 0)
    stage.final(first)
    assert stage.advance("call-1", "customer", first.end_ms + 3000) == []
    [out] = stage.advance("call-1", "customer", first.end_ms + 3001)
    assert out.utterance_index == 0
    assert "[CARD_NUMBER]" in out.text
    stage.final(first)
    [flushed] = stage.flush("call-1", "customer")
    assert flushed.utterance_index == 0
    assert stage.flush("call-1", "customer") == []


def test_finals_that_cannot_continue_are_never_held() -> None:
    stage = redactor()
    assert len(stage.final(final("order 12."))) == 1
    assert len(stage.final(final("it ends in 4111", reason=EndpointReason.END_OF_STREAM))) == 1
    assert len(redactor("email").final(final("my number is 4111"))) == 1
    assert len(redactor(hold_ms=0).final(final("my number is 4111"))) == 1


def test_channels_hold_apart() -> None:
    stage = redactor()
    stage.final(final("my card number is 4111 1111", channel="customer"))
    [agent] = stage.final(final("okay thank you", channel="agent"))
    assert agent.channel == "agent"
    assert set(stage.holding) == {("call-1", "customer")}


def test_a_chain_of_groups_is_held_and_redacted_together() -> None:
    stage = redactor()
    outs = []
    start = 0
    for index, group in enumerate(["my card number is 4111", "1111", "1111", "1111."]):
        record = final(group, start, index)
        start = record.end_ms + 1000
        outs += stage.final(record)
    assert [o.utterance_index for o in outs] == [0, 1, 2, 3]
    assert all("1111" not in o.text and "4111" not in o.text for o in outs)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4000), min_size=2, max_size=6), st.integers(0, 3000))
def test_released_finals_are_every_final_once_in_order(gaps_ms: list[int], hold_ms: int) -> None:
    """Whatever the pauses: every final comes out exactly once, in utterance order, and no run
    of 4 digits of the card survives in any of them once the stream is flushed."""
    stage = redactor(hold_ms=hold_ms)
    groups = ["my card number is 4111", "1111", "1111", "1111", "thanks", "bye"]
    outs = []
    start = 0
    for index, gap in enumerate(gaps_ms):
        record = final(groups[index], start, index)
        start = record.end_ms + gap
        outs += stage.final(record)
    outs += stage.flush_all()
    assert [o.utterance_index for o in outs] == list(range(len(gaps_ms)))


def test_the_same_finals_give_the_same_output() -> None:
    records = [final("my card number is 4111 1111", 0, 0), final("1111 1111.", 3000, 1)]
    runs = []
    for _ in range(2):
        stage = redactor()
        runs.append([to_json(o) for r in records for o in stage.final(r)])
    assert runs[0] == runs[1]


def test_a_redacted_final_is_valid_final_1_and_reads_back() -> None:
    [out] = redactor("pii").final(final("my social is 078-05-1120 and card 4111111111111111"))
    data = orjson.loads(to_json(out))
    validate("final", data)
    assert [r["entity"] for r in data["redactions"]] == ["ssn", "card_number"]
    assert parse_final(to_json(out)) == out


def partial(committed: str, tentative: str, tenant: str = "acme") -> Partial:
    return Partial("call-1", "customer", 0, 3, committed, tentative, 0, 1000, "m", 0, tenant=tenant)


def test_partials_mask_every_run_of_four_digits_at_once() -> None:
    out = redactor().partial(partial("order 12 and", "four one one one"))
    assert out.committed_text == "order 12 and"
    assert out.tentative_text == "[DIGITS]"
    out = redactor().partial(partial("my number is 4", ",111,111"))
    assert (out.committed_text, out.tentative_text) == ("my number is [DIGITS]", "")
    out = redactor().partial(partial("the security code is", "737"))
    assert out.tentative_text == "[CVV]"


def test_a_partial_under_off_or_without_digits_is_the_same_object() -> None:
    record = partial("my card is", "4111 1111")
    assert redactor("off").partial(record) is record
    plain = partial("two items", "please")
    assert redactor().partial(plain) is plain


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789", min_size=4, max_size=19), st.integers(0, 19))
def test_no_partial_shows_four_digits_in_a_row(digits: str, cut: int) -> None:
    cut = min(cut, len(digits))
    out = redactor().partial(partial(f"it is {digits[:cut]}", digits[cut:]))
    shown = out.committed_text + " " + out.tentative_text
    assert not re.search(r"\d{4}", shown.replace(" ", "").replace(",", ""))


def test_free_text_is_masked() -> None:
    assert (
        redactor("pii").text("I socially low 7 8, 05, 1 1 2", "acme") == "I socially low [DIGITS]"
    )


def test_tenants_have_their_own_policies() -> None:
    stage = Redactor(
        RedactorConfig(TenantPolicies(OFF, parse_tenant_policies("acme:pci, globex:pii")))
    )
    assert stage.policy_for("acme") is PCI
    assert stage.policy_for("globex") is PII
    assert stage.policy_for("other") is OFF


@pytest.mark.parametrize(
    "text", ["acme", "acme:everything", "acme:pci,acme:pii", "bad tenant:pci", ":pci"]
)
def test_bad_tenant_policies_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_tenant_policies(text)


def test_policies_parse() -> None:
    assert parse_policy("PCI") is PCI
    assert parse_policy("card_number+email").entities == {E.CARD_NUMBER, E.EMAIL}
    with pytest.raises(ConfigError, match="not off, pci, pii"):
        parse_policy("cards")


def test_dtmf_says_digits_were_keyed_never_which() -> None:
    report = dtmf_notice(PCI, "call-1", "customer", "7", 1200, 80)
    assert report.digit is None
    assert report.redacted
    assert "7" not in orjson.dumps(report.detail()).decode().replace("1200", "")
    assert dtmf_notice(OFF, "call-1", "customer", "7", 1200, 80).detail()["digit"] == "7"
