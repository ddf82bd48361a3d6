"""Replay and comparison: recorded audio through any model and config, and what changed.

Pure core, in flow order:

- ``timerange``: what to replay (time range of record timestamps and/or call ids);
- ``runner``: ``ReplayRunner`` feeds recorded chunks to the engine exactly as the worker does and
  collects the finals (imports the engine, hence torch: import it explicitly);
- ``results``: the results file (JSON lines) and ``load_run``, which also reads finals dumps;
- ``compare``: accuracy (WER against references, or divergence between runs), endpoint
  decisions that moved, latency percentiles, and the regression gate;
- ``report``: a comparison as markdown and JSON.

The Kafka shell is ``pipeline.replay.kafka`` (group-less reads of ``audio.chunks``, shadow
topics); the commands are ``streamscribe replay`` and ``streamscribe compare``
(``docs/replay.md``).
"""

from pipeline.replay.compare import (
    ChangeKind,
    Comparison,
    GateResult,
    compare_runs,
    parse_refs,
    reference_id,
)
from pipeline.replay.report import comparison_json, comparison_markdown, verdict_line
from pipeline.replay.results import (
    RESULTS_SCHEMA,
    PartitionRange,
    ReplayHeader,
    Run,
    load_run,
    result_lines,
)
from pipeline.replay.timerange import ReplayRange, parse_calls, parse_time, replay_range

__all__ = [
    "RESULTS_SCHEMA",
    "ChangeKind",
    "Comparison",
    "GateResult",
    "PartitionRange",
    "ReplayHeader",
    "ReplayRange",
    "Run",
    "compare_runs",
    "comparison_json",
    "comparison_markdown",
    "load_run",
    "parse_calls",
    "parse_refs",
    "parse_time",
    "reference_id",
    "replay_range",
    "result_lines",
    "verdict_line",
]
