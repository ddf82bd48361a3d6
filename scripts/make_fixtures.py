#!/usr/bin/env python3
"""Generate Streamscribe's speech fixtures under ``tests/fixtures/``.

Every test and benchmark that needs real speech with a KNOWN reference transcript reads the files
this script writes. The speech is synthesized with Debian text-to-speech voices from fixed text
lists, so the reference text is exact by construction.

Contract:
    * Deterministic: fixed texts, fixed voices, fixed seeds for every noise source, sox dither off.
      Re-running on the same machine reproduces the same bytes (``sha256`` in the manifest).
    * Idempotent: the managed sub-folders are emptied and rewritten on every run; nothing outside
      the output folder is touched except a private temporary folder.
    * No heavy dependencies: Python's standard library plus the ``sox`` command line. numpy and
      soundfile are not needed to generate the fixtures (tests read them with soundfile).

Output (see ``tests/fixtures/README.md`` for the format of ``manifest.json`` and ``refs.tsv``):
    utterances/  telephone/  noisy/  calls/  pauses/  nonspeech/  hotwords/  repeats/
    manifest.json  refs.tsv

Usage:
    python scripts/make_fixtures.py            # regenerate and verify tests/fixtures
    python scripts/make_fixtures.py --check    # verify the committed files against the manifest
    python scripts/make_fixtures.py --out DIR  # write somewhere else
"""

from __future__ import annotations

import argparse
import array
import hashlib
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "tests" / "fixtures"
MANAGED_DIRS = (
    "utterances",
    "telephone",
    "noisy",
    "calls",
    "pauses",
    "nonspeech",
    "hotwords",
    "repeats",
    "accuracy",
)
MANIFEST_SCHEMA = 1

SAMPLE_RATE_HZ = 16_000
TELEPHONE_RATE_HZ = 8_000
TELEPHONE_BAND_HZ = (300, 3400)
FULL_SCALE = 32767

SPEECH_RMS_DBFS = -20.0
"""Level every synthesized utterance is normalized to, measured over its speech span."""
SPEECH_PEAK_DBFS = -3.0
"""Peak ceiling after normalization; leaves headroom for band-limiting and noise mixing."""
ENERGY_FRAME_MS = 10
ENERGY_THRESHOLD_DB = 35.0
"""A 10 ms frame is speech when its RMS is within this many dB of the loudest frame."""
EDGE_FADE_MS = 5
ENDPOINT_SILENCE_MS = 800
"""The worker's default endpoint rule; the pause fixtures sit on either side of it."""

DISCLOSURE = "This call may be recorded for quality and training purposes."
FORBIDDEN_PHRASE = "that's not my problem"


class FixtureError(Exception):
    """A tool is missing or failed; the message is one line meant for the user."""


# ---------------------------------------------------------------------------------------------
# Tools and voices
# ---------------------------------------------------------------------------------------------

REQUIRED_COMMANDS = {
    "sox": "sox",
    "soxi": "sox",
    "espeak-ng": "espeak-ng",
    "festival": "festival",
    "text2wave": "festival",
    "flite": "flite",
}
FESTIVAL_VOICE_PACKAGES = {
    "cmu_us_slt_arctic_hts": "festvox-us-slt-hts",
    "kal_diphone": "festvox-kallpc16k",
}
FLITE_VOICES = ("slt", "rms", "awb")


@dataclass(frozen=True, slots=True)
class Voice:
    """One TTS voice. ``engine`` is ``festival``, ``flite`` or ``espeak-ng``."""

    engine: str
    name: str

    @property
    def label(self) -> str:
        return f"{self.engine}:{self.name}"

    @property
    def difficulty(self) -> str:
        """``hard`` for voices the whisper tiny.en model is measured to struggle with."""
        return "hard" if self.engine == "espeak-ng" else "standard"


SLT = Voice("festival", "cmu_us_slt_arctic_hts")
KAL = Voice("festival", "kal_diphone")
FLITE_SLT = Voice("flite", "slt")
FLITE_RMS = Voice("flite", "rms")
FLITE_AWB = Voice("flite", "awb")
ESPEAK_US = Voice("espeak-ng", "en-us")
ESPEAK_GB = Voice("espeak-ng", "en-gb-x-rp")

FESTIVAL_LEXICON = {
    "niamh": "((n iy v) 1)",
    "xarelto": "((z ax) 0) ((r eh l) 1) ((t ow) 0)",
    "keycloak": "((k iy) 1) ((k l ow k) 1)",
    "nguyen": "((n ax) 0) ((w ih n) 1)",
    "zyrtec": "((z er) 1) ((t eh k) 0)",
    "kubernetes": "((k uw) 1) ((b er) 0) ((n eh) 1) ((t iy z) 0)",
    "xfinity": "((eh k s) 1) ((f ih) 1) ((n ih) 0) ((t iy) 0)",
    "quixotron": "((k w ih k) 1) ((s ow) 0) ((t r aa n) 1)",
    "ozempic": "((ow) 0) ((z eh m) 1) ((p ih k) 0)",
    "saoirse": "((s er) 1) ((sh ax) 0)",
    "okonkwo": "((ow) 0) ((k ao ng) 1) ((k w ow) 0)",
    "zendesk": "((z eh n) 1) ((d eh s k) 1)",
}
"""Pronunciations for rare terms Festival's CMU lexicon gets wrong, so the audio says the word."""


def run_tool(args: Sequence[str], stdin: bytes | None = None) -> bytes:
    """Run a command, return its stdout; raise FixtureError with its stderr on failure."""
    result = subprocess.run(list(args), input=stdin, capture_output=True, check=False)
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        raise FixtureError(f"{args[0]} failed ({result.returncode}): {' '.join(detail[-2:])}")
    return result.stdout


def festival_has_voice(voice: str) -> bool:
    probe = subprocess.run(["festival", "--batch", f"(voice_{voice})"], capture_output=True)
    return probe.returncode == 0


def missing_packages() -> dict[str, str]:
    """Return ``{debian package: what is missing}`` for every tool or voice not installed."""
    missing: dict[str, str] = {}
    for command, package in REQUIRED_COMMANDS.items():
        if shutil.which(command) is None:
            missing.setdefault(package, f"command `{command}`")
    if "sox" not in missing and " flac " not in run_tool(["sox", "-h"]).decode() + " ":
        missing["libsox-fmt-base"] = "sox FLAC support"
    for voice, package in FESTIVAL_VOICE_PACKAGES.items():
        if "festival" in missing or not festival_has_voice(voice):
            missing[package] = f"festival voice `voice_{voice}`"
    if "flite" not in missing:
        listed = run_tool(["flite", "-lv"]).decode().split()
        for voice in FLITE_VOICES:
            if voice not in listed:
                missing.setdefault("flite", f"flite voice `{voice}`")
    return missing


def check_dependencies() -> None:
    """Raise FixtureError naming every missing Debian package, or return quietly."""
    missing = missing_packages()
    if missing:
        what = "; ".join(f"{pkg} (for {why})" for pkg, why in sorted(missing.items()))
        raise FixtureError(
            f"missing Debian packages: {what}. "
            f"Install with: sudo apt-get install {' '.join(sorted(missing))}"
        )


def tool_versions() -> dict[str, str]:
    """Each tool's version line, recorded in the manifest for provenance."""
    probes = {
        "sox": ["sox", "--version"],
        "espeak-ng": ["espeak-ng", "--version"],
        "festival": ["festival", "--version"],
        "flite": ["flite", "--version"],
    }
    versions = {}
    for name, args in probes.items():
        out = subprocess.run(args, capture_output=True, check=False)
        lines = (out.stdout or out.stderr).decode(errors="replace").strip().splitlines()
        line = next((x for x in lines if "version" in x.lower()), lines[0] if lines else "unknown")
        versions[name] = " ".join(line.split("Data at:")[0].split())
    return versions


# ---------------------------------------------------------------------------------------------
# Sample buffers (floats in [-1, 1]) and sox I/O
# ---------------------------------------------------------------------------------------------

Samples = list[float]
Entry = dict[str, Any]
"""One manifest record (JSON-bound, so a plain dict)."""


def ms_to_samples(ms: float, rate_hz: int) -> int:
    return round(ms * rate_hz / 1000)


def samples_to_ms(count: int, rate_hz: int) -> int:
    return round(count * 1000 / rate_hz)


def db_to_gain(db: float) -> float:
    return float(10.0 ** (db / 20.0))


def to_dbfs(value: float) -> float:
    return 20.0 * math.log10(value) if value > 0 else -math.inf


def rms(samples: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in samples) / len(samples)) if samples else 0.0


def peak(samples: Iterable[float]) -> float:
    return max((abs(x) for x in samples), default=0.0)


def pcm_from_bytes(raw: bytes) -> array.array[int]:
    """Little-endian signed 16-bit bytes to an int array in native order."""
    pcm = array.array("h")
    pcm.frombytes(raw)
    if sys.byteorder == "big":
        pcm.byteswap()
    return pcm


def pcm_to_bytes(channels: Sequence[Samples]) -> bytes:
    """Interleave float channels into little-endian signed 16-bit bytes (rounded, clipped)."""
    frames = len(channels[0])
    pcm = array.array("h", bytes(2 * frames * len(channels)))
    for index, channel in enumerate(channels):
        stride = len(channels)
        for position, value in enumerate(channel):
            scaled = round(value * FULL_SCALE)
            pcm[position * stride + index] = max(-FULL_SCALE - 1, min(FULL_SCALE, scaled))
    if sys.byteorder == "big":
        pcm.byteswap()
    return pcm.tobytes()


def raw_format(rate_hz: int, channels: int) -> list[str]:
    """sox arguments describing headerless little-endian 16-bit PCM."""
    return ["-t", "raw", "-r", str(rate_hz), "-c", str(channels), "-e", "signed", "-b", "16", "-L"]


def load_channels(path: Path, rate_hz: int | None = None) -> tuple[list[Samples], int]:
    """Decode any sox-readable file to float channels, optionally resampling to ``rate_hz``."""
    source_rate = int(run_tool(["soxi", "-r", str(path)]).decode().strip())
    channels = int(run_tool(["soxi", "-c", str(path)]).decode().strip())
    rate = rate_hz or source_rate
    effects = ["rate", "-v", str(rate)] if rate != source_rate else []
    raw = run_tool(["sox", "-D", str(path), *raw_format(rate, channels), "-", *effects])
    pcm = pcm_from_bytes(raw)
    return [[v / 32768.0 for v in pcm[c::channels]] for c in range(channels)], rate


def process(
    channels: Sequence[Samples], rate_hz: int, out_rate_hz: int, effects: Sequence[str]
) -> list[Samples]:
    """Run float channels through a sox effects chain and return the result as floats."""
    count = len(channels)
    source, sink = [*raw_format(rate_hz, count), "-"], [*raw_format(out_rate_hz, count), "-"]
    raw = run_tool(["sox", "-D", *source, *sink, *effects], stdin=pcm_to_bytes(channels))
    pcm = pcm_from_bytes(raw)
    return [[v / 32768.0 for v in pcm[c::count]] for c in range(count)]


def telephone_band(channels: Sequence[Samples], rate_hz: int) -> list[Samples]:
    """Band-limit to 300–3400 Hz and resample to 8 kHz, like a narrowband phone line."""
    low, high = TELEPHONE_BAND_HZ
    effects = ["sinc", f"{low}-{high}", "rate", "-v", str(TELEPHONE_RATE_HZ)]
    return process(channels, rate_hz, TELEPHONE_RATE_HZ, effects)


def save(
    path: Path, channels: Sequence[Samples], rate_hz: int, encoding: str = "pcm_s16le"
) -> None:
    """Write float channels to ``path``; the suffix picks the container.

    ``.flac``/``.wav`` hold 16-bit PCM (``encoding="mulaw"``/``"alaw"`` makes a G.711 WAV);
    ``.ulaw``/``.alaw`` are headerless G.711 bytes, one byte per sample.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    out_format: list[str] = []
    if path.suffix == ".flac":
        out_format = ["-C", "8"]
    elif path.suffix == ".ulaw":
        out_format = ["-t", "ul"]
    elif path.suffix == ".alaw":
        out_format = ["-t", "al"]
    elif encoding != "pcm_s16le":
        out_format = ["-e", {"mulaw": "mu-law", "alaw": "a-law"}[encoding], "-b", "8"]
    source = [*raw_format(rate_hz, len(channels)), "-"]
    sink = ["--comment", "", *out_format, str(path)]
    run_tool(["sox", "-D", *source, *sink], stdin=pcm_to_bytes(channels))


# ---------------------------------------------------------------------------------------------
# Speech analysis
# ---------------------------------------------------------------------------------------------


def speech_bounds(samples: Sequence[float], rate_hz: int) -> tuple[int, int]:
    """Return ``(first, end)`` sample indices of the energetic region, end exclusive.

    A 10 ms frame counts as speech when its RMS is within ENERGY_THRESHOLD_DB of the loudest
    frame; this trims the leading and trailing silence TTS engines add.
    """
    frame = ms_to_samples(ENERGY_FRAME_MS, rate_hz)
    levels = [rms(samples[i : i + frame]) for i in range(0, len(samples), frame)]
    loudest = max(levels, default=0.0)
    if loudest == 0.0:
        return 0, 0
    floor = loudest * db_to_gain(-ENERGY_THRESHOLD_DB)
    active = [i for i, level in enumerate(levels) if level >= floor]
    return active[0] * frame, min(len(samples), (active[-1] + 1) * frame)


def normalize_speech(samples: Samples, rate_hz: int) -> Samples:
    """Scale so the speech span sits at SPEECH_RMS_DBFS, capped at SPEECH_PEAK_DBFS peak."""
    first, end = speech_bounds(samples, rate_hz)
    gain = db_to_gain(SPEECH_RMS_DBFS) / rms(samples[first:end])
    gain = min(gain, db_to_gain(SPEECH_PEAK_DBFS) / peak(samples))
    return [x * gain for x in samples]


def fade_edges(samples: Samples, rate_hz: int) -> Samples:
    """Apply a short linear fade-in/out so hard-trimmed speech starts and ends without a click."""
    length = min(ms_to_samples(EDGE_FADE_MS, rate_hz), len(samples) // 2)
    faded = list(samples)
    for i in range(length):
        ramp = (i + 1) / (length + 1)
        faded[i] *= ramp
        faded[-1 - i] *= ramp
    return faded


# ---------------------------------------------------------------------------------------------
# Synthesis
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Say:
    """One sentence to synthesize. ``speed`` > 1 speaks faster than the voice's default."""

    text: str
    voice: Voice = SLT
    speed: float = 1.0


@dataclass(slots=True)
class Clip:
    """A synthesized, level-normalized mono clip at 16 kHz with its speech span (samples)."""

    say: Say
    samples: Samples
    speech_first: int
    speech_end: int

    @property
    def speech(self) -> Samples:
        """The speech span alone, hard-trimmed at the energy bounds and faded at the edges."""
        return fade_edges(self.samples[self.speech_first : self.speech_end], SAMPLE_RATE_HZ)


def festival_setup(voice: Voice, speed: float) -> list[str]:
    """Scheme forms that select the voice, add the lexicon and set the speaking rate."""
    forms = [f"(voice_{voice.name})"]
    forms += [
        f'(lex.add.entry \'("{word}" nil ({sylls})))' for word, sylls in FESTIVAL_LEXICON.items()
    ]
    if voice.name.endswith("_hts"):
        rate_option = f'(list (list "-r" {speed}))'
        forms.append(f"(set! hts_engine_params (append hts_engine_params {rate_option}))")
    else:
        forms.append(f"(Parameter.set 'Duration_Stretch {1.0 / speed:.4f})")
    return forms


TTS_COMMANDS = {
    "festival": "text2wave {evals} {text} -o {wav}",
    "flite": "flite -voice {voice} --setf duration_stretch={stretch} -f {text} -o {wav}",
    "espeak-ng": "espeak-ng -v {voice} -s {words_per_minute} -f {text} -w {wav}",
}
"""Command templates; each token is formatted on its own, so paths may contain spaces."""


def tts_command(say: Say, text_file: Path, wav_file: Path) -> list[str]:
    """The command line that renders ``text_file`` to ``wav_file`` with the requested voice."""
    values = {
        "voice": say.voice.name,
        "stretch": f"{1.0 / say.speed:.4f}",
        "words_per_minute": str(round(165 * say.speed)),
        "text": str(text_file),
        "wav": str(wav_file),
    }
    command = []
    for token in TTS_COMMANDS[say.voice.engine].split():
        if token == "{evals}":
            setup = festival_setup(say.voice, say.speed)
            command += [arg for form in setup for arg in ("-eval", form)]
        else:
            command.append(token.format(**values))
    return command


class Synthesizer:
    """Renders ``Say`` requests to normalized 16 kHz clips, caching each distinct request."""

    def __init__(self, work_dir: Path) -> None:
        self._work_dir = work_dir
        self._cache: dict[Say, Clip] = {}

    def __call__(self, say: Say) -> Clip:
        if say not in self._cache:
            self._cache[say] = self._render(say)
        return self._cache[say]

    def _render(self, say: Say) -> Clip:
        stem = self._work_dir / f"tts_{len(self._cache):03d}"
        text_file, wav_file = stem.with_suffix(".txt"), stem.with_suffix(".wav")
        text_file.write_text(say.text + "\n", encoding="utf-8")
        run_tool(tts_command(say, text_file, wav_file))
        if not wav_file.exists():
            raise FixtureError(f"{say.voice.label} produced no audio for: {say.text!r}")
        (mono, *_), _ = load_channels(wav_file, SAMPLE_RATE_HZ)
        samples = normalize_speech(mono, SAMPLE_RATE_HZ)
        first, end = speech_bounds(samples, SAMPLE_RATE_HZ)
        return Clip(say, samples, first, end)


# ---------------------------------------------------------------------------------------------
# Manifest helpers
# ---------------------------------------------------------------------------------------------


CONTAINERS = {".flac": "flac", ".wav": "wav"}


@dataclass(slots=True)
class Build:
    """Everything a section builder needs: where to write, a synthesizer, the manifest so far."""

    out_dir: Path
    synth: Synthesizer
    entries: list[Entry] = field(default_factory=list)

    def write(
        self,
        entry: Entry,
        channels: Sequence[Samples],
        rate_hz: int,
        encoding: str = "pcm_s16le",
    ) -> Entry:
        """Save audio at ``entry['path']`` and append the entry with its file facts filled in."""
        path = self.out_dir / entry["path"]
        save(path, channels, rate_hz, encoding)
        entry.update(
            sample_rate_hz=rate_hz,
            channels=len(channels),
            container=CONTAINERS.get(path.suffix, "raw"),
            encoding=encoding,
            duration_ms=samples_to_ms(len(channels[0]), rate_hz),
            num_frames=len(channels[0]),
            bytes=path.stat().st_size,
            sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        )
        self.entries.append(entry)
        return entry


def voice_fields(say: Say) -> Entry:
    return {"voice": say.voice.label, "speed": say.speed, "difficulty": say.voice.difficulty}


def span_fields(first: int, end: int, rate_hz: int) -> dict[str, int]:
    return {
        "speech_start_ms": samples_to_ms(first, rate_hz),
        "speech_end_ms": samples_to_ms(end, rate_hz),
    }


# ---------------------------------------------------------------------------------------------
# 1. utterances/  2. telephone/  3. noisy/
# ---------------------------------------------------------------------------------------------

UTTERANCES: dict[str, Say] = {
    "utt01_account": Say("Hi, I am calling because I cannot access my online account."),
    "utt02_billing": Say("I was charged twice for the same order on my last bill."),
    "utt03_delivery": Say(
        "My package was supposed to arrive on Monday, but it still has not been delivered.", KAL
    ),
    "utt04_appointment": Say(
        "Could I move my appointment to Thursday afternoon instead?", SLT, 0.85
    ),
    "utt05_password": Say("I would like to reset my password, please.", FLITE_SLT),
    "utt06_refund": Say("When will I receive the refund for the jacket I sent back?", SLT, 1.15),
    "utt07_address": Say(
        "I recently moved, so I need to update the address on my account.", KAL, 0.9
    ),
    "utt08_cancel": Say("Please cancel my subscription at the end of this month.", FLITE_RMS),
    "utt09_payment": Say("Can I set up automatic payments from my checking account?"),
    "utt10_internet": Say("The internet has been really slow since yesterday evening.", ESPEAK_US),
    "utt11_hold": Say(
        "Thank you for waiting, I have found your order in our system.", ESPEAK_GB, 0.9
    ),
    "utt12_complaint": Say(
        "I have called three times this week and nobody has fixed the problem.", FLITE_AWB
    ),
}
TELEPHONE_IDS = ("utt01_account", "utt03_delivery", "utt08_cancel", "utt09_payment")
CODEC_ID = "utt09_payment"
NOISY = {  # id: (clean utterance, noise colour, seed)
    "noisy01_billing_white": ("utt02_billing", "white", 301),
    "noisy02_appointment_pink": ("utt04_appointment", "pink", 302),
    "noisy03_address_white": ("utt07_address", "white", 303),
    "noisy04_payment_pink": ("utt09_payment", "pink", 304),
}
NOISY_SNR_DB = 10.0


def utterance_entry(entry_id: str, path: str, kind: str, clip: Clip) -> Entry:
    return {
        "id": entry_id,
        "path": path,
        "kind": kind,
        "text": clip.say.text,
        **voice_fields(clip.say),
    }


def build_utterances(build: Build) -> None:
    """Single 16 kHz utterances, each kept with the TTS engine's own leading/trailing silence."""
    for utt_id, say in UTTERANCES.items():
        clip = build.synth(say)
        entry = utterance_entry(utt_id, f"utterances/{utt_id}.flac", "utterance", clip)
        entry.update(span_fields(clip.speech_first, clip.speech_end, SAMPLE_RATE_HZ))
        build.write(entry, [clip.samples], SAMPLE_RATE_HZ)


def build_telephone(build: Build) -> None:
    """8 kHz band-limited copies, plus G.711 μ-law/A-law encodings of one of them."""
    for utt_id in TELEPHONE_IDS:
        clip = build.synth(UTTERANCES[utt_id])
        (narrow,) = telephone_band([clip.samples], SAMPLE_RATE_HZ)
        entry = utterance_entry(f"tel_{utt_id}", f"telephone/tel_{utt_id}.flac", "telephone", clip)
        entry.update(source_id=utt_id, band_hz=list(TELEPHONE_BAND_HZ))
        entry.update(span_fields(*speech_bounds(narrow, TELEPHONE_RATE_HZ), TELEPHONE_RATE_HZ))
        build.write(entry, [narrow], TELEPHONE_RATE_HZ)
        if utt_id == CODEC_ID:
            build_codec_variants(build, entry, narrow)


def build_codec_variants(build: Build, pcm_entry: Entry, narrow: Samples) -> None:
    """Headerless ``.ulaw``/``.alaw`` bytes and G.711 WAVs of the same 8 kHz signal."""
    variants = (
        ("mulaw", ".ulaw", "raw"),
        ("alaw", ".alaw", "raw"),
        ("mulaw", "_mulaw.wav", "wav"),
        ("alaw", "_alaw.wav", "wav"),
    )
    for encoding, suffix, container in variants:
        stem = f"tel_{pcm_entry['source_id']}"
        entry = {
            **{k: pcm_entry[k] for k in ("text", "voice", "speed", "difficulty", "source_id")},
            "id": f"{stem}_{encoding}_{container}",
            "path": f"telephone/{stem}{suffix}",
            "kind": "telephone_codec",
            "pcm_id": pcm_entry["id"],
            "speech_start_ms": pcm_entry["speech_start_ms"],
            "speech_end_ms": pcm_entry["speech_end_ms"],
        }
        build.write(entry, [narrow], TELEPHONE_RATE_HZ, encoding)


def white_noise(count: int, rng: random.Random) -> Samples:
    return [rng.gauss(0.0, 1.0) for _ in range(count)]


def pink_noise(count: int, rng: random.Random) -> Samples:
    """Pink (1/f) noise from white noise with Paul Kellet's refined filter."""
    poles = (0.99886, 0.99332, 0.96900, 0.86650, 0.55000, -0.7616)
    gains = (0.0555179, 0.0750759, 0.1538520, 0.3104856, 0.5329522, -0.0168980)
    state = [0.0] * 6
    held = 0.0
    out = []
    for white in white_noise(count, rng):
        state = [p * s + g * white for p, s, g in zip(poles, state, gains, strict=True)]
        out.append(sum(state) + held + white * 0.5362)
        held = white * 0.115926
    return out


def brown_noise(count: int, rng: random.Random) -> Samples:
    """Brown (1/f²) noise: leaky integration of white noise."""
    level, out = 0.0, []
    for white in white_noise(count, rng):
        level = 0.998 * level + white
        out.append(level)
    return out


NOISE_GENERATORS: dict[str, Callable[[int, random.Random], Samples]] = {
    "white": white_noise,
    "pink": pink_noise,
    "brown": brown_noise,
}


def scaled_noise(colour: str, count: int, seed: int, rms_target: float) -> Samples:
    """Deterministic noise of one colour scaled to an exact RMS (linear, full scale = 1)."""
    raw = NOISE_GENERATORS[colour](count, random.Random(seed))
    gain = rms_target / rms(raw)
    return [x * gain for x in raw]


def build_noisy(build: Build) -> None:
    """Utterances mixed with white/pink noise at 10 dB SNR.

    SNR = 10·log10(P_speech / P_noise), P_speech being the clean signal's mean power over its
    speech span and P_noise the noise's mean power over the whole file. If the mix would clip,
    speech and noise are scaled together (``mix_gain``), which leaves the SNR unchanged.
    """
    for noisy_id, (utt_id, colour, seed) in NOISY.items():
        clip = build.synth(UTTERANCES[utt_id])
        speech_rms = rms(clip.samples[clip.speech_first : clip.speech_end])
        noise_rms = speech_rms * db_to_gain(-NOISY_SNR_DB)
        noise = scaled_noise(colour, len(clip.samples), seed, noise_rms)
        mixed = [s + n for s, n in zip(clip.samples, noise, strict=True)]
        mix_gain = min(1.0, 0.97 / peak(mixed))
        entry = utterance_entry(noisy_id, f"noisy/{noisy_id}.flac", "noisy", clip)
        entry.update(span_fields(clip.speech_first, clip.speech_end, SAMPLE_RATE_HZ))
        entry.update(
            source_id=utt_id,
            noise=colour,
            noise_seed=seed,
            snr_db=NOISY_SNR_DB,
            mix_gain=round(mix_gain, 6),
        )
        build.write(entry, [[x * mix_gain for x in mixed]], SAMPLE_RATE_HZ)


# ---------------------------------------------------------------------------------------------
# 4. calls/
# ---------------------------------------------------------------------------------------------

AGENT, CUSTOMER = "agent", "customer"
CHANNEL_INDEX = {AGENT: 0, CUSTOMER: 1}
CALL_LEAD_MS = 500
CALL_TAIL_MS = 1000


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn: ``gap_ms`` is silence after the previous turn's speech ends (< 0: talk-over)."""

    speaker: str
    text: str
    gap_ms: int


@dataclass(frozen=True, slots=True)
class CallScript:
    call_id: str
    topic: str
    voices: dict[str, Voice]
    turns: tuple[Turn, ...]
    narrowband_copy: bool = False


def turns(*rows: tuple[str, str, int]) -> tuple[Turn, ...]:
    return tuple(Turn(speaker, text, gap) for speaker, text, gap in rows)


CALLS = (
    CallScript(
        "call01_billing",
        "billing dispute",
        {AGENT: SLT, CUSTOMER: KAL},
        turns(
            (AGENT, f"Brightline Energy, this is Emma. {DISCLOSURE} How can I help?", 0),
            (CUSTOMER, "Hi, my bill is much higher than usual this month.", 700),
            (AGENT, "I am sorry to hear that. Could you confirm the name on the account?", 600),
            (CUSTOMER, "Sure, it is Daniel Brooks.", 500),
            (
                AGENT,
                "Thank you, Daniel. Your last bill was only an estimate, so I will send you "
                "a corrected one this week.",
                1800,
            ),
            (CUSTOMER, "Great, thank you for your help.", 1600),
        ),
    ),
    CallScript(
        "call02_delivery",
        "missed delivery, no recording disclosure",
        {AGENT: SLT, CUSTOMER: FLITE_RMS},
        turns(
            (AGENT, "Good afternoon, you are through to the delivery team. How can I help?", 0),
            (CUSTOMER, "My package was supposed to arrive yesterday, but it never showed up.", 600),
            (AGENT, "I am sorry about that. Can I have your full name, please?", 700),
            (CUSTOMER, "Sure, my name is Sarah Miller.", 500),
            (
                AGENT,
                "Thanks, Sarah. The driver could not find your building, so I have booked "
                "a new delivery for tomorrow morning.",
                2000,
            ),
            (CUSTOMER, "Perfect, thank you so much.", 1500),
        ),
        narrowband_copy=True,
    ),
    CallScript(
        "call03_outage",
        "internet outage, agent uses a forbidden phrase",
        {AGENT: SLT, CUSTOMER: FLITE_SLT},
        turns(
            (AGENT, f"Hello, this is Mark from customer support. {DISCLOSURE}", 0),
            (CUSTOMER, "Hi, my internet has been down for two days and I work from home.", 700),
            (AGENT, "Have you tried restarting your router?", 800),
            (CUSTOMER, "Yes, I have restarted it three times already.", 600),
            (AGENT, f"Well, the outage is in your area, so {FORBIDDEN_PHRASE}.", 1700),
            (CUSTOMER, "Excuse me? Please call me when it is fixed.", 900),
        ),
    ),
    CallScript(
        "call04_appointment",
        "dental appointment with a talk-over",
        {AGENT: SLT, CUSTOMER: KAL},
        turns(
            (AGENT, f"Good morning, Riverside Dental, this is Anna speaking. {DISCLOSURE}", 0),
            (CUSTOMER, "Hi, I would like to see the dentist next week.", 600),
            (AGENT, "Of course. I have an opening on Tuesday afternoon or on Friday morning.", 700),
            (CUSTOMER, "Tuesday afternoon works for me.", -800),
            (AGENT, "Great, you are booked for Tuesday afternoon.", 600),
            (CUSTOMER, "Thank you, see you then.", 1600),
        ),
        narrowband_copy=True,
    ),
)


def place_turns(script: CallScript, synth: Synthesizer) -> tuple[list[Samples], list[Entry]]:
    """Lay each turn's full TTS clip on its channel so speech gaps match ``Turn.gap_ms``.

    Returns the two channels and one record per turn with placed (clip) and speech-only spans.
    """
    rate = SAMPLE_RATE_HZ
    placed: list[tuple[Turn, Clip, int]] = []
    previous_speech_end = ms_to_samples(CALL_LEAD_MS, rate)
    for turn in script.turns:
        clip = synth(Say(turn.text, script.voices[turn.speaker]))
        speech_start = previous_speech_end + ms_to_samples(turn.gap_ms, rate)
        clip_start = speech_start - clip.speech_first
        if clip_start < 0:
            raise FixtureError(f"{script.call_id}: first turn needs a longer lead-in")
        placed.append((turn, clip, clip_start))
        previous_speech_end = max(previous_speech_end, clip_start + clip.speech_end)
    total = max(start + len(clip.samples) for _, clip, start in placed)
    total = max(total, previous_speech_end + ms_to_samples(CALL_TAIL_MS, rate))
    channels: list[Samples] = [[0.0] * total, [0.0] * total]
    records = []
    for turn, clip, start in placed:
        channel = channels[CHANNEL_INDEX[turn.speaker]]
        for offset, value in enumerate(clip.samples):
            channel[start + offset] += value
        records.append(turn_record(turn, clip, start))
    return channels, records


def turn_record(turn: Turn, clip: Clip, clip_start: int) -> Entry:
    rate = SAMPLE_RATE_HZ
    return {
        "speaker": turn.speaker,
        "text": turn.text,
        "start_ms": samples_to_ms(clip_start, rate),
        "end_ms": samples_to_ms(clip_start + len(clip.samples), rate),
        **span_fields(clip_start + clip.speech_first, clip_start + clip.speech_end, rate),
        "gap_before_ms": turn.gap_ms,
        **voice_fields(clip.say),
    }


def overlaps(records: Sequence[Entry]) -> list[dict[str, int]]:
    """Intervals where agent and customer speech spans overlap (talk-over)."""
    found = []
    for a in (r for r in records if r["speaker"] == AGENT):
        for c in (r for r in records if r["speaker"] == CUSTOMER):
            start = max(a["speech_start_ms"], c["speech_start_ms"])
            end = min(a["speech_end_ms"], c["speech_end_ms"])
            if start < end:
                found.append({"start_ms": start, "end_ms": end, "duration_ms": end - start})
    return found


def call_entry(script: CallScript, records: list[Entry]) -> Entry:
    channels = []
    for label, index in CHANNEL_INDEX.items():
        own = [r for r in records if r["speaker"] == label]
        channels.append(
            {
                "index": index,
                "label": label,
                "voice": script.voices[label].label,
                "text": " ".join(r["text"] for r in own),
                "turns": [{k: v for k, v in r.items() if k != "speaker"} for r in own],
            }
        )
    agent_first = next(r for r in records if r["speaker"] == AGENT)
    gaps = [r["gap_before_ms"] for r in records[1:]]
    return {
        "id": script.call_id,
        "path": f"calls/{script.call_id}.flac",
        "kind": "call",
        "topic": script.topic,
        "channel_map": channels,
        "turn_order": [r["speaker"] for r in records],
        "recording_disclosure_in_first_agent_turn": DISCLOSURE in agent_first["text"],
        "forbidden_phrases_present": sorted(
            {FORBIDDEN_PHRASE for r in records if FORBIDDEN_PHRASE in r["text"]}
        ),
        "overlaps": overlaps(records),
        "longest_gap_ms": max(gaps),
    }


def remeasure_speech(records: list[Entry], channels: Sequence[Samples], rate_hz: int) -> None:
    """Recompute each turn's speech span from ``channels`` (placement spans stay as they are).

    Band-limiting removes low-frequency onsets, so an 8 kHz copy's energy bounds can move by a
    few frames relative to the 16 kHz original.
    """
    for record in records:
        channel = channels[CHANNEL_INDEX[record["speaker"]]]
        first = ms_to_samples(record["start_ms"], rate_hz)
        end = ms_to_samples(record["end_ms"], rate_hz)
        speech_first, speech_end = speech_bounds(channel[first:end], rate_hz)
        record.update(span_fields(first + speech_first, first + speech_end, rate_hz))


def build_calls(build: Build) -> None:
    """Stereo calls (left agent, right customer), and 8 kHz band-limited copies of some."""
    for script in CALLS:
        channels, records = place_turns(script, build.synth)
        build.write(call_entry(script, records), channels, SAMPLE_RATE_HZ)
        if script.narrowband_copy:
            narrow = telephone_band(channels, SAMPLE_RATE_HZ)
            remeasure_speech(records, narrow, TELEPHONE_RATE_HZ)
            entry = call_entry(script, records)
            entry.update(
                id=f"{script.call_id}_8k",
                path=f"calls/{script.call_id}_8k.flac",
                source_id=script.call_id,
                band_hz=list(TELEPHONE_BAND_HZ),
            )
            build.write(entry, narrow, TELEPHONE_RATE_HZ)


# ---------------------------------------------------------------------------------------------
# 5. pauses/
# ---------------------------------------------------------------------------------------------

PAUSE_A = Say("I would like to check the status of my order.")
PAUSE_B = Say("It was placed about a week ago.")
PAUSES = {"pause_1000ms_split": 1000, "pause_300ms_nosplit": 300}
PAUSE_LEAD_MS = 500
PAUSE_TAIL_MS = 1500


def build_pauses(build: Build) -> None:
    """Speech A, exactly N ms of digital silence, speech B; both hard-trimmed to their speech.

    1000 ms is safely above the 800 ms endpoint (must split into two finals); 300 ms is below
    it (must stay one final).
    """
    rate = SAMPLE_RATE_HZ
    speech_a, speech_b = build.synth(PAUSE_A).speech, build.synth(PAUSE_B).speech
    for pause_id, silence_ms in PAUSES.items():
        lead = [0.0] * ms_to_samples(PAUSE_LEAD_MS, rate)
        gap = [0.0] * ms_to_samples(silence_ms, rate)
        tail = [0.0] * ms_to_samples(PAUSE_TAIL_MS, rate)
        a_start = len(lead)
        b_start = a_start + len(speech_a) + len(gap)
        segments = [
            {"text": PAUSE_A.text, **span_fields(a_start, a_start + len(speech_a), rate)},
            {"text": PAUSE_B.text, **span_fields(b_start, b_start + len(speech_b), rate)},
        ]
        entry = {
            "id": pause_id,
            "path": f"pauses/{pause_id}.flac",
            "kind": "pause",
            "text": f"{PAUSE_A.text} {PAUSE_B.text}",
            **voice_fields(PAUSE_A),
            "segments": segments,
            "silence_ms": silence_ms,
            "silence_samples": len(gap),
            "endpoint_silence_ms": ENDPOINT_SILENCE_MS,
            "expect_split": silence_ms >= ENDPOINT_SILENCE_MS,
            "lead_silence_ms": PAUSE_LEAD_MS,
            "tail_silence_ms": PAUSE_TAIL_MS,
        }
        build.write(entry, [lead + speech_a + gap + speech_b + tail], rate)


# ---------------------------------------------------------------------------------------------
# 6. nonspeech/
# ---------------------------------------------------------------------------------------------

NONSPEECH_MS = 5000
DTMF_ROWS_HZ = (697, 770, 852, 941)
DTMF_COLS_HZ = (1209, 1336, 1477, 1633)
DTMF_KEYS = ("123A", "456B", "789C", "*0#D")
DTMF_DIGITS = "18005550199#"
DTMF_TONE_MS, DTMF_GAP_MS = 120, 100


def sine(freq_hz: float, count: int, rate_hz: int, amplitude: float) -> Samples:
    step = 2.0 * math.pi * freq_hz / rate_hz
    return [amplitude * math.sin(step * n) for n in range(count)]


def envelope(samples: Samples, rate_hz: int, attack_ms: int) -> Samples:
    """Raised-cosine attack and release so tone edges do not click."""
    ramp = min(ms_to_samples(attack_ms, rate_hz), len(samples) // 2)
    shaped = list(samples)
    for i in range(ramp):
        gain = 0.5 - 0.5 * math.cos(math.pi * (i + 0.5) / ramp)
        shaped[i] *= gain
        shaped[-1 - i] *= gain
    return shaped


def dtmf_tone(key: str, rate_hz: int) -> Samples:
    """One DTMF key: its row and column sines together, 6 dB under full scale each."""
    row = next(i for i, keys in enumerate(DTMF_KEYS) if key in keys)
    col = DTMF_KEYS[row].index(key)
    count = ms_to_samples(DTMF_TONE_MS, rate_hz)
    low = sine(DTMF_ROWS_HZ[row], count, rate_hz, 0.25)
    high = sine(DTMF_COLS_HZ[col], count, rate_hz, 0.25)
    return envelope([a + b for a, b in zip(low, high, strict=True)], rate_hz, 5)


def dtmf_sequence(digits: str, rate_hz: int) -> Samples:
    gap = [0.0] * ms_to_samples(DTMF_GAP_MS, rate_hz)
    out = list(gap) * 3
    for key in digits:
        out += dtmf_tone(key, rate_hz) + gap
    return out + gap * 3


HOLD_CHORDS_HZ = (
    (261.63, 329.63, 392.00),  # C major
    (220.00, 261.63, 329.63),  # A minor
    (174.61, 220.00, 261.63),  # F major
    (196.00, 246.94, 293.66),  # G major
)
HOLD_CHORD_MS = 1500


def hold_music(rate_hz: int) -> Samples:
    """Music-on-hold style loop: sine triads with a soft second harmonic, one per 1.5 s."""
    count = ms_to_samples(HOLD_CHORD_MS, rate_hz)
    out: Samples = []
    for chord in HOLD_CHORDS_HZ:
        mix = [0.0] * count
        for freq in chord:
            for partial, amplitude in ((1, 0.08), (2, 0.025)):
                for n, value in enumerate(sine(freq * partial, count, rate_hz, amplitude)):
                    mix[n] += value
        out += envelope(mix, rate_hz, 60)
    return out


NONSPEECH_NOISES = (  # id, colour, seed, RMS in dBFS
    ("white_noise_low", "white", 601, -50.0),
    ("pink_noise", "pink", 602, -35.0),
    ("brown_noise", "brown", 603, -35.0),
)
NonspeechItem = tuple[str, Samples, int, Entry]


def nonspeech_items() -> Iterator[NonspeechItem]:
    """Yield ``(id, samples, sample rate, manifest extras)`` for each non-speech fixture."""
    rate = SAMPLE_RATE_HZ
    count = ms_to_samples(NONSPEECH_MS, rate)
    yield "silence_digital", [0.0] * count, rate, {"description": "all-zero samples"}
    for item_id, colour, seed, dbfs in NONSPEECH_NOISES:
        noise = scaled_noise(colour, count, seed, db_to_gain(dbfs))
        extra = {"description": f"{colour} noise", "noise_seed": seed, "rms_dbfs": dbfs}
        yield item_id, noise, rate, extra
    chords = {"description": "sine-triad chords C, Am, F, G with a second harmonic"}
    yield "hold_music", hold_music(rate), rate, chords
    dtmf = {
        "description": "DTMF dual tones",
        "digits": DTMF_DIGITS,
        "tone_ms": DTMF_TONE_MS,
        "gap_ms": DTMF_GAP_MS,
    }
    yield "dtmf_digits_8k", dtmf_sequence(DTMF_DIGITS, TELEPHONE_RATE_HZ), TELEPHONE_RATE_HZ, dtmf
    tone = envelope(sine(1000.0, count, rate, 0.25), rate, 10)
    extra = {"description": "1 kHz sine test tone", "frequency_hz": 1000, "peak_dbfs": -12.0}
    yield "tone_1khz", tone, rate, extra


def build_nonspeech(build: Build) -> None:
    """Audio that must produce NO words: silence, noises, hold music, DTMF, a test tone."""
    for item_id, samples, rate, extra in nonspeech_items():
        entry = {
            "id": item_id,
            "path": f"nonspeech/{item_id}.flac",
            "kind": "nonspeech",
            "text": "",
            "expect_words": False,
            **extra,
        }
        build.write(entry, [samples], rate)


# ---------------------------------------------------------------------------------------------
# 7. hotwords/
# ---------------------------------------------------------------------------------------------

HOTWORDS: dict[str, tuple[Say, tuple[str, ...]]] = {
    "hot01_niamh": (
        Say("Hi, my name is Niamh and I will be looking after your order today."),
        ("Niamh",),
    ),
    "hot02_nguyen": (
        Say("Please hold while I transfer you to Nguyen in the billing team."),
        ("Nguyen",),
    ),
    "hot03_zyrtec": (
        Say("I would like a refill of my Zyrtec prescription, please.", KAL),
        ("Zyrtec",),
    ),
    "hot04_xarelto": (
        Say("My doctor switched me from Xarelto to a different blood thinner."),
        ("Xarelto",),
    ),
    "hot05_xfinity": (Say("My Xfinity internet bill went up again this month."), ("Xfinity",)),
    "hot06_quixotron": (
        Say("The Quixotron blender comes with a two year warranty.", KAL),
        ("Quixotron",),
    ),
    "hot07_ozempic": (Say("Is Ozempic covered by my insurance plan?"), ("Ozempic",)),
    "hot08_okonkwo": (
        Say("Please ask Saoirse Okonkwo to call me back about my Zendesk ticket."),
        ("Saoirse", "Okonkwo", "Zendesk"),
    ),
    "hot09_keycloak": (
        Say("We sign in through Keycloak before we open the Kubernetes dashboard."),
        ("Keycloak", "Kubernetes"),
    ),
}
ALL_HOTWORDS = tuple(term for _, terms in HOTWORDS.values() for term in terms)
HOTWORD_NEGATIVES: dict[str, Say] = {
    "hotneg01_raffle": Say("She really hopes to win the raffle at the office party."),
    "hotneg02_allergy": Say("The doctor said my allergies should get better in the spring."),
}
HOTWORD_NEGATIVE_REUSE = ("utt02_billing", "utt06_refund", "utt08_cancel")
"""Plain utterances that double as negatives: they get ``hotwords`` and an empty present list."""


def build_hotwords(build: Build) -> None:
    """Utterances with rare terms, and negatives that contain none of them.

    Every entry that carries ``hotwords`` lists the terms a test should bias toward and, in
    ``hotwords_present``, those actually spoken. Negatives (``hotwords_present`` empty) carry the
    full term list: biasing toward it must not insert any term. Besides the dedicated negatives
    in hotwords/, the utterances named in HOTWORD_NEGATIVE_REUSE get the same fields.
    """
    sections = (
        (HOTWORDS, "hotword"),
        ({neg_id: (say, ()) for neg_id, say in HOTWORD_NEGATIVES.items()}, "hotword_negative"),
    )
    for table, kind in sections:
        for entry_id, (say, terms) in table.items():
            clip = build.synth(say)
            entry = utterance_entry(entry_id, f"hotwords/{entry_id}.flac", kind, clip)
            entry.update(span_fields(clip.speech_first, clip.speech_end, SAMPLE_RATE_HZ))
            entry.update(hotwords=list(terms or ALL_HOTWORDS), hotwords_present=list(terms))
            build.write(entry, [clip.samples], SAMPLE_RATE_HZ)
    for entry in build.entries:
        if entry["id"] in HOTWORD_NEGATIVE_REUSE:
            entry.update(hotwords=list(ALL_HOTWORDS), hotwords_present=[])


# ---------------------------------------------------------------------------------------------
# 8. repeats/
# ---------------------------------------------------------------------------------------------

REPEATS: dict[str, Say] = {
    "rep01_hear": Say("Can you hear me now? Can you hear me now? Can you hear me now? Hello?"),
    "rep02_hold": Say(
        "Please hold on a moment while I check that for you."
        " Please hold on a moment while I check that for you."
    ),
    "rep03_thanks": Say("Thank you very much. Thank you very much. Have a great day.", KAL),
    "rep04_repeat": Say(
        "I said the package never arrived. I said the package never arrived.", ESPEAK_US
    ),
}


def build_repeats(build: Build) -> None:
    """Sentences a caller says twice in a row, verbatim: real speech that a decoder's loop guard
    must not cut back to one copy (Whisper's hallucination loops look the same in tokens)."""
    for rep_id, say in REPEATS.items():
        clip = build.synth(say)
        entry = utterance_entry(rep_id, f"repeats/{rep_id}.flac", "repeat", clip)
        entry.update(span_fields(clip.speech_first, clip.speech_end, SAMPLE_RATE_HZ))
        build.write(entry, [clip.samples], SAMPLE_RATE_HZ)


# ---------------------------------------------------------------------------------------------
# 9. accuracy/
# ---------------------------------------------------------------------------------------------

ONSET = Say("This is especially necessary with regard to the billing team.", ESPEAK_US)
LOOP = Say("Yes, that is correct.", FLITE_AWB)
LONG_TURN = tuple(
    Say(text, ESPEAK_GB)
    for text in (
        "Before we continue, please note that this call may be recorded for quality and "
        "training purposes.",
        "Your new plan includes unlimited calls and texts within the country.",
        "The monthly fee is forty dollars, and it will appear on your next statement.",
        "If you cancel within the first thirty days, you will receive a full refund.",
        "After that, an early termination fee of one hundred dollars applies.",
        "Do you agree to these terms and conditions?",
    )
)
LONG_TURN_GAP_MS = 250
ACCURACY_LEAD_MS = 500
ACCURACY_TAIL_MS = {"onset": 1000, "loop": 1500, "long_turn": 1000}


def build_accuracy(build: Build) -> None:
    """One file per failure class of streaming on real speech (issue 21), each measured to
    fail the engine of before the fix (docs/accuracy.md):

    * ``onset``: telephone audio whose first words silero scores low, so the gate starts late
      (``acc_onset_8k``: espeak-ng at 8 kHz; the gate started at 932 ms, "This is" lost);
    * ``loop``: a short sentence tiny.en writes three times in its 10 s window (telephone);
    * ``long_turn``: six sentences read 250 ms apart, 25 s with no 800 ms pause: the
      utterance reached ``max_length`` at 20 s and was cut inside a word.
    """
    rate = SAMPLE_RATE_HZ
    lead = [0.0] * ms_to_samples(ACCURACY_LEAD_MS, rate)
    for entry_id, say, kind in (("acc_onset_8k", ONSET, "onset"), ("acc_loop_8k", LOOP, "loop")):
        clip = build.synth(say)
        tail = [0.0] * ms_to_samples(ACCURACY_TAIL_MS[kind], rate)
        (narrow,) = telephone_band([lead + clip.speech + tail], rate)
        entry = utterance_entry(entry_id, f"accuracy/{entry_id}.flac", kind, clip)
        entry.update(band_hz=list(TELEPHONE_BAND_HZ))
        entry.update(span_fields(*speech_bounds(narrow, TELEPHONE_RATE_HZ), TELEPHONE_RATE_HZ))
        build.write(entry, [narrow], TELEPHONE_RATE_HZ)
    samples = list(lead)
    segments = []
    gap = [0.0] * ms_to_samples(LONG_TURN_GAP_MS, rate)
    for index, say in enumerate(LONG_TURN):
        speech = build.synth(say).speech
        segments.append(
            {"text": say.text, **span_fields(len(samples), len(samples) + len(speech), rate)}
        )
        samples += speech + (gap if index < len(LONG_TURN) - 1 else [])
    samples += [0.0] * ms_to_samples(ACCURACY_TAIL_MS["long_turn"], rate)
    entry = {
        "id": "acc_long_turn",
        "path": "accuracy/acc_long_turn.flac",
        "kind": "long_turn",
        "text": " ".join(say.text for say in LONG_TURN),
        **voice_fields(LONG_TURN[0]),
        "segments": segments,
        "gap_ms": LONG_TURN_GAP_MS,
        **span_fields(segments[0]["speech_start_ms"] * rate // 1000, len(samples), rate),
    }
    entry["speech_end_ms"] = segments[-1]["speech_end_ms"]
    build.write(entry, [samples], rate)


# ---------------------------------------------------------------------------------------------
# Manifest, refs.tsv, verification
# ---------------------------------------------------------------------------------------------

SECTIONS: tuple[Callable[[Build], None], ...] = (
    build_utterances,
    build_telephone,
    build_noisy,
    build_calls,
    build_pauses,
    build_nonspeech,
    build_hotwords,
    build_repeats,
    build_accuracy,
)
REF_KINDS = (
    "utterance",
    "telephone",
    "telephone_codec",
    "noisy",
    "pause",
    "hotword",
    "hotword_negative",
    "repeat",
    "onset",
    "loop",
    "long_turn",
)


def write_manifest(out_dir: Path, entries: list[Entry]) -> None:
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "generator": "scripts/make_fixtures.py",
        "tools": tool_versions(),
        "speech_rms_dbfs": SPEECH_RMS_DBFS,
        "energy_threshold_db": ENERGY_THRESHOLD_DB,
        "total_bytes": sum(e["bytes"] for e in entries),
        "files": entries,
    }
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    (out_dir / "manifest.json").write_text(text, encoding="utf-8")


def write_refs(out_dir: Path, entries: list[Entry]) -> None:
    """``refs.tsv``: ``id<TAB>text`` per single-speaker file, then ``call:channel<TAB>text``."""
    lines = [f"{e['id']}\t{e['text']}\n" for e in entries if e["kind"] in REF_KINDS]
    for call in (e for e in entries if e["kind"] == "call"):
        lines += [f"{call['id']}:{ch['label']}\t{ch['text']}\n" for ch in call["channel_map"]]
    (out_dir / "refs.tsv").write_text("".join(lines), encoding="utf-8")


def load_manifest(out_dir: Path) -> Entry:
    manifest: Entry = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
    return manifest


def verify(out_dir: Path) -> tuple[list[str], dict[str, str]]:
    """Re-read every file listed in the manifest.

    Checks sha256, frame and channel counts with soxi, that nothing is clipped, and recomputes
    the SNR of the noisy files from the clean ones. Returns ``(problems, measured level per id)``;
    no problems means all good.
    """
    files = load_manifest(out_dir)["files"]
    by_id = {e["id"]: e for e in files}
    problems: list[str] = []
    measured: dict[str, str] = {}
    for entry in files:
        problems += verify_entry(out_dir, entry, by_id, measured)
    return problems, measured


def verify_entry(
    out_dir: Path, entry: Entry, by_id: dict[str, Entry], measured: dict[str, str]
) -> list[str]:
    path = out_dir / entry["path"]
    if not path.exists():
        return [f"{entry['id']}: missing {entry['path']}"]
    problems = []
    if hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
        problems.append(f"{entry['id']}: sha256 differs from manifest")
    if entry["container"] == "raw":  # G.711: one byte per sample, no header
        if path.stat().st_size != entry["num_frames"] * entry["channels"]:
            problems.append(f"{entry['id']}: size does not match num_frames")
        return problems
    frames = int(run_tool(["soxi", "-s", str(path)]).decode())
    channels = int(run_tool(["soxi", "-c", str(path)]).decode())
    if (frames, channels) != (entry["num_frames"], entry["channels"]):
        problems.append(f"{entry['id']}: {frames} frames/{channels} ch, manifest disagrees")
    audio, _ = load_channels(path)
    loudest = max(peak(c) for c in audio)
    if loudest >= 0.999:
        problems.append(f"{entry['id']}: clipped (peak {to_dbfs(loudest):.1f} dBFS)")
    if entry["kind"] == "noisy":
        snr = measured_snr(out_dir, entry, audio[0], by_id[entry["source_id"]])
        measured[entry["id"]] = f"SNR {snr:5.2f} dB"
        if abs(snr - entry["snr_db"]) > 0.2:
            problems.append(f"{entry['id']}: SNR {snr:.2f} dB, expected {entry['snr_db']}")
    else:
        level = max(rms(c) for c in audio)
        measured[entry["id"]] = f"RMS {to_dbfs(level):5.1f} dBFS" if level else "RMS -inf"
    return problems


def measured_snr(out_dir: Path, entry: Entry, noisy: Samples, clean_entry: Entry) -> float:
    """SNR recovered from the files: noise = noisy − mix_gain·clean, speech over its span."""
    (clean, *_), rate = load_channels(out_dir / clean_entry["path"])
    gain = entry["mix_gain"]
    first = ms_to_samples(entry["speech_start_ms"], rate)
    end = ms_to_samples(entry["speech_end_ms"], rate)
    noise = [n / gain - c for n, c in zip(noisy, clean, strict=True)]
    return 20.0 * math.log10(rms(clean[first:end]) / rms(noise))


def report(out_dir: Path, measured: dict[str, str]) -> None:
    """Print one line per file (duration, rate, level or SNR) and the total size."""
    manifest = load_manifest(out_dir)
    for entry in manifest["files"]:
        seconds = entry["duration_ms"] / 1000
        print(
            f"  {entry['path']:<44} {seconds:6.2f} s {entry['sample_rate_hz']:>5} Hz "
            f"{entry['channels']} ch {entry['bytes']:>8} B  {measured.get(entry['id'], '')}"
        )
    total = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    print(
        f"total under {out_dir}: {total} bytes ({total / 1e6:.2f} MB), "
        f"{len(manifest['files'])} audio files"
    )


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def generate(out_dir: Path) -> None:
    """Empty the managed folders and rebuild every fixture, the manifest and refs.tsv."""
    check_dependencies()
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in MANAGED_DIRS:
        shutil.rmtree(out_dir / name, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="streamscribe-fixtures-") as work:
        build = Build(out_dir, Synthesizer(Path(work)))
        for section in SECTIONS:
            section(build)
    write_manifest(out_dir, build.entries)
    write_refs(out_dir, build.entries)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT_DIR,
        help=f"output folder (default: {DEFAULT_OUT_DIR.relative_to(REPO_ROOT)})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not regenerate; verify the existing files against the manifest",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="print a line per file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if not args.check:
            generate(args.out)
        problems, measured = verify(args.out)
    except FixtureError as error:
        print(f"make_fixtures: {error}", file=sys.stderr)
        return 2
    if args.verbose or not args.check:
        report(args.out, measured)
    for problem in problems:
        print(f"make_fixtures: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
