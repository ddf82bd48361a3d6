"""A ``Comparison`` as a markdown report (for people, CI job summaries) and as JSON (for tools).

Both are deterministic functions of the comparison. Rates are percentages; an infinite rate
(errors against an empty reference) is ``null`` in JSON and ``∞`` in markdown.
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.evaluation import WordErrors
from pipeline.replay.compare import (
    ChangeKind,
    Comparison,
    LatencyStats,
    RunInfo,
    StreamComparison,
    Utterance,
    UtteranceGroup,
    percent,
    total_errors,
)
from pipeline.text import format_span_ms

__all__ = ["COMPARE_SCHEMA", "comparison_json", "comparison_markdown", "verdict_line"]

COMPARE_SCHEMA = "compare/1"
DEFAULT_MAX_EXAMPLES = 50


def _rate(value: float | None) -> float | None:
    if value is None or math.isinf(value):
        return None
    return round(value, 3)


def _errors_json(errors: WordErrors | None) -> dict[str, Any] | None:
    if errors is None:
        return None
    return {
        "wer": _rate(percent(errors)),
        "substitutions": errors.substitutions,
        "deletions": errors.deletions,
        "insertions": errors.insertions,
        "reference_words": errors.reference_words,
    }


def _latency_json(stats: LatencyStats) -> dict[str, Any]:
    return {
        "count": stats.count,
        "p50": stats.p50_ms,
        "p95": stats.p95_ms,
        "p99": stats.p99_ms,
        "max": stats.max_ms,
    }


def _run_json(info: RunInfo) -> dict[str, Any]:
    return {
        "file": info.label,
        "model_id": info.model_id,
        "finals": info.finals,
        "streams": info.streams,
        "latency_ms": _latency_json(info.latency),
    }


def _utterance_json(utterance: Utterance) -> dict[str, Any]:
    return {
        "utterance_index": utterance.index,
        "start_ms": utterance.start_ms,
        "end_ms": utterance.end_ms,
        "endpoint_reason": utterance.endpoint_reason,
        "text": utterance.text,
    }


def _calls(comparison: Comparison) -> list[tuple[str, list[StreamComparison]]]:
    calls: dict[str, list[StreamComparison]] = {}
    for stream in comparison.streams:
        calls.setdefault(stream.call_id, []).append(stream)
    return sorted(calls.items())


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data (schema ``compare/1``)."""
    gate = comparison.gate
    return {
        "schema": COMPARE_SCHEMA,
        "baseline": _run_json(comparison.baseline),
        "candidate": _run_json(comparison.candidate),
        "config_changes": [
            {"setting": c.name, "baseline": c.baseline, "candidate": c.candidate}
            for c in comparison.config_changes
        ],
        "references": comparison.has_references,
        "unmatched_references": list(comparison.unmatched_references),
        "overall": {
            "baseline": _errors_json(comparison.baseline_errors),
            "candidate": _errors_json(comparison.candidate_errors),
            "divergence": _errors_json(comparison.divergence),
        },
        "gate": {
            "metric": gate.metric,
            "baseline": _rate(gate.baseline_pct),
            "candidate": _rate(gate.candidate_pct),
            "increase": _rate(gate.increase_pct),
            "max_increase": gate.max_increase_pct,
            "passed": gate.passed,
        },
        "endpoint_changes": {kind.value: count for kind, count in comparison.endpoint_changes},
        "text_changes": comparison.text_changes,
        "boundary_tolerance_ms": comparison.boundary_tolerance_ms,
        "calls": [
            {
                "call_id": call_id,
                "baseline": _errors_json(total_errors(s.baseline_errors for s in streams)),
                "candidate": _errors_json(total_errors(s.candidate_errors for s in streams)),
                "divergence": _errors_json(total_errors(s.divergence for s in streams)),
                "channels": [
                    {
                        "channel": s.channel,
                        "reference_id": s.reference_id,
                        "baseline": _errors_json(s.baseline_errors),
                        "candidate": _errors_json(s.candidate_errors),
                        "divergence": _errors_json(s.divergence),
                        "changes": [
                            {
                                "kinds": [k.value for k in group.kinds],
                                "baseline": [_utterance_json(u) for u in group.baseline],
                                "candidate": [_utterance_json(u) for u in group.candidate],
                            }
                            for group in s.changes
                        ],
                    }
                    for s in streams
                ],
            }
            for call_id, streams in _calls(comparison)
        ],
    }


def _pct(value: float | None) -> str:
    if value is None:
        return "–"
    if math.isinf(value):
        return "∞"
    return f"{value:.2f} %"


def _wer_cell(errors: WordErrors | None) -> str:
    return "–" if errors is None else _pct(percent(errors))


def _sdi(errors: WordErrors) -> str:
    return f"{errors.substitutions} / {errors.deletions} / {errors.insertions}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "∅"


def _side(utterances: tuple[Utterance, ...]) -> str:
    if not utterances:
        return "∅"
    return "<br>".join(
        f"#{u.index} {format_span_ms(u.start_ms)}–{format_span_ms(u.end_ms)} "
        f"({u.endpoint_reason}) {_cell(u.text)}"
        for u in utterances
    )


def verdict_line(comparison: Comparison) -> str:
    """One line saying whether the candidate passes the gate, and why."""
    gate = comparison.gate
    if gate.metric == "wer":
        measured = (
            f"WER {_pct(gate.candidate_pct)} vs baseline {_pct(gate.baseline_pct)} "
            f"({gate.increase_pct:+.2f} points)"
        )
    else:
        measured = f"divergence from baseline {_pct(gate.candidate_pct)} (no references)"
    if gate.max_increase_pct is None:
        return f"NOT GATED: candidate {measured}"
    verdict = "PASS" if gate.passed else "FAIL"
    return f"{verdict}: candidate {measured}, limit +{gate.max_increase_pct:g} points"


def comparison_markdown(comparison: Comparison, max_examples: int = DEFAULT_MAX_EXAMPLES) -> str:
    """The markdown report: verdict, runs, settings changed, accuracy per call, endpoint
    decisions, changed utterances side by side (at most ``max_examples``), latency."""
    base, cand = comparison.baseline, comparison.candidate
    lines = [
        "# Replay comparison",
        "",
        f"**{verdict_line(comparison)}**",
        "",
        "| | baseline | candidate |",
        "|---|---|---|",
        f"| file | `{base.label}` | `{cand.label}` |",
        f"| model | {base.model_id or '–'} | {cand.model_id or '–'} |",
        f"| finals | {base.finals} | {cand.finals} |",
        f"| streams (call × channel) | {base.streams} | {cand.streams} |",
        "",
    ]
    if comparison.config_changes:
        lines += [
            "## Settings that differ",
            "",
            "| setting | baseline | candidate |",
            "|---|---|---|",
        ]
        lines += [
            f"| `{c.name}` | {_cell(str(c.baseline))} | {_cell(str(c.candidate))} |"
            for c in comparison.config_changes
        ]
        lines.append("")
    lines += _accuracy(comparison)
    lines += _endpoints(comparison)
    lines += _examples(comparison, max_examples)
    lines += [
        "## Latency (`latency_ms` of finals)",
        "",
        "| run | finals with latency | P50 | P95 | P99 | max |",
        "|---|---|---|---|---|---|",
    ]
    for name, info in (("baseline", base), ("candidate", cand)):
        stats = info.latency
        cells = [stats.p50_ms, stats.p95_ms, stats.p99_ms, stats.max_ms]
        shown = " | ".join("–" if v is None else f"{v} ms" for v in cells)
        lines.append(f"| {name} | {stats.count} | {shown} |")
    lines += [
        "",
        "A replay's latency is stream time (how much audio had been fed when the final was "
        "decoded: the step cadence), not compute time; finals dumped from production carry "
        "serving latency.",
        "",
    ]
    return "\n".join(lines)


def _accuracy(comparison: Comparison) -> list[str]:
    lines = ["## Accuracy", ""]
    unmatched = comparison.unmatched_references
    if unmatched:
        shown = ", ".join(f"`{_cell(ref)}`" for ref in unmatched[:20])
        more = f" and {len(unmatched) - 20} more" if len(unmatched) > 20 else ""
        lines += [
            f"**{len(unmatched)} reference(s) matched no stream** of either run (not counted: "
            f"calls aged out of the topic, or ids mistyped): {shown}{more}.",
            "",
        ]
    if comparison.has_references:
        lines += [
            f"Overall WER: baseline {_wer_cell(comparison.baseline_errors)}, candidate "
            f"{_wer_cell(comparison.candidate_errors)} (streams with a reference). "
            f"Divergence between the runs: {_wer_cell(comparison.divergence)}.",
            "",
            "| call | channel | reference | ref words | baseline WER | candidate WER | "
            "divergence | S / D / I vs baseline |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for stream in comparison.streams:
            words = stream.baseline_errors.reference_words if stream.baseline_errors else "–"
            lines.append(
                f"| {_cell(stream.call_id)} | {stream.channel} | "
                f"{_cell(stream.reference_id or '–')} | {words} | "
                f"{_wer_cell(stream.baseline_errors)} | {_wer_cell(stream.candidate_errors)} | "
                f"{_wer_cell(stream.divergence)} | {_sdi(stream.divergence)} |"
            )
    else:
        lines += [
            f"No references: the candidate is compared with the baseline's text. Divergence "
            f"(WER of the candidate with the baseline as reference): "
            f"{_wer_cell(comparison.divergence)}.",
            "",
            "| call | channel | baseline words | divergence | S / D / I |",
            "|---|---|---|---|---|",
        ]
        for stream in comparison.streams:
            lines.append(
                f"| {_cell(stream.call_id)} | {stream.channel} | "
                f"{stream.divergence.reference_words} | {_wer_cell(stream.divergence)} | "
                f"{_sdi(stream.divergence)} |"
            )
    lines.append("")
    return lines


def _endpoints(comparison: Comparison) -> list[str]:
    lines = [
        "## Endpoint decisions",
        "",
        f"Utterance groups (utterances of both runs overlapping in time) whose segmentation "
        f"differs; boundaries move when a start or end differs by more than "
        f"{comparison.boundary_tolerance_ms} ms.",
        "",
        "| change | groups |",
        "|---|---|",
    ]
    lines += [f"| {kind.value} | {count} |" for kind, count in comparison.endpoint_changes]
    lines += [f"| {ChangeKind.TEXT_CHANGED.value} | {comparison.text_changes} |", ""]
    return lines


def _examples(comparison: Comparison, max_examples: int) -> list[str]:
    changed: list[tuple[StreamComparison, UtteranceGroup]] = [
        (stream, group) for stream in comparison.streams for group in stream.changes
    ]
    if not changed:
        return ["## Changed utterances", "", "None: both runs agree.", ""]
    lines = [
        "## Changed utterances",
        "",
        "| call | channel | span | changes | baseline | candidate |",
        "|---|---|---|---|---|---|",
    ]
    for stream, group in changed[:max_examples]:
        lines.append(
            f"| {_cell(stream.call_id)} | {stream.channel} | "
            f"{format_span_ms(group.start_ms)}–{format_span_ms(group.end_ms)} | "
            f"{', '.join(k.value for k in group.kinds)} | {_side(group.baseline)} | "
            f"{_side(group.candidate)} |"
        )
    if len(changed) > max_examples:
        lines.append(f"\n… and {len(changed) - max_examples} more (see the JSON report).")
    lines.append("")
    return lines
