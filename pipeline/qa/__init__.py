"""QA analytics: per-call summaries (talk time, overlap, compliance…) from finals and events.

The pure core: ``records`` (reading input), ``matching`` (fuzzy phrases), ``rules`` (the rules
file), ``summary`` (the ``qa_call/1`` summary) and ``state`` (per-call lifecycle). The faust shell
lives in ``pipeline.qa.app`` and is imported only by ``streamscribe qa`` (it pulls in faust).
"""

from pipeline.qa.matching import MatchOptions, find_phrase, normalize_words
from pipeline.qa.records import (
    RecordRejectedError,
    RecordRejectReason,
    parse_event,
    parse_final,
)
from pipeline.qa.rules import (
    DEFAULT_RULES,
    Evidence,
    Outcome,
    QaRules,
    Rule,
    RuleKind,
    RuleResult,
    load_rules,
)
from pipeline.qa.state import CallAnalytics, CallState
from pipeline.qa.summary import (
    QA_CALL_SCHEMA,
    CallMeta,
    CallStatus,
    CallSummary,
    EndReason,
    summarize,
    to_json,
)

__all__ = [
    "DEFAULT_RULES",
    "QA_CALL_SCHEMA",
    "CallAnalytics",
    "CallMeta",
    "CallState",
    "CallStatus",
    "CallSummary",
    "EndReason",
    "Evidence",
    "MatchOptions",
    "Outcome",
    "QaRules",
    "RecordRejectReason",
    "RecordRejectedError",
    "Rule",
    "RuleKind",
    "RuleResult",
    "find_phrase",
    "load_rules",
    "normalize_words",
    "parse_event",
    "parse_final",
    "summarize",
    "to_json",
]
