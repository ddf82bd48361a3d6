"""Run the benchmarks and rebuild bench/README.md from the results (``make bench``).

    .venv/bin/python -m bench.run                    # every benchmark, full sizes
    .venv/bin/python -m bench.run --quick            # smaller sizes, under 10 minutes
                                                     # (benchmarks marked in_quick only)
    .venv/bin/python -m bench.run --only e2e transport
    .venv/bin/python -m bench.run --readme           # only rebuild bench/README.md

Each benchmark runs as its own process (``python -m bench.<name>``), one after the other, so
one's threads, memory and model never skew another's numbers. A benchmark that needs Kafka or
Redis gets the local one started by ``deploy/local/*.sh`` when none answers (and stopped again
at the end). Results land in bench/results/; bench/README.md is then rebuilt from every result
present, so a partial run keeps the other benchmarks' last numbers.

bench/README.md keeps the numbers: per benchmark its tables, their captions and one-line
results (:func:`numbers_of`). The prose lives beside each benchmark's code, in the module
docstring of ``bench/<module>.py`` (what it measures and how, and how to read it), and in full
in ``bench/results/<name>.md`` (the run's own notes); each section of the README links both.

Kafka and Redis: the local ones (``deploy/local/``) are started when none answers. Every broker
benchmark creates its topics under a fresh ``bench-<name>-<id>.`` prefix and deletes them at the
end; worker subprocesses are stopped (their logs go to ``$TMPDIR/streamscribe-bench/``). Torch
runs with 1 intra-op thread by default (``--threads N``): on the 2-core machine of the committed
runs, 2 threads have made the recognizer 3–9× and batched VAD 20–40× slower whenever other
processes held the cores, and faster when they did not (engine_rtf's thread row shows the run's
own case). ``bench.run`` gives engine_concurrency, e2e and peer_sweep 2 threads: they measure what
the engine does with the whole machine (the peer uses both cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import REPO, RESULTS, SHARED_MACHINE_NOTE, fmt, markdown_table

README = REPO / "bench" / "README.md"


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str
    summary: str
    needs_kafka: bool = False
    needs_redis: bool = False
    in_quick: bool = True
    """Part of ``--quick`` (which must stay under 10 minutes); otherwise full runs and
    ``--only`` only."""
    args: tuple[str, ...] = ()
    """Extra arguments, as the committed results were measured (e.g. 2 torch threads where
    the benchmark compares against a system that uses both cores)."""
    module: str = ""
    """The ``bench.<module>`` that runs it (default: ``name``; a variant runs another's module
    with other arguments)."""


TWO_THREADS = ("--threads", "2")

BENCHMARKS = (
    Benchmark("engine_wer", "WER: streaming engine vs offline 30 s decoding; window cut"),
    Benchmark(
        "engine_wer_realspeech",
        "WER on real speech (../shared/speech): streaming finals vs offline, telephone + 16 kHz",
        args=("--realspeech",),
        module="engine_wer",
    ),
    Benchmark("engine_rtf", "recognizer real-time factor by batch size; stage split; VAD"),
    Benchmark(
        "engine_concurrency",
        "N real-time channels through one engine: latency, CPU, RAM",
        args=TWO_THREADS,
    ),
    Benchmark(
        "engine_concurrency_int8",
        "the same with int8 Whisper weights (STREAMSCRIBE_QUANTIZATION=int8)",
        in_quick=False,
        args=(*TWO_THREADS, "--quantization", "int8"),
        module="engine_concurrency",
    ),
    Benchmark(
        "engine_profile",
        "CPU per channel-audio second by stage (VAD, mel, encoder, decoder, ...), 1/8/16 ch",
        in_quick=False,
        args=TWO_THREADS,
    ),
    Benchmark("transport", "worker with a no-op model vs a bare consumer", needs_kafka=True),
    Benchmark(
        "e2e", "end to end through Kafka; kill -9 recovery", needs_kafka=True, args=TWO_THREADS
    ),
    Benchmark(
        "ingress",
        "concurrent real-time G.711 calls on one ingress core: arrival → acked, drops, CPU",
        needs_kafka=True,
    ),
    Benchmark(
        "chaos",
        "finals through frozen, killed, restarted workers and broker (own broker), 3 x 10 min",
        in_quick=False,
        args=("--runs", "3"),
    ),
    Benchmark("hotwords", "hotword biasing: recall, false insertions, cost", needs_redis=True),
    Benchmark("hotword_catalog", "hotword lists at scale: what a list change costs a worker"),
    Benchmark("redaction", "redaction: recall and precision per entity type, added cost per final"),
    Benchmark("denoise", "RNNoise before the engine: WER with and without, cost", in_quick=False),
    Benchmark(
        "peer_sweep",
        "Streamscribe vs the per-stream pattern, N live channels",
        in_quick=False,
        args=TWO_THREADS,
    ),
    Benchmark("soak", "continuous calls through Kafka: memory, latency, lag", True, in_quick=False),
    Benchmark(
        "soak_malloc_arena2",
        "the soak with glibc's MALLOC_ARENA_MAX=2 in the worker: allocator steps or growth?",
        True,
        in_quick=False,
        args=("--malloc-arena-max", "2"),
        module="soak",
    ),
)
ORDER = [b.name for b in BENCHMARKS]


def _service_up(script: str) -> bool:
    return (
        subprocess.run(
            ["bash", str(REPO / "deploy" / "local" / script), "status"],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


def _service(script: str, action: str) -> bool:
    result = subprocess.run(
        ["bash", str(REPO / "deploy" / "local" / script), action],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        print(f"bench: {script} {action} failed: {result.stderr.strip()[-500:]}", file=sys.stderr)
    return result.returncode == 0


def _kafka_reachable() -> bool:
    from bench.infra import broker_reachable, kafka_settings

    return broker_reachable(kafka_settings())


def run_benchmarks(
    selected: Sequence[Benchmark], quick: bool, timeout_s: float, out: Path = RESULTS
) -> list[dict[str, Any]]:
    started_services: list[str] = []
    outcomes = []
    try:
        needs_kafka = any(b.needs_kafka for b in selected)
        if needs_kafka and not _kafka_reachable() and _service("kafka.sh", "up"):
            started_services.append("kafka.sh")
        needs_redis = any(b.needs_redis for b in selected)
        if needs_redis and not _service_up("redis.sh") and _service("redis.sh", "up"):
            started_services.append("redis.sh")
        for bench in selected:
            module = bench.module or bench.name
            command = [sys.executable, "-m", f"bench.{module}", "--out", str(out)]
            command += ["--quick"] if quick else []
            command += bench.args
            print(f"\n=== {bench.name}: {bench.summary}", flush=True)
            began = time.monotonic()
            try:
                code = subprocess.run(command, cwd=REPO, timeout=timeout_s, check=False).returncode
            except subprocess.TimeoutExpired:
                code = -1
                print(f"bench: {bench.name} exceeded {timeout_s:.0f} s and was stopped")
            elapsed = time.monotonic() - began
            outcomes.append({"name": bench.name, "exit_code": code, "wall_s": elapsed})
            print(f"=== {bench.name}: exit {code} after {elapsed:.0f} s", flush=True)
    finally:
        for script in reversed(started_services):
            _service(script, "down")
    return outcomes


# -- README ----------------------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return None


def _targets(report: dict[str, Any]) -> list[list[str]]:
    """Rows (target, limit, measured, verdict) whatever the benchmark's JSON shape."""
    targets = report.get("targets") or []
    rows = []
    if isinstance(targets, dict):  # {"name": met}
        for name, met in targets.items():
            rows.append([name, "—", "—", "met" if met else "**not met**"])
        return rows
    for t in targets:
        verdict = {True: "met", False: "**not met**", None: "not measured"}[t.get("met")]
        rows.append(
            [
                t["name"],
                f"{'≥' if t.get('comparison') == '>=' else '≤'} {t['limit']:g} {t.get('unit', '')}",
                fmt(t.get("value"), 3),
                verdict,
            ]
        )
    return rows


def _machine_rows(machine: dict[str, Any]) -> list[list[str]]:
    return [
        ["CPU", str(machine.get("cpu_model") or machine.get("machine", "—"))],
        [
            "cores",
            f"{machine.get('logical_cores', '—')} logical / "
            f"{machine.get('physical_cores', '—')} physical",
        ],
        ["memory", f"{machine.get('memory_gib', '—')} GiB"],
        ["GPU", str(machine.get("gpu") or "none (CPU only)")],
        ["OS / Python", f"{machine.get('os', '—')} / {machine.get('python', '—')}"],
        ["torch", str(machine.get("torch", "—"))],
    ]


def machines_by_device(
    reports: dict[str, dict[str, Any]], names: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The machine of each device's runs: ``cpu`` for ``<name>``, ``cuda`` for ``<name>-cuda``
    (the first report of that device, in ``names`` order, that records one). Runs on another
    device were measured on another machine (the CUDA runs on a lent GPU machine). What differs
    between runs on one machine (commit, load) is in each benchmark's row of the list."""
    machines: dict[str, dict[str, Any]] = {}
    for name in names:
        machine = reports[name].get("machine")
        device = name.partition("-")[2] or "cpu"
        if isinstance(machine, dict) and "cpu_model" in machine:
            machines.setdefault(device, machine)
    return machines


def build_readme(results_dir: Path = RESULTS) -> str:
    reports: dict[str, dict[str, Any]] = {}
    for path in sorted(results_dir.glob("*.json")):
        report = _load(path)
        if report is not None:
            reports[path.stem] = report
    # Each benchmark, then its runs on other devices (``<name>-cuda``), then anything else.
    names = [
        n
        for base in ORDER
        for n in ([base] if base in reports else [])
        + sorted(r for r in reports if r.startswith(f"{base}-"))
    ]
    names += sorted(n for n in reports if n not in names)
    lines = [
        "# Benchmarks",
        "",
        "Speed, latency, memory and accuracy of Streamscribe, measured by `bench/` (never "
        "asserted in tests). This file is generated by `python -m bench.run` from "
        "`bench/results/*.json` and `*.md`; edit `bench/run.py`, not this file.",
        "",
        f"> {SHARED_MACHINE_NOTE} Medians are quoted throughout; ratios (batch sizes, worker "
        "vs bare consumer, window sizes) come from measurements interleaved in one run.",
        "",
        "## How to rerun",
        "",
        "```sh",
        "make bench          # every benchmark, full sizes (tens of minutes)",
        "make bench-quick    # smaller sizes, under 10 minutes",
        ".venv/bin/python -m bench.run --only engine_rtf e2e [--quick]",
        ".venv/bin/python -m bench.engine_concurrency --channels 1 4 16 32  # one module",
        ".venv/bin/python -m bench.run --readme   # rebuild this file from bench/results/",
        "```",
        "",
        "How the runs are set up (local Kafka and Redis, per-run topics, torch threads): "
        "[run.py](run.py). This page keeps the numbers: each benchmark's tables, captions and "
        "one-line results. What a benchmark measures and how to read it is in the docstring of "
        "its module (the *Method* link of each section); the run's full report, with its notes, "
        "is its `results/<name>.md` (the *Full report* link).",
        "",
        "| benchmark | what | mode | measured | wall s | commit | load at start (1 / 5 min) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    summaries = {b.name: b.summary for b in BENCHMARKS}
    for name in names:
        base, _, device = name.partition("-")
        if device and base in summaries:
            summaries[name] = f"{summaries[base]} ({device.upper()})"
    for name in names:
        report = reports[name]
        machine = report.get("machine")
        if not isinstance(machine, dict):
            machine = {}
        lines.append(
            f"| [{name}](#{name.replace('_', '-')}) | {summaries.get(name, '')} | "
            f"{'quick' if report.get('quick') else 'full'} | "
            f"{machine.get('date_utc', '—')} | {fmt(report.get('wall_s'), 0)} | "
            f"{machine.get('git_commit', '—')} | {machine.get('load_average_1m_5m', '—')} |"
        )
    machines = machines_by_device(reports, names)
    if machines:
        headers = ["", *(f"{device.upper()} runs" for device in machines)]
        columns = [_machine_rows(machine) for machine in machines.values()]
        rows = [
            [label, *(column[i][1] for column in columns)]
            for i, (label, _) in enumerate(columns[0])
        ]
        lines += ["", "## Machine", "", markdown_table(headers, rows)]
    target_rows = [[name, *row] for name in names for row in _targets(reports[name])]
    if target_rows:
        lines += [
            "",
            "## Targets",
            "",
            markdown_table(["benchmark", "target", "limit", "measured", ""], target_rows),
        ]
    modules = {b.name: b.module or b.name for b in BENCHMARKS}
    for name in names:
        lines += ["", f'<a id="{name.replace("_", "-")}"></a>', ""]
        md_path = results_dir / f"{name}.md"
        body = md_path.read_text().strip() if md_path.exists() else f"## {name}"
        if body.startswith("# "):
            body = "#" + body  # one level below this page's title
        lines.append(numbers_of(body))
        links = []
        module = modules.get(name.partition("-")[0])
        if module is not None:
            links.append(f"Method: [bench/{module}.py]({module}.py)")
        if md_path.exists():
            links.append(f"Full report: [results/{name}.md](results/{name}.md)")
        if links:
            lines += ["", " · ".join(links)]
        for image in reports[name].get("figures") or []:
            lines += ["", f"![{name}](results/{image})"]
    return "\n".join(lines) + "\n"


CAPTION_MAX_CHARS = 300
"""A paragraph this long or shorter is a caption or a one-line result; a longer one is prose."""


def numbers_of(body: str) -> str:
    """The numbers of one benchmark's report: its headings, tables, and the paragraphs of at
    most ``CAPTION_MAX_CHARS`` (captions, one-line results). Longer paragraphs, lists (notes,
    settings) and a caption ending in ``:`` whose list it introduces are left to the report
    itself, which the README links."""
    blocks = [block for block in body.split("\n\n") if block.strip()]
    following = [*blocks[1:], ""]
    kept = [
        block for block, after in zip(blocks, following, strict=True) if not _is_prose(block, after)
    ]
    return "\n\n".join(kept)


def _is_prose(block: str, following: str) -> bool:
    if block.startswith(("#", "|", "![")):
        return False
    if block.startswith("- ") or len(block) > CAPTION_MAX_CHARS:
        return True
    return block.rstrip().endswith(":") and not following.startswith("|")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.run", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (< 10 minutes)")
    parser.add_argument("--only", nargs="+", choices=ORDER, metavar="NAME", help="these only")
    parser.add_argument("--readme", action="store_true", help="only rebuild bench/README.md")
    parser.add_argument("--list", action="store_true", help="list the benchmarks")
    parser.add_argument("--timeout-s", type=float, help="stop one benchmark after this long")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="results folder (README only for the default)"
    )
    args = parser.parse_args(argv)
    if args.list:
        for bench in BENCHMARKS:
            mode = "" if bench.in_quick else "  (full runs and --only)"
            print(f"{bench.name:20} {bench.summary}{mode}")
        return 0
    outcomes: list[dict[str, Any]] = []
    if not args.readme:
        selected = [
            b
            for b in BENCHMARKS
            if (b.name in args.only if args.only else b.in_quick or not args.quick)
        ]
        timeout_s = args.timeout_s or (600 if args.quick else 3600)
        started = time.monotonic()
        outcomes = run_benchmarks(selected, args.quick, timeout_s, args.out)
        print(f"\nbench: {len(outcomes)} benchmark(s) in {time.monotonic() - started:.0f} s")
        for outcome in outcomes:
            print(
                f"  {outcome['name']:20} exit {outcome['exit_code']:3}  {outcome['wall_s']:.0f} s"
            )
    if args.out.resolve() == RESULTS.resolve():
        README.write_text(build_readme())
        print(f"bench: wrote {README.relative_to(REPO)}")
    return 0 if all(o["exit_code"] == 0 for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
