"""What every benchmark shares: machine facts, statistics, results files, plots and fixtures.

A benchmark module ``bench/<name>.py`` measures, then calls :func:`write_results`, which writes
``bench/results/<name>.json`` (machine, configuration, numbers, targets), ``<name>.md`` (a short
table for bench/README.md) and one ``<name>*.png`` per figure. ``bench.run`` runs the modules and
rebuilds bench/README.md from whatever results are present.

Numbers are medians (or percentiles) of repeated measurements on a machine other people use at
the same time; compare ratios measured within one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as dt
import functools
import gc
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psutil

from pipeline.evaluation import WordErrors, word_errors

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
RESULTS = REPO / "bench" / "results"
SHARED_MACHINE_NOTE = (
    "Measured on a shared machine (other engineers' tests ran on the same cores): absolute "
    "times are noisy; ratios measured within one run are the reliable part."
)

DEFAULT_TORCH_THREADS = 1
"""Torch threads of the benchmarks. On the shared 2-core machine they were written on, two
intra-op threads made batched silero VAD 20–40× slower than one whenever other processes held
the cores (threads wait on each other at every operator); one thread is stable."""

__all__ = [
    "DEFAULT_TORCH_THREADS",
    "FIXTURES",
    "REPO",
    "RESULTS",
    "SHARED_MACHINE_NOTE",
    "CpuMeter",
    "FixtureClip",
    "Target",
    "ViewUpdate",
    "add_device_option",
    "bench_parser",
    "call_clips",
    "chunk_to_view_by_stream_ms",
    "chunk_to_view_ms",
    "corpus_wer",
    "fmt",
    "load_manifest",
    "load_refs",
    "machine_info",
    "markdown_table",
    "new_figure",
    "percentiles",
    "plain_log_axis",
    "plot_latency_percentiles",
    "release_memory",
    "result_name",
    "rss_bytes",
    "single_clips",
    "synchronize",
    "write_results",
]


# -- machine ---------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() + ("+dirty" if dirty else "")


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on (CPU model, cores, memory, versions, date, load)."""
    import torch  # imported here: the README builder needs none of torch's start-up cost

    load_1m, load_5m, _ = os.getloadavg()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu_model": _cpu_model(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu": gpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_average_1m_5m": [round(load_1m, 2), round(load_5m, 2)],
        "git_commit": _git_commit(),
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


# -- statistics ------------------------------------------------------------------------------


def percentiles(values: Iterable[float], qs: Sequence[int] = (50, 95, 99)) -> dict[str, Any]:
    """``{"n", "p50", "p95", "p99", "mean", "max"}`` (linear interpolation; None when empty)."""
    data = np.asarray(list(values), dtype=np.float64)
    result: dict[str, Any] = {"n": int(data.size)}
    for q in qs:
        result[f"p{q}"] = float(np.percentile(data, q)) if data.size else None
    result["mean"] = float(data.mean()) if data.size else None
    result["max"] = float(data.max()) if data.size else None
    return result


@dataclass(frozen=True, slots=True)
class ViewUpdate:
    """A partial or a final as a screen shows it: which utterance of which stream, when it was
    emitted, and capture times (epoch ms) of the utterance's first audio
    (``speech_start_capture_ms``, its speech onset as the VAD gate cut it, pad included) and
    of the end of the newest audio it shows (``covered_capture_ms``; a final's is the end of
    its utterance)."""

    stream: str
    utterance: int
    emit_ms: int
    speech_start_capture_ms: int
    covered_capture_ms: int
    is_final: bool


def chunk_to_view_ms(updates: Iterable[ViewUpdate], chunk_ms: int = 20) -> list[float]:
    """``chunk_to_view_by_stream_ms`` of every stream, in one list."""
    by_stream = chunk_to_view_by_stream_ms(updates, chunk_ms)
    return [latency for latencies in by_stream.values() for latency in latencies]


def chunk_to_view_by_stream_ms(
    updates: Iterable[ViewUpdate], chunk_ms: int = 20
) -> dict[str, list[float]]:
    """How long every chunk of an utterance shown waited before a screen showed it: chunk → view.

    An utterance's audio runs from its ``speech_start_capture_ms`` to its final's
    ``covered_capture_ms`` (for an utterance with no final, one suppressed, empty or never
    emitted, to the end of its newest partial: all of it the harness knows about). It is cut
    into chunks of ``chunk_ms`` from its start (the last one shorter). A chunk ending at
    capture time ``t`` (its last sample captured, so it could be handed over) is shown by the
    first output of its utterance, partial or final, by emit time, whose covered audio reaches
    ``t``; its value is that output's ``emit_ms − t``. One value per chunk, by stream, in no
    particular order; ``updates`` may come in any order.

    Every chunk of an utterance shown counts, not only those a partial happened to end on: an
    utterance without a partial counts all its chunks at its final's time, and a long gap
    between two partials counts every chunk that waited through it (so rare partials cost what
    they cost a reader). An utterance never shown at all (no partial, no final) is not in
    ``updates`` and adds nothing: it shows in the WER, as deletions, not here.
    """
    by_utterance: dict[tuple[str, int], list[ViewUpdate]] = {}
    for update in updates:
        by_utterance.setdefault((update.stream, update.utterance), []).append(update)
    latencies: dict[str, list[float]] = {}
    for (stream, _), outputs in by_utterance.items():
        start_ms = min(u.speech_start_capture_ms for u in outputs)
        finals = [u.covered_capture_ms for u in outputs if u.is_final]
        end_ms = min(finals) if finals else max(u.covered_capture_ms for u in outputs)
        chunks = max(0, -(-(end_ms - start_ms) // chunk_ms))
        chunk_ends_ms = [min(start_ms + (k + 1) * chunk_ms, end_ms) for k in range(chunks)]
        waiting = 0  # the first chunk not shown yet
        shown_ms = start_ms
        for output in sorted(outputs, key=lambda u: u.emit_ms):
            shown_ms = max(shown_ms, output.covered_capture_ms)
            while waiting < chunks and chunk_ends_ms[waiting] <= shown_ms:
                latencies.setdefault(stream, []).append(output.emit_ms - chunk_ends_ms[waiting])
                waiting += 1
    return latencies


def fmt(value: float | None, digits: int = 2, unit: str = "") -> str:
    """A number for a table: ``—`` for missing, fixed digits otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}{unit}"


@dataclass(frozen=True, slots=True)
class Target:
    """A target the issue sets, and whether the measured value meets it."""

    name: str
    value: float | None
    limit: float
    unit: str
    higher_is_better: bool = False

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.limit if self.higher_is_better else self.value <= self.limit

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "limit": self.limit,
            "unit": self.unit,
            "comparison": ">=" if self.higher_is_better else "<=",
            "met": self.met,
        }

    def row(self) -> list[str]:
        verdict = {True: "met", False: "**not met**", None: "not measured"}[self.met]
        comparison = "≥" if self.higher_is_better else "≤"
        return [self.name, f"{comparison} {self.limit:g} {self.unit}", fmt(self.value, 3), verdict]


# -- processes -------------------------------------------------------------------------------


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of a process (this one by default)."""
    return int(psutil.Process(pid).memory_info().rss)


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS, so RSS reflects live data."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@dataclass
class CpuMeter:
    """CPU used by one process (user + system seconds, all threads) and by the whole machine
    over a wall-clock interval. ``cores`` = CPU seconds per wall second (2.0 = two full cores)."""

    pid: int | None = None
    _process: psutil.Process = field(init=False)
    _cpu_start_s: float = field(init=False, default=0.0)
    _wall_start_s: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._process = psutil.Process(self.pid)
        self.restart()

    def restart(self) -> None:
        times = self._process.cpu_times()
        self._cpu_start_s = times.user + times.system
        self._wall_start_s = time.monotonic()
        psutil.cpu_percent(None)  # starts the machine-wide interval

    def read(self) -> dict[str, float]:
        times = self._process.cpu_times()
        wall_s = max(time.monotonic() - self._wall_start_s, 1e-9)
        cpu_s = times.user + times.system - self._cpu_start_s
        return {
            "wall_s": wall_s,
            "process_cpu_s": cpu_s,
            "process_cores": cpu_s / wall_s,
            "machine_cpu_percent": psutil.cpu_percent(None),
        }


# -- fixtures --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FixtureClip:
    """One reference-transcribed stream: a single-speaker file or one channel of a call.

    ``samples`` are float32 in [-1, 1) at ``sample_rate_hz`` (8 or 16 kHz). ``turns`` (calls
    only): ``(start_ms, end_ms, text)`` of each turn of this channel, from the manifest.
    """

    clip_id: str
    kind: str
    sample_rate_hz: int
    samples: npt.NDArray[np.float32]
    text: str
    turns: tuple[tuple[int, int, str], ...] = ()

    @property
    def duration_ms(self) -> int:
        return 1000 * len(self.samples) // self.sample_rate_hz


def load_manifest() -> list[dict[str, Any]]:
    data = json.loads((FIXTURES / "manifest.json").read_text(encoding="utf-8"))
    files: list[dict[str, Any]] = data["files"]
    return files


def load_refs() -> dict[str, str]:
    refs = {}
    for line in (FIXTURES / "refs.tsv").read_text(encoding="utf-8").splitlines():
        if line.strip():
            key, text = line.split("\t", 1)
            refs[key] = text
    return refs


def _read_mono(entry: dict[str, Any]) -> tuple[npt.NDArray[np.float32], int]:
    import soundfile

    path = FIXTURES / entry["path"]
    if entry.get("container") == "raw":
        subtype = {"mulaw": "ULAW", "alaw": "ALAW"}[entry["encoding"]]
        data, rate = soundfile.read(
            str(path),
            samplerate=entry["sample_rate_hz"],
            channels=1,
            format="RAW",
            subtype=subtype,
            dtype="float32",
        )
    else:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        data = data[:, 0]
    return np.ascontiguousarray(data, dtype=np.float32), int(rate)


def single_clips(kinds: Iterable[str]) -> list[FixtureClip]:
    """Single-speaker fixtures of the given manifest kinds, with their refs.tsv text."""
    wanted = set(kinds)
    refs = load_refs()
    clips = []
    for entry in load_manifest():
        if entry["kind"] not in wanted or entry.get("channels", 1) != 1:
            continue
        samples, rate = _read_mono(entry)
        text = refs.get(entry["id"], entry.get("text", ""))
        clips.append(FixtureClip(entry["id"], entry["kind"], rate, samples, text))
    return clips


@functools.cache
def call_clips(include_8k: bool = True) -> list[FixtureClip]:
    """Every channel of every fixture call (``call01_billing:agent`` …) with its turns.

    Read once per process (a benchmark runs many levels over the same clips); callers must not
    modify the list or its arrays."""
    from pipeline.audio.files import read_call_audio

    refs = load_refs()
    clips = []
    for entry in load_manifest():
        if entry["kind"] != "call" or (not include_8k and entry["sample_rate_hz"] != 16000):
            continue
        audio = read_call_audio(FIXTURES / entry["path"], entry["id"])
        for channel in entry["channel_map"]:
            label = channel["label"]
            turns = tuple((t["start_ms"], t["end_ms"], t["text"]) for t in channel["turns"])
            clips.append(
                FixtureClip(
                    f"{entry['id']}:{label}",
                    "call",
                    audio.sample_rate_hz,
                    audio.channels[label],
                    refs.get(f"{entry['id']}:{label}", channel["text"]),
                    turns,
                )
            )
    return clips


# -- results ---------------------------------------------------------------------------------


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(
    name: str,
    *,
    quick: bool,
    config: dict[str, Any],
    results: dict[str, Any],
    markdown: str,
    targets: Sequence[Target] = (),
    figures: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
    started_s: float | None = None,
    out: Path = RESULTS,
) -> list[Path]:
    """Write ``<name>.json``, ``<name>.md`` and the figures (matplotlib, saved as PNG).

    ``figures`` maps a suffix (``""`` → ``<name>.png``, ``"memory"`` → ``<name>_memory.png``)
    to a figure. The markdown gets the targets table and the notes appended.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    images = []
    for suffix, figure in (figures or {}).items():
        path = out / (f"{name}_{suffix}.png" if suffix else f"{name}.png")
        figure.savefig(path, dpi=110, bbox_inches="tight")
        images.append(path.name)
        written.append(path)
    report = {
        "benchmark": name,
        "quick": quick,
        "machine": machine_info(),
        "wall_s": None if started_s is None else round(time.monotonic() - started_s, 1),
        "config": config,
        "results": results,
        "targets": [t.to_dict() for t in targets],
        "notes": list(notes),
        "figures": images,
    }
    json_path = out / f"{name}.json"
    json_path.write_text(json.dumps(report, indent=2, default=_json_default) + "\n")
    written.append(json_path)
    parts = [markdown.rstrip()]
    if targets:
        parts.append(
            markdown_table(["target", "limit", "measured", ""], (t.row() for t in targets))
        )
    if notes:
        parts.append("\n".join(f"- {note}" for note in notes))
    md_path = out / f"{name}.md"
    md_path.write_text("\n\n".join(parts) + "\n")
    written.append(md_path)
    return written


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def new_figure(width_in: float = 7.0, height_in: float = 4.0) -> Any:
    """A matplotlib figure on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(width_in, height_in))
    return figure, axes


def plain_log_axis(axes: Any) -> None:
    """Log-scaled y axis labelled with plain numbers (0.5, 1, 2) rather than powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axes.set_yscale("log")
    axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


def bench_parser(name: str, description: str) -> argparse.ArgumentParser:
    """The flags every benchmark module understands."""
    parser = argparse.ArgumentParser(prog=f"bench.{name}", description=description)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (bench.run --quick)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_TORCH_THREADS,
        help=f"torch intra-op threads (default {DEFAULT_TORCH_THREADS}; see bench/README.md)",
    )
    return parser


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """``--device cpu|cuda`` for the benchmarks that run the recognizer (CUDA: float16)."""
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="torch device; CUDA results are written beside the CPU ones as <name>-cuda.*",
    )


def result_name(name: str, device: str) -> str:
    """The results' file stem: ``name`` on CPU, ``name-<device>`` elsewhere."""
    return name if device == "cpu" else f"{name}-{device}"


def synchronize(device: str) -> None:
    """Wait for queued device work, so a wall-clock timing covers it (no-op on CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def corpus_wer(
    clips: Sequence[FixtureClip], texts: Mapping[str, str], categories: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Corpus WER of ``texts`` (clip id → hypothesis) per category (``categories``: clip kind →
    category) and over all clips (``all``), with the error counts."""
    totals: dict[str, WordErrors] = {}
    for clip in clips:
        errors = word_errors(clip.text, texts[clip.clip_id])
        for category in (categories[clip.kind], "all"):
            totals[category] = totals.get(category, WordErrors()) + errors
    return {
        category: {
            "wer": errors.wer,
            "errors": errors.errors,
            "substitutions": errors.substitutions,
            "deletions": errors.deletions,
            "insertions": errors.insertions,
            "reference_words": errors.reference_words,
        }
        for category, errors in totals.items()
    }


def plot_latency_percentiles(
    axes: Any,
    levels: Sequence[Mapping[str, Any]],
    channels: Sequence[int],
    partial_label: str,
    partial_target_s: float,
    final_target_s: float,
    partial_metric: str = "chunk_to_partial_ms",
) -> None:
    """P50/P95/P99 of the live view's latency (``partial_metric``, ms in ``levels``) and of
    final latency per level, in s, with each P95 target as a band."""
    for metric, label, color, target in (
        (partial_metric, partial_label, "tab:blue", partial_target_s),
        ("endpoint_to_final_ms", "endpoint→final", "tab:orange", final_target_s),
    ):
        for q, style in (("p50", ":"), ("p95", "-"), ("p99", "--")):
            values = [
                np.nan if level[metric][q] is None else level[metric][q] / 1000 for level in levels
            ]
            axes.plot(channels, values, style, marker="o", color=color, label=f"{label} {q}")
        axes.axhline(target, color=color, alpha=0.3, linewidth=4, label=f"{label} P95 target")
