"""The rules file (parsing, defaults, errors) and each rule's pass / fail / pending outcome."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from pipeline.contracts.messages import Final
from pipeline.errors import ConfigError
from pipeline.qa.matching import MatchOptions, Token
from pipeline.qa.rules import (
    DEFAULT_RULES,
    Outcome,
    Rule,
    RuleKind,
    RuleResult,
    evaluate_rule,
    load_rules,
    parse_rules,
)
from pipeline.qa.summary import tokens_of
from tests.conftest import REPO
from tests.qa_builders import final

DISCLOSURE = Rule(
    "disclosure", RuleKind.REQUIRED_PHRASE, ("this call may be recorded",), "agent", 30_000
)
FORBIDDEN = Rule(
    "dismissive",
    RuleKind.FORBIDDEN_PHRASE,
    ("that's not my problem", "not my department"),
    "agent",
)


def by_channel(*finals: Final) -> dict[str, list[Token]]:
    tokens: dict[str, list[Token]] = {}
    for item in sorted(finals, key=lambda f: f.start_ms):
        tokens.setdefault(item.channel, []).extend(tokens_of(item))
    return tokens


def evaluate(
    rule: Rule, finals: Sequence[Final], *, ended: bool = True, heard_until_ms: int = 60_000
) -> RuleResult:
    return evaluate_rule(
        rule, by_channel(*finals), MatchOptions(), call_ended=ended, heard_until_ms=heard_until_ms
    )


def test_required_phrase_said_in_time_passes_with_evidence() -> None:
    # Words of 400 ms with 100 ms gaps from 2000 ms: "this" is word 4, at 4000 ms.
    said = final("agent", 0, "hello I am Emma this cool may be recorded okay", 2000)
    result = evaluate(DISCLOSURE, [said])
    assert result.outcome is Outcome.PASS
    assert result.detail == "said at 4.0\u20136.4 s"
    (evidence,) = result.evidence
    assert evidence.utterance_id == "call-1:agent:0"
    assert (evidence.start_ms, evidence.end_ms) == (4000, 6400)
    assert evidence.matched_text == "this cool may be recorded"
    assert evidence.score == pytest.approx(0.8)


def test_required_phrase_said_late_fails_with_the_late_evidence() -> None:
    late = final("agent", 4, "by the way this call may be recorded", 31_000)
    result = evaluate(DISCLOSURE, [late])
    assert result.outcome is Outcome.FAIL
    assert result.detail == "said at 32.5\u201334.9 s, not finished by the 30.0 s deadline"
    assert [e.start_ms for e in result.evidence] == [32_500]


def test_a_deadline_is_met_by_the_phrase_finished_before_it() -> None:
    """The deadline is judged by the end of the phrase's last word, not by its first word."""
    # "this" starts at 28_000 ms, "recorded" ends at 30_400 ms.
    straddling = final("agent", 0, "this call may be recorded", 28_000)
    result = evaluate(DISCLOSURE, [straddling])
    assert result.outcome is Outcome.FAIL
    assert result.detail == "said at 28.0\u201330.4 s, not finished by the 30.0 s deadline"
    in_time = final("agent", 0, "this call may be recorded", 27_600)  # ends at 30_000 ms
    assert evaluate(DISCLOSURE, [in_time]).outcome is Outcome.PASS


def test_required_phrase_with_its_words_minutes_apart_is_not_said() -> None:
    """Review finding: "help you with this call" at 3 s and "will be recorded" at 300 s passed
    the disclosure as "said at 5.2 s"."""
    finals = [
        final("agent", 0, "sure I can help you with this call", 3000),
        final("customer", 0, "is it recorded", 290_000),
        final("agent", 1, "will be recorded yes for training", 300_000),
    ]
    result = evaluate(DISCLOSURE, finals, heard_until_ms=310_000)
    assert result.outcome is Outcome.FAIL
    assert result.evidence == ()
    assert result.detail == "not said on the agent channel within 30.0 s"


def test_required_phrase_never_said_fails_once_the_call_ended() -> None:
    result = evaluate(DISCLOSURE, [final("agent", 0, "how can I help", 500)])
    assert result.outcome is Outcome.FAIL
    assert result.evidence == ()


def test_required_phrase_is_pending_while_live_before_the_deadline() -> None:
    finals = [final("agent", 0, "how can I help", 500)]
    assert evaluate(DISCLOSURE, finals, ended=False, heard_until_ms=10_000).outcome is (
        Outcome.PENDING
    )
    # The customer talked past the deadline, the agent's own words did not reach it: an
    # agent utterance still being decoded could hold the phrase.
    assert evaluate(DISCLOSURE, finals, ended=False, heard_until_ms=30_001).outcome is (
        Outcome.PENDING
    )
    late = [*finals, final("agent", 1, "anything else today", 29_000)]
    assert evaluate(DISCLOSURE, late, ended=False, heard_until_ms=31_000).outcome is (Outcome.FAIL)


def test_required_phrase_by_the_wrong_channel_does_not_count() -> None:
    customer = final("customer", 0, "this call may be recorded", 500)
    assert evaluate(DISCLOSURE, [customer]).outcome is Outcome.FAIL


def test_agent_rules_read_the_one_channel_of_a_mono_call() -> None:
    said = final("mono", 0, "hello this call may be recorded for quality", 1000)
    dismissed = final("mono", 1, "well that's not my problem", 8000)
    disclosure = evaluate(DISCLOSURE, [said, dismissed])
    assert disclosure.outcome is Outcome.PASS
    assert disclosure.evidence[0].channel == "mono"
    forbidden = evaluate(FORBIDDEN, [said, dismissed])
    assert forbidden.outcome is Outcome.FAIL
    assert [e.utterance_id for e in forbidden.evidence] == ["call-1:mono:1"]
    assert evaluate(DISCLOSURE, [dismissed]).detail == "not said on the mono channel within 30.0 s"


def test_required_phrase_split_across_two_finals_is_found() -> None:
    first = final("agent", 0, "hello this call", 500)  # ends at 1900 ms
    second = final("agent", 1, "may be recorded", 3000)
    customer = final("customer", 0, "okay", 2000)  # the other side in the pause
    for finals in ([first, second], [first, customer, second]):
        result = evaluate(DISCLOSURE, finals)
        assert result.outcome is Outcome.PASS
        assert result.evidence[0].utterance_id == "call-1:agent:0"
        assert result.evidence[0].matched_text == "this call may be recorded"
        assert (result.evidence[0].start_ms, result.evidence[0].end_ms) == (1000, 4400)


def test_forbidden_phrase_fails_with_every_occurrence() -> None:
    finals = [
        final("agent", 0, "well that's not my problem", 1000),
        final("customer", 0, "that's not my problem either", 4000),
        final("agent", 1, "sorry that is not my department", 9000),
    ]
    result = evaluate(FORBIDDEN, finals)
    assert result.outcome is Outcome.FAIL
    assert [(e.utterance_id, e.start_ms, e.phrase) for e in result.evidence] == [
        ("call-1:agent:0", 1500, "that's not my problem"),
        ("call-1:agent:1", 10_500, "not my department"),
    ]
    assert result.evidence[0].matched_text == "that's not my problem"


def test_overlapping_phrases_of_a_rule_count_one_occurrence() -> None:
    """Review finding: phrases "not my problem" and "that's not my problem" made one utterance
    "said 2x"."""
    rule = Rule(
        "dismissive", RuleKind.FORBIDDEN_PHRASE, ("not my problem", "that's not my problem")
    )
    finals = [
        final("agent", 0, "sorry that's not my problem", 1000),
        final("agent", 1, "really not my problem", 6000),
    ]
    result = evaluate(rule, finals)
    assert result.detail == "forbidden phrase said 2x"
    assert [(e.utterance_id, e.phrase) for e in result.evidence] == [
        ("call-1:agent:0", "that's not my problem"),
        ("call-1:agent:1", "not my problem"),
    ]


def test_channel_labels_compare_case_insensitively() -> None:
    """Review finding: on a call with channels ``Agent`` / ``Customer`` the forbidden phrase
    passed and the disclosure failed, though both were said."""
    finals = [
        final("Agent", 0, "this call may be recorded", 1000),
        final("Agent", 1, "that's not my problem", 9000),
        final("Customer", 0, "hi", 500),
    ]
    disclosure = evaluate(DISCLOSURE, finals)
    assert disclosure.outcome is Outcome.PASS
    assert disclosure.evidence[0].channel == "Agent"
    forbidden = evaluate(FORBIDDEN, finals)
    assert forbidden.outcome is Outcome.FAIL
    assert [e.utterance_id for e in forbidden.evidence] == ["call-1:Agent:1"]


@pytest.mark.parametrize("rule", [DISCLOSURE, FORBIDDEN], ids=["required", "forbidden"])
def test_a_rule_whose_channel_is_not_on_the_call_is_not_checked(rule: Rule) -> None:
    """It never passes silently: pending while the channel may still join, then a failure
    whose detail says why."""
    finals = [
        final("left", 0, "this call may be recorded", 1000),
        final("right", 0, "that's not my problem", 5000),
    ]
    tokens = by_channel(*finals)
    tokens["caller"] = []  # a channel known from its session events that said nothing
    ended = evaluate_rule(rule, tokens, MatchOptions(), call_ended=True, heard_until_ms=60_000)
    assert ended.outcome is Outcome.FAIL
    assert ended.detail == (
        "not checked: no agent channel on this call (channels: caller, left, right)"
    )
    assert ended.evidence == ()
    live = evaluate_rule(rule, tokens, MatchOptions(), call_ended=False, heard_until_ms=60_000)
    assert live.outcome is Outcome.PENDING
    assert live.detail == "no agent channel on this call yet"


def test_forbidden_phrase_absent_passes_even_while_live() -> None:
    finals = [final("agent", 0, "I will fix that for you", 1000)]
    assert evaluate(FORBIDDEN, finals).outcome is Outcome.PASS
    assert evaluate(FORBIDDEN, finals, ended=False).outcome is Outcome.PASS


def test_a_rule_for_any_channel() -> None:
    anyone = Rule("thanks", RuleKind.REQUIRED_PHRASE, ("thank you for calling",))
    result = evaluate(anyone, [final("customer", 0, "thank you for calling", 0)])
    assert result.outcome is Outcome.PASS


def test_no_rules_file_means_the_built_in_rules() -> None:
    assert load_rules("") is DEFAULT_RULES
    assert load_rules(None) is DEFAULT_RULES
    ids = [rule.rule_id for rule in DEFAULT_RULES.rules]
    assert ids == ["recording_disclosure", "no_dismissive_language"]


def _docs_example() -> str:
    text = (REPO / "docs" / "qa.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/qa.md shows a rules file"
    return str(blocks[0])


def test_the_documented_example_is_a_valid_rules_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(_docs_example())
    rules = load_rules(path)
    assert {rule.kind for rule in rules.rules} == set(RuleKind)
    assert rules.keywords
    assert rules.matching == MatchOptions(min_score=0.8, word_similarity=0.75)


def test_a_complete_rules_file() -> None:
    rules = parse_rules(
        {
            "keywords": ["refund", "cancel my account"],
            "monologue_max_gap_ms": 2000,
            "matching": {"min_score": 0.75},
            "rules": [
                {"id": "a", "kind": "required_phrase", "phrase": "hello", "deadline_ms": 5000},
                {"id": "b", "kind": "forbidden_phrase", "phrases": ["x y"], "channel": "agent"},
            ],
        }
    )
    assert rules.keywords == ("refund", "cancel my account")
    assert rules.monologue_max_gap_ms == 2000
    assert rules.matching == MatchOptions(min_score=0.75, word_similarity=0.75)
    assert rules.rules == (
        Rule("a", RuleKind.REQUIRED_PHRASE, ("hello",), None, 5000),
        Rule("b", RuleKind.FORBIDDEN_PHRASE, ("x y",), "agent"),
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rule": []}, "unknown key"),
        ({"rules": [{"id": "a", "kind": "maybe", "phrase": "x"}]}, "kind must be one of"),
        ({"rules": [{"kind": "required_phrase", "phrase": "x"}]}, "id must be"),
        ({"rules": [{"id": "a", "kind": "required_phrase"}]}, "phrases must be"),
        ({"rules": [{"id": "a", "kind": "required_phrase", "phrase": "?!"}]}, "has no words"),
        (
            {"rules": [{"id": "a", "kind": "required_phrase", "phrase": "x", "phrases": ["y"]}]},
            "not both",
        ),
        (
            {"rules": [{"id": "a", "kind": "forbidden_phrase", "phrase": "x", "deadline_ms": 1}]},
            "required_phrase rules only",
        ),
        (
            {"rules": [{"id": "a", "kind": "required_phrase", "phrase": "x", "deadline_ms": -1}]},
            "non-negative",
        ),
        (
            {"rules": [{"id": "a", "kind": "required_phrase", "phrase": "x", "colour": "red"}]},
            "unknown key",
        ),
        (
            {
                "rules": [
                    {"id": "a", "kind": "required_phrase", "phrase": "x"},
                    {"id": "a", "kind": "forbidden_phrase", "phrase": "y"},
                ]
            },
            "unique",
        ),
        ({"keywords": "refund"}, "keywords"),
        ({"matching": {"min_score": 1.5}}, "min_score"),
        ({"matching": {"fuzz": 1}}, "matching"),
        ({"monologue_max_gap_ms": "long"}, "monologue_max_gap_ms"),
    ],
)
def test_invalid_rules_name_the_problem(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_rules(data, "rules.toml")


def test_an_unreadable_rules_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read rules file"):
        load_rules(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[[rules]\n")
    with pytest.raises(ConfigError, match=r"broken\.toml"):
        load_rules(broken)


def test_a_rules_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_bytes('title = "caf\u00e9"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_rules(path)
