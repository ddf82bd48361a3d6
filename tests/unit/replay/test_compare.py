"""Comparison: WER and divergence, endpoint movements, latency, the gate."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import ConfigError
from pipeline.evaluation import WordErrors
from pipeline.replay.compare import (
    ChangeKind,
    Utterance,
    compare_runs,
    group_utterances,
    latency_stats,
    parse_refs,
    reference_id,
)
from pipeline.replay.results import Run
from tests.unit.replay.builders import final, run


def _u(
    index: int, start_ms: int, end_ms: int, text: str = "x", reason: str = "silence"
) -> Utterance:
    return Utterance(index, start_ms, end_ms, reason, text)


def _kinds(base: list[Utterance], cand: list[Utterance]) -> list[tuple[ChangeKind, ...]]:
    return [group.kinds for group in group_utterances(base, cand, 200)]


def test_identical_and_slightly_moved_utterances_are_no_change() -> None:
    base = [_u(0, 0, 1000, "Hello."), _u(1, 2000, 3000, "Bye.")]
    cand = [_u(0, 150, 1100, "hello"), _u(1, 1900, 3200, "BYE")]
    assert _kinds(base, cand) == [(), ()]


def test_boundaries_beyond_the_tolerance_move() -> None:
    assert _kinds([_u(0, 0, 1000)], [_u(0, 0, 1201)]) == [(ChangeKind.BOUNDARY_MOVED,)]
    assert _kinds([_u(0, 500, 1000)], [_u(0, 250, 1000)]) == [(ChangeKind.BOUNDARY_MOVED,)]


def test_split_merged_and_regrouped() -> None:
    one = [_u(0, 0, 3000, "a b c")]
    two = [_u(0, 0, 1400, "a b"), _u(1, 1500, 3000, "c")]
    assert _kinds(one, two) == [(ChangeKind.SPLIT,)]
    assert _kinds(two, one) == [(ChangeKind.MERGED,)]
    three = [_u(0, 0, 900, "a"), _u(1, 1000, 2000, "b"), _u(2, 2100, 3000, "c")]
    assert _kinds(two, three) == [(ChangeKind.REGROUPED,)]


def test_reason_and_text_changes() -> None:
    base = [_u(0, 0, 1000, "I can't.", "silence")]
    cand = [_u(0, 0, 1000, "I can.", "max_length")]
    assert _kinds(base, cand) == [(ChangeKind.REASON_CHANGED, ChangeKind.TEXT_CHANGED)]


def test_utterances_on_one_side_only() -> None:
    groups = group_utterances([_u(0, 0, 1000, "a")], [_u(0, 1000, 2000, "b")])
    assert [(len(g.baseline), len(g.candidate), g.kinds) for g in groups] == [
        (1, 0, (ChangeKind.ONLY_IN_BASELINE, ChangeKind.TEXT_CHANGED)),
        (0, 1, (ChangeKind.ONLY_IN_CANDIDATE, ChangeKind.TEXT_CHANGED)),
    ]
    assert (groups[1].start_ms, groups[1].end_ms) == (1000, 2000)


def test_refs_and_reference_ids() -> None:
    refs = parse_refs("# comment\nutt01\tHello there.\n\ncall1:agent\tHi.\n", "refs.tsv")
    assert refs == {"utt01": "Hello there.", "call1:agent": "Hi."}
    assert reference_id("call1", "agent", refs, single_channel=False) == "call1:agent"
    assert reference_id("call1", "customer", refs, single_channel=False) is None
    assert reference_id("utt01", "mono", refs, single_channel=True) == "utt01"
    assert reference_id("utt01", "agent", refs, single_channel=False) is None
    with pytest.raises(ConfigError, match=r"refs\.tsv:1: expected"):
        parse_refs("no tab here", "refs.tsv")
    with pytest.raises(ConfigError, match="appears twice"):
        parse_refs("a\tx\na\ty", "refs.tsv")


def test_latency_percentiles_are_nearest_rank() -> None:
    finals = [final("c", i, "w", i * 10, i * 10 + 5, latency_ms=i + 1) for i in range(100)]
    finals.append(final("c", 100, "w", 2000, 2005, latency_ms=None))
    stats = latency_stats(finals)
    assert (stats.count, stats.p50_ms, stats.p95_ms, stats.p99_ms, stats.max_ms) == (
        100,
        50,
        95,
        99,
        100,
    )
    assert latency_stats([final("c", 0, "w", 0, 5)]).p50_ms is None


BASE = run(
    final("c1", 0, "Hello, how can I help?", 0, 2000, channel="agent", latency_ms=300),
    final("c1", 0, "My bill is wrong.", 2500, 4000, channel="customer", latency_ms=500),
    final("u1", 0, "Reset my password please.", 100, 2100, latency_ms=400),
)


def test_a_run_against_itself_passes_a_zero_gate_with_and_without_refs() -> None:
    refs = {"c1:agent": "Hello, how can I help?", "c1:customer": "My bill is wrong."}
    with_refs = compare_runs(BASE, BASE, refs, max_increase_pct=0.0)
    assert with_refs.gate.metric == "wer"
    assert with_refs.gate.passed
    assert with_refs.gate.increase_pct == 0.0
    assert with_refs.baseline_errors == WordErrors(0, 0, 0, 9)
    assert [s.reference_id for s in with_refs.streams] == ["c1:agent", "c1:customer", None]
    assert with_refs.text_changes == 0
    assert all(count == 0 for _, count in with_refs.endpoint_changes)
    without = compare_runs(BASE, BASE, None, max_increase_pct=0.0)
    assert without.gate.metric == "divergence"
    assert without.gate.passed
    assert without.gate.baseline_pct is None
    assert without.baseline.latency.p50_ms == 400


def test_a_worse_candidate_fails_the_gate_and_its_changes_are_reported() -> None:
    worse = run(
        final("c1", 0, "Hello, how can", 0, 1200, channel="agent", reason="max_length"),
        final("c1", 1, "I help?", 1200, 2000, channel="agent"),
        final("c1", 0, "My bill is wrong.", 2500, 4000, channel="customer"),
        final("u1", 0, "Reset my passport please.", 100, 2100),
    )
    refs = {"c1:agent": "Hello, how can I help?", "u1": "Reset my password please."}
    result = compare_runs(BASE, worse, refs, max_increase_pct=0.5)
    assert result.gate.metric == "wer"
    assert result.baseline_errors == WordErrors(0, 0, 0, 9)
    assert result.candidate_errors == WordErrors(1, 0, 0, 9)
    assert result.gate.increase_pct == pytest.approx(100 / 9)
    assert not result.gate.passed
    counts = dict(result.endpoint_changes)
    assert counts[ChangeKind.SPLIT] == 1
    assert counts[ChangeKind.REASON_CHANGED] == 0
    assert result.text_changes == 1
    (agent, customer, u1) = result.streams
    assert agent.changes[0].kinds == (ChangeKind.SPLIT,)
    assert customer.changes == ()
    assert u1.changes[0].kinds == (ChangeKind.TEXT_CHANGED,)
    assert u1.divergence == WordErrors(1, 0, 0, 4)
    assert result.divergence == WordErrors(1, 0, 0, 13)
    # The same comparison without a gate is reported but passes.
    assert compare_runs(BASE, worse, refs).gate.passed
    # Without references the divergence is gated.
    divergence = compare_runs(BASE, worse, None, max_increase_pct=5.0)
    assert divergence.gate.metric == "divergence"
    assert divergence.gate.candidate_pct == pytest.approx(100 / 13)
    assert not divergence.gate.passed


def test_a_better_candidate_passes_even_a_zero_gate() -> None:
    refs = {"u1": "Reset my password please."}
    worse = run(final("u1", 0, "Reset my passport please.", 100, 2100))
    assert compare_runs(worse, BASE, refs, max_increase_pct=0).gate.passed


def test_empty_text_against_an_empty_baseline_is_an_infinite_divergence() -> None:
    silent = Run("silent.jsonl", None, (), (("u1", "mono"),))
    talking = run(final("u1", 0, "You", 0, 500))
    result = compare_runs(silent, talking, None, max_increase_pct=100.0)
    assert math.isinf(result.gate.candidate_pct)
    assert not result.gate.passed
    assert result.streams[0].changes[0].kinds == (
        ChangeKind.ONLY_IN_CANDIDATE,
        ChangeKind.TEXT_CHANGED,
    )


def test_refs_matching_no_stream_are_refused() -> None:
    with pytest.raises(ConfigError, match="no stream of either run has a reference"):
        compare_runs(BASE, BASE, {"other": "text"})


def test_references_without_words_are_refused_not_failed() -> None:
    # Review finding: empty reference texts made both WERs infinite, and inf - inf failed a
    # no-op run as a regression (exit 1, "+nan points") instead of naming the bad references.
    with pytest.raises(ConfigError, match="references of the compared streams have no words"):
        compare_runs(BASE, BASE, {"c1:agent": "", "c1:customer": " "}, max_increase_pct=0.5)


@pytest.mark.parametrize("refs", [None, {"call01:agent": "hello there"}])
def test_two_empty_runs_are_refused_not_passed(refs: dict[str, str] | None) -> None:
    # Calls aged out of the audio topic, or mistyped: a gate on nothing must not pass.
    empty = Run("empty.jsonl", {"model_id": "m"}, (), ())
    with pytest.raises(ConfigError, match="neither run replayed any stream"):
        compare_runs(empty, empty, refs)


def test_settings_that_differ_are_listed_from_the_headers() -> None:
    header = {
        "model_id": "whisper-tiny.en",
        "device": "cpu",
        "dtype": "float32",
        "asr": {"endpoint_silence_ms": 800, "hop_ms": 500},
        "replay": {"step_interval_ms": 100},
        "source": {"topic": "audio.chunks", "from_ms": 1, "to_ms": None, "calls": []},
    }
    other = {**header, "asr": {"endpoint_silence_ms": 200, "hop_ms": 500}, "model_id": "big"}
    base = run(*BASE.finals, header=header)
    cand = run(*BASE.finals, header=other)
    changes = compare_runs(base, cand).config_changes
    assert [(c.name, c.baseline, c.candidate) for c in changes] == [
        ("asr.endpoint_silence_ms", 800, 200),
        ("model_id", "whisper-tiny.en", "big"),
    ]
    assert compare_runs(base, run(*BASE.finals)).config_changes == ()


def _tiling(draw: st.DrawFn) -> list[Utterance]:
    """Utterances that tile time without overlap, as finals do."""
    gaps = draw(st.lists(st.integers(0, 2000), min_size=0, max_size=8))
    lengths = draw(st.lists(st.integers(1, 3000), min_size=len(gaps), max_size=len(gaps)))
    utterances, position = [], 0
    for index, (gap, length) in enumerate(zip(gaps, lengths, strict=True)):
        start = position + gap
        utterances.append(_u(index, start, start + length, f"w{index}"))
        position = start + length
    return utterances


tilings = st.composite(_tiling)


@given(tilings(), tilings())
def test_groups_hold_every_utterance_once_in_time_order(
    base: list[Utterance], cand: list[Utterance]
) -> None:
    groups = group_utterances(base, cand)
    assert [u for g in groups for u in g.baseline] == base
    assert [u for g in groups for u in g.candidate] == cand
    for first, second in itertools.pairwise(groups):
        assert first.end_ms <= second.start_ms
    assert all(group.kinds for group in group_utterances(base, []))


@given(tilings())
def test_a_run_compared_with_itself_changes_nothing(utterances: list[Utterance]) -> None:
    assert all(not group.kinds for group in group_utterances(utterances, utterances))


@pytest.mark.parametrize("baseline_streams", [(), (("c1", "agent"),)])
def test_a_baseline_without_streams_the_candidate_has_references_for_is_refused(
    baseline_streams: tuple[tuple[str, str], ...],
) -> None:
    # An empty dump, or a baseline of fewer calls: its missing streams would count as all
    # deleted and pass any candidate, however much worse on the streams both have.
    refs = {"c1:agent": "Hello, how can I help?", "u1": "Reset my password please."}
    baseline = Run(
        "base.jsonl",
        None,
        tuple(f for f in BASE.finals if (f.call_id, f.channel) in baseline_streams),
        baseline_streams,
    )
    worse = run(
        final("c1", 0, "Hello, who can I kelp?", 0, 2000, channel="agent"),
        final("u1", 0, "Reset my passport please.", 100, 2100),
    )
    with pytest.raises(ConfigError, match=r"baseline has no record of \d stream"):
        compare_runs(baseline, worse, refs, max_increase_pct=0.5)


def test_a_candidate_missing_a_stream_the_baseline_has_fails_the_gate() -> None:
    refs = {"c1:agent": "Hello, how can I help?", "u1": "Reset my password please."}
    lost_one = run(*(f for f in BASE.finals if f.call_id != "u1"))
    result = compare_runs(BASE, lost_one, refs, max_increase_pct=0.5)
    assert not result.gate.passed


def test_runs_that_read_other_offsets_list_them_as_a_difference() -> None:
    # --calls alone (or an open end): equal times, other records.
    def header(end_offset: int) -> dict[str, object]:
        return {
            "model_id": "m",
            "source": {
                "topic": "audio.chunks",
                "from_ms": None,
                "to_ms": None,
                "calls": ["c1"],
                "partitions": [{"partition": 0, "start_offset": 0, "end_offset": end_offset}],
            },
        }

    base = run(*BASE.finals, header=header(300))
    cand = run(*BASE.finals, header=header(500))
    changes = compare_runs(base, cand).config_changes
    assert [(c.name, c.baseline, c.candidate) for c in changes] == [
        ("source.partitions", "0:0-300", "0:0-500")
    ]
