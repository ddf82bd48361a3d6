"""Redaction end to end through ``streamscribe transcribe`` on real weights and synthesized calls.

A customer reads a test card number (in groups, with a pause in the middle that splits it over
two finals, and a second one as number words), its security code and expiry, an SSN, a phone
number and a spelled e-mail address, in two espeak-ng voices, at 16 kHz and (band-limited)
8 kHz. The segments are synthesized one by one and joined with known silences, so where each
value was spoken is known to the millisecond. With ``pci`` and ``pii``: no protected value of
the policy appears in any printed record (partials and suppressed hypotheses included), and
every redaction's span overlaps the audio of a value. A call without such values comes out with
the same finals as under ``off``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import soundfile

from pipeline.cli import main
from tests.conftest import validate

# Three decodes of ~100 s of speech on real weights: past the default 600 s on a loaded CPU.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

PAUSE_MS = 400
SPLIT_PAUSE_MS = 1300  # past the 800 ms endpoint: the card number arrives in two finals


@dataclass(frozen=True, slots=True)
class Value:
    """A protected value: its entity type, the digits (or words) that must never be shown."""

    entity: str
    secrets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Segment:
    text: str
    value: Value | None = None
    pause_after_ms: int = PAUSE_MS


CARD = Value("card_number", ("4539148803436467", "4539", "1488", "0343", "6467"))
CARD_WORDS = Value("card_number", ("4526018159083012", "4526", "0181", "5908", "3012"))
CVV = Value("cvv", ("737",))
EXPIRY = Value("expiry", ("0327",))
SSN = Value("ssn", ("078051120", "07805", "1120"))
PHONE = Value("phone", ("4155552671", "5552671", "2671"))
EMAIL = Value("email", ("smith", "example"))
PCI_VALUES = (CARD, CARD_WORDS, CVV, EXPIRY)

# Each voice reads some of the values (the CPU time of the test stays within reach of a shared
# machine): the card read in groups with a pause at 16 kHz, SSN and phone at 8 kHz, the card read
# as words at 16 kHz. At 8 kHz tiny.en writes that last one as "The content are in 4.2.6." (no
# cue, three digits: nothing there to redact or to leak), so it would test the recognizer, not
# the redaction.
PROTECTED_A = (
    Segment("Hi, I would like to pay my bill."),
    Segment("My card number is 4 5 3 9, 1 4 8 8,", CARD, SPLIT_PAUSE_MS),
    Segment("0 3 4 3, 6 4 6 7.", CARD),
    Segment("The security code is 7 3 7.", CVV),
    Segment("The expiration date is 0 3, 2 7.", EXPIRY),
    Segment("My email address is john dot smith at example dot com.", EMAIL),
)
PROTECTED_B = (
    Segment("My social security number is 0 7 8, 0 5, 1 1 2 0.", SSN),
    Segment("My phone number is 4 1 5, 5 5 5, 2 6 7 1.", PHONE),
)
PROTECTED_C = (
    Segment(
        "The card number is four five two six, oh one eight one, five nine oh eight, "
        "three oh one two.",
        CARD_WORDS,
    ),
)
CLEAN = (
    Segment("I ordered two items last week, order 12."),
    Segment("It arrived at 3 pm and cost 25 dollars."),
    Segment("I have called three times this week."),
)
VOICES = (
    ("en-us", 140, 16_000, PROTECTED_A),
    ("en-gb-x-rp", 140, 8_000, PROTECTED_B),
    ("en-gb-x-rp", 140, 16_000, PROTECTED_C),
)


@dataclass(frozen=True, slots=True)
class Call:
    path: Path
    spans_ms: tuple[tuple[Value, int, int], ...]


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} is needed to synthesize the calls (make setup installs it)")


def _synthesize(workdir: Path, name: str, voice: str, speed: int, rate_hz: int,
                segments: tuple[Segment, ...]) -> Call:  # fmt: skip
    """The segments spoken one by one, joined with their pauses, as one mono file."""
    pieces: list[Path] = []
    spans: list[tuple[Value, int, int]] = []
    position_ms = 0
    for index, segment in enumerate(segments):
        raw = workdir / f"{name}_{index}_raw.wav"
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(raw), segment.text],
            check=True,
            capture_output=True,
        )
        clip = workdir / f"{name}_{index}.wav"
        effects = ["sinc", "300-3400"] if rate_hz == 8000 else []
        subprocess.run(
            ["sox", str(raw), "-r", str(rate_hz), "-c", "1", "-b", "16", str(clip), *effects,
             "pad", "0", f"{segment.pause_after_ms / 1000}"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        duration_ms = soundfile.info(str(clip)).frames * 1000 // rate_hz
        if segment.value is not None:
            spans.append(
                (segment.value, position_ms, position_ms + duration_ms - segment.pause_after_ms)
            )
        position_ms += duration_ms
        pieces.append(clip)
    path = workdir / f"{name}.wav"
    subprocess.run(["sox", *map(str, pieces), str(path)], check=True, capture_output=True)
    return Call(path, tuple(spans))


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Call]:
    _need("espeak-ng")
    _need("sox")
    workdir = tmp_path_factory.mktemp("redaction_calls")
    made = {}
    for voice, speed, rate_hz, segments in VOICES:
        tag = f"{voice.replace('-', '')}_{rate_hz // 1000}k"
        made[f"pay_{tag}"] = _synthesize(workdir, f"pay_{tag}", voice, speed, rate_hz, segments)
    made["clean"] = _synthesize(workdir, "clean", "en-us", 140, 16_000, CLEAN)
    return made


def _transcribe(paths: list[Path], policy: str, *, partials: bool = True) -> list[dict[str, Any]]:
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STREAMSCRIBE_TORCH_THREADS", "2")
        env.delenv("STREAMSCRIBE_CONFIG", raising=False)
        env.setenv("STREAMSCRIBE_REDACTION_POLICY", policy)
        env.setenv("STREAMSCRIBE_HOP_MS", "1000")  # half the partial decodes of the default
        with contextlib.redirect_stdout(out):
            flags = [] if partials else ["--no-partials"]
            assert main(["transcribe", "--json", *flags, *map(str, paths)]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture(scope="module")
def outputs(calls: dict[str, Call]) -> dict[str, list[dict[str, Any]]]:
    """Every call under each policy (the clean call under ``off`` too): one run per policy.
    Partials are decoded under ``pii`` (which masks every ``pci`` value too); the other runs
    print finals only, to keep the CPU time of the test within reach of a shared machine."""
    paths = [call.path for call in calls.values()]
    return {
        "pii": _transcribe(paths, "pii"),
        "pci": _transcribe(paths, "pci", partials=False),
        "off": _transcribe([calls["clean"].path], "off", partials=False),
    }


def _shown_texts(records: list[dict[str, Any]], call_id: str) -> Iterator[str]:
    for record in records:
        if record.get("call_id") != call_id:
            continue
        for key in ("text", "committed_text", "tentative_text"):
            if isinstance(record.get(key), str):
                yield record[key]
        for word in record.get("words", ()):
            yield word["word"]


def _leaks(text: str, value: Value) -> list[str]:
    """The secrets of ``value`` that ``text`` shows: a digit secret inside a digit run written
    any way (``4,539``, ``4-5-3-9``), a word secret anywhere."""
    lowered = text.lower()
    found = []
    digits_only = re.sub(r"(?<=\d)[\s,.\-/]+(?=\d)", "", lowered)
    for secret in value.secrets:
        haystack = digits_only if secret.isdigit() else lowered
        if secret.isdigit():
            if any(secret in run for run in re.findall(r"\d+", haystack)):
                found.append(secret)
        elif secret in haystack:
            found.append(secret)
    return found


@pytest.mark.parametrize("policy", ["pci", "pii"])
def test_no_protected_value_is_shown(
    policy: str, calls: dict[str, Call], outputs: dict[str, list[dict[str, Any]]]
) -> None:
    records = outputs[policy]
    values = PCI_VALUES if policy == "pci" else (*PCI_VALUES, SSN, PHONE, EMAIL)
    for name in calls:
        if not name.startswith("pay_"):
            continue
        leaks = {
            (value.entity, secret, text)
            for text in _shown_texts(records, name)
            for value in values
            for secret in _leaks(text, value)
        }
        assert leaks == set(), name
    for record in records:
        if record["type"] in ("partial", "final"):
            validate(record["type"], {k: v for k, v in record.items() if k != "type"})


@pytest.mark.parametrize("policy", ["pci", "pii"])
def test_every_redaction_span_overlaps_the_audio_of_a_value(
    policy: str, calls: dict[str, Call], outputs: dict[str, list[dict[str, Any]]]
) -> None:
    wanted = {v.entity for v in PCI_VALUES} if policy == "pci" else None
    for name, call in calls.items():
        if not name.startswith("pay_"):
            continue
        finals = [r for r in outputs[policy] if r["type"] == "final" and r["call_id"] == name]
        redactions = [red for final in finals for red in final.get("redactions", ())]
        if wanted is not None and not any(v.entity in wanted for v, _, _ in call.spans_ms):
            assert redactions == [], name  # SSN and phone are not the pci policy's
            continue
        assert redactions, name
        for redaction in redactions:
            overlapping = [
                value
                for value, start_ms, end_ms in call.spans_ms
                if redaction["start_ms"] < end_ms and start_ms < redaction["end_ms"]
            ]
            assert overlapping, (name, redaction, call.spans_ms)
            if wanted is not None:
                assert redaction["entity"] in wanted
        # A card number (read with a pause in the middle: in both of its finals) is redacted.
        card_spans = [(s, e) for value, s, e in call.spans_ms if value.entity == "card_number"]
        for start_ms, end_ms in card_spans:
            assert any(r["start_ms"] < end_ms and start_ms < r["end_ms"] for r in redactions), (
                name,
                start_ms,
                end_ms,
            )


def test_a_call_without_protected_values_comes_out_unchanged(
    outputs: dict[str, list[dict[str, Any]]],
) -> None:
    def finals(records: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
        return [
            (r["text"], [(w["word"], w["start_ms"], w["end_ms"]) for w in r["words"]])
            for r in records
            if r["type"] == "final" and r["call_id"] == "clean"
        ]

    plain = finals(outputs["off"])
    assert plain
    assert any(re.search(r"\b12\b", text) for text, _ in plain)  # an ordinary number kept
    for policy in ("pci", "pii"):
        assert finals(outputs[policy]) == plain, policy
        clean = [r for r in outputs[policy] if r.get("call_id") == "clean"]
        assert all("redactions" not in r for r in clean)
        assert not any("[" in text for text in _shown_texts(clean, "clean"))
