"""``fit_dead_letter``: a refused record's dead letter always fits, and says what was cut."""

from __future__ import annotations

from pipeline.worker.dead_letter import (
    HEADER_OVERHEAD_BYTES,
    MAX_HEADER_BYTES,
    MAX_KEY_BYTES,
    fit_dead_letter,
)

DLQ = [("dlq-reason", b"bad_key"), ("dlq-detail", b"too long")]


def test_a_record_within_the_budgets_is_kept_byte_for_byte() -> None:
    headers = [("ss-seq", b"1"), ("ss-null", None)]
    letter = fit_dead_letter(b"call-1", b"\x01\x02", headers, DLQ, max_value_bytes=100)
    assert (letter.key, letter.value) == (b"call-1", b"\x01\x02")
    assert letter.headers == [*headers, *DLQ]


def test_a_huge_key_is_cut_and_says_its_length() -> None:
    # Review finding: the key was copied whole, and a dead letter too large for the producer
    # failed every transaction of the worker, forever (each rewind read the record again).
    key = b"k" * (3 * 1024 * 1024)
    letter = fit_dead_letter(key, b"", [], DLQ, max_value_bytes=100)
    assert letter.key == key[:MAX_KEY_BYTES]
    assert letter.headers == [*DLQ, ("dlq-key-truncated-from-bytes", str(len(key)).encode())]


def test_huge_headers_are_kept_in_order_up_to_the_budget() -> None:
    big = b"9" * (3 * 1024 * 1024)  # an ss-seq of 3 MB of digits (bad_sequence)
    headers = [("ss-version", b"1"), ("ss-seq", big), ("ss-channel", b"mono")]
    letter = fit_dead_letter(b"c", b"", headers, DLQ, max_value_bytes=100)
    version, seq, *rest = letter.headers
    assert version == ("ss-version", b"1")
    assert seq[0] == "ss-seq"
    overhead = 2 * HEADER_OVERHEAD_BYTES
    assert overhead + len("ss-version") + 1 + len("ss-seq") + len(seq[1]) == MAX_HEADER_BYTES
    assert seq[1] == big[: len(seq[1])]
    total = sum(HEADER_OVERHEAD_BYTES + len(n) + len(v or b"") for n, v in headers)
    assert rest == [*DLQ, ("dlq-headers-truncated-from-bytes", str(total).encode())]


def test_a_header_name_beyond_the_budget_is_dropped_with_those_after_it() -> None:
    headers = [("n" * (MAX_HEADER_BYTES + 1), b"x"), ("ss-seq", b"1")]
    letter = fit_dead_letter(b"c", b"", headers, DLQ, max_value_bytes=100)
    assert letter.headers[: len(DLQ)] == DLQ
    assert letter.headers[-1][0] == "dlq-headers-truncated-from-bytes"


def test_many_empty_headers_count_their_overhead() -> None:
    # Self-review finding: names and values alone counted a million empty headers as 0 bytes,
    # about 2.4 MB on the wire, and the producer refused the dead letter.
    headers = [("", None)] * 1_200_000
    letter = fit_dead_letter(b"c", b"", headers, DLQ, max_value_bytes=100)
    kept = letter.headers[: -len(DLQ) - 1]
    assert len(kept) == MAX_HEADER_BYTES // HEADER_OVERHEAD_BYTES
    assert letter.headers[-1][0] == "dlq-headers-truncated-from-bytes"


def test_every_part_cut_together_stays_under_the_topics_limit() -> None:
    big = b"\x07" * (3 * 1024 * 1024)
    headers = [(f"h{i}", big) for i in range(3)]
    letter = fit_dead_letter(big, big, headers, DLQ, max_value_bytes=2 * 1024 * 1024 - 65536)
    size = len(letter.key or b"") + len(letter.value or b"")
    size += sum(HEADER_OVERHEAD_BYTES + len(n) + len(v or b"") for n, v in letter.headers)
    assert size < 2 * 1024 * 1024 - 16 * 1024
    names = [name for name, _ in letter.headers]
    assert names[-3:] == [
        "dlq-truncated-from-bytes",
        "dlq-key-truncated-from-bytes",
        "dlq-headers-truncated-from-bytes",
    ]
