"""Comparing two runs of the recognizer over the same audio (pure): accuracy, endpoints, latency.

A *stream* is one (call, channel). For every stream present in either run:

- **Accuracy.** With references, each run's word errors against the stream's reference (WER,
  ``pipeline.evaluation``); always, the *divergence*: the candidate's word errors with the
  baseline's text taken as the reference (0 when the texts agree after normalization).
- **Endpoint decisions.** The utterances of both runs are grouped by time overlap (transitively):
  a group with one baseline and several candidate utterances is a ``split``, the reverse a
  ``merged``, several on both sides with different counts ``regrouped``; with equal counts the
  utterances are paired in order and a start or end that moved by more than the tolerance
  (200 ms) is a ``boundary_moved``, a different endpoint reason a ``reason_changed``. A group
  with utterances on one side only is ``only_in_baseline`` / ``only_in_candidate``. Groups whose
  normalized text differs are ``text_changed``.
- **Latency.** P50 / P95 / P99 (nearest rank) of ``latency_ms`` of each run's finals, when set.

The gate. With references the metric is WER and the *increase* is candidate WER − baseline WER,
in percentage points over all streams that have a reference; without references the metric is
the divergence (baseline vs itself is 0). The gate fails when the increase exceeds
``max_increase_pct``.

Reference ids (``refs.tsv``: ``id<TAB>text``): a stream's reference is ``call_id:channel``; a call
with a single channel may also use the bare ``call_id`` (how single-speaker fixtures are keyed).
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.contracts.messages import Final
from pipeline.errors import ConfigError
from pipeline.evaluation import WordErrors, normalize_words, word_errors
from pipeline.replay.results import Run

__all__ = [
    "DEFAULT_BOUNDARY_TOLERANCE_MS",
    "ENDPOINT_CHANGE_KINDS",
    "ChangeKind",
    "Comparison",
    "ConfigChange",
    "GateResult",
    "LatencyStats",
    "RunInfo",
    "StreamComparison",
    "Utterance",
    "UtteranceGroup",
    "compare_runs",
    "group_utterances",
    "latency_stats",
    "parse_refs",
    "percent",
    "reference_id",
    "total_errors",
]

DEFAULT_BOUNDARY_TOLERANCE_MS = 200


class ChangeKind(enum.StrEnum):
    """How a group of overlapping utterances differs between the two runs."""

    TEXT_CHANGED = "text_changed"
    BOUNDARY_MOVED = "boundary_moved"
    REASON_CHANGED = "reason_changed"
    SPLIT = "split"
    MERGED = "merged"
    REGROUPED = "regrouped"
    ONLY_IN_BASELINE = "only_in_baseline"
    ONLY_IN_CANDIDATE = "only_in_candidate"


ENDPOINT_CHANGE_KINDS = (
    ChangeKind.BOUNDARY_MOVED,
    ChangeKind.SPLIT,
    ChangeKind.MERGED,
    ChangeKind.REGROUPED,
    ChangeKind.REASON_CHANGED,
    ChangeKind.ONLY_IN_BASELINE,
    ChangeKind.ONLY_IN_CANDIDATE,
)
"""The kinds that are endpoint (segmentation) decisions, in report order."""


@dataclass(frozen=True, slots=True)
class Utterance:
    """The parts of a final that the comparison looks at."""

    index: int
    start_ms: int
    end_ms: int
    endpoint_reason: str
    text: str

    @classmethod
    def of(cls, final: Final) -> Utterance:
        return cls(
            final.utterance_index,
            final.start_ms,
            final.end_ms,
            str(final.endpoint_reason),
            final.text,
        )


@dataclass(frozen=True, slots=True)
class UtteranceGroup:
    """Utterances of both runs that overlap in time, transitively, on one stream."""

    baseline: tuple[Utterance, ...]
    candidate: tuple[Utterance, ...]
    kinds: tuple[ChangeKind, ...]

    @property
    def start_ms(self) -> int:
        return min(u.start_ms for u in (*self.baseline, *self.candidate))

    @property
    def end_ms(self) -> int:
        return max(u.end_ms for u in (*self.baseline, *self.candidate))


@dataclass(frozen=True, slots=True)
class StreamComparison:
    """One (call, channel): errors against its reference (None without one), the divergence,
    and the groups of utterances that changed (in time order)."""

    call_id: str
    channel: str
    reference_id: str | None
    baseline_errors: WordErrors | None
    candidate_errors: WordErrors | None
    divergence: WordErrors
    changes: tuple[UtteranceGroup, ...]


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Nearest-rank percentiles of ``latency_ms`` (None when no final has a latency)."""

    count: int
    p50_ms: int | None
    p95_ms: int | None
    p99_ms: int | None
    max_ms: int | None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One side of the comparison, summarized."""

    label: str
    model_id: str | None
    finals: int
    streams: int
    latency: LatencyStats


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """A header field (``asr.endpoint_silence_ms``, ``model_id``, …) that differs."""

    name: str
    baseline: Any
    candidate: Any


@dataclass(frozen=True, slots=True)
class GateResult:
    """The regression decision. Rates in percent; ``increase_pct`` in percentage points.

    ``max_increase_pct`` None: reported, not gated (``passed`` is True).
    """

    metric: str
    baseline_pct: float | None
    candidate_pct: float
    increase_pct: float
    max_increase_pct: float | None

    @property
    def passed(self) -> bool:
        if self.max_increase_pct is None:
            return True
        return not self.increase_pct > self.max_increase_pct + 1e-9


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything ``compare`` reports (see the module docstring)."""

    baseline: RunInfo
    candidate: RunInfo
    config_changes: tuple[ConfigChange, ...]
    streams: tuple[StreamComparison, ...]
    has_references: bool
    baseline_errors: WordErrors | None
    candidate_errors: WordErrors | None
    divergence: WordErrors
    endpoint_changes: tuple[tuple[ChangeKind, int], ...]
    text_changes: int
    gate: GateResult
    boundary_tolerance_ms: int
    unmatched_references: tuple[str, ...] = ()
    """Reference ids no stream of either run matched (sorted): calls aged out of the topic, or
    ids mistyped; the WER covers fewer calls than the references name."""


def percent(errors: WordErrors) -> float:
    """Word error rate in percent (inf when there are errors but no reference words)."""
    return 100.0 * errors.wer


def parse_refs(text: str, label: str = "refs") -> dict[str, str]:
    """``id<TAB>text`` lines → {id: text}; blank lines and ``#`` comments are skipped.

    Raises:
        ConfigError: a line without a tab, or an id given twice.
    """
    refs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        ref_id, tab, reference = line.partition("\t")
        if not tab or not ref_id.strip():
            raise ConfigError(f"{label}:{number}: expected 'id<TAB>text'")
        if ref_id.strip() in refs:
            raise ConfigError(f"{label}:{number}: id {ref_id.strip()!r} appears twice")
        refs[ref_id.strip()] = reference.strip()
    return refs


def reference_id(
    call_id: str, channel: str, refs: Mapping[str, str], single_channel: bool
) -> str | None:
    """The reference of a stream: ``call_id:channel``, else ``call_id`` for a one-channel call."""
    qualified = f"{call_id}:{channel}"
    if qualified in refs:
        return qualified
    if single_channel and call_id in refs:
        return call_id
    return None


def latency_stats(finals: Iterable[Final]) -> LatencyStats:
    """Nearest-rank P50 / P95 / P99 and max of the finals' ``latency_ms`` (those that have one)."""
    values = sorted(f.latency_ms for f in finals if f.latency_ms is not None)
    if not values:
        return LatencyStats(0, None, None, None, None)

    def rank(p: float) -> int:
        return values[max(0, math.ceil(p / 100 * len(values)) - 1)]

    return LatencyStats(len(values), rank(50), rank(95), rank(99), values[-1])


def _kinds(
    baseline: Sequence[Utterance], candidate: Sequence[Utterance], tolerance_ms: int
) -> tuple[ChangeKind, ...]:
    kinds: list[ChangeKind] = []
    if not candidate:
        kinds.append(ChangeKind.ONLY_IN_BASELINE)
    elif not baseline:
        kinds.append(ChangeKind.ONLY_IN_CANDIDATE)
    elif len(baseline) == len(candidate):
        pairs = list(zip(baseline, candidate, strict=True))
        if any(
            abs(b.start_ms - c.start_ms) > tolerance_ms or abs(b.end_ms - c.end_ms) > tolerance_ms
            for b, c in pairs
        ):
            kinds.append(ChangeKind.BOUNDARY_MOVED)
        if any(b.endpoint_reason != c.endpoint_reason for b, c in pairs):
            kinds.append(ChangeKind.REASON_CHANGED)
    else:
        if len(baseline) == 1:
            kinds.append(ChangeKind.SPLIT)
        elif len(candidate) == 1:
            kinds.append(ChangeKind.MERGED)
        else:
            kinds.append(ChangeKind.REGROUPED)
        if (
            abs(baseline[0].start_ms - candidate[0].start_ms) > tolerance_ms
            or abs(baseline[-1].end_ms - candidate[-1].end_ms) > tolerance_ms
        ):
            kinds.append(ChangeKind.BOUNDARY_MOVED)
        if baseline[-1].endpoint_reason != candidate[-1].endpoint_reason:
            kinds.append(ChangeKind.REASON_CHANGED)
    base_words = normalize_words(" ".join(u.text for u in baseline))
    if base_words != normalize_words(" ".join(u.text for u in candidate)):
        kinds.append(ChangeKind.TEXT_CHANGED)
    return tuple(kinds)


def group_utterances(
    baseline: Sequence[Utterance],
    candidate: Sequence[Utterance],
    tolerance_ms: int = DEFAULT_BOUNDARY_TOLERANCE_MS,
) -> list[UtteranceGroup]:
    """Both runs' utterances of one stream grouped by time overlap, in time order, each group
    with its ``ChangeKind``s (empty when the group is the same in both runs)."""
    items = sorted(
        [(u.start_ms, u.end_ms, 0, u) for u in baseline]
        + [(u.start_ms, u.end_ms, 1, u) for u in candidate],
        key=lambda item: (item[0], item[1], item[2], item[3].index),
    )
    groups: list[UtteranceGroup] = []
    sides: tuple[list[Utterance], list[Utterance]] = ([], [])
    group_end_ms: int | None = None

    def close() -> None:
        if sides[0] or sides[1]:
            kinds = _kinds(sides[0], sides[1], tolerance_ms)
            groups.append(UtteranceGroup(tuple(sides[0]), tuple(sides[1]), kinds))
        sides[0].clear()
        sides[1].clear()

    for start_ms, end_ms, side, utterance in items:
        if group_end_ms is None or start_ms >= group_end_ms:
            close()
            group_end_ms = end_ms
        else:
            group_end_ms = max(group_end_ms, end_ms)
        sides[side].append(utterance)
    close()
    return groups


def _text(finals: Sequence[Final]) -> str:
    return " ".join(final.text for final in finals)


def total_errors(errors: Iterable[WordErrors | None]) -> WordErrors | None:
    """The sum of the errors that are present (None when none is)."""
    present = [e for e in errors if e is not None]
    if not present:
        return None
    total = WordErrors()
    for item in present:
        total = total + item
    return total


def _flatten(header: Mapping[str, Any] | None) -> dict[str, Any]:
    if header is None:
        return {}
    flat: dict[str, Any] = {
        "model_id": header.get("model_id"),
        "device": header.get("device"),
        "dtype": header.get("dtype"),
    }
    for section in ("asr", "replay"):
        for key, value in sorted((header.get(section) or {}).items()):
            flat[f"{section}.{key}"] = value
    source = header.get("source") or {}
    for key in ("topic", "from_ms", "to_ms", "calls"):
        flat[f"source.{key}"] = source.get(key)
    # The offsets read: with --calls alone (or an open end) the times above are equal while
    # the records are not (new audio came, retention moved the start).
    flat["source.partitions"] = ", ".join(
        f"{p.get('partition')}:{p.get('start_offset')}-{p.get('end_offset')}"
        for p in source.get("partitions") or ()
    )
    return flat


def _config_changes(baseline: Run, candidate: Run) -> tuple[ConfigChange, ...]:
    if baseline.header is None or candidate.header is None:
        return ()
    base, cand = _flatten(baseline.header), _flatten(candidate.header)
    return tuple(
        ConfigChange(name, base.get(name), cand.get(name))
        for name in sorted(set(base) | set(cand))
        if base.get(name) != cand.get(name)
    )


def _info(run: Run) -> RunInfo:
    return RunInfo(
        run.label, run.model_id, len(run.finals), len(run.streams), latency_stats(run.finals)
    )


def compare_runs(
    baseline: Run,
    candidate: Run,
    refs: Mapping[str, str] | None = None,
    *,
    max_increase_pct: float | None = None,
    boundary_tolerance_ms: int = DEFAULT_BOUNDARY_TOLERANCE_MS,
) -> Comparison:
    """Compare ``candidate`` with ``baseline`` (see the module docstring).

    Raises:
        ConfigError: neither run has a stream (calls aged out of the topic, mistyped ids: a
            gate on nothing would pass), ``refs`` were given but no stream of either run has a
            reference (a mismatch of ids would otherwise pass the gate unnoticed), or the
            candidate has a stream with a reference that the baseline lacks (an empty or
            partial baseline would make any candidate look better).
    """
    keys = sorted(set(baseline.streams) | set(candidate.streams))
    if not keys:
        raise ConfigError(
            "neither run replayed any stream: check --calls and the time range against what "
            "the audio topic still holds (its retention)"
        )
    channels_per_call = Counter(call_id for call_id, _ in keys)
    by_stream: dict[tuple[str, str], tuple[list[Final], list[Final]]] = {k: ([], []) for k in keys}
    for side, run in enumerate((baseline, candidate)):
        for final in run.finals:
            by_stream[(final.call_id, final.channel)][side].append(final)
    streams: list[StreamComparison] = []
    for call_id, channel in keys:
        base_finals, cand_finals = by_stream[(call_id, channel)]
        ref_id = (
            reference_id(call_id, channel, refs, channels_per_call[call_id] == 1)
            if refs is not None
            else None
        )
        reference = refs[ref_id] if refs is not None and ref_id is not None else None
        groups = group_utterances(
            [Utterance.of(f) for f in base_finals],
            [Utterance.of(f) for f in cand_finals],
            boundary_tolerance_ms,
        )
        streams.append(
            StreamComparison(
                call_id=call_id,
                channel=channel,
                reference_id=ref_id,
                baseline_errors=(
                    None if reference is None else word_errors(reference, _text(base_finals))
                ),
                candidate_errors=(
                    None if reference is None else word_errors(reference, _text(cand_finals))
                ),
                divergence=word_errors(_text(base_finals), _text(cand_finals)),
                changes=tuple(group for group in groups if group.kinds),
            )
        )
    has_references = any(s.reference_id is not None for s in streams)
    if refs is not None and not has_references:
        raise ConfigError(
            "no stream of either run has a reference: refs ids are call_id:channel "
            "(or call_id for a one-channel call)"
        )
    covered = set(baseline.streams)
    uncovered = [
        f"{s.call_id}:{s.channel}"
        for s in streams
        if s.reference_id is not None and (s.call_id, s.channel) not in covered
    ]
    if uncovered:
        # Counted as all deleted in the baseline, they would flatter any candidate. (A stream
        # the candidate lacks counts against the candidate: that is a regression to see.)
        raise ConfigError(
            f"the baseline has no record of {len(uncovered)} stream(s) with a reference that "
            f"the candidate has ({', '.join(uncovered[:5])}{', …' if len(uncovered) > 5 else ''})"
            ": compare runs of the same calls and range"
        )
    baseline_errors = total_errors(s.baseline_errors for s in streams)
    candidate_errors = total_errors(s.candidate_errors for s in streams)
    divergence = total_errors(s.divergence for s in streams) or WordErrors()
    if baseline_errors is not None and candidate_errors is not None:
        if not baseline_errors.reference_words:
            # Every rate would be 0 or infinite, and two infinite ones give no verdict.
            raise ConfigError(
                "the references of the compared streams have no words: WER is undefined "
                "(check the references file's text column)"
            )
        base_pct, cand_pct = percent(baseline_errors), percent(candidate_errors)
        gate = GateResult("wer", base_pct, cand_pct, cand_pct - base_pct, max_increase_pct)
    else:
        spread = percent(divergence)
        gate = GateResult("divergence", None, spread, spread, max_increase_pct)
    counts: Counter[ChangeKind] = Counter(
        kind for s in streams for group in s.changes for kind in group.kinds
    )
    return Comparison(
        baseline=_info(baseline),
        candidate=_info(candidate),
        config_changes=_config_changes(baseline, candidate),
        streams=tuple(streams),
        has_references=has_references,
        baseline_errors=baseline_errors,
        candidate_errors=candidate_errors,
        divergence=divergence,
        endpoint_changes=tuple((kind, counts[kind]) for kind in ENDPOINT_CHANGE_KINDS),
        text_changes=counts[ChangeKind.TEXT_CHANGED],
        gate=gate,
        boundary_tolerance_ms=boundary_tolerance_ms,
        unmatched_references=tuple(
            sorted(set(refs or ()) - {s.reference_id for s in streams if s.reference_id})
        ),
    )
