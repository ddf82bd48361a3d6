"""The audio-chunk codec: round trips, zero copy, and every rejection reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.contracts import audio_chunk
from pipeline.contracts.audio_chunk import (
    CONTRACT_VERSION,
    MAX_CALL_ID_BYTES,
    MAX_CAPTURE_MS,
    MAX_SEQ,
    REQUIRED_HEADERS,
    SUPPORTED_SAMPLE_RATES_HZ,
    AudioChunk,
    Encoding,
    Header,
    RejectReason,
    decode_chunk,
    encode_chunk,
)
from pipeline.contracts.g711 import mulaw_encode
from pipeline.errors import ChunkRejectedError, ContractError
from tests.conftest import SCHEMAS, load_schema

labels = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=32)
call_ids = st.text(min_size=1, max_size=40).filter(
    lambda s: 0 < len(s.encode()) <= 128 and s.isprintable()
)


def good_headers(**overrides: str | None) -> list[tuple[str, bytes]]:
    """Valid headers; ``ss_seq="x"`` overrides ``ss-seq``, ``None`` removes a header."""
    values: dict[str, str | None] = {
        Header.VERSION: "1",
        Header.CHANNEL: "agent",
        Header.SEQ: "0",
        Header.SAMPLE_RATE_HZ: "16000",
        Header.ENCODING: "pcm_s16le",
    }
    values.update({Header(name.replace("_", "-")): value for name, value in overrides.items()})
    return [(name, value.encode()) for name, value in values.items() if value is not None]


@given(
    call_id=call_ids,
    channel=labels,
    seq=st.integers(0, 2**40),
    rate=st.sampled_from(SUPPORTED_SAMPLE_RATES_HZ),
    encoding=st.sampled_from(list(Encoding)),
    num_samples=st.integers(0, 400),
    capture_ms=st.none() | st.integers(0, 2**45),
    end_of_stream=st.booleans(),
    flush=st.booleans(),
    tenant=labels,
    data=st.data(),
)
def test_encode_decode_round_trip(
    call_id: str,
    channel: str,
    seq: int,
    rate: int,
    encoding: Encoding,
    num_samples: int,
    capture_ms: int | None,
    end_of_stream: bool,
    flush: bool,
    tenant: str,
    data: st.DataObject,
) -> None:
    if num_samples == 0:
        end_of_stream = True
    payload = data.draw(
        st.binary(
            min_size=num_samples * encoding.bytes_per_sample,
            max_size=num_samples * encoding.bytes_per_sample,
        )
    )
    chunk = AudioChunk(
        call_id,
        channel,
        seq,
        rate,
        encoding,
        memoryview(payload),
        capture_ms,
        end_of_stream,
        flush,
        tenant,
    )
    key, value, headers = encode_chunk(chunk)
    assert value == payload
    decoded = decode_chunk(key, value, headers)
    assert decoded == chunk
    assert decoded.num_samples == num_samples


def test_pcm_payload_is_a_zero_copy_view() -> None:
    samples = np.arange(-160, 160, dtype="<i2")
    value = bytearray(samples.tobytes())
    chunk = decode_chunk(b"call-1", value, good_headers())
    pcm = chunk.pcm_int16()
    assert np.array_equal(pcm, samples)
    value[0:2] = (12345).to_bytes(2, "little", signed=True)
    assert pcm[0] == 12345, "the numpy array must share memory with the record value"


def test_mulaw_payload_decodes_to_pcm() -> None:
    tone = (8000 * np.sin(np.arange(160) / 5)).astype(np.int16)
    chunk = decode_chunk(b"call-1", mulaw_encode(tone).tobytes(), good_headers(ss_encoding="mulaw"))
    assert chunk.num_samples == 160
    assert np.max(np.abs(chunk.pcm_int16().astype(int) - tone)) < 300
    floats = chunk.samples_float32()
    assert floats.dtype == np.float32
    assert np.max(np.abs(floats)) < 1.0


REJECTIONS = [
    (None, b"\0\0", good_headers(), RejectReason.MISSING_KEY),
    (b"", b"\0\0", good_headers(), RejectReason.MISSING_KEY),
    (b"x" * (MAX_CALL_ID_BYTES + 1), b"\0\0", good_headers(), RejectReason.BAD_KEY),
    (b"\xff\xfe", b"\0\0", good_headers(), RejectReason.BAD_KEY),
    (b"a\nb", b"\0\0", good_headers(), RejectReason.BAD_KEY),  # breaks utterance_id's pattern
    ("c\u2028d".encode(), b"\0\0", good_headers(), RejectReason.BAD_KEY),
    (b"c", b"\0\0", good_headers(ss_seq=None), RejectReason.MISSING_HEADER),
    (b"c", b"\0\0", good_headers(ss_version=None), RejectReason.MISSING_HEADER),
    (b"c", b"\0\0", good_headers(ss_version="2"), RejectReason.UNKNOWN_VERSION),
    (b"c", b"\0\0", good_headers(ss_sample_rate_hz="44100"), RejectReason.UNSUPPORTED_SAMPLE_RATE),
    (b"c", b"\0\0", good_headers(ss_sample_rate_hz="fast"), RejectReason.UNSUPPORTED_SAMPLE_RATE),
    (b"c", b"\0\0", good_headers(ss_sample_rate_hz="08000"), RejectReason.UNSUPPORTED_SAMPLE_RATE),
    # int() of more than 4300 digits raises ValueError: a crash on every read of the record
    (
        b"c",
        b"\0\0",
        good_headers(ss_sample_rate_hz="9" * 5000),
        RejectReason.UNSUPPORTED_SAMPLE_RATE,
    ),
    (b"c", b"\0\0", good_headers(ss_encoding="opus"), RejectReason.UNSUPPORTED_ENCODING),
    (b"c", b"\0\0", good_headers(ss_seq="-1"), RejectReason.BAD_SEQUENCE),
    (b"c", b"\0\0", good_headers(ss_seq="1e3"), RejectReason.BAD_SEQUENCE),
    (b"c", b"\0\0", good_headers(ss_channel="agent one"), RejectReason.BAD_HEADER_VALUE),
    (b"c", b"\0\0", good_headers(ss_channel=""), RejectReason.BAD_HEADER_VALUE),
    (b"c", b"\0\0", good_headers(ss_end_of_stream="yes"), RejectReason.BAD_HEADER_VALUE),
    (b"c", b"\0\0", good_headers(ss_capture_ms="now"), RejectReason.BAD_HEADER_VALUE),
    (b"c", b"\0\0", good_headers(ss_tenant="a" * 65), RejectReason.BAD_HEADER_VALUE),
    (b"c", b"\0\0\0", good_headers(), RejectReason.ODD_BYTE_COUNT),
    (b"c", b"\0" * 65538, good_headers(), RejectReason.OVERSIZE_PAYLOAD),
    (b"c", b"", good_headers(), RejectReason.EMPTY_PAYLOAD),
    (b"c", None, good_headers(), RejectReason.EMPTY_PAYLOAD),
]


@pytest.mark.parametrize(("key", "value", "headers", "reason"), REJECTIONS)
def test_every_bad_input_is_rejected_with_its_reason(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]], reason: RejectReason
) -> None:
    with pytest.raises(ChunkRejectedError) as caught:
        decode_chunk(key, value, headers)
    assert caught.value.reason == reason
    assert isinstance(caught.value, ContractError)
    assert str(reason) in str(caught.value)


def test_non_ascii_header_is_rejected() -> None:
    headers = [*good_headers(ss_channel=None), (Header.CHANNEL.value, "agënt".encode())]
    with pytest.raises(ChunkRejectedError) as caught:
        decode_chunk(b"c", b"\0\0", headers)
    assert caught.value.reason == RejectReason.BAD_HEADER_VALUE


def test_empty_payload_allowed_on_end_of_stream_and_flush() -> None:
    assert decode_chunk(b"c", b"", good_headers(ss_end_of_stream="1")).end_of_stream
    assert decode_chunk(b"c", b"", good_headers(ss_flush="1")).flush


def test_payload_limit_is_configurable() -> None:
    with pytest.raises(ChunkRejectedError):
        decode_chunk(b"c", b"\0" * 640, good_headers(), max_payload_bytes=320)


@pytest.mark.parametrize("reason", list(RejectReason))
def test_every_codec_reason_is_in_the_dead_letter_schema(reason: RejectReason) -> None:
    allowed = load_schema("dead_letter")["properties"]["reason"]["enum"]
    assert reason.value in allowed


def test_code_and_machine_readable_contract_agree() -> None:
    contract = json.loads((SCHEMAS / "audio_chunk.json").read_text())
    assert contract["version"] == CONTRACT_VERSION
    assert contract["key"]["max_bytes"] == MAX_CALL_ID_BYTES
    assert tuple(contract["sample_rates_hz"]) == SUPPORTED_SAMPLE_RATES_HZ
    assert {name: spec["bytes_per_sample"] for name, spec in contract["encodings"].items()} == {
        e.value: e.bytes_per_sample for e in Encoding
    }
    assert [h["name"] for h in contract["headers"]] == [h.value for h in Header]
    bounds = {h["name"]: h.get("max") for h in contract["headers"]}
    assert bounds[Header.SEQ] == MAX_SEQ
    assert bounds[Header.CAPTURE_MS] == MAX_CAPTURE_MS
    required = [h["name"] for h in contract["headers"] if h["required"]]
    assert required == [h.value for h in REQUIRED_HEADERS]


header_values = st.sampled_from(
    [b"1", b"2", b"0", b"16000", b"8000", b"44100", b"pcm_s16le", b"mulaw", b"alaw", b"opus",
     b"agent", b"customer", b"a b", b"", b"-", b"x" * 65, b"12", b"-1", b"1e3", b"\xff", b"yes",
     b"08000", b"9" * 5000, "agent", None]
)  # fmt: skip
header_lists = st.lists(
    st.tuples(st.sampled_from([h.value for h in Header] + ["x-other"]), header_values),
    max_size=12,
)
record_values = st.sampled_from([None, b"", b"\0", b"\0\0", b"\0" * 640, b"\0" * 65538])
record_keys = st.sampled_from(
    [None, b"", b"call-1", b"\xff\xfe", b"x" * (MAX_CALL_ID_BYTES + 1), b"a\tb", "Zoë".encode()]
)


@given(record_keys, record_values, header_lists, st.data())
def test_the_hot_path_agrees_with_the_full_validation(
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | str | None]],
    data: st.DataObject,
) -> None:
    """``decode_chunk`` tries a cached hot path first: it must return exactly what the full
    validation returns, or leave the decision (and the reason) to it."""
    if data.draw(st.booleans()):  # most generated lists are invalid; make half of them valid
        headers = [*good_headers(), *headers[:3]]
    fast = audio_chunk._decode_ordinary(key, value, headers, audio_chunk.DEFAULT_MAX_PAYLOAD_BYTES)
    try:
        checked = audio_chunk._decode_checked(key, value, headers)
    except ChunkRejectedError:
        assert fast is None
        return
    assert fast is None or fast == checked
    assert decode_chunk(key, value, headers) == checked


@pytest.mark.parametrize("header", [h.value for h in Header])
def test_a_huge_header_value_is_refused_with_a_short_detail(header: str) -> None:
    # The detail goes into the dead letter's headers and a chunk_rejected event: repeating a
    # multi-megabyte value would make both too big for their topics (a commit that always fails).
    headers = [*good_headers(), (header, b"7" * 1_000_000)]
    with pytest.raises(ChunkRejectedError) as caught:
        decode_chunk(b"c", b"\0\0", headers)
    assert len(caught.value.detail) < 300
    assert "(1000000 characters)" in caught.value.detail


def test_an_ordinary_chunk_takes_the_hot_path() -> None:
    chunk = AudioChunk("call-1", "agent", 7, 16000, Encoding.PCM_S16LE, memoryview(b"\0" * 640))
    decoded = audio_chunk._decode_ordinary(
        *encode_chunk(chunk), audio_chunk.DEFAULT_MAX_PAYLOAD_BYTES
    )
    assert decoded == chunk


@pytest.mark.parametrize(
    ("header", "value", "reason"),
    [
        (Header.SEQ, str(MAX_SEQ + 1), RejectReason.BAD_SEQUENCE),
        (Header.CAPTURE_MS, str(MAX_CAPTURE_MS + 1), RejectReason.BAD_HEADER_VALUE),
        (Header.CAPTURE_MS, "9" * 19, RejectReason.BAD_HEADER_VALUE),
    ],
)
def test_numbers_beyond_their_bound_are_refused(header: Header, value: str, reason: str) -> None:
    # A capture time of 9.9e18 ms used to pass and make a final whose latency no 64-bit JSON
    # integer holds: the worker crashed on it, and on it again after every restart.
    headers = [(name, raw) for name, raw in good_headers() if name != header]
    headers.append((header, value.encode()))
    with pytest.raises(ChunkRejectedError) as refused:
        decode_chunk(b"call-1", b"\0" * 640, headers)
    assert refused.value.reason == reason
    assert audio_chunk._decode_ordinary(b"call-1", b"\0" * 640, headers, 65536) is None


def test_the_largest_numbers_are_accepted() -> None:
    headers = [(n, r) for n, r in good_headers() if n not in (Header.SEQ, Header.CAPTURE_MS)]
    headers += [
        (Header.SEQ, str(MAX_SEQ).encode()),
        (Header.CAPTURE_MS, str(MAX_CAPTURE_MS).encode()),
    ]
    chunk = decode_chunk(b"call-1", b"\0" * 640, headers)
    assert (chunk.seq, chunk.capture_ms) == (MAX_SEQ, MAX_CAPTURE_MS)
