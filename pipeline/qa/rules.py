"""Compliance rules and analytics options: the rules file, its defaults, and rule evaluation.

A rules file is TOML (``docs/qa.md`` shows a complete one)::

    keywords = ["refund", "cancel", "supervisor"]
    monologue_max_gap_ms = 3000

    [matching]
    min_score = 0.8
    word_similarity = 0.75

    [[rules]]
    id = "recording_disclosure"
    kind = "required_phrase"          # or "forbidden_phrase"
    phrases = ["this call may be recorded"]
    channel = "agent"                 # optional: the channel that must (not) say it
    deadline_ms = 30000               # required_phrase only: said (finished) by this audio time
    description = "Agent discloses the recording within 30 s"

Without a file the built-in ``DEFAULT_RULES`` apply. ``evaluate_rule`` is pure: it takes the
call's words as ``Token`` sequences per channel (time-ordered) and returns a ``RuleResult`` with
its outcome and the evidence (utterance id, time, matched words).
"""

from __future__ import annotations

import enum
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.contracts.audio_chunk import MONO_CHANNEL
from pipeline.errors import ConfigError
from pipeline.qa.matching import MatchOptions, PhraseMatch, Token, find_phrase, normalize_words

__all__ = [
    "DEFAULT_RULES",
    "Evidence",
    "Outcome",
    "QaRules",
    "Rule",
    "RuleKind",
    "RuleResult",
    "evaluate_rule",
    "load_rules",
    "parse_rules",
]


class RuleKind(enum.StrEnum):
    REQUIRED_PHRASE = "required_phrase"
    """One of ``phrases`` must be said (by ``channel``, before ``deadline_ms`` when set)."""
    FORBIDDEN_PHRASE = "forbidden_phrase"
    """None of ``phrases`` may be said (by ``channel`` when set)."""


class Outcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    PENDING = "pending"
    """Only while a call is live: a required phrase not said yet, its deadline not reached; or
    a rule whose channel is not on the call (yet)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One compliance rule. ``channel=None`` means any channel (a label compares
    case-insensitively); ``deadline_ms`` is the audio time by which the phrase must be finished."""

    rule_id: str
    kind: RuleKind
    phrases: tuple[str, ...]
    channel: str | None = None
    deadline_ms: int | None = None
    description: str = ""


DEFAULT_MONOLOGUE_MAX_GAP_MS = 3000


@dataclass(frozen=True, slots=True)
class QaRules:
    """Everything an analyst configures: rules, keywords, matching tolerance, monologue gap."""

    rules: tuple[Rule, ...]
    keywords: tuple[str, ...] = ()
    matching: MatchOptions = field(default_factory=MatchOptions)
    monologue_max_gap_ms: int = DEFAULT_MONOLOGUE_MAX_GAP_MS
    """Same-speaker speech separated by a pause this long or longer is two monologues."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """Where a phrase was heard: first matched word's utterance and the matched words' span."""

    utterance_id: str
    channel: str
    start_ms: int
    end_ms: int
    matched_text: str
    phrase: str
    score: float


@dataclass(frozen=True, slots=True)
class RuleResult:
    """The outcome of one rule on one call, with its evidence and a one-line explanation."""

    rule_id: str
    kind: RuleKind
    outcome: Outcome
    detail: str
    evidence: tuple[Evidence, ...] = ()
    description: str = ""


DEFAULT_RULES = QaRules(
    rules=(
        Rule(
            rule_id="recording_disclosure",
            kind=RuleKind.REQUIRED_PHRASE,
            phrases=("this call may be recorded", "this call is being recorded"),
            channel="agent",
            deadline_ms=30_000,
            description="The agent says that the call may be recorded within the first 30 s.",
        ),
        Rule(
            rule_id="no_dismissive_language",
            kind=RuleKind.FORBIDDEN_PHRASE,
            phrases=("that's not my problem", "that is not my problem", "not my department"),
            channel="agent",
            description="The agent never dismisses the customer's issue.",
        ),
    ),
    keywords=("refund", "cancel", "complaint", "supervisor", "manager"),
)

_RULE_KEYS = {"id", "kind", "phrase", "phrases", "channel", "deadline_ms", "description"}
_TOP_KEYS = {"rules", "keywords", "matching", "monologue_max_gap_ms"}


def load_rules(path: Path | str | None) -> QaRules:
    """The rules in ``path``, or ``DEFAULT_RULES`` when ``path`` is empty or None.

    Raises:
        ConfigError: unreadable file or invalid content (the message names the file and field).
    """
    if not path:
        return DEFAULT_RULES
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"cannot read rules file {path}: not UTF-8 (byte {error.start})"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read rules file {path}: {error}") from None
    return parse_rules(data, str(path))


def _fail(source: str, message: str) -> ConfigError:
    return ConfigError(f"rules file {source}: {message}")


def _phrases(body: Mapping[str, Any], where: str, source: str) -> tuple[str, ...]:
    if "phrase" in body and "phrases" in body:
        raise _fail(source, f"{where}: give either phrase or phrases, not both")
    raw = [body["phrase"]] if "phrase" in body else body.get("phrases", [])
    if not isinstance(raw, list) or not raw or not all(isinstance(p, str) for p in raw):
        raise _fail(source, f"{where}: phrases must be a non-empty list of strings")
    if not all(normalize_words(phrase) for phrase in raw):
        raise _fail(source, f"{where}: a phrase has no words")
    return tuple(raw)


def _parse_rule(body: Any, position: int, source: str) -> Rule:
    where = f"rule #{position + 1}"
    if not isinstance(body, dict):
        raise _fail(source, f"{where} must be a table")
    unknown = set(body) - _RULE_KEYS
    if unknown:
        raise _fail(source, f"{where}: unknown key(s) {sorted(unknown)}")
    rule_id = body.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        raise _fail(source, f"{where}: id must be a non-empty string")
    where = f"rule {rule_id!r}"
    try:
        kind = RuleKind(str(body.get("kind")))
    except ValueError:
        kinds = ", ".join(kind.value for kind in RuleKind)
        raise _fail(source, f"{where}: kind must be one of {kinds}") from None
    channel = body.get("channel")
    if channel is not None and (not isinstance(channel, str) or not channel):
        raise _fail(source, f"{where}: channel must be a non-empty string")
    deadline_ms = body.get("deadline_ms")
    if deadline_ms is not None:
        if kind is not RuleKind.REQUIRED_PHRASE:
            raise _fail(source, f"{where}: deadline_ms applies to required_phrase rules only")
        if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, int) or deadline_ms < 0:
            raise _fail(source, f"{where}: deadline_ms must be a non-negative integer")
    description = body.get("description", "")
    if not isinstance(description, str):
        raise _fail(source, f"{where}: description must be a string")
    return Rule(rule_id, kind, _phrases(body, where, source), channel, deadline_ms, description)


def _fraction(value: Any, name: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise _fail(source, f"matching.{name} must be a number in (0, 1]")
    return float(value)


def parse_rules(data: Mapping[str, Any], source: str = "<rules>") -> QaRules:
    """Rules from parsed TOML; ``source`` names the file in error messages.

    Raises:
        ConfigError: unknown keys, wrong types, duplicate rule ids.
    """
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise _fail(source, f"unknown key(s) {sorted(unknown)}")
    raw_rules = data.get("rules", [])
    if not isinstance(raw_rules, list):
        raise _fail(source, "rules must be an array of tables ([[rules]])")
    rules = tuple(_parse_rule(body, n, source) for n, body in enumerate(raw_rules))
    ids = [rule.rule_id for rule in rules]
    if len(set(ids)) != len(ids):
        raise _fail(source, "rule ids must be unique")
    keywords = data.get("keywords", [])
    if not isinstance(keywords, list) or not all(
        isinstance(k, str) and normalize_words(k) for k in keywords
    ):
        raise _fail(source, "keywords must be a list of non-empty strings")
    matching = data.get("matching", {})
    if not isinstance(matching, dict) or set(matching) - {"min_score", "word_similarity"}:
        raise _fail(source, "[matching] takes min_score and word_similarity only")
    defaults = MatchOptions()
    options = MatchOptions(
        min_score=_fraction(matching.get("min_score", defaults.min_score), "min_score", source),
        word_similarity=_fraction(
            matching.get("word_similarity", defaults.word_similarity), "word_similarity", source
        ),
    )
    gap_ms = data.get("monologue_max_gap_ms", DEFAULT_MONOLOGUE_MAX_GAP_MS)
    if isinstance(gap_ms, bool) or not isinstance(gap_ms, int) or gap_ms < 0:
        raise _fail(source, "monologue_max_gap_ms must be a non-negative integer")
    return QaRules(rules, tuple(keywords), options, gap_ms)


def _evidence(
    tokens: Sequence[Token], first: int, last: int, phrase: str, score: float
) -> Evidence:
    words: list[str] = []
    seen: set[tuple[str, int]] = set()
    for token in tokens[first : last + 1]:
        # A source word split into several tokens ("check-in") is quoted once.
        if (token.utterance_id, token.word_index) not in seen:
            seen.add((token.utterance_id, token.word_index))
            words.append(token.text)
    head = tokens[first]
    return Evidence(
        utterance_id=head.utterance_id,
        channel=head.channel,
        start_ms=head.start_ms,
        end_ms=max(token.end_ms for token in tokens[first : last + 1]),
        matched_text=" ".join(words),
        phrase=phrase,
        score=score,
    )


def _rule_channels(rule: Rule, channels: Iterable[str]) -> tuple[str, ...] | None:
    """The call's channels that ``rule`` reads: ``None`` for any channel, ``()`` when the rule's
    channel is not on the call. Labels compare case-insensitively (``Agent`` is ``agent``). On a
    one-channel call the mono channel stands for every named one (the agent's words are there
    too: a mono call would otherwise fail every agent rule)."""
    if rule.channel is None:
        return None
    mono = tuple(channel for channel in channels if channel.casefold() == MONO_CHANNEL)
    if mono:
        return mono
    wanted = rule.channel.casefold()
    return tuple(channel for channel in channels if channel.casefold() == wanted)


def _overlap(a: PhraseMatch, b: PhraseMatch) -> bool:
    return a.first <= b.last and b.first <= a.last


def _all_matches(
    rule: Rule,
    read: tuple[str, ...] | None,
    tokens_by_channel: Mapping[str, Sequence[Token]],
    options: MatchOptions,
) -> list[Evidence]:
    """Every match of a phrase of ``rule`` in the channels ``read`` (any when None), by time.

    Where matches of several phrases overlap on one channel ("that's not my problem" and "not
    my problem" in the same words), one occurrence counts: the best score, then the earliest
    start, then the longest stretch, then the phrase listed first."""
    found: list[Evidence] = []
    for channel, tokens in sorted(tokens_by_channel.items()):
        if read is not None and channel not in read:
            continue
        candidates = [
            (match, phrase)
            for phrase in rule.phrases
            for match in find_phrase(phrase, tokens, options)
        ]
        candidates.sort(
            key=lambda item: (-item[0].score, item[0].first, item[0].first - item[0].last)
        )
        accepted: list[PhraseMatch] = []
        for match, phrase in candidates:
            if not any(_overlap(match, other) for other in accepted):
                accepted.append(match)
                found.append(_evidence(tokens, match.first, match.last, phrase, match.score))
    return sorted(found, key=lambda e: (e.start_ms, e.channel, e.utterance_id))


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s"


def _said(evidence: Evidence) -> str:
    return f"said at {evidence.start_ms / 1000:.1f}\u2013{_seconds(evidence.end_ms)}"


def evaluate_rule(
    rule: Rule,
    tokens_by_channel: Mapping[str, Sequence[Token]],
    options: MatchOptions,
    *,
    call_ended: bool,
    heard_until_ms: int,
) -> RuleResult:
    """The outcome of ``rule`` given the call's words so far (``tokens_by_channel`` has every
    channel of the call, also those that said nothing).

    ``heard_until_ms`` is how far the call's transcript reaches (audio time); while the call is
    live a required phrase that is still missing is ``pending`` until that passes its deadline,
    and, for a rule of one channel, until that channel's own words do (the other side talking
    past the deadline says nothing about an utterance of this channel still being decoded).
    A forbidden phrase fails with every occurrence as evidence; a required phrase passes with its
    first occurrence completed by the deadline (its last word's end), or fails with its first
    occurrence when that was completed later. A rule whose channel is not on the call cannot be
    checked: ``pending`` while the call is live (the channel may still join), then ``fail``
    with a detail that says so (never a silent pass).
    """
    read = _rule_channels(rule, tokens_by_channel)

    def result(outcome: Outcome, detail: str, evidence: Sequence[Evidence] = ()) -> RuleResult:
        return RuleResult(
            rule.rule_id, rule.kind, outcome, detail, tuple(evidence), rule.description
        )

    if read == ():
        if not call_ended:
            return result(Outcome.PENDING, f"no {rule.channel} channel on this call yet")
        present = ", ".join(sorted(tokens_by_channel)) or "none"
        return result(
            Outcome.FAIL,
            f"not checked: no {rule.channel} channel on this call (channels: {present})",
        )
    matches = _all_matches(rule, read, tokens_by_channel, options)
    who = f"{'/'.join(read)} channel" if read else "any channel"
    if read is not None:
        own = max(
            (token.end_ms for channel in read for token in tokens_by_channel[channel]), default=0
        )
        heard_until_ms = min(heard_until_ms, own)

    if rule.kind is RuleKind.FORBIDDEN_PHRASE:
        if matches:
            return result(Outcome.FAIL, f"forbidden phrase said {len(matches)}x", matches)
        return result(Outcome.PASS, f"no forbidden phrase on the {who}")
    deadline_ms = rule.deadline_ms
    on_time = [m for m in matches if deadline_ms is None or m.end_ms <= deadline_ms]
    if on_time:
        return result(Outcome.PASS, _said(on_time[0]), on_time[:1])
    if matches and deadline_ms is not None:
        late = matches[0]
        return result(
            Outcome.FAIL,
            f"{_said(late)}, not finished by the {_seconds(deadline_ms)} deadline",
            [late],
        )
    deadline_open = deadline_ms is None or heard_until_ms < deadline_ms
    if not call_ended and deadline_open:
        return result(Outcome.PENDING, f"not said yet on the {who}")
    if deadline_ms is None:
        return result(Outcome.FAIL, f"never said on the {who}")
    return result(Outcome.FAIL, f"not said on the {who} within {_seconds(deadline_ms)}")
