"""Hotword benchmark: recall, false insertions, WER and decoding overhead of trie biasing.

    .venv/bin/python -m bench.hotwords [--quick] [--repeats 9] [--threads 1] [--device cpu]
                                       [--no-redis]

Measures, with Whisper tiny.en (``WhisperRecognizer``) on the speech fixtures:

- **recall** of the 12 rare terms in the 9 hotword sentences, without biasing, with the trie
  (all 12 terms loaded), with a hotword prompt only and with trie + prompt, plus a few
  neighbouring bias weights (sensitivity of the defaults);
- **false insertions** on unrelated speech (every fixture utterance, noisy copy and hotword
  negative, i.e. no term spoken) with 12, 100 and 1,000 phrases loaded: a phrase word that
  appears in the hypothesis but not in the reference;
- **WER** (``pipeline.evaluation.wer``) on the 12 regular utterances with 0 / 100 / 1,000
  phrases;
- **decoding time** of a batch with 0, 10, 100 and 1,000 phrases: median of ``--repeats``
  interleaved runs, as ratios to no biasing; and the cost of one bias call per step;
- **live update latency** (unless ``--no-redis`` or Redis is unreachable): ``HotwordStore.add``
  → a running ``HotwordRegistry`` serves the new list, median and max.

Writes ``bench/results/hotwords.json`` and ``bench/results/hotwords.md`` (``bench.common``).
``--quick`` skips the bias-weight grid.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import soundfile
import torch

from bench.common import FIXTURES, Target, bench_parser, write_results
from pipeline.asr.recognizer import Recognition, RecognitionRequest, TokenBias
from pipeline.asr.whisper_recognizer import WhisperRecognizer, WhisperSettings
from pipeline.evaluation import WordErrors, normalize_words, word_errors
from pipeline.hotwords import (
    BiasWeights,
    HotwordCatalog,
    HotwordKeys,
    HotwordRegistry,
    HotwordStore,
    ListRef,
    RegistryConfig,
    TokenTrie,
    TrieBias,
    connect,
    uniform_prior,
)
from pipeline.settings import load_settings

# Realistic tenant vocabulary besides the 12 fixture terms: people's names, products, drugs,
# vendors. None of them is spoken in the fixtures.
EXTRA_PHRASES = (
    "Siobhan",
    "Aoife",
    "Caoimhe",
    "Oisin",
    "Padraig",
    "Ruairi",
    "Tadhg",
    "Grainne",
    "Eoghan",
    "Ciaran",
    "Xiomara",
    "Anoushka",
    "Chiamaka",
    "Oluwaseun",
    "Ngozi",
    "Adebayo",
    "Thandiwe",
    "Nkechi",
    "Bartholomew",
    "Przemyslaw",
    "Wojciech",
    "Zbigniew",
    "Katarzyna",
    "Szymon",
    "Bjorn",
    "Saanvi",
    "Aarav",
    "Ishaan",
    "Tran",
    "Phuong",
    "Huynh",
    "Xiaoming",
    "Zhiwei",
    "Yevgeny",
    "Svetlana",
    "Dmitri",
    "Salesforce",
    "Zoho",
    "Freshdesk",
    "Okta",
    "Grafana",
    "Terraform",
    "Ansible",
    "Jenkins",
    "Postgres",
    "Datadog",
    "PagerDuty",
    "Twilio",
    "Genesys",
    "Verizon",
    "Comcast",
    "Vodafone",
    "Telstra",
    "Lipitor",
    "Humira",
    "Eliquis",
    "Jardiance",
    "Trulicity",
    "Entresto",
    "Dupixent",
    "Keytruda",
    "Wegovy",
    "Mounjaro",
    "Rybelsus",
    "Farxiga",
    "Januvia",
    "Synthroid",
    "Xeljanz",
    "Otezla",
    "Skyrizi",
    "Rinvoq",
    "Zepbound",
    "QuickBooks",
    "Xero",
    "Shopify",
    "Zappos",
    "Wayfair",
    "Etsy",
    "Lenovo",
    "Huawei",
    "Xiaomi",
    "Peloton",
    "Roomba",
    "Dyson",
    "Nespresso",
    "Vitamix",
    "Azure DevOps",
    "Xfinity Flex",
)

BIAS_GRID = ((4.0, 6.0), (5.0, 7.0), (6.0, 8.0), (5.0, 8.0), (4.0, 7.0))


@dataclass(frozen=True, slots=True)
class Clip:
    id: str
    text: str
    audio: npt.NDArray[np.float32]
    spoken: tuple[str, ...]


def load_clips(kinds: set[str]) -> list[Clip]:
    files = json.loads((FIXTURES / "manifest.json").read_text())["files"]
    clips = []
    for record in files:
        if record["kind"] not in kinds or record["sample_rate_hz"] != 16000:
            continue
        samples, _ = soundfile.read(str(FIXTURES / record["path"]), dtype="float32")
        clips.append(
            Clip(
                record["id"],
                record["text"],
                np.ascontiguousarray(samples),
                tuple(record.get("hotwords_present", ())),
            )
        )
    return clips


def fixture_terms() -> list[str]:
    files = json.loads((FIXTURES / "manifest.json").read_text())["files"]
    return list(next(f for f in files if f["kind"] == "hotword_negative")["hotwords"])


def synthetic_phrases(count: int, seed: int = 0) -> list[str]:
    """Pronounceable made-up names (some two-word), deterministic for a seed."""
    rng = random.Random(seed)
    onsets = [*"bcdfghjklmnprstvz", "br", "cr", "dr", "gr", "kr", "pr", "tr", "st", "sh", "ch"]
    vowels = [*"aeiou", "ai", "ei", "ou", "ia"]
    codas = ["", "", "n", "r", "s", "x", "k", "l", "m"]
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        words = []
        for _ in range(1 if rng.random() < 0.8 else 2):
            syllables = rng.randint(2, 4)
            word = "".join(
                rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                for _ in range(syllables)
            )
            words.append(word.capitalize())
        phrase = " ".join(words)
        if phrase not in seen:
            seen.add(phrase)
            out.append(phrase)
    return out


def make_bias(
    recognizer: WhisperRecognizer,
    phrases: Sequence[str],
    weights: BiasWeights | None = None,
    prior: Callable[[int], float] | None = None,
) -> TrieBias:
    trie = TokenTrie.from_phrases([(p, 1.0) for p in phrases], recognizer.model.tokenizer)
    return TrieBias(trie, weights, prior)


def recognize(
    recognizer: WhisperRecognizer,
    clips: Sequence[Clip],
    bias: TokenBias | None = None,
    prompt: str = "",
    batch: int = 8,
) -> list[Recognition]:
    out: list[Recognition] = []
    for first in range(0, len(clips), batch):
        out.extend(
            recognizer.recognize(
                [
                    RecognitionRequest(c.audio, bias=bias, prompt=prompt)
                    for c in clips[first : first + batch]
                ]
            )
        )
    return out


def term_hits(clips: Sequence[Clip], results: Sequence[Recognition]) -> dict[str, Any]:
    spoken = hits = 0
    missed = []
    for clip, result in zip(clips, results, strict=True):
        words = set(normalize_words(result.text))
        for term in clip.spoken:
            spoken += 1
            if term.lower() in words:
                hits += 1
            else:
                missed.append(term)
    return {
        "spoken": spoken,
        "found": hits,
        "recall": hits / spoken if spoken else 0.0,
        "missed": missed,
    }


def false_insertions(
    clips: Sequence[Clip], results: Sequence[Recognition], phrases: Sequence[str]
) -> dict[str, Any]:
    """Phrase words in a hypothesis that its reference does not have (any loaded phrase)."""
    vocabulary = {w for p in phrases for w in normalize_words(p)}
    inserted: list[str] = []
    words_total = 0
    for clip, result in zip(clips, results, strict=True):
        reference = set(normalize_words(clip.text))
        hypothesis = normalize_words(result.text)
        words_total += len(hypothesis)
        inserted.extend(
            f"{clip.id}:{w}" for w in hypothesis if w in vocabulary and w not in reference
        )
    return {
        "utterances": len(clips),
        "hypothesis_words": words_total,
        "false_insertions": len(inserted),
        "rate_per_utterance": len(inserted) / len(clips) if clips else 0.0,
        "examples": inserted[:10],
    }


def wer(clips: Sequence[Clip], results: Sequence[Recognition]) -> dict[str, Any]:
    total = WordErrors()
    for clip, result in zip(clips, results, strict=True):
        total = total + word_errors(clip.text, result.text)
    return {
        "wer": total.wer,
        "errors": total.errors,
        "reference_words": total.reference_words,
        "substitutions": total.substitutions,
        "deletions": total.deletions,
        "insertions": total.insertions,
    }


def timed_medians(
    runs: dict[str, Callable[[], object]], repeats: int
) -> dict[str, dict[str, float]]:
    """Wall and process-CPU medians of each run, interleaved round-robin (load drift hits all
    alike). On a shared machine the CPU time of this process is the steadier of the two."""
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():  # warm-up (caches, allocator)
        run()
    for _ in range(repeats):
        for name, run in runs.items():
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            run()
            cpu[name].append(time.process_time() - cpu_start)
            wall[name].append(time.perf_counter() - wall_start)
    return {
        name: {
            "wall_median_s": statistics.median(wall[name]),
            "wall_min_s": min(wall[name]),
            "cpu_median_s": statistics.median(cpu[name]),
            "cpu_min_s": min(cpu[name]),
        }
        for name in runs
    }


def step_overhead(
    recognizer: WhisperRecognizer, phrases: Sequence[str], prefixes: Sequence[list[int]]
) -> dict[str, float]:
    """Per decoding step and item: the bias call, and the bias call plus what the decoder does
    with its answer (``torch.tensor`` of ids and values, ``index_add_`` into a logits row)."""
    bias = make_bias(recognizer, phrases)
    logits = torch.zeros(recognizer.model.dims.n_vocab)
    rounds = 20
    sizes = 0
    start = time.perf_counter()
    for _ in range(rounds):
        for prefix in prefixes:
            sizes += len(bias(prefix))
    call_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(rounds):
        for prefix in prefixes:
            bonus = bias(prefix)
            if bonus:
                ids = torch.tensor(list(bonus.keys()), dtype=torch.long)
                values = torch.tensor(list(bonus.values()), dtype=logits.dtype)
                logits.index_add_(0, ids, values)
    applied_s = time.perf_counter() - start
    calls = rounds * len(prefixes)
    return {
        "bias_call_us": 1e6 * call_s / calls,
        "bias_applied_us": 1e6 * applied_s / calls,
        "mean_bonus_entries": sizes / calls,
    }


def update_latency(tokenizer: Any, samples: int) -> dict[str, Any]:
    """Store.add → the registry serves the new phrase; over a real Redis."""
    settings = load_settings()
    prefix = f"bench-{uuid.uuid4().hex[:8]}:hw"
    client = connect(settings.redis.url)
    store = HotwordStore(client, HotwordKeys(prefix))
    registry = HotwordRegistry(store, HotwordCatalog(tokenizer), RegistryConfig())
    latencies = []
    try:
        client.ping()
        registry.start()
        if not registry.wait_loaded(10):
            return {"skipped": "registry did not load"}
        for i in range(samples):
            phrase = f"Term{i}"
            start = time.perf_counter()
            store.add(ListRef("bench", "call"), [phrase])
            while phrase not in {e.phrase for e in registry.entries_for("bench", "call")}:
                if time.perf_counter() - start > 10:
                    return {"skipped": f"update {i} not seen within 10 s"}
                time.sleep(0.001)
            latencies.append(time.perf_counter() - start)
    except Exception as error:  # a benchmark without Redis still reports the rest
        return {"skipped": f"Redis unavailable: {error}"}
    finally:
        registry.stop()
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()
    return {
        "samples": len(latencies),
        "median_ms": 1000 * statistics.median(latencies),
        "max_ms": 1000 * max(latencies),
        "poll_interval_ms": 1000 * RegistryConfig().poll_interval_s,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    recognizer = WhisperRecognizer(WhisperSettings(device=args.device))
    terms = fixture_terms()
    phrases_100 = terms + [p for p in EXTRA_PHRASES if p not in terms][: 100 - len(terms)]
    assert len(phrases_100) == 100
    phrases_1000 = phrases_100 + synthetic_phrases(900)
    phrases_10 = phrases_100[:10]

    hot = load_clips({"hotword"})
    negatives = load_clips({"hotword_negative"}) + [
        c
        for c in load_clips({"utterance"})
        if c.id in {"utt02_billing", "utt06_refund", "utt08_cancel"}
    ]
    utterances = load_clips({"utterance"})
    unrelated = utterances + load_clips({"noisy", "hotword_negative"})

    report: dict[str, Any] = {
        "model": recognizer.model_id,
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "defaults": {
            "start_bonus": BiasWeights().start_bonus,
            "continue_bonus": BiasWeights().continue_bonus,
        },
    }
    hot_plain = recognize(recognizer, hot)
    trie_all = make_bias(recognizer, terms)
    hot_trie = recognize(recognizer, hot, trie_all)
    prompt = ", ".join(terms)
    hot_prompt = recognize(recognizer, hot, prompt=prompt)
    hot_both = recognize(recognizer, hot, trie_all, prompt=prompt)
    neg_plain = recognize(recognizer, negatives)
    neg_trie = recognize(recognizer, negatives, trie_all)
    neg_prompt = recognize(recognizer, negatives, prompt=prompt)
    neg_both = recognize(recognizer, negatives, trie_all, prompt=prompt)
    report["recall"] = {
        "none": term_hits(hot, hot_plain),
        "trie": term_hits(hot, hot_trie),
        "prompt": term_hits(hot, hot_prompt),
        "trie_and_prompt": term_hits(hot, hot_both),
    }
    report["negatives_12_terms"] = {
        "none": false_insertions(negatives, neg_plain, terms),
        "trie": false_insertions(negatives, neg_trie, terms),
        "prompt": false_insertions(negatives, neg_prompt, terms),
        "trie_and_prompt": false_insertions(negatives, neg_both, terms),
    }
    report["hotword_sentences"] = [
        {"id": c.id, "reference": c.text, "none": a.text, "trie": b.text, "prompt": p.text}
        for c, a, b, p in zip(hot, hot_plain, hot_trie, hot_prompt, strict=True)
    ]
    report["hotword_sentence_wer"] = {
        "none": wer(hot, hot_plain),
        "trie": wer(hot, hot_trie),
        "prompt": wer(hot, hot_prompt),
    }

    if not args.quick:
        grid = []
        for start_bonus, continue_bonus in BIAS_GRID:
            weights = BiasWeights(start_bonus, continue_bonus)
            bias = make_bias(recognizer, terms, weights)
            hits = term_hits(hot, recognize(recognizer, hot, bias))
            inserted = false_insertions(negatives, recognize(recognizer, negatives, bias), terms)
            grid.append(
                {
                    "start_bonus": start_bonus,
                    "continue_bonus": continue_bonus,
                    "found": hits["found"],
                    "missed": hits["missed"],
                    "false_insertions": inserted["false_insertions"],
                }
            )
        report["weights_grid"] = grid

    unrelated_plain = recognize(recognizer, unrelated)
    bias_100 = make_bias(recognizer, phrases_100)
    bias_1000 = make_bias(recognizer, phrases_1000)
    hot_100 = recognize(recognizer, hot, bias_100)
    report["recall_100_loaded"] = term_hits(hot, hot_100)
    report["hotword_sentence_wer"]["trie_100_loaded"] = wer(hot, hot_100)
    unrelated_100 = recognize(recognizer, unrelated, bias_100)
    unrelated_1000 = recognize(recognizer, unrelated, bias_1000)
    report["false_insertions_unrelated"] = {
        "none": false_insertions(unrelated, unrelated_plain, phrases_1000),
        "100_phrases": false_insertions(unrelated, unrelated_100, phrases_100),
        "1000_phrases": false_insertions(unrelated, unrelated_1000, phrases_1000),
    }
    by_id = {c.id: i for i, c in enumerate(unrelated)}
    pick = [by_id[c.id] for c in utterances]
    report["utterance_wer"] = {
        "none": wer(utterances, [unrelated_plain[i] for i in pick]),
        "100_phrases": wer(utterances, [unrelated_100[i] for i in pick]),
        "1000_phrases": wer(utterances, [unrelated_1000[i] for i in pick]),
    }
    # The same trie without the start prior (every first token trusted alike).
    flat_terms = make_bias(recognizer, terms, prior=uniform_prior)
    flat_100 = make_bias(recognizer, phrases_100, prior=uniform_prior)
    unrelated_flat = recognize(recognizer, unrelated, flat_100)
    report["flat_prior"] = {
        "recall": term_hits(hot, recognize(recognizer, hot, flat_terms)),
        "false_insertions_100_phrases": false_insertions(unrelated, unrelated_flat, phrases_100),
        "utterance_wer_100_phrases": wer(utterances, [unrelated_flat[i] for i in pick]),
    }
    report["utterance_wer"]["delta_points_100"] = 100 * (
        report["utterance_wer"]["100_phrases"]["wer"] - report["utterance_wer"]["none"]["wer"]
    )

    build_start = time.perf_counter()
    make_bias(recognizer, synthetic_phrases(1000, seed=1))
    report["trie_build_ms_1000_phrases"] = 1000 * (time.perf_counter() - build_start)
    biases: dict[str, TokenBias | None] = {
        "0": None,
        "10": make_bias(recognizer, phrases_10),
        "100": bias_100,
        "1000": bias_1000,
    }
    timing_batch = utterances[: args.batch]

    def decode_batch(bias: TokenBias | None) -> Callable[[], object]:
        return lambda: recognizer.recognize(
            [RecognitionRequest(c.audio, bias=bias) for c in timing_batch]
        )

    runs = {name: decode_batch(bias) for name, bias in biases.items()}
    medians = timed_medians(runs, args.repeats)
    report["decode_time"] = {
        "batch": len(timing_batch),
        "repeats": args.repeats,
        "runs": medians,
        "wall_ratio_to_none": {
            name: m["wall_median_s"] / medians["0"]["wall_median_s"] for name, m in medians.items()
        },
        "cpu_ratio_to_none": {
            name: m["cpu_median_s"] / medians["0"]["cpu_median_s"] for name, m in medians.items()
        },
        "cpu_min_ratio_to_none": {
            name: m["cpu_min_s"] / medians["0"]["cpu_min_s"] for name, m in medians.items()
        },
    }
    # Load-independent view: the per-step cost of biasing, times the steps of these decodes,
    # against the CPU time of an unbiased decode of the same batch.
    tokenizer = recognizer.model.tokenizer
    prefixes: list[list[int]] = []
    for result in unrelated_plain[: len(timing_batch)]:
        tokens = tokenizer.encode(" " + result.text.strip())
        prefixes.extend(tokens[:i] for i in range(len(tokens) + 1))
    steps = len(prefixes)
    overhead = {}
    for name, phrases in (("10", phrases_10), ("100", phrases_100), ("1000", phrases_1000)):
        cost = step_overhead(recognizer, phrases, prefixes)
        cost["estimated_ratio"] = (
            1 + steps * cost["bias_applied_us"] / 1e6 / (medians["0"]["cpu_median_s"])
        )
        overhead[name] = cost
    report["step_overhead"] = {"steps_in_batch": steps, "by_phrases": overhead}
    report["update_latency"] = (
        {"skipped": "--no-redis"}
        if args.no_redis
        else update_latency(recognizer.model.tokenizer, 20)
    )
    return report


def markdown(report: dict[str, Any]) -> str:
    recall = report["recall"]
    neg = report["negatives_12_terms"]
    fi = report["false_insertions_unrelated"]
    uw = report["utterance_wer"]
    dt = report["decode_time"]
    lines = [
        f"# Hotword biasing — {report['model']} on {report['device']}",
        "",
        f"Bias weights: start {report['defaults']['start_bonus']}, continue "
        f"{report['defaults']['continue_bonus']} (× boost 1.0). Generated by `bench/hotwords.py`.",
        "",
        "| mechanism | recall (12 terms, 9 sentences) | false insertions (5 negatives) | missed |",
        "| --- | --- | --- | --- |",
    ]
    for name in ("none", "trie", "prompt", "trie_and_prompt"):
        lines.append(
            f"| {name} | {recall[name]['found']}/{recall[name]['spoken']} "
            f"({100 * recall[name]['recall']:.0f} %) | {neg[name]['false_insertions']} | "
            f"{', '.join(recall[name]['missed']) or '—'} |"
        )
    r100 = report["recall_100_loaded"]
    hw = report["hotword_sentence_wer"]
    lines += [
        "",
        f"With the 12 terms among 100 phrases loaded, recall is {r100['found']}/{r100['spoken']} "
        f"(missed: {', '.join(r100['missed']) or 'none'}): phrases that share first tokens "
        "compete. WER of the 9 hotword sentences: "
        + ", ".join(f"{name} {100 * v['wer']:.1f} %" for name, v in hw.items())
        + ".",
        "",
        "| phrases loaded | false insertions on unrelated speech | utterance WER |",
        "| --- | --- | --- |",
        *(
            f"| {count} | {fi[key]['false_insertions']} / {fi[key]['utterances']} utt. | "
            f"{100 * uw[key]['wer']:.2f} % |"
            for count, key in (("0", "none"), ("100", "100_phrases"), ("1000", "1000_phrases"))
        ),
        "",
        "Without the start prior (flat start bonus): recall "
        f"{report['flat_prior']['recall']['found']}/12, with 100 phrases "
        f"{report['flat_prior']['false_insertions_100_phrases']['false_insertions']} false "
        f"insertion(s) and utterance WER "
        f"{100 * report['flat_prior']['utterance_wer_100_phrases']['wer']:.2f} %.",
        "",
        f"Decoding time, batch of {dt['batch']}, median of {dt['repeats']} interleaved runs "
        f"(wall and process CPU; {report['torch_threads']} torch threads, shared machine), and "
        "the measured per-step cost of biasing (bias call + applying it to the logits) times the "
        "steps of the batch, as an estimate that no other process's load can skew:",
        "",
        "| phrases | wall s | wall ratio | CPU s | CPU ratio | CPU min ratio | per step µs "
        "| est. ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, run_stats in dt["runs"].items():
        step = report["step_overhead"]["by_phrases"].get(name)
        lines.append(
            f"| {name} | {run_stats['wall_median_s']:.3f} | {dt['wall_ratio_to_none'][name]:.3f} | "
            f"{run_stats['cpu_median_s']:.3f} | {dt['cpu_ratio_to_none'][name]:.3f} | "
            f"{dt['cpu_min_ratio_to_none'][name]:.3f} | "
            + (
                "— | — |"
                if step is None
                else f"{step['bias_applied_us']:.1f} | {step['estimated_ratio']:.3f} |"
            )
        )
    if "weights_grid" in report:
        lines += [
            "",
            "| start | continue | found | false insertions | missed |",
            "| --- | --- | --- | --- | --- |",
        ]
        for row in report["weights_grid"]:
            lines.append(
                f"| {row['start_bonus']} | {row['continue_bonus']} | {row['found']}/12 | "
                f"{row['false_insertions']} | {', '.join(row['missed']) or '—'} |"
            )
    latency = report["update_latency"]
    lines += [""]
    if "skipped" in latency:
        lines.append(f"Live update latency: skipped ({latency['skipped']}).")
    else:
        lines.append(
            f"Live update latency (store → registry, {latency['samples']} updates): median "
            f"{latency['median_ms']:.0f} ms, max {latency['max_ms']:.0f} ms."
        )
    return "\n".join(lines)


def targets(report: dict[str, Any]) -> list[Target]:
    return [
        Target(
            "recall of the 12 terms with the trie",
            report["recall"]["trie"]["recall"],
            0.9,
            "",
            higher_is_better=True,
        ),
        Target(
            "false insertions on the fixtures (12 terms on negatives; 100 phrases on all "
            "unrelated speech)",
            report["negatives_12_terms"]["trie"]["false_insertions"]
            + report["false_insertions_unrelated"]["100_phrases"]["false_insertions"],
            0,
            "",
        ),
        Target(
            "utterance WER change with 100 phrases",
            report["utterance_wer"]["delta_points_100"],
            0.5,
            "points",
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("hotwords", (__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="timed runs per phrase count")
    parser.add_argument("--batch", type=int, default=4, help="utterances per timed decode")
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    parser.add_argument("--no-redis", action="store_true", help="skip the live-update latency")
    args = parser.parse_args(argv)
    started_s = time.monotonic()
    report = run(args)
    text = markdown(report)
    write_results(
        "hotwords",
        quick=args.quick,
        config={
            "device": args.device,
            "threads": args.threads,
            "repeats": args.repeats,
            "batch": args.batch,
            "weights": report["defaults"],
        },
        results=report,
        markdown=text,
        targets=targets(report),
        started_s=started_s,
        out=args.out,
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
