"""Redaction: recall and precision per entity type on labelled transcripts, and the cost per final.

    .venv/bin/python -m bench.redaction [--quick] [--variants N]

The labelled set is built here, deterministically (fixed seed), as word sequences of the shape
Whisper writes:

- **clean finals**: every sentence of the fixtures' reference texts (``tests/fixtures/refs.tsv``,
  calls split into sentences) plus generated sentences full of ordinary numbers (``two items``,
  ``order 12``, times, prices, years, room numbers, zip codes, counts), none with a protected
  value;
- **protected finals**: for each entity type, sentences from several templates holding a value
  (Luhn-valid test card numbers of 15 and 16 digits, codes, expiry dates, SSNs, routing and
  account numbers, US phone numbers, e-mail addresses, dates of birth), each value written in
  one of the ways Whisper writes numbers (``4539 1488 0343 6467``, ``4,539,148,803,436,467``,
  ``4539-1488-…`` glued as its words are, digit by digit as numerals, as number words with
  ``oh``/``double``), the label being the words of the value.

- **misheard finals**: values announced by their cue (``My social security number is``,
  ``My phone number is``, …) in the shapes tiny.en wrote from narrowband speech
  (tests/integration/test_redaction_transcribe.py, 8 kHz voice): ``is`` heard as ``in`` and a
  misheard stretch glued by dashes between the cue and the value (``near -rof -envate,``),
  digits glued one by one (``1 -1 -2 -0.``), digits heard as other words inside the value
  (``4 -1 time, time time time, 2 -6 -7 -1``), the label being the words from the value's
  first digit to its last; clean finals with the same cues and ordinary numbers
  (``My phone is 2 years old.``) are added to the clean set.

Every final goes through ``Redactor.final`` with policy ``pii`` (the hold off: each final is
judged alone, a hold only joins finals). **Recall** of an entity type: labelled values whose
words are all inside redactions of that type; **any-tag recall**: inside any redaction (what
matters for leaking). **Precision**: redactions of the type that cover a labelled value of that
type. **Clean precision**: clean finals that come out unchanged. **Cost**: wall time and CPU
time of ``Redactor.final`` per final (all finals, P50/P95/max), measured after a warm-up.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.common import REPO, Target, markdown_table, percentiles, write_results
from pipeline.contracts.messages import EndpointReason, EntityType, Final, Word
from pipeline.redaction import PII, Redactor, RedactorConfig, TenantPolicies, luhn_valid

E = EntityType
DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


@dataclass(frozen=True, slots=True)
class Labelled:
    """One final's words and, for a protected final, the word span and type of its value."""

    words: tuple[str, ...]
    entity: EntityType | None = None
    first: int = 0
    last: int = -1


def _card(rng: random.Random, prefix: str, length: int) -> str:
    while True:
        body = prefix + "".join(rng.choice("0123456789") for _ in range(length - 1 - len(prefix)))
        number = next(body + c for c in "0123456789" if luhn_valid(body + c))
        if len(set(number)) >= 5:
            return number


def _ssn(rng: random.Random) -> str:
    while True:
        digits = "".join(rng.choice("0123456789") for _ in range(9))
        if (
            digits[0] not in "9"
            and digits[:3] not in ("000", "666")
            and digits[3:5] != "00"
            and digits[5:] != "0000"
        ):
            return digits


def _phone(rng: random.Random) -> str:
    area = rng.choice(["415", "212", "617", "303", "512", "206"])
    return area + str(rng.randint(2, 9)) + "".join(rng.choice("0123456789") for _ in range(6))


def _spoken(digits: str, rng: random.Random) -> list[str]:
    words = []
    index = 0
    while index < len(digits):
        digit = digits[index]
        if index + 1 < len(digits) and digits[index + 1] == digit and rng.random() < 0.5:
            words += ["double", DIGIT_WORDS[int(digit)]]
            index += 2
            continue
        words.append("oh" if digit == "0" and rng.random() < 0.5 else DIGIT_WORDS[int(digit)])
        index += 1
    return words


def _written(digits: str, groups: Sequence[int], style: str, rng: random.Random) -> list[str]:
    """``digits`` in ``groups`` as Whisper writes them in ``style``."""
    parts = []
    at = 0
    for size in groups:
        parts.append(digits[at : at + size])
        at += size
    if style == "spaced":
        return parts
    if style == "comma":  # Whisper's thousands grouping, its words "4", ",539", ",148", …
        head = len(digits) % 3 or 3
        chunks = [digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)]
        return [chunks[0], *("," + c for c in chunks[1:])]
    if style == "dash":
        return [parts[0], *("-" + p for p in parts[1:])]
    if style == "whole":
        return [digits]
    if style == "numerals":
        return list(digits)
    return [word for part in parts for word in _spoken(part, rng)]  # "words"


STYLES = ("spaced", "comma", "dash", "whole", "numerals", "words")


def _value(entity: EntityType, rng: random.Random) -> tuple[list[str], str]:
    """A value of ``entity`` as words, and the template it goes into."""
    style = rng.choice(STYLES)
    if entity is E.CARD_NUMBER:
        prefix, length = rng.choice([("4", 16), ("51", 16), ("37", 15), ("6011", 16)])
        digits = _card(rng, prefix, length)
        groups = (4, 6, 5) if length == 15 else (4, 4, 4, 4)
        template = rng.choice(
            [
                "My card number is {v}.",
                "It's a Visa, {v}.",
                "Okay, the long number is {v}, and that's it.",
                "Sure, {v}.",
                "I'd like to pay with {v} please.",
            ]
        )
        return _written(digits, groups, style, rng), template
    if entity is E.CVV:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.choice([3, 3, 4])))
        template = rng.choice(
            [
                "The security code is {v}.",
                "The code on the back is {v}.",
                "CVV {v}.",
                "And the three digits on the back, {v}.",
            ]
        )
        return _written(
            digits, (len(digits),), rng.choice(("spaced", "numerals", "words")), rng
        ), template
    if entity is E.EXPIRY:
        month, year = rng.randint(1, 12), rng.randint(24, 35)
        written = rng.choice(
            [
                [f"{month:02d}/{year}"],
                [f"{month:02d}", str(year)],
                [*_spoken(f"{month:02d}", rng), "twenty", DIGIT_WORDS[year % 10]]
                if 20 < year < 30
                else [f"{month:02d}/{year}"],
            ]
        )
        template = rng.choice(
            ["The expiration date is {v}.", "It expires {v}.", "Expiry {v}.", "Valid thru {v}."]
        )
        return written, template
    if entity is E.SSN:
        digits = _ssn(rng)
        template = rng.choice(
            [
                "My social security number is {v}.",
                "My social is {v}.",
                "SSN {v}.",
                "It's {v}, my social.",
            ]
        )
        return _written(digits, (3, 2, 4), style, rng), template
    if entity is E.ROUTING_NUMBER:
        digits = "".join(rng.choice("0123456789") for _ in range(9))
        template = rng.choice(["The routing number is {v}.", "Routing {v}."])
        return _written(digits, (3, 3, 3), rng.choice(("spaced", "whole", "words")), rng), template
    if entity is E.BANK_ACCOUNT:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(8, 12)))
        template = rng.choice(
            [
                "My checking account number is {v}.",
                "The account number is {v}.",
                "Savings account {v}.",
            ]
        )
        return _written(
            digits, (len(digits),), rng.choice(("whole", "words", "spaced")), rng
        ), template
    if entity is E.PHONE:
        digits = _phone(rng)
        template = rng.choice(
            [
                "You can reach me at {v}.",
                "My phone number is {v}.",
                "Call me back on {v}.",
                "My cell is {v}.",
            ]
        )
        return _written(digits, (3, 3, 4), style, rng), template
    if entity is E.EMAIL:
        first, last = (
            rng.choice(["john", "mary", "priya", "li", "omar"]),
            rng.choice(["smith", "jones", "patel", "chen"]),
        )
        domain, tld = (
            rng.choice(["example", "gmail", "outlook", "acme"]),
            rng.choice(["com", "net", "org"]),
        )
        written = rng.choice(
            [
                [f"{first}.{last}@{domain}.{tld}"],
                [first, "dot", last, "at", domain, "dot", tld],
                [first, f".{last}", f".{domain}", f".{tld}"],
                [f"{first}{last}", "at", f"{domain}.{tld}"],
            ]
        )
        template = rng.choice(
            ["My email is {v}.", "My email address is {v}.", "Send it to my email, {v}."]
        )
        return written, template
    month = rng.choice(["January", "March", "July", "October", "December"])
    day, year = rng.randint(1, 28), rng.randint(1940, 2005)
    written = rng.choice(
        [
            [month, f"{day}th,", str(year)],
            [f"{rng.randint(1, 12):02d}/{day:02d}/{year}"],
            [month, "third,", "nineteen", "eighty"],
        ]
    )
    template = rng.choice(["My date of birth is {v}.", "I was born on {v}.", "Date of birth, {v}."])
    return written, template


def protected_finals(rng: random.Random, per_entity: int) -> list[Labelled]:
    finals = []
    for entity in EntityType:
        for _ in range(per_entity):
            value, template = _value(entity, rng)
            before, _, after = template.partition("{v}")
            head = before.split()
            tail = after.split()
            words = [*head, *value]
            if tail and tail[0] in (".", ","):
                words[-1] += tail[0]
                tail = tail[1:]
            elif after.startswith((".", ",")):
                words[-1] += after[0]
                tail = after[1:].split()
            finals.append(
                Labelled(tuple(words + tail), entity, len(head), len(head) + len(value) - 1)
            )
    return finals


CUED_TEMPLATES = {
    E.CARD_NUMBER: "My card number is {v}.",
    E.CVV: "The security code is {v}.",
    E.SSN: "My social security number is {v}.",
    E.PHONE: "My phone number is {v}.",
    E.BANK_ACCOUNT: "My account number is {v}.",
    E.ROUTING_NUMBER: "The routing number is {v}.",
}
MISHEARD_DIGITS = ("time,", "time", "fix", "to", "for", "tree", "do", "near")
SYLLABLES = ("near", "rof", "envate", "ine", "grenade", "ofen", "mit", "un")


def _cued_digits(entity: EntityType, rng: random.Random) -> tuple[str, tuple[int, ...]]:
    """Digits of a value of ``entity`` and the groups a caller reads them in."""
    if entity is E.CARD_NUMBER:
        return _card(rng, "4", 16), (4, 4, 4, 4)
    if entity is E.CVV:
        return "".join(rng.choice("0123456789") for _ in range(3)), (3,)
    if entity is E.SSN:
        return _ssn(rng), (3, 2, 4)
    if entity is E.PHONE:
        return _phone(rng), (3, 3, 4)
    if entity is E.ROUTING_NUMBER:
        return "".join(rng.choice("0123456789") for _ in range(9)), (3, 3, 3)
    return "".join(rng.choice("0123456789") for _ in range(10)), (5, 5)


def _glued(digits: str, groups: Sequence[int]) -> list[str]:
    """Digits glued one by one, groups closed by a comma: ``1 -1 -2 -0,`` (tiny.en's words for
    digits read one by one at 8 kHz)."""
    words: list[str] = []
    at = 0
    for size in groups:
        part = digits[at : at + size]
        at += size
        words += [part[0], *("-" + d for d in part[1:])]
        words[-1] += ","
    words[-1] = words[-1].rstrip(",")
    return words


def misheard_finals(rng: random.Random, per_entity: int) -> list[Labelled]:
    """Cued values as a recognizer mishears them (see the module docstring)."""
    finals = []
    for entity, template in CUED_TEMPLATES.items():
        for variant in range(per_entity):
            digits, groups = _cued_digits(entity, rng)
            value = _glued(digits, groups) if variant % 2 else list(digits)
            if variant % 3 != 2 and len(value) > 4:  # a digit or two heard as other words
                at = rng.randrange(1, len(value) - 3)
                for index in range(at, at + rng.choice((1, 2))):
                    value[index] = rng.choice(MISHEARD_DIGITS)
            head = template.partition("{v}")[0].split()
            head[-1] = rng.choice(("is", "in"))
            if variant % 3 != 1:  # a misheard stretch between the cue and the value
                for _ in range(rng.choice((1, 2))):
                    first, *rest = rng.sample(SYLLABLES, rng.choice((2, 3)))
                    head += [first, *("-" + syllable for syllable in rest)]
                    head[-1] += ","
            value[-1] += "."
            finals.append(
                Labelled(tuple(head + value), entity, len(head), len(head) + len(value) - 1)
            )
    return finals


ORDINARY = (
    "I ordered {n} items last week and only {m} arrived.",
    "Order {n} was placed on the {d}th.",
    "It cost ${p} plus {m} dollars shipping.",
    "The meeting is at {h}:30 pm on Tuesday.",
    "I have called {w} times this week.",
    "We moved here in {y}, about {m} years ago.",
    "My zip code is 9{n}{n}.",
    "Room {n}{m}, floor {m}.",
    "Press {w} for billing or {w} for support.",
    "It took {n} minutes to get through, then {m} more on hold.",
    "I need {w} new chargers and {n} cables.",
    "The router has {m} lights, {w} of them blinking.",
    "My account has been charged {w} times for {n} dollars.",
    "Can you call me back in {n} minutes?",
    "The package weighed {p} kilos.",
    "My phone is {m} years old.",
    "My phone broke {w} times, the screen {n} days ago.",
    "I changed my phone number {m} weeks ago.",
    "What is your phone number?",
    "The security code did not work, I tried {w} times.",
    "My social worker comes {w} times a week.",
    "My card number changed when the card expired {m} months ago.",
)


def clean_finals(rng: random.Random, generated: int) -> list[Labelled]:
    finals = []
    for line in (REPO / "tests" / "fixtures" / "refs.tsv").read_text().splitlines():
        _, _, text = line.partition("\t")
        for sentence in re.split(r"(?<=[.?!])\s+", text):
            if sentence.strip():
                finals.append(Labelled(tuple(sentence.split())))
    for _ in range(generated):
        text = rng.choice(ORDINARY).format(
            n=rng.randint(1, 99),
            m=rng.randint(2, 12),
            d=rng.randint(4, 28),
            p=f"{rng.randint(1, 99)}.{rng.randint(10, 99)}",
            h=rng.randint(1, 11),
            w=rng.choice(DIGIT_WORDS[1:]),
            y=rng.randint(1990, 2023),
        )
        finals.append(Labelled(tuple(text.split())))
    return finals


def as_final(labelled: Labelled, index: int) -> Final:
    words = tuple(Word(w, i * 300, (i + 1) * 300, 0.9) for i, w in enumerate(labelled.words))
    return Final(
        "bench", "customer", index, f"bench:customer:{index}", " ".join(labelled.words), words,
        0, len(words) * 300, EndpointReason.SILENCE, "bench", 0,
    )  # fmt: skip


def _covered(final: Final, labelled: Labelled) -> tuple[set[int], dict[int, EntityType]]:
    """Which original words the output final's tags cover, and by which entity type."""
    by_word: dict[int, EntityType] = {}
    spans = [(r.start_ms // 300, (r.end_ms - 1) // 300, r.entity) for r in final.redactions]
    for first, last, entity in spans:
        for index in range(first, last + 1):
            by_word[index] = entity
    return set(by_word), by_word


def evaluate(
    redactor: Redactor, finals: Sequence[Labelled], timer: Callable[[], float]
) -> dict[str, object]:
    recall: Counter[str] = Counter()
    any_tag: Counter[str] = Counter()
    total: Counter[str] = Counter()
    predicted: Counter[str] = Counter()
    correct: Counter[str] = Counter()
    clean_total = clean_unchanged = 0
    false_entities: Counter[str] = Counter()
    for index, labelled in enumerate(finals):
        [out] = redactor.final(as_final(labelled, index))
        covered, by_word = _covered(out, labelled)
        value = set(range(labelled.first, labelled.last + 1))
        for redaction in out.redactions:
            predicted[redaction.entity.value] += 1
            words = set(range(redaction.start_ms // 300, (redaction.end_ms - 1) // 300 + 1))
            if labelled.entity is redaction.entity and words & value:
                correct[redaction.entity.value] += 1
            if labelled.entity is None:
                false_entities[redaction.entity.value] += 1
        if labelled.entity is None:
            clean_total += 1
            clean_unchanged += not out.redactions
            continue
        name = labelled.entity.value
        total[name] += 1
        any_tag[name] += value <= covered
        recall[name] += all(by_word.get(i) is labelled.entity for i in value)
    per_entity = {
        entity.value: {
            "values": total[entity.value],
            "recall": recall[entity.value] / total[entity.value] if total[entity.value] else None,
            "any_tag_recall": any_tag[entity.value] / total[entity.value]
            if total[entity.value]
            else None,
            "precision": correct[entity.value] / predicted[entity.value]
            if predicted[entity.value]
            else None,
        }
        for entity in EntityType
    }
    return {
        "per_entity": per_entity,
        "clean_finals": clean_total,
        "clean_unchanged": clean_unchanged,
        "clean_precision": clean_unchanged / clean_total if clean_total else None,
        "false_redactions_on_clean": dict(false_entities),
    }


def cost(redactor: Redactor, finals: Sequence[Labelled], repeats: int) -> dict[str, object]:
    records = [as_final(labelled, index) for index, labelled in enumerate(finals)]
    for record in records[:50]:
        redactor.final(record)  # warm-up
    wall_ms: list[float] = []
    cpu_ms: list[float] = []
    for _ in range(repeats):
        for record in records:
            wall, cpu = time.perf_counter(), time.process_time()
            redactor.final(record)
            cpu_ms.append((time.process_time() - cpu) * 1000)
            wall_ms.append((time.perf_counter() - wall) * 1000)
    words = sum(len(f.words) for f in finals) / len(finals)
    return {
        "finals": len(wall_ms),
        "mean_words_per_final": round(words, 1),
        "wall_ms": percentiles(wall_ms),
        "cpu_ms_mean": sum(cpu_ms) / len(cpu_ms),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variants", type=int, default=0, help="protected finals per entity type")
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    started_s = time.monotonic()
    per_entity = args.variants or (60 if args.quick else 200)
    rng = random.Random(args.seed)
    protected = protected_finals(rng, per_entity)
    clean = clean_finals(rng, per_entity * 2)
    misheard = misheard_finals(rng, per_entity // 2)
    redactor = Redactor(RedactorConfig(TenantPolicies(PII), hold_ms=0))
    quality = evaluate(redactor, [*protected, *clean], time.perf_counter)
    misheard_quality = evaluate(redactor, misheard, time.perf_counter)
    spent = cost(redactor, [*protected, *clean, *misheard], repeats=1 if args.quick else 3)
    rows = _rows(quality)
    misheard_rows = [row for row in _rows(misheard_quality) if row[1]]
    wall = spent["wall_ms"]  # type: ignore[index]
    targets = [
        Target(
            "recall, Luhn-valid card numbers",
            _value_of(quality, "card_number", "recall"),
            1.0,
            "",
            higher_is_better=True,
        ),
        Target("recall, SSNs", _value_of(quality, "ssn", "recall"), 1.0, "", higher_is_better=True),
        Target(
            "recall, every other type (lowest)",
            min(
                stats["recall"]  # type: ignore[index]
                for name, stats in quality["per_entity"].items()  # type: ignore[union-attr]
                if name not in ("card_number", "ssn")
            ),
            0.95,
            "",
            higher_is_better=True,
        ),
        Target(
            "recall, misheard cued values (lowest type)",
            min(
                stats["recall"]  # type: ignore[index]
                for stats in misheard_quality["per_entity"].values()  # type: ignore[union-attr]
                if stats["values"]  # type: ignore[index]
            ),
            0.95,
            "",
            higher_is_better=True,
        ),
        Target(
            "precision on finals without protected values",
            quality["clean_precision"],
            0.98,
            "",
            higher_is_better=True,
        ),  # type: ignore[arg-type]
        Target("added P95 latency per final", wall["p95"], 5.0, "ms"),
    ]
    markdown = (
        "# Redaction\n\n"
        f"{len(protected)} labelled finals with a protected value ({per_entity} per entity type, "
        f"six ways of writing numbers) and {len(clean)} without (the fixtures' sentences and "
        f"generated ordinary numbers), policy `pii`, each final alone (seed {args.seed}).\n\n"
        + markdown_table(["entity", "values", "recall", "any-tag recall", "precision"], rows)
        + "\n\n"
        f"Finals without protected values left unchanged: {quality['clean_unchanged']} of "
        f"{quality['clean_finals']} ({_pct(quality['clean_precision'])}); false redactions by "
        f"type: {quality['false_redactions_on_clean'] or 'none'}.\n\n"
        f"{len(misheard)} finals with a value announced by its cue, as a recognizer mishears "
        "it (a misheard stretch before the value, digits glued one by one, digits heard as "
        "other words):\n\n"
        + markdown_table(
            ["entity", "values", "recall", "any-tag recall", "precision"], misheard_rows
        )
        + "\n\n"
        f"Cost of `Redactor.final` per final ({spent['finals']} calls, "
        f"{spent['mean_words_per_final']} words on average, one thread): wall P50 "
        f"{wall['p50']:.3f} ms, P95 {wall['p95']:.3f} ms, max {wall['max']:.3f} ms; CPU "
        f"{spent['cpu_ms_mean']:.3f} ms mean.\n"
    )
    write_results(
        "redaction",
        quick=args.quick,
        config={"per_entity": per_entity, "seed": args.seed, "policy": "pii"},
        results={"quality": quality, "misheard": misheard_quality, "cost": spent},
        markdown=markdown,
        targets=targets,
        notes=[
            "The labelled set is generated from templates that use the keywords the detectors "
            "know, so its recall is an upper bound; recognizer errors (a dropped digit, a "
            "misheard keyword) are what the integration test on synthesized speech "
            "(tests/integration/test_redaction_transcribe.py) exercises. The misheard set "
            "copies the shapes tiny.en wrote in one run of that test at 8 kHz: it shows "
            "those shapes are caught, not the recall on real narrowband calls.",
            "Cost: the detectors only, on the same CPU as the rest of the worker; finals held "
            "for an unfinished number wait for the next final on top (bounded by "
            "STREAMSCRIBE_REDACTION_HOLD_MS of audio).",
        ],
        started_s=started_s,
        **({"out": __import__("pathlib").Path(args.out)} if args.out else {}),
    )
    print(markdown)
    return 0


def _rows(quality: dict[str, object]) -> list[list[object]]:
    return [
        [
            name,
            stats["values"],
            _pct(stats["recall"]),
            _pct(stats["any_tag_recall"]),
            _pct(stats["precision"]),
        ]
        for name, stats in quality["per_entity"].items()  # type: ignore[attr-defined]
    ]


def _pct(value: object) -> str:
    return "—" if value is None else f"{100 * float(value):.1f} %"  # type: ignore[arg-type]


def _value_of(quality: dict[str, object], entity: str, key: str) -> float | None:
    stats = quality["per_entity"][entity]  # type: ignore[index]
    value = stats[key]
    return None if value is None else float(value)


if __name__ == "__main__":
    raise SystemExit(main())
