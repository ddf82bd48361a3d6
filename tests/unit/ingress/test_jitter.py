"""The reorder buffer and the RTP receiver: order restored, duplicates and late packets dropped,
gaps filled by timestamp, wraparound and stream changes continue one timeline, always bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.ingress.calls import ChannelSpec, RtpReceiver, SourcePolicy
from pipeline.ingress.jitter import JitterBuffer, JitterConfig, PushStatus
from pipeline.ingress.rtp import Codec, RejectReason
from tests.unit.ingress.test_rtp import build

SAMPLES = 160  # 20 ms at 8 kHz, one byte per sample (G.711)
DEPTH = 8
SILENCE = b"\xff"
SOURCE = ("127.0.0.1", 5004)


def config(**overrides: int) -> JitterConfig:
    return JitterConfig(
        sample_rate_hz=8000,
        bytes_per_sample=1,
        silence_sample=SILENCE,
        depth_packets=overrides.get("depth_packets", DEPTH),
        max_wait_ms=overrides.get("max_wait_ms", 60),
        max_gap_ms=overrides.get("max_gap_ms", 10_000),
        start_hold_ms=overrides.get("start_hold_ms", 0),
    )


def audio(index: int) -> bytes:
    """A packet's payload that no other packet has (and that is never μ-law silence)."""
    return bytes([index % 200 + 1]) * SAMPLES


starts = st.tuples(
    st.integers(0, 65535) | st.sampled_from([65530, 65535]),
    st.integers(0, 2**32 - 1) | st.just(2**32 - 3 * SAMPLES),
)


@st.composite
def reordered(draw: st.DrawFn) -> tuple[int, list[int]]:
    """A count and an arrival order in which no packet comes more than DEPTH - 1 places late,
    with some packets repeated later (duplicates)."""
    count = draw(st.integers(1, 60))
    keys = [index + draw(st.floats(0, DEPTH - 1.01)) for index in range(count)]
    order = sorted(range(count), key=lambda index: keys[index])
    for _ in range(draw(st.integers(0, 5))):
        position = draw(st.integers(0, len(order) - 1))
        order.insert(draw(st.integers(position + 1, len(order))), order[position])
    assert sorted(set(order)) == list(range(count))
    return count, order


@given(start=starts, case=reordered())
def test_reordered_and_duplicated_packets_come_out_once_in_order(
    start: tuple[int, int], case: tuple[int, list[int]]
) -> None:
    first_seq, first_ts = start
    count, order = case
    buffer = JitterBuffer(config())
    out = b""
    duplicates = 0
    # The first packet to arrive starts the stream: reorder relative to it.
    base = order[0]
    for index in order:
        release = buffer.push(
            (first_seq + index) % 65536, (first_ts + index * SAMPLES) % 2**32, audio(index), 0
        )
        assert buffer.waiting_packets <= DEPTH
        duplicates += release.status is PushStatus.DUPLICATE
        late = release.status is PushStatus.LATE
        assert not late or index < base
        out += release.audio
        assert release.lost_packets == 0
    out += buffer.drain().audio
    expected = b"".join(audio(index) for index in range(base, count))
    assert out == expected
    # A repeat of a packet that was taken is a duplicate; packets before the first to arrive
    # are late, repeats included (they were never taken).
    repeats = len([i for i in order if i >= base]) - len({i for i in order if i >= base})
    assert duplicates == repeats


@given(
    start=starts,
    count=st.integers(3, 60),
    dropped=st.sets(st.integers(1, 58), max_size=20),
)
def test_lost_packets_become_silence_of_their_length(
    start: tuple[int, int], count: int, dropped: set[int]
) -> None:
    first_seq, first_ts = start
    dropped = {index for index in dropped if index < count - 1}
    buffer = JitterBuffer(config())
    out = b""
    lost = filled = 0
    for index in range(count):
        if index in dropped:
            continue
        release = buffer.push(
            (first_seq + index) % 65536, (first_ts + index * SAMPLES) % 2**32, audio(index), 0
        )
        out += release.audio
        lost += release.lost_packets
        filled += release.filled_samples
    release = buffer.drain()
    out += release.audio
    lost += release.lost_packets
    filled += release.filled_samples
    expected = b"".join(
        SILENCE * SAMPLES if index in dropped else audio(index) for index in range(count)
    )
    assert out == expected
    assert lost == len(dropped)
    assert filled == len(dropped) * SAMPLES


@given(
    st.lists(
        st.tuples(st.integers(0, 65535), st.integers(0, 2**32 - 1), st.integers(0, 10_000)),
        max_size=80,
    )
)
def test_any_packets_at_all_keep_the_buffer_bounded(packets: list[tuple[int, int, int]]) -> None:
    buffer = JitterBuffer(config())
    for seq, timestamp, arrival_ms in packets:
        buffer.push(seq, timestamp, audio(seq), arrival_ms)
        assert buffer.waiting_packets <= DEPTH


def test_a_packet_after_its_place_was_given_up_is_late() -> None:
    buffer = JitterBuffer(config())
    buffer.push(0, 0, audio(0), 0)
    lost = 0
    for index in range(2, 2 + DEPTH):
        lost += buffer.push(index, index * SAMPLES, audio(index), 0).lost_packets
    assert lost == 1
    assert buffer.push(1, SAMPLES, audio(1), 0).status is PushStatus.LATE


def test_a_missing_packet_is_given_up_after_the_wait_even_without_more_packets() -> None:
    buffer = JitterBuffer(config(max_wait_ms=60))
    assert buffer.push(0, 0, audio(0), 1000).audio == audio(0)
    assert buffer.push(2, 2 * SAMPLES, audio(2), 1000).audio == b""
    assert buffer.expire(1059).audio == b""
    release = buffer.expire(1060)
    assert release.audio == SILENCE * SAMPLES + audio(2)
    assert release.lost_packets == 1


def test_silence_suppression_is_filled_by_timestamp() -> None:
    buffer = JitterBuffer(config())
    buffer.push(7, 1000, audio(0), 0)
    # The next packet follows in sequence but 2 s later on the RTP clock (no packets between).
    release = buffer.push(8, 1000 + SAMPLES + 16000, audio(1), 2000)
    assert release.audio == SILENCE * 16000 + audio(1)
    assert release.filled_samples == 16000


def test_a_sequence_jump_continues_the_timeline_by_arrival_time() -> None:
    buffer = JitterBuffer(config())
    out = b""
    for index in range(5):
        out += buffer.push(100 + index, index * SAMPLES, audio(index), 20 * index).audio
    # A re-INVITE: numbering restarts far away, 1 s after the last packet arrived.
    release = buffer.push(40_000, 123_456, audio(9), 80 + 1000)
    assert release.discontinuity
    out += release.audio
    gap_samples = (1000 - 20) * 8
    assert out == b"".join(audio(i) for i in range(5)) + SILENCE * gap_samples + audio(9)


def receiver(**spec: int | None) -> RtpReceiver:
    return RtpReceiver(
        ChannelSpec("agent", Codec.PCMU, 8000, **spec),  # type: ignore[arg-type]
        SourcePolicy.parse("127.0.0.0/8"),
        config(),
    )


def test_a_new_ssrc_after_probation_continues_the_same_channel() -> None:
    rtp = receiver()
    out = b""
    for index in range(3):
        out += rtp.receive(
            build(seq=index, timestamp=index * SAMPLES, ssrc=1, payload=audio(index)),
            SOURCE,
            20 * index,
        ).audio
    held = rtp.receive(build(seq=900, timestamp=5, ssrc=2, payload=audio(10)), SOURCE, 540)
    assert held.audio == b""
    switched = rtp.receive(
        build(seq=901, timestamp=5 + SAMPLES, ssrc=2, payload=audio(11)), SOURCE, 560
    )
    assert switched.discontinuity
    out += switched.audio
    silence = SILENCE * ((540 - 40 - 20) * 8)
    assert out == audio(0) + audio(1) + audio(2) + silence + audio(10) + audio(11)


def test_an_interleaved_foreign_ssrc_is_refused_and_the_stream_goes_on() -> None:
    rtp = receiver()
    rtp.receive(build(seq=1, timestamp=0, ssrc=1, payload=audio(1)), SOURCE, 0)
    rtp.receive(build(seq=77, timestamp=0, ssrc=9, payload=audio(9)), SOURCE, 5)
    after = rtp.receive(build(seq=2, timestamp=SAMPLES, ssrc=1, payload=audio(2)), SOURCE, 20)
    assert after.rejected is not None
    assert after.rejected.reason is RejectReason.UNEXPECTED_SSRC
    assert after.audio == audio(2)


def test_sources_outside_the_allow_list_and_after_the_first_are_refused() -> None:
    rtp = receiver()
    outside = rtp.receive(build(), ("10.1.2.3", 5004), 0)
    assert outside.rejected is not None
    assert outside.rejected.reason is RejectReason.UNEXPECTED_SOURCE
    assert rtp.receive(build(seq=1), SOURCE, 0).rejected is None
    other = rtp.receive(build(seq=2), ("127.0.0.1", 6000), 0)
    assert other.rejected is not None
    assert other.rejected.reason is RejectReason.UNEXPECTED_SOURCE


def test_telephone_events_and_comfort_noise_stay_out_of_the_audio() -> None:
    notices = []
    rtp = receiver()
    out = rtp.receive(build(seq=1, timestamp=0, payload=audio(1)), SOURCE, 0).audio
    event = bytes([5, 0x0A]) + (320).to_bytes(2, "big")
    end = bytes([5, 0x8A]) + (480).to_bytes(2, "big")
    for seq, payload in ((2, event), (3, end), (4, end), (5, end)):
        received = rtp.receive(
            build(seq=seq, timestamp=SAMPLES, payload_type=101, payload=payload), SOURCE, 0
        )
        notices += [(event.digit, len(out) + at) for event, at in received.dtmf_placed]
        out += received.audio
        assert received.dtmf is None
    out += rtp.receive(
        build(seq=6, timestamp=4 * SAMPLES, payload_type=13, payload=b"\x40"), SOURCE, 0
    ).audio
    out += rtp.receive(build(seq=7, timestamp=5 * SAMPLES, payload=audio(7)), SOURCE, 0).audio
    assert notices == [("5", SAMPLES)]  # three end packets, one notice, where the tone starts
    assert out == audio(1) + SILENCE * 4 * SAMPLES + audio(7)


def test_unknown_payload_types_are_refused_and_l16_takes_the_first_dynamic_one() -> None:
    rtp = receiver()
    refused = rtp.receive(build(payload_type=8), SOURCE, 0)
    assert refused.rejected is not None
    assert refused.rejected.reason is RejectReason.UNKNOWN_PAYLOAD_TYPE
    l16 = RtpReceiver(
        ChannelSpec("mono", Codec.L16, 16000), SourcePolicy.parse("127.0.0.1"), config()
    )
    first = l16.receive(build(payload_type=118, payload=b"\x00\x01\x00\x02"), SOURCE, 0)
    assert first.audio == b"\x01\x00\x02\x00"
    other = l16.receive(build(seq=2, payload_type=119, payload=b"\x00\x01"), SOURCE, 0)
    assert other.rejected is not None
    assert other.rejected.reason is RejectReason.UNKNOWN_PAYLOAD_TYPE
    odd = l16.receive(build(seq=3, payload_type=118, payload=b"\x00"), SOURCE, 0)
    assert odd.rejected is not None
    assert odd.rejected.reason is RejectReason.BAD_PAYLOAD


def test_jitter_follows_rfc_3550_and_ignores_telephone_events() -> None:
    buffer = JitterBuffer(config())
    # Packets 20 ms apart on the RTP clock, arriving 20 ms apart but every other one 8 ms late.
    for index in range(64):
        buffer.push(index, index * SAMPLES, audio(index), 20 * index + (8 if index % 2 else 0))
    assert 7.0 < buffer.jitter_ms <= 8.0  # J converges on |D| = 8 ms
    steady = buffer.jitter_ms
    for repeat in range(5):  # one key press: the same start time, arriving 50 ms apart
        buffer.push(64 + repeat, 64 * SAMPLES, None, 1280 + 50 * repeat)
    assert buffer.jitter_ms == steady


def test_a_start_hold_reorders_the_first_packets_instead_of_dropping_them() -> None:
    """Packet 0 overtaken by packet 1: without a hold 1 starts the stream and 0 is late; with a
    40 ms hold both come out in order, and the release says when the stream began."""
    plain = JitterBuffer(config())
    assert plain.push(1, SAMPLES, audio(1), 1000).audio == audio(1)
    assert plain.push(0, 0, audio(0), 1005).status is PushStatus.LATE
    held = JitterBuffer(config(start_hold_ms=40))
    assert held.push(1, SAMPLES, audio(1), 1000).audio == b""
    assert held.push(0, 0, audio(0), 1005).audio == b""
    assert held.push(0, 0, audio(0), 1010).status is PushStatus.DUPLICATE
    assert held.waiting_packets == 2
    release = held.push(2, 2 * SAMPLES, audio(2), 1040)
    assert release.audio == audio(0) + audio(1) + audio(2)
    assert release.started_ms == 1000
    assert held.push(3, 3 * SAMPLES, audio(3), 1060).started_ms is None


def test_a_start_hold_ends_by_time_without_more_packets_and_on_drain() -> None:
    buffer = JitterBuffer(config(start_hold_ms=40))
    buffer.push(5, 5 * SAMPLES, audio(5), 0)
    assert buffer.expire(39).audio == b""
    assert buffer.expire(40).audio == audio(5)
    drained = JitterBuffer(config(start_hold_ms=40))
    drained.push(9, 0, audio(9), 0)
    assert drained.drain().audio == audio(9)


@given(start=starts, case=reordered())
def test_with_a_start_hold_nothing_is_late_that_came_within_it(
    start: tuple[int, int], case: tuple[int, list[int]]
) -> None:
    """Every packet arrives at the same moment (within the hold): whatever the order, all come
    out once, in order, from the earliest."""
    first_seq, first_ts = start
    count, order = case
    buffer = JitterBuffer(config(start_hold_ms=40))
    out = b""
    for index in order:
        release = buffer.push(
            (first_seq + index) % 65536, (first_ts + index * SAMPLES) % 2**32, audio(index), 0
        )
        assert buffer.waiting_packets <= DEPTH
        out += release.audio
    out += buffer.drain().audio
    assert out == b"".join(audio(index) for index in range(min(order[:DEPTH]), count))


def test_a_key_press_is_placed_by_its_timestamp_even_when_it_overtakes_audio() -> None:
    rtp = receiver()
    end = bytes([3, 0x8A]) + (160).to_bytes(2, "big")
    out = rtp.receive(build(seq=1, timestamp=0, payload=audio(1)), SOURCE, 0).audio
    # The event (after packet 2's audio on the RTP clock) arrives before packet 2.
    early = rtp.receive(
        build(seq=3, timestamp=2 * SAMPLES, payload_type=101, payload=end), SOURCE, 0
    )
    assert early.dtmf_placed == ()  # waits for packet 2, as the audio does
    late_audio = rtp.receive(build(seq=2, timestamp=SAMPLES, payload=audio(2)), SOURCE, 0)
    ((event, at),) = late_audio.dtmf_placed
    assert event.digit == "3"
    assert len(out) + at == 2 * SAMPLES
