"""The per-call summary: every field from hand-built finals with exact timings."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import orjson
import pytest

from pipeline.qa.rules import DEFAULT_RULES, Outcome, QaRules
from pipeline.qa.summary import (
    MAX_SUMMARY_BYTES,
    CallMeta,
    CallStatus,
    EndReason,
    Interval,
    Monologue,
    content_digest,
    fit_record,
    speech_span,
    summarize,
    to_json,
)
from tests.conftest import FIXTURES, validate
from tests.qa_builders import CALL, final, spanning

ENDED = CallMeta(
    CALL,
    channels=("agent", "customer"),
    channel_audio_ms={"agent": 20_000, "customer": 19_000},
    status=CallStatus.ENDED,
    end_reason=EndReason.SESSIONS_ENDED,
    revision=1,
    published_ms=1_700_000_000_000,
)

# Words last 400 ms with 100 ms gaps: an n-word final spans n * 500 - 100 ms of speech.
AGENT_0 = final("agent", 0, "hello this call may be recorded", 1000)  # 1000-3900
AGENT_1 = final("agent", 1, "I can cancel that", 4500)  # 4500-6400
CUSTOMER_0 = final("customer", 0, "I want a refund please", 6000)  # 6000-8400 (overlaps 400)
AGENT_2 = final("agent", 2, "okay", 12_000)  # 12000-12400
CUSTOMER_1 = final("customer", 1, "refund refund", 12_200)  # 12200-13100 (overlaps 200)
FINALS = [AGENT_0, AGENT_1, CUSTOMER_0, AGENT_2, CUSTOMER_1]


def summary_dict(**changes: Any) -> dict[str, Any]:
    summary = summarize(replace(ENDED, **changes), FINALS, DEFAULT_RULES)
    data: dict[str, Any] = orjson.loads(to_json(summary))
    return data


def test_speech_span_is_the_word_span() -> None:
    assert speech_span(AGENT_0) == (1000, 3900)
    assert AGENT_0.end_ms == 4700
    no_words = final("agent", 9, "hi", 500, with_words=False)
    assert speech_span(no_words) == (no_words.start_ms, no_words.end_ms)


def test_channel_talk_time_utterances_words_and_rate() -> None:
    summary = summarize(ENDED, FINALS, DEFAULT_RULES)
    agent, customer = summary.channels
    assert agent.channel == "agent"
    assert agent.talk_ms == 2900 + 1900 + 400
    assert (agent.utterances, agent.words) == (3, 11)
    assert agent.words_per_minute == round(11 * 60_000 / 5200, 1)
    assert (agent.first_speech_ms, agent.last_speech_ms) == (1000, 12_400)
    assert customer.talk_ms == 2400 + 900
    assert (customer.utterances, customer.words) == (2, 7)


def test_a_rate_over_a_few_words_is_no_rate() -> None:
    # Review finding: one "Yes." timed at 40 ms made 1,500 words per minute.
    short = final("customer", 0, "yes", 0, word_ms=40)
    [stats] = summarize(CallMeta(CALL), [short], DEFAULT_RULES).channels
    assert (stats.words, stats.talk_ms, stats.words_per_minute) == (1, 40, None)
    long = final("customer", 0, " ".join(["word"] * 11), 0)  # 0-5400
    [stats] = summarize(CallMeta(CALL), [long], DEFAULT_RULES).channels
    assert stats.words_per_minute == round(11 * 60_000 / 5400, 1)


def test_overlapping_utterances_of_one_channel_count_once_in_talk_time() -> None:
    overlapping = final("agent", 5, "same time", 1500)  # 1500-2400, inside AGENT_0
    summary = summarize(ENDED, [AGENT_0, overlapping], DEFAULT_RULES)
    assert summary.channels[0].talk_ms == 2900
    assert summary.overlaps == ()


def test_speech_silence_duration_and_ratio() -> None:
    summary = summarize(ENDED, FINALS, DEFAULT_RULES)
    # Union of all speech: 1000-3900, 4500-8400, 12000-13100.
    assert summary.speech_ms == 2900 + 3900 + 1100
    assert summary.duration_ms == 20_000
    assert summary.silence_ms == 20_000 - 7900
    assert summary.silence_ratio == pytest.approx(12_100 / 20_000)
    assert summary.longest_gap_ms == 12_000 - 8400


def test_duration_without_session_audio_is_the_end_of_the_last_final() -> None:
    summary = summarize(replace(ENDED, channel_audio_ms={}), FINALS, DEFAULT_RULES)
    assert summary.duration_ms == CUSTOMER_1.end_ms == 13_900


def test_overlaps_are_the_intersections_of_the_channels() -> None:
    summary = summarize(ENDED, FINALS, DEFAULT_RULES)
    assert summary.overlaps == (Interval(6000, 6400, 400), Interval(12_200, 12_400, 200))
    assert summary.overlap_ms == 600


def test_overlap_of_three_channels_is_counted_once() -> None:
    finals = [
        final("agent", 0, "a b c d", 0),  # 0-1900
        final("customer", 0, "e f", 500),  # 500-1400
        final("supervisor", 0, "g", 1000),  # 1000-1400
    ]
    summary = summarize(CallMeta(CALL), finals, DEFAULT_RULES)
    assert summary.overlaps == (Interval(500, 1400, 900),)


def test_touching_spans_do_not_overlap() -> None:
    finals = [final("agent", 0, "a", 0), final("customer", 0, "b", 400)]
    assert summarize(CallMeta(CALL), finals, DEFAULT_RULES).overlaps == ()


def test_turns_follow_speech_start_order() -> None:
    summary = summarize(ENDED, FINALS, DEFAULT_RULES)
    assert [(t.speaker, t.start_ms, t.end_ms, t.utterance_ids) for t in summary.turns] == [
        ("agent", 1000, 6400, ("call-1:agent:0", "call-1:agent:1")),
        ("customer", 6000, 8400, ("call-1:customer:0",)),
        ("agent", 12_000, 12_400, ("call-1:agent:2",)),
        ("customer", 12_200, 13_100, ("call-1:customer:1",)),
    ]


def test_a_back_channel_inside_the_speaker_s_talk_does_not_cut_the_monologue() -> None:
    # Review finding: a customer "uh-huh" inside a 10 s agent utterance halved the agent's
    # monologue (turns follow speech starts, and the monologue followed the turns).
    finals = [
        final("agent", 0, " ".join(["word"] * 20), 0),  # 0-9900
        final("customer", 0, "uh-huh", 4000),  # 4000-4400: inside the agent's speech
        final("agent", 1, " ".join(["word"] * 19), 10_400),  # 10400-19800, pause 500
        final("customer", 1, "okay so what now", 21_000),  # after it: a turn, cuts
    ]
    summary = summarize(CallMeta(CALL), finals, DEFAULT_RULES)
    assert summary.longest_monologue == Monologue("agent", 0, 19_800, 19_800, 2)
    assert [t.speaker for t in summary.turns] == ["agent", "customer", "agent", "customer"]
    overlapping = [*finals[:1], final("customer", 0, "wait wait wait", 9_000), *finals[2:]]
    assert summarize(CallMeta(CALL), overlapping, DEFAULT_RULES).longest_monologue == Monologue(
        "agent", 0, 9_900, 9_900, 1
    )  # the customer talked past the agent's end: a turn taken, the monologue cut there


def test_longest_monologue_splits_at_long_same_speaker_pauses() -> None:
    finals = [
        final("agent", 0, "one two", 0),  # 0-900
        final("agent", 1, "three four five", 2000),  # 2000-3400, pause 1100
        final("agent", 2, "six", 7000),  # 7000-7400, pause 3600: a new monologue
        final("customer", 0, "ok", 8000),
        final("agent", 3, "a b c d e f g h", 9000),  # 9000-12900, 3900 ms
    ]
    summary = summarize(CallMeta(CALL), finals, DEFAULT_RULES)
    assert summary.longest_monologue == Monologue("agent", 9000, 12_900, 3900, 1)
    shorter_gap = QaRules(DEFAULT_RULES.rules, monologue_max_gap_ms=1000)
    relaxed = replace(DEFAULT_RULES, monologue_max_gap_ms=5000)
    assert summarize(CallMeta(CALL), finals[:3], shorter_gap).longest_monologue == Monologue(
        "agent", 2000, 3400, 1400, 1
    )
    assert summarize(CallMeta(CALL), finals[:3], relaxed).longest_monologue == Monologue(
        "agent", 0, 7400, 7400, 3
    )


def test_keywords_are_counted_per_channel() -> None:
    rules = replace(DEFAULT_RULES, keywords=("refund", "cancel that", "supervisor"))
    summary = summarize(ENDED, FINALS, rules)
    counts = {k.keyword: (k.total, dict(k.by_channel)) for k in summary.keywords}
    assert counts == {
        "refund": (3, {"customer": 3}),
        "cancel that": (1, {"agent": 1}),
        "supervisor": (0, {}),
    }


def test_a_keyword_of_several_words_runs_across_utterances_but_not_across_a_pause() -> None:
    """Review finding: "cancel my" at 15 s and "account please" at 200 s counted as
    "cancel my account"."""
    rules = replace(DEFAULT_RULES, keywords=("cancel my account", "refund"))
    apart = [
        final("customer", 0, "cancel my", 15_000),
        final("customer", 1, "account please", 200_000),
    ]
    # "my" ends at 15_900; the other side speaks in the 1.1 s pause.
    close = [
        final("customer", 0, "cancel my", 15_000),
        final("agent", 0, "yes", 16_100),
        final("customer", 1, "account please", 17_000),
    ]
    counts = {
        name: {k.keyword: k.total for k in summarize(ENDED, finals, rules).keywords}
        for name, finals in (("apart", apart), ("close", close))
    }
    assert counts == {
        "apart": {"cancel my account": 0, "refund": 0},
        "close": {"cancel my account": 1, "refund": 0},
    }


def test_compliance_results_and_overall_verdict() -> None:
    summary = summarize(ENDED, FINALS, DEFAULT_RULES)
    outcomes = {result.rule_id: result.outcome for result in summary.compliance}
    assert outcomes == {
        "recording_disclosure": Outcome.PASS,
        "no_dismissive_language": Outcome.PASS,
    }
    assert summary.compliance_passed is True
    evidence = summary.compliance[0].evidence[0]
    assert (evidence.utterance_id, evidence.start_ms) == ("call-1:agent:0", 1500)

    rude = final("agent", 3, "well that's not my problem", 15_000)
    failed = summarize(ENDED, [*FINALS, rude], DEFAULT_RULES)
    assert failed.compliance_passed is False
    assert failed.compliance[1].evidence[0].utterance_id == "call-1:agent:3"


def test_a_live_call_with_a_pending_rule_has_no_verdict_yet() -> None:
    greeting = final("agent", 0, "good morning", 500)
    summary = summarize(CallMeta(CALL), [greeting], DEFAULT_RULES)
    assert summary.status is CallStatus.LIVE
    assert summary.compliance[0].outcome is Outcome.PENDING
    assert summary.compliance_passed is None


def test_the_transcript_is_ordered_by_time_with_speakers() -> None:
    summary = summarize(ENDED, list(reversed(FINALS)), DEFAULT_RULES)
    assert [(line.speaker, line.start_ms, line.text) for line in summary.transcript] == [
        ("agent", 1000, "hello this call may be recorded"),
        ("agent", 4500, "I can cancel that"),
        ("customer", 6000, "I want a refund please"),
        ("agent", 12_000, "okay"),
        ("customer", 12_200, "refund refund"),
    ]
    assert summary.utterances == 5
    assert summary.model_ids == ("whisper-tiny.en",)


def test_duplicate_finals_count_once_and_the_first_wins() -> None:
    changed = replace(AGENT_0, text="something else entirely")
    with_duplicates = [*FINALS, AGENT_0, CUSTOMER_0, changed]
    assert summarize(ENDED, with_duplicates, DEFAULT_RULES) == summarize(
        ENDED, FINALS, DEFAULT_RULES
    )


def test_finals_without_speech_are_ignored() -> None:
    empty = final("customer", 7, "", 15_000)
    summary = summarize(ENDED, [*FINALS, empty], DEFAULT_RULES)
    assert summary.utterances == 5
    assert summary.channels[1].utterances == 2


def test_finals_without_word_timings_use_their_audio_span() -> None:
    plain = final("agent", 0, "this call may be recorded", 1000, with_words=False)
    summary = summarize(CallMeta(CALL), [plain], DEFAULT_RULES)
    assert summary.channels[0].talk_ms == plain.end_ms - plain.start_ms
    assert summary.channels[0].words == 5
    assert summary.compliance[0].outcome is Outcome.PASS


def test_a_call_without_finals() -> None:
    summary = summarize(CallMeta(CALL, channels=("agent",)), [], DEFAULT_RULES)
    assert summary.duration_ms == 0
    assert summary.silence_ratio is None
    assert summary.longest_monologue is None
    assert summary.channels[0].first_speech_ms is None
    validate("qa_call", orjson.loads(to_json(summary)))


def test_summaries_match_the_schema() -> None:
    validate("qa_call", summary_dict())
    validate("qa_call", summary_dict(status=CallStatus.LIVE, end_reason=None, revision=0))


def test_json_is_deterministic_and_the_digest_ignores_revision_and_time() -> None:
    summary = summarize(ENDED, FINALS, DEFAULT_RULES)
    assert to_json(summary) == to_json(summarize(ENDED, list(reversed(FINALS)), DEFAULT_RULES))
    assert json.loads(to_json(summary))["schema"] == "qa_call/1"
    republished = replace(summary, revision=7, published_ms=1)
    assert content_digest(republished) == content_digest(summary)
    assert content_digest(replace(summary, duration_ms=1)) != content_digest(summary)


TOLERANCE_MS = 300


def _manifest_calls() -> list[dict[str, Any]]:
    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    return [entry for entry in manifest["files"] if entry["kind"] == "call"]


@pytest.mark.parametrize("call", _manifest_calls(), ids=lambda call: call["id"])
def test_reference_turns_of_the_fixture_calls_come_out_as_the_manifest_says(
    call: dict[str, Any],
) -> None:
    """Finals shaped like the references give back the manifest's turns, overlaps, gaps, rules.

    The full-pipeline test compares recognized calls with these references within 0.3 s; here
    the finals carry the reference speech timings exactly, so turns come back exactly.
    """
    finals = [
        spanning(channel["label"], n, turn["text"], turn["speech_start_ms"], turn["speech_end_ms"])
        for channel in call["channel_map"]
        for n, turn in enumerate(channel["turns"])
    ]
    labels = tuple(channel["label"] for channel in call["channel_map"])
    meta = CallMeta(
        CALL,
        channels=labels,
        channel_audio_ms=dict.fromkeys(labels, call["duration_ms"]),
        status=CallStatus.ENDED,
    )
    summary = summarize(meta, finals, DEFAULT_RULES)
    assert [turn.speaker for turn in summary.turns] == call["turn_order"]
    references = sorted(
        (turn["speech_start_ms"], turn["speech_end_ms"])
        for channel in call["channel_map"]
        for turn in channel["turns"]
    )
    assert [(turn.start_ms, turn.end_ms) for turn in summary.turns] == references
    # The manifest's gaps and overlaps are the script's design values: within 0.3 s of speech.
    assert len(summary.overlaps) == len(call["overlaps"])
    for found, expected in zip(summary.overlaps, call["overlaps"], strict=True):
        assert abs(found.start_ms - expected["start_ms"]) <= TOLERANCE_MS
        assert abs(found.end_ms - expected["end_ms"]) <= TOLERANCE_MS
    assert abs(summary.longest_gap_ms - call["longest_gap_ms"]) <= TOLERANCE_MS
    assert summary.duration_ms == call["duration_ms"]
    outcomes = {result.rule_id: result.outcome for result in summary.compliance}
    disclosed = call["recording_disclosure_in_first_agent_turn"]
    assert outcomes["recording_disclosure"] is (Outcome.PASS if disclosed else Outcome.FAIL)
    forbidden = outcomes["no_dismissive_language"]
    assert forbidden is (Outcome.FAIL if call["forbidden_phrases_present"] else Outcome.PASS)


def test_a_summary_too_big_for_one_record_keeps_its_statistics_and_the_start_of_its_text() -> None:
    # A long call: 3,000 utterances make a record of about a megabyte, which the
    # producer would refuse (and the call would be retried forever).
    finals = [
        final(("agent", "customer")[n % 2], n // 2, "so I was saying that " * 6, 1000 + n * 16_000)
        for n in range(3000)
    ]
    summary = summarize(ENDED, finals, DEFAULT_RULES)
    assert len(to_json(summary)) > MAX_SUMMARY_BYTES
    record = fit_record(summary)
    assert len(record) <= MAX_SUMMARY_BYTES
    data = orjson.loads(record)
    validate("qa_call", data)
    kept = len(data["transcript"])
    assert 0 < kept < 3000
    assert data["transcript_omitted"] == 3000 - kept
    assert data["transcript"] == orjson.loads(to_json(summary))["transcript"][:kept]
    assert data["utterances"] == 3000  # the statistics cover every utterance
    assert fit_record(summarize(ENDED, FINALS, DEFAULT_RULES)) == to_json(
        summarize(ENDED, FINALS, DEFAULT_RULES)
    )


def test_a_word_timed_at_one_instant_splits_no_silence() -> None:
    agent = [final("agent", 0, "hello", 1000), final("agent", 1, "bye", 10_000)]  # gap 8600
    instant = final("customer", 0, "uh", 5000, word_ms=0)  # 0 ms of speech at 5000
    base = orjson.loads(to_json(summarize(ENDED, agent, DEFAULT_RULES)))
    data = orjson.loads(to_json(summarize(ENDED, [*agent, instant], DEFAULT_RULES)))
    assert data["speech_ms"] == base["speech_ms"]
    assert data["longest_gap_ms"] == base["longest_gap_ms"] == 8600
