"""The audio-chunk wire contract: a Kafka record whose value *is* the audio.

Record layout (documented for producers in ``schemas/audio_chunk.md``, machine-readable in
``schemas/audio_chunk.json``; a unit test keeps this module and that file in step):

- key: the call id, UTF-8, 1..128 bytes. Both channels of a call share the key, so they land on
  one partition and one worker.
- value: raw audio bytes in the encoding named by a header; no JSON, no base64.
- headers (ASCII values): see ``Header``. ``ss-version``, ``ss-channel``, ``ss-seq``,
  ``ss-sample-rate-hz`` and ``ss-encoding`` are required; the rest are optional.

``decode_chunk`` validates a record and returns an ``AudioChunk`` whose payload is a zero-copy
view of the record value; ``AudioChunk.pcm_int16()`` is a zero-copy ``np.frombuffer`` view for
``pcm_s16le``. Every way a record can be invalid raises ``ChunkRejectedError`` with a
``RejectReason``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pipeline.contracts.g711 import alaw_decode, mulaw_decode
from pipeline.errors import ChunkRejectedError

__all__ = [
    "CONTRACT_VERSION",
    "MAX_CALL_ID_BYTES",
    "MAX_CAPTURE_MS",
    "MAX_SEQ",
    "MONO_CHANNEL",
    "STEREO_CHANNELS",
    "SUPPORTED_SAMPLE_RATES_HZ",
    "AudioChunk",
    "Encoding",
    "Header",
    "RejectReason",
    "decode_chunk",
    "encode_chunk",
]

CONTRACT_VERSION = 1
MAX_CALL_ID_BYTES = 128
MONO_CHANNEL = "mono"
"""The channel label of a one-channel call (all speakers on it): the producer SDK's default."""
STEREO_CHANNELS = ("agent", "customer")
"""The channel labels of a two-channel call, in the order of a stereo file's channels."""
SUPPORTED_SAMPLE_RATES_HZ = (8000, 16000)
_SUPPORTED_RATE_TEXTS = frozenset(str(rate) for rate in SUPPORTED_SAMPLE_RATES_HZ)
MAX_SEQ = 2**63 - 1
"""The largest ``ss-seq``: what a signed 64-bit integer (Java's ``long``) holds."""
MAX_CAPTURE_MS = 253_402_300_799_999
"""The largest ``ss-capture-ms``: the last millisecond of the year 9999. Anything later is not a
capture time, and would overflow the latencies computed from it."""
DEFAULT_MAX_PAYLOAD_BYTES = 65536
MAX_CHANNEL_LABEL_BYTES = 32
MAX_TENANT_BYTES = 64
LABEL_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
"""The form of channel and tenant labels (``fullmatch``)."""


class Header(enum.StrEnum):
    """Kafka header names of an audio chunk (values are ASCII)."""

    VERSION = "ss-version"
    """Contract version, decimal; this module speaks ``1``."""
    CHANNEL = "ss-channel"
    """Channel label: ``mono``, ``agent``, ``customer`` or another ``[A-Za-z0-9._-]`` label."""
    SEQ = "ss-seq"
    """Per-(call, channel) sequence number, decimal, from 0, +1 per chunk."""
    SAMPLE_RATE_HZ = "ss-sample-rate-hz"
    """Sample rate of the payload: 8000 or 16000."""
    ENCODING = "ss-encoding"
    """Payload encoding: ``pcm_s16le``, ``mulaw`` or ``alaw``."""
    CAPTURE_MS = "ss-capture-ms"
    """Capture time of the chunk's first sample, epoch milliseconds (optional)."""
    END_OF_STREAM = "ss-end-of-stream"
    """``1`` on the last chunk of the (call, channel); its payload may be empty (optional)."""
    FLUSH = "ss-flush"
    """``1`` forces a final of the open utterance after this chunk's audio (optional)."""
    TENANT = "ss-tenant"
    """Tenant id, selects per-tenant config and hotwords (optional, default ``default``)."""


REQUIRED_HEADERS = (
    Header.VERSION,
    Header.CHANNEL,
    Header.SEQ,
    Header.SAMPLE_RATE_HZ,
    Header.ENCODING,
)


class Encoding(enum.StrEnum):
    """Payload encodings and their bytes per sample."""

    PCM_S16LE = "pcm_s16le"
    MULAW = "mulaw"
    ALAW = "alaw"

    @property
    def bytes_per_sample(self) -> int:
        # An identity test, not a dict lookup: hashing an enum member is slow, and the worker
        # asks this for every chunk.
        return 2 if self is Encoding.PCM_S16LE else 1


class RejectReason(enum.StrEnum):
    """Why a chunk went to the dead-letter topic (the ``dlq-reason`` header)."""

    MISSING_KEY = "missing_key"
    BAD_KEY = "bad_key"
    MISSING_HEADER = "missing_header"
    UNKNOWN_VERSION = "unknown_version"
    BAD_HEADER_VALUE = "bad_header_value"
    UNREADABLE_HEADERS = "unreadable_headers"
    BAD_SEQUENCE = "bad_sequence"
    UNSUPPORTED_SAMPLE_RATE = "unsupported_sample_rate"
    UNSUPPORTED_ENCODING = "unsupported_encoding"
    ODD_BYTE_COUNT = "odd_byte_count"
    OVERSIZE_PAYLOAD = "oversize_payload"
    EMPTY_PAYLOAD = "empty_payload"
    OUT_OF_ORDER = "out_of_order"
    CALL_ALREADY_ENDED = "call_already_ended"
    CALL_TOO_LONG = "call_too_long"
    TOO_MANY_SESSIONS = "too_many_sessions"


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """One validated audio chunk.

    ``payload`` is a view of the record value (no copy); it stays valid as long as the record's
    value bytes are alive, which the ``memoryview`` itself guarantees.
    """

    call_id: str
    channel: str
    seq: int
    sample_rate_hz: int
    encoding: Encoding
    payload: memoryview
    capture_ms: int | None = None
    end_of_stream: bool = False
    flush: bool = False
    tenant: str = "default"

    @property
    def num_samples(self) -> int:
        return len(self.payload) // self.encoding.bytes_per_sample

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self.num_samples / self.sample_rate_hz

    def pcm_int16(self) -> npt.NDArray[np.int16]:
        """Samples as int16 PCM: a zero-copy view for ``pcm_s16le``, a decoded copy for G.711."""
        if self.encoding is Encoding.PCM_S16LE:
            return np.frombuffer(self.payload, dtype="<i2")
        codes = np.frombuffer(self.payload, dtype=np.uint8)
        if self.encoding is Encoding.MULAW:
            return mulaw_decode(codes)
        return alaw_decode(codes)

    def samples_float32(self) -> npt.NDArray[np.float32]:
        """The samples scaled to [-1, 1) as float32 at ``sample_rate_hz`` (a new array)."""
        # One pass (int16 × float32 → float32); exact, the scale is a power of two.
        return np.multiply(self.pcm_int16(), _INT16_SCALE, dtype=np.float32)


_INT16_SCALE = np.float32(1.0 / 32768.0)

HeaderList = Sequence[tuple[str, bytes | str | None]]


def _header_map(headers: HeaderList | None) -> dict[str, bytes]:
    """Header list → dict; the last value wins for a repeated name (Kafka allows repeats)."""
    found: dict[str, bytes] = {}
    for name, value in headers or ():
        if value is None:
            continue
        found[name] = value.encode() if isinstance(value, str) else bytes(value)
    return found


def _ascii(headers: dict[str, bytes], name: Header) -> str:
    raw = headers[name]
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise ChunkRejectedError(RejectReason.BAD_HEADER_VALUE, f"{name} is not ASCII") from None


SHOWN_VALUE_CHARS = 64
"""How much of an offending header value a rejection's detail repeats (it goes into the dead
letter's headers and a ``chunk_rejected`` event: a huge value must not make those too big)."""


def _shown(text: str) -> str:
    """``text`` as the detail of a rejection shows it: quoted, cut at ``SHOWN_VALUE_CHARS``."""
    if len(text) <= SHOWN_VALUE_CHARS:
        return repr(text)
    return f"{text[:SHOWN_VALUE_CHARS]!r}… ({len(text)} characters)"


def _decimal(headers: dict[str, bytes], name: Header, reason: RejectReason, most: int) -> int:
    text = _ascii(headers, name)
    if not text.isdigit() or len(text) > 19:
        raise ChunkRejectedError(
            reason, f"{name}={_shown(text)} is not a non-negative decimal integer"
        )
    value = int(text)
    if value > most:
        raise ChunkRejectedError(reason, f"{name}={_shown(text)} is above {most}")
    return value


def _flag(headers: dict[str, bytes], name: Header) -> bool:
    if name not in headers:
        return False
    text = _ascii(headers, name)
    if text not in ("0", "1"):
        raise ChunkRejectedError(
            RejectReason.BAD_HEADER_VALUE, f"{name}={_shown(text)} must be 0 or 1"
        )
    return text == "1"


def _label(headers: dict[str, bytes], name: Header, max_bytes: int) -> str:
    text = _ascii(headers, name)
    if len(text) > max_bytes or not LABEL_PATTERN.fullmatch(text):
        raise ChunkRejectedError(
            RejectReason.BAD_HEADER_VALUE,
            f"{name}={_shown(text)} must be 1..{max_bytes} characters of [A-Za-z0-9._-]",
        )
    return text


def decode_chunk(
    key: bytes | None,
    value: bytes | memoryview | None,
    headers: HeaderList | None,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> AudioChunk:
    """Validate one record of ``audio.chunks`` and return its ``AudioChunk``.

    Checks, in this order (the first failure decides the reason): key present and valid UTF-8
    of at most 128 bytes; required headers present; version known; sample rate, encoding,
    sequence, flags and labels well formed; payload size within ``max_payload_bytes``, a whole
    number of samples, and non-empty unless the chunk ends the stream or flushes.

    Raises:
        ChunkRejectedError: with a ``RejectReason`` value as ``reason``.
    """
    chunk = _decode_ordinary(key, value, headers, max_payload_bytes)
    if chunk is not None:
        return chunk
    return _decode_checked(key, value, headers, max_payload_bytes=max_payload_bytes)


# (version, channel, sample rate, encoding, tenant) header bytes → their validated values. These
# repeat on every chunk of a session, so each combination is validated once (bounded: cleared
# when full, a cache miss only costs the full validation).
_SessionHeaders = tuple[bytes | None, bytes | None, bytes | None, bytes | None, bytes | None]
_SESSION_HEADER_CACHE: dict[_SessionHeaders, tuple[str, int, Encoding, str]] = {}
_SESSION_HEADER_CACHE_SIZE = 4096
# Header name → its place in ``_decode_ordinary``'s unpacking (plain ``str`` keys: comparing with
# enum members costs more than the rest of the hot path).
_HEADER_SLOTS: dict[str, int] = {header.value: slot for slot, header in enumerate(Header)}


def _decode_ordinary(
    key: bytes | None,
    value: bytes | memoryview | None,
    headers: HeaderList | None,
    max_payload_bytes: int,
) -> AudioChunk | None:
    """The hot path for a valid record (the worker decodes every chunk): the ``AudioChunk``
    ``_decode_checked`` would return, or ``None`` whenever anything is unusual, in which case
    ``_decode_checked`` decides (and names the reason). A unit test holds the two to agreement.
    """
    if not key or len(key) > MAX_CALL_ID_BYTES or not headers:
        return None
    found: list[bytes | None] = [None] * len(_HEADER_SLOTS)
    for name, raw in headers:
        if raw is None:
            continue
        if not isinstance(raw, bytes):
            return None
        slot = _HEADER_SLOTS.get(name)
        if slot is not None:
            found[slot] = raw
    version, channel, seq, rate, encoding, capture, end, flush, tenant = found  # Header order
    if seq is None or len(seq) > 19 or not seq.isdigit():
        return None
    if capture is not None and (len(capture) > 19 or not capture.isdigit()):
        return None
    if end not in (None, b"0", b"1") or flush not in (None, b"0", b"1"):
        return None
    session_headers = (version, channel, rate, encoding, tenant)
    known = _SESSION_HEADER_CACHE.get(session_headers)
    if known is None:
        known = _validate_session_headers(session_headers)
        if known is None:
            return None
        if len(_SESSION_HEADER_CACHE) >= _SESSION_HEADER_CACHE_SIZE:
            _SESSION_HEADER_CACHE.clear()
        _SESSION_HEADER_CACHE[session_headers] = known
    channel_label, sample_rate_hz, chunk_encoding, tenant_label = known
    try:
        call_id = bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not call_id.isprintable():
        return None
    payload = memoryview(value if value is not None else b"").cast("B")
    end_of_stream, flushes = end == b"1", flush == b"1"
    if (
        len(payload) > max_payload_bytes
        or len(payload) % chunk_encoding.bytes_per_sample
        or not (payload or end_of_stream or flushes)
    ):
        return None
    seq_number = int(seq)
    capture_ms = None if capture is None else int(capture)
    if seq_number > MAX_SEQ or (capture_ms is not None and capture_ms > MAX_CAPTURE_MS):
        return None
    return AudioChunk(
        call_id=call_id,
        channel=channel_label,
        seq=seq_number,
        sample_rate_hz=sample_rate_hz,
        encoding=chunk_encoding,
        payload=payload,
        capture_ms=capture_ms,
        end_of_stream=end_of_stream,
        flush=flushes,
        tenant=tenant_label,
    )


def _validate_session_headers(
    session_headers: _SessionHeaders,
) -> tuple[str, int, Encoding, str] | None:
    """Channel, sample rate, encoding and tenant when all are valid (and the version is ours)."""
    if None in session_headers[:4]:  # all but the tenant are required
        return None
    names = (Header.VERSION, Header.CHANNEL, Header.SAMPLE_RATE_HZ, Header.ENCODING, Header.TENANT)
    found: dict[str, bytes] = {
        name: raw for name, raw in zip(names, session_headers, strict=True) if raw is not None
    }
    try:
        sample_rate_hz, encoding = _format(found)
        channel, tenant = _labels(found)
    except ChunkRejectedError:
        return None
    return channel, sample_rate_hz, encoding, tenant


def _format(found: dict[str, bytes]) -> tuple[int, Encoding]:
    """The version (must be ours), sample rate and encoding headers, checked in that order."""
    version_text = _ascii(found, Header.VERSION)
    if version_text != str(CONTRACT_VERSION):
        raise ChunkRejectedError(
            RejectReason.UNKNOWN_VERSION,
            f"{Header.VERSION}={_shown(version_text)}, this worker speaks {CONTRACT_VERSION}",
        )
    rate_text = _ascii(found, Header.SAMPLE_RATE_HZ)
    # Compared as text: int() of a long digit string raises ValueError (Python's 4300-digit
    # limit), which would escape as a crash on every read of the record, not a dead letter.
    if rate_text not in _SUPPORTED_RATE_TEXTS:
        raise ChunkRejectedError(
            RejectReason.UNSUPPORTED_SAMPLE_RATE,
            f"{Header.SAMPLE_RATE_HZ}={_shown(rate_text)}, supported: {SUPPORTED_SAMPLE_RATES_HZ}",
        )
    encoding_text = _ascii(found, Header.ENCODING)
    try:
        encoding = Encoding(encoding_text)
    except ValueError:
        supported = ", ".join(e.value for e in Encoding)
        raise ChunkRejectedError(
            RejectReason.UNSUPPORTED_ENCODING,
            f"{Header.ENCODING}={_shown(encoding_text)}, supported: {supported}",
        ) from None
    return int(rate_text), encoding


def _labels(found: dict[str, bytes]) -> tuple[str, str]:
    """The channel label and the tenant (``default`` when absent)."""
    channel = _label(found, Header.CHANNEL, MAX_CHANNEL_LABEL_BYTES)
    tenant = _label(found, Header.TENANT, MAX_TENANT_BYTES) if Header.TENANT in found else "default"
    return channel, tenant


def _decode_checked(
    key: bytes | None,
    value: bytes | memoryview | None,
    headers: HeaderList | None,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> AudioChunk:
    """Every check of ``decode_chunk``, one at a time, raising ``ChunkRejectedError`` with the
    reason of the first that fails (the order is ``decode_chunk``'s)."""
    if not key:
        raise ChunkRejectedError(RejectReason.MISSING_KEY, "record has no key (the call id)")
    if len(key) > MAX_CALL_ID_BYTES:
        raise ChunkRejectedError(
            RejectReason.BAD_KEY, f"call id is {len(key)} bytes, at most {MAX_CALL_ID_BYTES}"
        )
    try:
        call_id = bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        raise ChunkRejectedError(RejectReason.BAD_KEY, "call id is not valid UTF-8") from None
    if not call_id.isprintable():
        raise ChunkRejectedError(
            RejectReason.BAD_KEY,
            f"call id {_shown(call_id)} is not printable (a line break, a tab, a zero-width or "
            "non-breaking space: ids go into utterance_id and log lines)",
        )

    found = _header_map(headers)
    missing = [str(name) for name in REQUIRED_HEADERS if name not in found]
    if missing:
        raise ChunkRejectedError(
            RejectReason.MISSING_HEADER, f"missing header(s) {', '.join(missing)}"
        )

    sample_rate_hz, encoding = _format(found)
    seq = _decimal(found, Header.SEQ, RejectReason.BAD_SEQUENCE, MAX_SEQ)
    channel, tenant = _labels(found)
    capture_ms = (
        _decimal(found, Header.CAPTURE_MS, RejectReason.BAD_HEADER_VALUE, MAX_CAPTURE_MS)
        if Header.CAPTURE_MS in found
        else None
    )
    end_of_stream = _flag(found, Header.END_OF_STREAM)
    flush = _flag(found, Header.FLUSH)

    payload = memoryview(value if value is not None else b"").cast("B")
    if len(payload) > max_payload_bytes:
        raise ChunkRejectedError(
            RejectReason.OVERSIZE_PAYLOAD,
            f"payload is {len(payload)} bytes, at most {max_payload_bytes}",
        )
    if len(payload) % encoding.bytes_per_sample:
        raise ChunkRejectedError(
            RejectReason.ODD_BYTE_COUNT,
            f"{encoding.value} payload of {len(payload)} bytes is not whole samples",
        )
    if not payload and not (end_of_stream or flush):
        raise ChunkRejectedError(
            RejectReason.EMPTY_PAYLOAD, "empty payload without end-of-stream or flush flag"
        )
    return AudioChunk(
        call_id=call_id,
        channel=channel,
        seq=seq,
        sample_rate_hz=sample_rate_hz,
        encoding=encoding,
        payload=payload,
        capture_ms=capture_ms,
        end_of_stream=end_of_stream,
        flush=flush,
        tenant=tenant,
    )


def encode_chunk(chunk: AudioChunk) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """The (key, value, headers) of a record carrying ``chunk``; ``decode_chunk`` inverts it."""
    headers: list[tuple[str, bytes]] = [
        (Header.VERSION, str(CONTRACT_VERSION).encode()),
        (Header.CHANNEL, chunk.channel.encode()),
        (Header.SEQ, str(chunk.seq).encode()),
        (Header.SAMPLE_RATE_HZ, str(chunk.sample_rate_hz).encode()),
        (Header.ENCODING, chunk.encoding.value.encode()),
        (Header.TENANT, chunk.tenant.encode()),
    ]
    if chunk.capture_ms is not None:
        headers.append((Header.CAPTURE_MS, str(chunk.capture_ms).encode()))
    if chunk.end_of_stream:
        headers.append((Header.END_OF_STREAM, b"1"))
    if chunk.flush:
        headers.append((Header.FLUSH, b"1"))
    return chunk.call_id.encode("utf-8"), bytes(chunk.payload), headers
