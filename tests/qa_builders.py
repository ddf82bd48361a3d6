"""Hand-built finals and events with exact timings for the QA unit tests."""

from __future__ import annotations

from pipeline.contracts.messages import EndpointReason, Event, EventType, Final, Word, utterance_id

CALL = "call-1"


def final(
    channel: str,
    index: int,
    text: str,
    start_ms: int,
    *,
    word_ms: int = 400,
    gap_ms: int = 100,
    call_id: str = CALL,
    trailing_ms: int = 800,
    with_words: bool = True,
    model_id: str = "whisper-tiny.en",
) -> Final:
    """A final whose words each last ``word_ms`` with ``gap_ms`` between them from ``start_ms``.

    The utterance's audio span ends ``trailing_ms`` after its last word (the endpoint silence).
    """
    words = tuple(
        Word(
            word,
            start_ms + n * (word_ms + gap_ms),
            start_ms + n * (word_ms + gap_ms) + word_ms,
            0.9,
        )
        for n, word in enumerate(text.split())
    )
    speech_end_ms = words[-1].end_ms if words else start_ms
    return Final(
        call_id=call_id,
        channel=channel,
        utterance_index=index,
        utterance_id=utterance_id(call_id, channel, index),
        text=text,
        words=words if with_words else (),
        start_ms=start_ms,
        end_ms=speech_end_ms + trailing_ms,
        endpoint_reason=EndpointReason.SILENCE,
        model_id=model_id,
        emit_ms=1_000_000 + start_ms,
    )


def spanning(channel: str, index: int, text: str, start_ms: int, end_ms: int) -> Final:
    """A final whose words spread evenly over exactly ``start_ms``..``end_ms`` of speech."""
    raw = text.split()
    step_ms = (end_ms - start_ms) / len(raw)
    words = tuple(
        Word(word, round(start_ms + n * step_ms), round(start_ms + (n + 1) * step_ms), 0.9)
        for n, word in enumerate(raw)
    )
    return Final(
        call_id=CALL,
        channel=channel,
        utterance_index=index,
        utterance_id=utterance_id(CALL, channel, index),
        text=text,
        words=words,
        start_ms=max(0, start_ms - 200),
        end_ms=end_ms + 800,
        endpoint_reason=EndpointReason.SILENCE,
        model_id="whisper-tiny.en",
        emit_ms=0,
    )


def session(
    kind: EventType,
    channel: str,
    *,
    call_id: str = CALL,
    audio_ms: int | None = None,
    finals: int | None = None,
) -> Event:
    # The detail the ASR worker writes: duration_ms (audio length), utterances (finals count).
    detail = {
        name: value
        for name, value in (("duration_ms", audio_ms), ("utterances", finals))
        if value is not None
    }
    return Event(kind, 1_000_000, "worker-1", call_id, channel, detail)
