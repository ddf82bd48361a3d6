"""The per-call QA summary (``qa_call/1``): pure computation from a call's finals.

Definitions (all times are audio milliseconds from the call's first sample, as in the finals):

- **speech span** of an utterance: from its first word's ``start_ms`` to its last word's
  ``end_ms`` (the utterance's ``start_ms``/``end_ms`` when it has no word timings). The audio span
  of a final also holds the endpoint's trailing silence; the speech span does not, which is what
  makes it comparable with reference turn timings.
- **talk time** of a channel: the length of the union of its utterances' speech spans.
- **words per minute** of a channel: its words / its talk time; ``None`` below
  ``MIN_RATE_TALK_MS`` of talk (one "Yes." timed at 40 ms would be 1,500 words per minute).
- **speech**: the union of every channel's speech spans; **silence** = duration - speech;
  **silence ratio** = silence / duration (``null`` for a call without audio).
- **duration**: the longest channel audio reported by ``session_ended`` events
  (``detail.duration_ms``), and never less than the end of the last final's audio span.
- **overlap** (talk-over): every stretch where two or more channels' talk-time unions intersect.
- **longest gap**: the longest silence between two stretches of speech (any channel).
- **turn**: a maximal run of consecutive utterances (ordered by speech start) of one channel.
- **monologue**: one speaker's stretch of speech, cut wherever that speaker pauses
  ``monologue_max_gap_ms`` or longer, or another speaker says something not wholly inside the
  stretch so far (a back-channel, "uh-huh" while the agent talks, does not cut it; it still makes
  a turn); the longest monologue is the longest such stretch.
- **keywords**: non-overlapping occurrences of each keyword's normalized words, per channel; the
  words of a keyword of several words follow each other without a pause longer than
  ``MAX_WORD_GAP_MS`` (they may lie in two utterances). Words compare exactly after
  normalization: ``refunds`` is not ``refund``, ``supervisor's`` is ``supervisors``.
- **compliance**: each rule's ``RuleResult`` (``pipeline.qa.rules``).

Duplicate finals (same ``utterance_id``) count once: the first one given wins. Finals with no
words and blank text carry no speech and are ignored. ``to_json`` is deterministic (sorted keys),
and ``content_digest`` hashes everything but ``revision`` and ``published_ms``, so a publisher can
tell whether new input changed a summary.
"""

from __future__ import annotations

import enum
import hashlib
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

from pipeline.contracts.messages import Final
from pipeline.qa.matching import Token, normalize_words, pause_runs
from pipeline.qa.rules import Outcome, QaRules, RuleResult, evaluate_rule

__all__ = [
    "QA_CALL_SCHEMA",
    "CallMeta",
    "CallStatus",
    "CallSummary",
    "ChannelStats",
    "EndReason",
    "Interval",
    "KeywordCount",
    "Monologue",
    "TranscriptLine",
    "Turn",
    "content_digest",
    "has_speech",
    "speech_span",
    "summarize",
    "to_json",
    "tokens_of",
]

QA_CALL_SCHEMA = "qa_call/1"


class CallStatus(enum.StrEnum):
    LIVE = "live"
    ENDED = "ended"


class EndReason(enum.StrEnum):
    SESSIONS_ENDED = "sessions_ended"
    """Every channel of the call has a ``session_ended`` event."""
    IDLE_TIMEOUT = "idle_timeout"
    """No record for the call for the app's idle timeout (wall clock)."""


MIN_RATE_TALK_MS = 5_000
"""A channel's words per minute needs this much talk time; below it the rate is ``None``."""


@dataclass(frozen=True, slots=True)
class CallMeta:
    """What the summary needs beyond the finals: lifecycle facts from events and publication."""

    call_id: str
    tenant: str = "default"
    channels: tuple[str, ...] = ()
    """Channels known from session events; channels of finals are added to them."""
    channel_audio_ms: Mapping[str, int] = field(default_factory=dict)
    status: CallStatus = CallStatus.LIVE
    end_reason: EndReason | None = None
    revision: int = 0
    published_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Interval:
    start_ms: int
    end_ms: int
    duration_ms: int


@dataclass(frozen=True, slots=True)
class ChannelStats:
    """Talk statistics of one channel; first/last speech are ``None`` when it said nothing."""

    channel: str
    utterances: int
    words: int
    talk_ms: int
    words_per_minute: float | None  # None below MIN_RATE_TALK_MS of talk
    first_speech_ms: int | None
    last_speech_ms: int | None


@dataclass(frozen=True, slots=True)
class Turn:
    speaker: str
    start_ms: int
    end_ms: int
    utterance_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Monologue:
    speaker: str
    start_ms: int
    end_ms: int
    duration_ms: int
    utterances: int


@dataclass(frozen=True, slots=True)
class KeywordCount:
    keyword: str
    total: int
    by_channel: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class TranscriptLine:
    utterance_id: str
    speaker: str
    start_ms: int
    end_ms: int
    text: str


@dataclass(frozen=True, slots=True)
class CallSummary:
    """One call's QA summary; ``to_json`` gives the ``qa_call/1`` record of ``qa.calls``.

    ``revision`` is 0 for a live view that was never published, then 1 for the first published
    summary and +1 for each published change (a view of changes not yet published carries the
    next revision and no ``published_ms``). ``compliance_passed`` is ``None`` while a rule is
    pending.
    """

    call_id: str
    tenant: str
    status: CallStatus
    end_reason: EndReason | None
    revision: int
    published_ms: int | None
    duration_ms: int
    speech_ms: int
    silence_ms: int
    silence_ratio: float | None
    overlap_ms: int
    overlaps: tuple[Interval, ...]
    longest_gap_ms: int
    channels: tuple[ChannelStats, ...]
    turns: tuple[Turn, ...]
    longest_monologue: Monologue | None
    keywords: tuple[KeywordCount, ...]
    compliance: tuple[RuleResult, ...]
    compliance_passed: bool | None
    transcript: tuple[TranscriptLine, ...]
    utterances: int
    model_ids: tuple[str, ...]
    schema: str = QA_CALL_SCHEMA
    transcript_omitted: int = 0
    """Transcript lines left out at the end to keep the record within ``MAX_SUMMARY_BYTES``
    (``fit_record``); the statistics always cover every utterance."""


def to_dict(summary: CallSummary) -> dict[str, Any]:
    """The summary as plain JSON-ready data (enums as their values)."""
    return asdict(summary)


def to_json(summary: CallSummary) -> bytes:
    """Compact UTF-8 JSON with sorted keys (deterministic)."""
    return orjson.dumps(to_dict(summary), option=orjson.OPT_SORT_KEYS)


MAX_SUMMARY_BYTES = 900_000
"""Largest summary record: under the producer's 1,000,000-byte request limit and the broker's
default ``max.message.bytes``, with room for the key and headers. About 2,500 transcript lines
fit (a call of several hours)."""


def fit_record(summary: CallSummary, max_bytes: int = MAX_SUMMARY_BYTES) -> bytes:
    """``to_json(summary)``, with the transcript cut short (its first lines kept, the count of
    the others in ``transcript_omitted``) when the whole record would exceed ``max_bytes``: a
    record the producer refuses would never be published, and would be retried forever."""
    record = to_json(summary)
    if len(record) <= max_bytes:
        return record
    lines = summary.transcript
    kept_low, kept_high = 0, len(lines)  # the answer lies in [low, high)
    best = to_json(replace(summary, transcript=(), transcript_omitted=len(lines)))
    while kept_high - kept_low > 1:
        middle = (kept_low + kept_high) // 2
        candidate = to_json(
            replace(summary, transcript=lines[:middle], transcript_omitted=len(lines) - middle)
        )
        if len(candidate) <= max_bytes:
            kept_low, best = middle, candidate
        else:
            kept_high = middle
    return best


def content_digest(summary: CallSummary) -> str:
    """SHA-256 of the summary without ``revision`` and ``published_ms``."""
    return hashlib.sha256(to_json(replace(summary, revision=0, published_ms=None))).hexdigest()


def speech_span(final: Final) -> tuple[int, int]:
    """First word start to last word end; the audio span when the final has no words."""
    if final.words:
        start_ms = min(word.start_ms for word in final.words)
        return start_ms, max(start_ms, max(word.end_ms for word in final.words))
    return final.start_ms, final.end_ms


def has_speech(final: Final) -> bool:
    """Whether a final carries speech: words, or non-blank text (a blank final is ignored)."""
    return bool(final.words) or bool(final.text.strip())


def _unique(finals: Iterable[Final]) -> list[Final]:
    seen: set[str] = set()
    unique = []
    for final in finals:
        if final.utterance_id not in seen:
            seen.add(final.utterance_id)
            unique.append(final)
    return unique


def _union(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start_ms, end_ms in sorted(spans):
        if merged and start_ms <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end_ms))
        else:
            merged.append((start_ms, end_ms))
    return merged


def _length(spans: Iterable[tuple[int, int]]) -> int:
    return sum(end_ms - start_ms for start_ms, end_ms in spans)


def _overlaps(unions: Sequence[Sequence[tuple[int, int]]]) -> list[tuple[int, int]]:
    """Stretches where two or more of the (already merged) span lists intersect."""
    edges: list[tuple[int, int]] = []
    for spans in unions:
        for start_ms, end_ms in spans:
            if end_ms > start_ms:
                edges.append((start_ms, 1))
                edges.append((end_ms, -1))
    # At equal times ends sort before starts: touching spans do not overlap.
    edges.sort()
    active = 0
    opened_ms = 0
    found: list[tuple[int, int]] = []
    for time_ms, step in edges:
        if step == 1 and active == 1:
            opened_ms = time_ms
        elif step == -1 and active == 2 and time_ms > opened_ms:
            found.append((opened_ms, time_ms))
        active += step
    return _union(found)


def _word_count(final: Final) -> int:
    if final.words:
        return sum(1 for word in final.words if normalize_words(word.word))
    return len(normalize_words(final.text))


def tokens_of(final: Final) -> list[Token]:
    """The final's normalized words with their times (spread evenly when it has no words)."""
    tokens: list[Token] = []
    if final.words:
        for index, word in enumerate(final.words):
            for norm in normalize_words(word.word):
                tokens.append(
                    Token(
                        norm,
                        word.word.strip(),
                        final.utterance_id,
                        final.channel,
                        index,
                        word.start_ms,
                        word.end_ms,
                    )
                )
        return tokens
    raw_words = final.text.split()
    span_ms = final.end_ms - final.start_ms
    for index, raw in enumerate(raw_words):
        start_ms = final.start_ms + span_ms * index // len(raw_words)
        end_ms = final.start_ms + span_ms * (index + 1) // len(raw_words)
        for norm in normalize_words(raw):
            tokens.append(
                Token(norm, raw, final.utterance_id, final.channel, index, start_ms, end_ms)
            )
    return tokens


def _count_keyword(keyword: Sequence[str], tokens: Sequence[Token]) -> int:
    """Non-overlapping occurrences of ``keyword``'s words in ``tokens``, none across a pause."""
    count = 0
    size = len(keyword)
    wanted = list(keyword)
    for run in pause_runs(tokens):
        words = [tokens[index].norm for index in run]
        position = 0
        while position + size <= len(words):
            if words[position : position + size] == wanted:
                count += 1
                position += size
            else:
                position += 1
    return count


def _turns(ordered: Sequence[Final]) -> list[list[Final]]:
    turns: list[list[Final]] = []
    for final in ordered:
        if turns and turns[-1][-1].channel == final.channel:
            turns[-1].append(final)
        else:
            turns.append([final])
    return turns


def _longest_monologue(ordered: Sequence[Final], max_gap_ms: int) -> Monologue | None:
    """The longest stretch of one speaker (``ordered``: by speech start), cut where that
    speaker pauses ``max_gap_ms`` or longer, or where another speaker says something that is
    not wholly inside the stretch so far: a back-channel ("uh-huh" while the agent talks) does
    not end a monologue; it is still a turn of its own."""
    best: Monologue | None = None
    run: list[Final] = []
    run_start_ms = run_end_ms = 0

    def close() -> None:
        nonlocal best
        if run and (best is None or run_end_ms - run_start_ms > best.duration_ms):
            duration_ms = run_end_ms - run_start_ms
            best = Monologue(run[0].channel, run_start_ms, run_end_ms, duration_ms, len(run))

    for final in ordered:
        start_ms, end_ms = speech_span(final)
        if run and final.channel == run[0].channel and start_ms - run_end_ms < max_gap_ms:
            run.append(final)
            run_end_ms = max(run_end_ms, end_ms)
            continue
        if run and final.channel != run[0].channel and end_ms <= run_end_ms:
            continue  # a back-channel, said while the speaker talks
        close()
        run, run_start_ms, run_end_ms = [final], start_ms, end_ms
    close()
    return best


def _channel_stats(channel: str, finals: Sequence[Final]) -> ChannelStats:
    spans = _union(speech_span(final) for final in finals)
    talk_ms = _length(spans)
    words = sum(_word_count(final) for final in finals)
    return ChannelStats(
        channel=channel,
        utterances=len(finals),
        words=words,
        talk_ms=talk_ms,
        words_per_minute=(
            round(words * 60_000 / talk_ms, 1) if talk_ms >= MIN_RATE_TALK_MS else None
        ),
        first_speech_ms=spans[0][0] if spans else None,
        last_speech_ms=spans[-1][1] if spans else None,
    )


def summarize(meta: CallMeta, finals: Iterable[Final], rules: QaRules) -> CallSummary:
    """The summary of a call from its finals (any order, duplicates allowed) and its facts."""
    every = _unique(finals)
    spoken = sorted(
        (final for final in every if has_speech(final)),
        key=lambda f: (*speech_span(f), f.channel, f.utterance_index),
    )
    channels = sorted(set(meta.channels) | {final.channel for final in every})
    by_channel = {channel: [f for f in spoken if f.channel == channel] for channel in channels}
    stats = tuple(_channel_stats(channel, by_channel[channel]) for channel in channels)

    channel_unions = [_union(speech_span(f) for f in by_channel[c]) for c in channels]
    speech = _union(span for spans in channel_unions for span in spans)
    speech_ms = _length(speech)
    duration_ms = max([0, *meta.channel_audio_ms.values(), *(f.end_ms for f in every)])
    silence_ms = max(duration_ms - speech_ms, 0)
    overlaps = tuple(
        Interval(start_ms, end_ms, end_ms - start_ms)
        for start_ms, end_ms in _overlaps(channel_unions)
    )
    # A zero-length span (a word Whisper timed at one instant) adds no speech: it splits no gap.
    heard = [span for span in speech if span[1] > span[0]]
    gaps = [later[0] - earlier[1] for earlier, later in itertools.pairwise(heard)]

    turns = _turns(spoken)
    tokens_by_channel = {
        channel: [token for final in by_channel[channel] for token in tokens_of(final)]
        for channel in channels
    }
    keywords = []
    for keyword in rules.keywords:
        wanted = normalize_words(keyword)
        counts = {
            channel: _count_keyword(wanted, tokens) for channel, tokens in tokens_by_channel.items()
        }
        counts = {channel: count for channel, count in counts.items() if count}
        keywords.append(KeywordCount(keyword, sum(counts.values()), counts))

    ended = meta.status is CallStatus.ENDED
    heard_until_ms = max((final.end_ms for final in every), default=0)
    compliance = tuple(
        evaluate_rule(
            rule,
            tokens_by_channel,
            rules.matching,
            call_ended=ended,
            heard_until_ms=heard_until_ms,
        )
        for rule in rules.rules
    )
    outcomes = {result.outcome for result in compliance}
    passed = False if Outcome.FAIL in outcomes else None if Outcome.PENDING in outcomes else True
    return CallSummary(
        call_id=meta.call_id,
        tenant=meta.tenant,
        status=meta.status,
        end_reason=meta.end_reason,
        revision=meta.revision,
        published_ms=meta.published_ms,
        duration_ms=duration_ms,
        speech_ms=speech_ms,
        silence_ms=silence_ms,
        silence_ratio=round(silence_ms / duration_ms, 4) if duration_ms else None,
        overlap_ms=sum(interval.duration_ms for interval in overlaps),
        overlaps=overlaps,
        longest_gap_ms=max(gaps, default=0),
        channels=stats,
        turns=tuple(
            Turn(
                turn[0].channel,
                speech_span(turn[0])[0],
                max(speech_span(final)[1] for final in turn),
                tuple(final.utterance_id for final in turn),
            )
            for turn in turns
        ),
        longest_monologue=_longest_monologue(spoken, rules.monologue_max_gap_ms),
        keywords=tuple(keywords),
        compliance=compliance,
        compliance_passed=passed,
        transcript=tuple(
            TranscriptLine(final.utterance_id, final.channel, *speech_span(final), final.text)
            for final in spoken
        ),
        utterances=len(spoken),
        model_ids=tuple(sorted({final.model_id for final in every})),
    )
