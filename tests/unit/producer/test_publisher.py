"""``AudioPublisher`` / ``CallStream`` against a fake transport: records, flags, errors."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.clock import ManualClock
from pipeline.contracts import Encoding, Header
from pipeline.contracts.g711 import mulaw_encode
from pipeline.errors import ConfigError, ContractError, PublishError
from pipeline.producer import STEREO, AudioPublisher
from tests.unit.producer.fakes import FakeTransport

T0_MS = 1_790_000_000_000


def _publisher(transport: FakeTransport, **kwargs: object) -> AudioPublisher:
    return AudioPublisher(
        transport,
        topic="audio.chunks",
        clock=ManualClock(T0_MS),
        **kwargs,  # type: ignore[arg-type]
    )


def _tone(num_samples: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-20000, 20000, num_samples, dtype=np.int16)


def test_push_cuts_chunks_and_end_sends_the_rest_with_end_of_stream() -> None:
    transport = FakeTransport()
    publisher = _publisher(transport)
    audio = _tone(450)
    with publisher.open_call("c1", channels=("mono",), sample_rate_hz=8000) as call:
        assert call.push("mono", audio[:100]) == 0
        assert call.push("mono", audio[100:400]) == 2
        assert call.push("mono", audio[400:]) == 0
    chunks = transport.chunks()
    assert [c.seq for c in chunks] == [0, 1, 2]
    assert [c.num_samples for c in chunks] == [160, 160, 130]
    assert [c.end_of_stream for c in chunks] == [False, False, True]
    assert b"".join(bytes(c.payload) for c in chunks) == audio.astype("<i2").tobytes()
    assert all(r.key == b"c1" and r.topic == "audio.chunks" for r in transport.records)
    # No capture time given: the clock dates the first sample, the audio dates the rest.
    assert [c.capture_ms for c in chunks] == [T0_MS, T0_MS + 20, T0_MS + 40]


def test_stereo_frames_split_into_agent_and_customer_with_their_own_sequences() -> None:
    transport = FakeTransport()
    publisher = _publisher(transport)
    left, right = _tone(330, 1), _tone(330, 2)
    with publisher.open_call("c2", channels=STEREO, sample_rate_hz=16000, tenant="acme") as call:
        call.push_frames(np.stack([left, right], axis=1), capture_ms=T0_MS + 7)
    chunks = transport.chunks()
    for label, samples in (("agent", left), ("customer", right)):
        mine = [c for c in chunks if c.channel == label]
        assert [c.seq for c in mine] == [0, 1]
        assert b"".join(bytes(c.payload) for c in mine) == samples.tobytes()
        assert [c.capture_ms for c in mine] == [T0_MS + 7, T0_MS + 27]
        assert mine[-1].end_of_stream
    assert {c.tenant for c in chunks} == {"acme"}


def test_flush_sends_the_remainder_flagged_and_the_call_goes_on() -> None:
    transport = FakeTransport()
    publisher = _publisher(transport)
    call = publisher.open_call("c3", sample_rate_hz=16000)
    call.push("mono", _tone(400))
    assert call.flush("mono") == 1
    assert call.flush() == 1  # nothing buffered: an empty flush record is still valid
    call.push("mono", _tone(320))
    call.end()
    chunks = transport.chunks()
    assert [(c.seq, c.num_samples, c.flush, c.end_of_stream) for c in chunks] == [
        (0, 320, False, False),
        (1, 80, True, False),
        (2, 0, True, False),
        (3, 320, False, False),
        (4, 0, False, True),
    ]
    assert [(c.capture_ms or 0) - T0_MS for c in chunks] == [0, 20, 25, 25, 45]
    assert call.ended
    assert call.end() == 0


def test_g711_calls_encode_samples_and_pass_bytes_through() -> None:
    transport = FakeTransport()
    publisher = _publisher(transport)
    samples = _tone(160)
    with publisher.open_call("c4", sample_rate_hz=8000, encoding="mulaw") as call:
        call.push("mono", samples)
        call.push("mono", b"\xff" * 10)
    chunks = transport.chunks()
    assert chunks[0].encoding is Encoding.MULAW
    assert bytes(chunks[0].payload) == mulaw_encode(samples).tobytes()
    assert bytes(chunks[1].payload) == b"\xff" * 10


def test_every_record_follows_the_contract_and_headers_come_from_encode_chunk() -> None:
    transport = FakeTransport()
    publisher = _publisher(transport, chunk_ms=40)
    with publisher.open_call("call-ü", channels=("agent",), sample_rate_hz=16000) as call:
        call.push("agent", _tone(1000), capture_ms=T0_MS)
    assert [c.num_samples for c in transport.chunks()] == [640, 360]
    names = [name for name, _ in transport.records[0].headers]
    assert names[:2] == [Header.VERSION, Header.CHANNEL]
    assert transport.records[0].key == "call-ü".encode()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sample_rate_hz": 44100}, "44100"),
        ({"channels": ("agent", "agent")}, "distinct"),
        ({"channels": ()}, "distinct"),
        ({"channels": ("bad label",)}, "ss-channel"),
        ({"tenant": "no spaces"}, "ss-tenant"),
        ({"encoding": "opus"}, "encoding"),
        ({"chunk_ms": 3000}, "65536"),
        ({"chunk_ms": 0}, "chunk"),
    ],
)
def test_open_call_refuses_what_the_contract_would_reject(
    kwargs: dict[str, object], match: str
) -> None:
    publisher = _publisher(FakeTransport())
    with pytest.raises(ConfigError, match=match):
        publisher.open_call("c5", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="call id"):
        publisher.open_call("x" * 200)


@pytest.mark.parametrize("kwargs", [{"call_id": "ab\udcff"}, {"call_id": "c", "tenant": "t\udcff"}])
def test_text_that_is_not_encodable_is_refused_with_one_line(kwargs: dict[str, str]) -> None:
    # What `--call-id $'ab\xff'` becomes on a UTF-8 command line: a lone surrogate.
    with pytest.raises(ConfigError, match="valid text"):
        _publisher(FakeTransport()).open_call(**kwargs)  # type: ignore[arg-type]


def test_one_open_call_per_id_and_no_audio_after_end() -> None:
    publisher = _publisher(FakeTransport())
    call = publisher.open_call("c6")
    with pytest.raises(ConfigError, match="already open"):
        publisher.open_call("c6")
    with pytest.raises(ConfigError, match="no channel"):
        call.push("agent", _tone(10))
    call.end()
    with pytest.raises(ContractError, match="ended"):
        call.push("mono", _tone(10))
    publisher.open_call("c6").end()  # ended calls free their id


def test_a_failed_delivery_raises_on_the_next_push_once() -> None:
    transport = FakeTransport(fail=lambda index: "Broker: boom" if index == 1 else None)
    publisher = _publisher(transport)
    call = publisher.open_call("c7", sample_rate_hz=8000)
    call.push("mono", _tone(320))  # records 0 and 1 sent; reports come at the next poll
    with pytest.raises(PublishError, match="seq 1: Broker: boom") as raised:
        call.push("mono", _tone(160))
    assert raised.value.failures == ("call 'c7' mono seq 1: Broker: boom",)
    # The push that reported the failure still sent its own audio (record 2): nothing the
    # caller handed over is dropped, and the timeline stays exact.
    assert call.next_seq("mono") == 3
    call.push("mono", _tone(160))  # reported once; the caller decides what to do next
    call.end()
    publisher.close()
    summary = call.summary()
    assert (summary.failed_records, summary.delivered_records) == (1, 4)
    sent = [dict(record.headers) for record in transport.records]
    assert [h["ss-seq"] for h in sent] == [b"0", b"1", b"2", b"3", b"4"]
    assert [int(h["ss-capture-ms"]) - int(sent[0]["ss-capture-ms"]) for h in sent[:4]] == [
        0,
        20,
        40,
        60,
    ]
    assert summary.partitions == (3,)
    assert transport.closed


def test_a_failed_delivery_raises_from_flush_and_from_the_context_manager() -> None:
    transport = FakeTransport(fail=lambda index: "Local: Message timed out")
    publisher = _publisher(transport)
    publisher.open_call("c8").push("mono", _tone(320))  # one 20 ms chunk at 16 kHz
    with pytest.raises(PublishError, match="1 record"):
        publisher.flush()

    transport = FakeTransport(fail=lambda index: "Local: Message timed out")
    with pytest.raises(PublishError), _publisher(transport) as publisher:
        publisher.open_call("c9").end()
    assert transport.closed


def test_records_without_a_report_by_the_timeout_raise() -> None:
    transport = FakeTransport(stuck=True)
    publisher = _publisher(transport)
    publisher.open_call("c10").end()
    with pytest.raises(PublishError, match=r"1 record.*unconfirmed"):
        publisher.close(timeout_s=0.01)
    assert transport.closed
    publisher.close()  # idempotent
    with pytest.raises(ConfigError, match="closed"):
        publisher.open_call("c11")


def test_summary_counts_records_audio_and_bytes_per_channel() -> None:
    transport = FakeTransport()
    publisher = _publisher(transport)
    with publisher.open_call("c12", channels=STEREO, sample_rate_hz=8000) as call:
        call.push("agent", _tone(8000))
        call.push("customer", _tone(4000))
    publisher.flush()
    summary = call.summary()
    agent, customer = summary.channels
    assert (agent.records, agent.audio_ms, agent.payload_bytes) == (51, 1000.0, 16000)
    assert (customer.records, customer.audio_ms, customer.payload_bytes) == (26, 500.0, 8000)
    assert summary.records == 77
    assert summary.delivered_records == 77


def test_leaving_a_call_ends_every_channel_even_after_a_failed_delivery() -> None:
    transport = FakeTransport(fail=lambda index: "Broker: boom" if index == 1 else None)
    publisher = _publisher(transport)
    call = publisher.open_call("call-b", channels=("agent", "customer"))
    call.push("agent", _tone(500))  # record 0, and a remainder
    call.push("customer", _tone(50))  # a remainder only
    publisher.open_call("call-a").push("mono", _tone(320))  # record 1: its delivery fails
    publisher.transport.poll(0)  # the failure is reported meanwhile
    with pytest.raises(PublishError, match="call-a"):
        call.__exit__(None, None, None)  # leaving the with block
    ended = [(c.call_id, c.channel) for c in transport.chunks() if c.end_of_stream]
    assert ended == [("call-b", "agent"), ("call-b", "customer")]
    publisher.open_call("call-b")  # not "already open": the call ended


def test_a_record_refused_at_once_is_counted_and_the_rest_of_the_push_is_sent() -> None:
    transport = FakeTransport(refuse=lambda index: index == 1)
    publisher = _publisher(transport)
    call = publisher.open_call("c12", sample_rate_hz=8000)
    with pytest.raises(PublishError, match="refused"):
        call.push("mono", _tone(4 * 160))
    assert [c.seq for c in transport.chunks()] == [0, 2, 3]  # the worker sees a 1-chunk gap
    assert call.summary().failed_records == 1
    call.end()
    assert [c.seq for c in transport.chunks()][-1] == 4


def test_a_refusal_on_one_channel_leaves_the_other_channels_audio_in_push_frames() -> None:
    transport = FakeTransport(refuse=lambda index: index == 0)  # the agent's first record
    publisher = _publisher(transport)
    call = publisher.open_call("c13", channels=STEREO, sample_rate_hz=8000)
    block = np.stack([_tone(320, 1), _tone(320, 2)], axis=1)  # 40 ms: 2 chunks a channel
    with pytest.raises(PublishError, match="refused"):
        call.push_frames(block)
    call.push_frames(block)
    call.end()
    chunks = transport.chunks()
    agent = [(c.seq, c.capture_ms - T0_MS) for c in chunks if c.channel == "agent"]
    customer = [(c.seq, c.capture_ms - T0_MS) for c in chunks if c.channel == "customer"]
    assert agent == [(1, 20), (2, 40), (3, 60), (4, 80)]  # seq 0 refused: a 1-chunk gap
    assert customer == [(0, 0), (1, 20), (2, 40), (3, 60), (4, 80)]
    stats = {s.channel: s for s in call.summary().channels}
    assert (stats["customer"].audio_samples, stats["agent"].audio_samples) == (640, 640 - 160)
    assert call.summary().failed_records == 1


def test_a_call_cannot_send_once_its_publisher_is_closed() -> None:
    transport = FakeTransport()
    publisher = _publisher(transport)
    call = publisher.open_call("c-late", sample_rate_hz=8000)
    publisher.close()
    with pytest.raises(ConfigError, match="publisher is closed"):
        call.push("mono", _tone(160))
    assert transport.records == []


def test_a_failure_is_still_reported_after_a_push_that_raised_for_its_own_audio() -> None:
    transport = FakeTransport(fail=lambda index: "Broker: boom" if index == 0 else None)
    publisher = _publisher(transport)
    call = publisher.open_call("c-odd", sample_rate_hz=8000)
    call.push("mono", _tone(160))
    with pytest.raises(ContractError):
        call.push("mono", b"\x01")  # half a sample: this push's own mistake
    with pytest.raises(PublishError, match="seq 0: Broker: boom"):
        call.push("mono", _tone(160))
