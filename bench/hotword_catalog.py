"""Hotword catalog at scale: what one list change costs a worker holding many call lists.

    .venv/bin/python -m bench.hotword_catalog [--quick] [--repeats 7]

Every worker holds every hotword list of every tenant and call (a call may move to any worker),
and a platform that sets a list per call keeps a day of them (their TTL). This measures, with the
real tiny.en tokenizer (no model, no Redis), a tenant of 1,000 phrases and N call lists of two
phrases each:

- **full load**: ``HotwordCatalog.replace_all`` of everything (a worker's start, a resync);
- **one call-list notice**: ``put`` of a new call list, median of ``--repeats``: what a
  ``streamscribe hotwords add --call`` costs every worker;
- **tenant edit**: ``put`` of the tenant's list with one phrase more (every call list of the
  tenant is laid over it again).

Writes ``bench/results/hotword_catalog.json`` and ``.md`` (``bench.common``). ``--quick`` stops
at 5,000 call lists.
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import time
from collections.abc import Sequence

from bench.common import markdown_table, write_results
from pipeline.hotwords.catalog import HotwordCatalog, HotwordList
from pipeline.hotwords.model import Hotword, ListRef

FULL_COUNTS = (0, 1_000, 5_000, 20_000)
QUICK_COUNTS = (0, 1_000, 5_000)
TENANT_PHRASES = 1_000
NEVER_MS = 10**15


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(5, 9))).title()


def _entries(rng: random.Random, count: int) -> tuple[Hotword, ...]:
    phrases = {_word(rng) + (f" {_word(rng)}" if rng.random() < 0.3 else "") for _ in range(count)}
    return tuple(Hotword(phrase) for phrase in sorted(phrases))


def measure(call_lists: int, repeats: int, tokenizer: object) -> dict[str, float]:
    rng = random.Random(call_lists)
    tenant = HotwordList(ListRef("acme"), _entries(rng, TENANT_PHRASES))
    calls = [
        HotwordList(ListRef("acme", f"call-{n}"), _entries(rng, 2), NEVER_MS)
        for n in range(call_lists)
    ]
    catalog = HotwordCatalog(tokenizer)  # type: ignore[arg-type]
    started = time.perf_counter()
    catalog.replace_all([tenant, *calls])
    load_s = time.perf_counter() - started
    notices = []
    for n in range(repeats):
        update = HotwordList(ListRef("acme", f"new-{n}"), _entries(rng, 2), NEVER_MS)
        started = time.perf_counter()
        catalog.put(update)
        notices.append(time.perf_counter() - started)
    edited = HotwordList(tenant.ref, (*tenant.entries, Hotword("Zzyzx")))
    started = time.perf_counter()
    catalog.put(edited)
    edit_s = time.perf_counter() - started
    return {
        "call_lists": call_lists,
        "full_load_s": round(load_s, 3),
        "notice_ms": round(statistics.median(notices) * 1000, 2),
        "tenant_edit_s": round(edit_s, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    from pipeline.asr.whisper.model import bundled_model_dir
    from pipeline.asr.whisper.tokenizer import load_tokenizer

    started_s = time.monotonic()
    tokenizer = load_tokenizer(bundled_model_dir(), multilingual=False)
    rows = [
        measure(n, args.repeats, tokenizer) for n in (QUICK_COUNTS if args.quick else FULL_COUNTS)
    ]
    table = markdown_table(
        ["call lists", "full load s", "one call-list notice ms", "tenant edit s"],
        [[r["call_lists"], r["full_load_s"], r["notice_ms"], r["tenant_edit_s"]] for r in rows],
    )
    markdown = (
        "# Hotword catalog at scale\n\n"
        f"A tenant of {TENANT_PHRASES} phrases and N call lists of 2 phrases each, the real "
        "tiny.en tokenizer, one thread. A notice is the median of "
        f"{args.repeats} `put`s of a new call list: what each `hotwords add --call` costs "
        "every worker.\n\n" + table + "\n"
    )
    write_results(
        "hotword_catalog",
        quick=args.quick,
        config={"tenant_phrases": TENANT_PHRASES, "repeats": args.repeats},
        results={"rows": rows},
        markdown=markdown,
        started_s=started_s,
    )
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
