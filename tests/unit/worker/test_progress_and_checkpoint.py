"""Low watermarks and checkpoint records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

from pipeline.asr.endpoint import EndpointSnapshot
from pipeline.asr.session import SessionKey, SessionSnapshot
from pipeline.asr.vad import SpeechGateSnapshot
from pipeline.worker.admission import AdmissionState
from pipeline.worker.checkpoint import (
    PARTITION_KEY,
    PartitionCheckpoint,
    SessionCheckpoint,
    decode_checkpoint,
    encode_key,
)
from pipeline.worker.progress import PartitionProgress

KEY = SessionKey("call:1", "agent")


def _snapshot(last_position: int) -> SessionSnapshot:
    return SessionSnapshot(
        tenant="acme",
        input_rate_hz=8000,
        total_samples=32000,
        tail=tuple(np.linspace(-0.5, 0.5, 700).tolist()),
        vad_state=(tuple(np.arange(256) / 7.0), tuple(np.arange(64) / 3.0)),
        gate=SpeechGateSnapshot(32000, 31040, False, None, None),
        endpoint=EndpointSnapshot(31040, None, None),
        upsampler=tuple(np.arange(15) / 11.0),
        next_index=3,
        capture_mark=(31000, 1_790_000_000_000),
        last_position=last_position,
        stats=(32000, 12000, 3, 0),
    )


def test_low_watermark_is_the_oldest_needed_offset_or_the_next_one() -> None:
    progress = PartitionProgress(0)
    assert progress.low_watermark() is None
    for offset in (10, 11, 12):
        progress.consumed(offset)
    assert progress.low_watermark() == 13
    progress.session(KEY).needed_offsets.extend([11, 12])
    assert progress.low_watermark() == 11
    progress.snapshot_taken(KEY, _snapshot(last_position=11))
    assert progress.low_watermark() == 12
    progress.snapshot_taken(KEY, _snapshot(last_position=12))
    assert progress.low_watermark() == 13


def test_session_checkpoint_round_trip_is_exact() -> None:
    checkpoint = SessionCheckpoint(
        KEY, _snapshot(41), AdmissionState(next_seq=9, audio_ms=180.0), 2, False
    )
    decoded = decode_checkpoint(encode_key(KEY), checkpoint.encode())
    assert decoded == checkpoint


def test_the_finals_counts_round_trip_and_are_absent_in_older_checkpoints() -> None:
    checkpoint = SessionCheckpoint(
        KEY, None, None, 6, False, finals_published=5, finals_suppressed=1
    )
    assert decode_checkpoint(encode_key(KEY), checkpoint.encode()) == checkpoint
    older = orjson.loads(checkpoint.encode())
    del older["finals_published"], older["finals_suppressed"]
    decoded = decode_checkpoint(encode_key(KEY), orjson.dumps(older))
    assert isinstance(decoded, SessionCheckpoint)
    assert (decoded.finals_published, decoded.finals_suppressed) == (None, None)


def test_partition_checkpoint_and_ended_session_round_trip() -> None:
    partition = PartitionCheckpoint(handled_through=99)
    assert decode_checkpoint(encode_key(PARTITION_KEY), partition.encode()) == partition
    ended = SessionCheckpoint(KEY, None, AdmissionState(next_seq=5, ended=True), 4, True)
    assert decode_checkpoint(encode_key(KEY), ended.encode()) == ended


@pytest.mark.parametrize(
    "damage",
    [
        lambda snapshot: snapshot.pop("tail"),
        lambda snapshot: snapshot.update(gate=snapshot["gate"][:4]),
        lambda snapshot: snapshot.update(stats=None),
        lambda snapshot: snapshot.update(endpoint=[31040, None, 20000]),  # start/end disagree
        # Decodable, but a step would fail on them later (slice indices, comparisons):
        lambda snapshot: snapshot.update(gate=[32000.5, 31040, False, None, None]),
        lambda snapshot: snapshot.update(gate=["32000", 31040, False, None, None]),
        lambda snapshot: snapshot.update(gate=[32000, 31040, 0, None, None]),
        lambda snapshot: snapshot.update(endpoint=[True, None, None]),
        lambda snapshot: snapshot.update(tenant=7),
        lambda snapshot: snapshot.update(gate=[40000, 31040, False, None, None]),
        lambda snapshot: snapshot.update(gate=[32000, 32001, False, None, None]),
        lambda snapshot: snapshot.update(endpoint=[32001, None, None]),
        lambda snapshot: snapshot.update(input_rate_hz=44100),
        lambda snapshot: snapshot.update(next_index=-1),
    ],
    ids=[
        "missing-field",
        "short-gate",
        "null-stats",
        "inconsistent-endpoint",
        "float-position",
        "string-position",
        "int-for-bool",
        "bool-for-int",
        "tenant-not-text",
        "gate-beyond-stream",
        "settled-beyond-gate",
        "endpoint-beyond-stream",
        "unknown-rate",
        "negative-index",
    ],
)
def test_a_malformed_snapshot_is_a_value_error(damage: Callable[[dict[str, Any]], object]) -> None:
    """The worker's checkpoint reader skips ValueErrors; anything else would crash every worker
    that takes the partition (the bad record stays in the compacted topic)."""
    record = orjson.loads(SessionCheckpoint(KEY, _snapshot(4), None, 2, False).encode())
    damage(record["snapshot"])
    with pytest.raises(ValueError, match=r"malformed|session snapshot"):
        decode_checkpoint(encode_key(KEY), orjson.dumps(record))


def test_a_call_id_that_looks_like_the_partition_key_is_still_a_session() -> None:
    tricky = SessionKey("__partition__", "")
    checkpoint = SessionCheckpoint(tricky, None, None, -1, False)
    assert decode_checkpoint(encode_key(tricky), checkpoint.encode()) == checkpoint
