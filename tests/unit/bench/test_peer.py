"""The baseline peer's pure parts: time-stamped LocalAgreement, VAD gating, endpoints, trims."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import soundfile
import torch

from bench.peer import (
    FinalObservation,
    HypothesisBuffer,
    PackagedSileroVad,
    PartialObservation,
    PeerSettings,
    PeerStream,
    PeerWord,
)
from bench.peer_sweep import Peer, peer_view_updates
from pipeline.asr.vad import EnergyVad
from pipeline.audio.resample import DELAY_SAMPLES

RATE = 16_000
WORD_S = 0.25


def words(*spans: tuple[str, float, float]) -> list[PeerWord]:
    return [PeerWord(f" {text}", start, end) for text, start, end in spans]


def test_agreement_commits_the_common_prefix_of_two_hypotheses() -> None:
    buffer = HypothesisBuffer()
    buffer.insert(words(("hello", 0.0, 0.4), ("word", 0.5, 0.9)))
    assert buffer.flush() == []
    buffer.insert(words(("Hello,", 0.0, 0.4), ("world", 0.5, 0.9), ("again", 1.0, 1.3)))
    committed = buffer.flush()
    assert [w.text for w in committed] == [" Hello,"]
    assert [w.text for w in buffer.tentative] == [" world", " again"]
    assert buffer.last_committed_end_s == 0.4


def test_agreement_never_retracts_and_skips_words_before_the_committed_end() -> None:
    buffer = HypothesisBuffer()
    for _ in range(2):
        buffer.insert(words(("one", 0.0, 0.3), ("two", 0.4, 0.7)))
        buffer.flush()
    assert [w.text for w in buffer.committed] == [" one", " two"]
    # A re-decode that disagrees about already committed audio changes nothing committed.
    buffer.insert(words(("won", 0.0, 0.3), ("too", 0.4, 0.7), ("three", 0.8, 1.1)))
    buffer.flush()
    buffer.insert(words(("three", 0.8, 1.1), ("four", 1.2, 1.5)))
    buffer.flush()
    assert [w.text for w in buffer.committed] == [" one", " two", " three"]


def test_agreement_drops_a_repeat_of_the_committed_tail() -> None:
    buffer = HypothesisBuffer()
    for _ in range(2):
        buffer.insert(words(("good", 0.0, 0.3), ("morning", 0.4, 0.8)))
        buffer.flush()
    # Whisper repeats "morning" with a time just after the committed end.
    buffer.insert(words(("morning", 0.85, 1.0), ("team", 1.1, 1.4)))
    assert [w.text for w in buffer._new] == [" team"]


class ScriptedDecoder:
    """One word per 250 ms of audio: loud audio (mean |x| > ``loud``) → "w<k>", else nothing."""

    def __init__(self, loud: float = 0.05) -> None:
        self.calls: list[tuple[int, str]] = []
        self.loud = loud

    def __call__(self, audio: npt.NDArray[np.float32], prompt: str) -> list[PeerWord]:
        self.calls.append((len(audio), prompt))
        out = []
        step = int(WORD_S * RATE)
        for k in range(len(audio) // step):
            piece = audio[k * step : (k + 1) * step]
            if np.abs(piece).mean() > self.loud:
                end = "." if k % 4 == 3 else ""
                out.append(PeerWord(f" w{k}{end}", k * WORD_S, (k + 1) * WORD_S))
        return out


def speech_then_silence(
    speech_s: float, silence_s: float, level: float = 0.3
) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(0)
    speech = (level * rng.standard_normal(int(speech_s * RATE))).astype(np.float32)
    return np.concatenate([speech, np.zeros(int(silence_s * RATE), dtype=np.float32)])


def feed(
    stream: PeerStream, audio: npt.NDArray[np.float32], end: bool = True
) -> list[PartialObservation | FinalObservation]:
    outputs: list[PartialObservation | FinalObservation] = []
    chunk = RATE // 50
    clock = iter(range(10**9))
    for k in range(0, len(audio), chunk):
        last = end and k + chunk >= len(audio)
        stream.accept(audio[k : k + chunk], RATE, capture_ms=k * 1000 // RATE, end_of_stream=last)
        while stream.has_work:
            outputs.extend(stream.step(lambda: next(clock)))
    return outputs


def test_stream_decodes_speech_only_and_finalizes_after_the_endpoint_silence() -> None:
    decoder = ScriptedDecoder()
    stream = PeerStream("a", PeerSettings(), EnergyVad(), decoder)
    audio = np.concatenate(
        [
            np.zeros(RATE, dtype=np.float32),
            speech_then_silence(3.0, 1.5),
            speech_then_silence(2.0, 0.5),
        ]
    )
    outputs = feed(stream, audio)
    finals = [o for o in outputs if isinstance(o, FinalObservation)]
    partials = [o for o in outputs if isinstance(o, PartialObservation)]
    assert [f.reason for f in finals] == ["silence", "end_of_stream"]
    assert [f.utterance_index for f in finals] == [0, 1]
    # The first final is decided 800 ms into the silence after 1 s + 3 s of audio.
    decided = finals[0].decided_capture_ms
    assert 4_700 <= decided <= 4_900
    assert partials, "one partial per hop of speech"
    assert stream.done
    # Every decode got at most the utterance (plus pads), never the leading silence.
    assert all(n <= 3.2 * RATE for n, _ in decoder.calls[:4])


def test_stream_trims_the_buffer_at_a_committed_sentence_end() -> None:
    decoder = ScriptedDecoder()
    stream = PeerStream("a", PeerSettings(), EnergyVad(), decoder)
    feed(stream, speech_then_silence(6.0, 0.0), end=False)
    # Words w3., w7. … end sentences; once committed, later decodes start after them and
    # carry the committed text as the prompt.
    assert any(prompt for _, prompt in decoder.calls)
    assert min(n for n, _ in decoder.calls[-2:]) < 5 * RATE


def test_partials_carry_their_utterance_even_after_an_empty_final() -> None:
    # The first utterance is speech to the VAD but gives the decoder no words: its final is
    # empty and never emitted, so counting finals would file the second one's partials under it.
    stream = PeerStream("a", PeerSettings(), EnergyVad(), ScriptedDecoder(loud=0.15))
    audio = np.concatenate(
        [speech_then_silence(3.0, 1.5, level=0.1), speech_then_silence(3.0, 0.5, level=0.3)]
    )
    outputs = feed(stream, audio)
    assert [o.utterance_index for o in outputs if isinstance(o, FinalObservation)] == [1]
    partials = [o for o in outputs if isinstance(o, PartialObservation)]
    updates = peer_view_updates(partials)
    texts = [o.text for o in partials]
    assert {u.utterance for u, text in zip(updates, texts, strict=True) if not text} == {0}
    assert {u.utterance for u, text in zip(updates, texts, strict=True) if text} == {1}


SPEECH = Path(__file__).resolve().parents[2] / "fixtures" / "utterances" / "utt01_account.flac"


def test_peer_vad_is_silero_packaged_model_one_stream_per_instance() -> None:
    vad = Peer.make_vad()
    assert isinstance(vad, PackagedSileroVad)
    speech, rate_hz = soundfile.read(str(SPEECH), dtype="float32")
    assert rate_hz == RATE
    audio = np.concatenate([speech, np.zeros(RATE, dtype=np.float32)])
    frames = audio[: len(audio) // 512 * 512].reshape(-1, 512)
    state = vad.new_state()
    probs = [float(vad.speech_probs(frame[None, :], [state])[0]) for frame in frames]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        from silero_vad import load_silero_vad

        packaged = load_silero_vad()
    with torch.no_grad():
        expected = [packaged(torch.from_numpy(frame), RATE).item() for frame in frames]
    assert probs == pytest.approx(expected, abs=1e-6)
    assert max(probs) > 0.9
    assert probs[-1] < 0.1
    # The next stream on the instance starts from a fresh model state.
    fresh = vad.new_state()
    assert float(vad.speech_probs(frames[:1], [fresh])[0]) == pytest.approx(probs[0], abs=1e-6)
    with pytest.raises(ValueError, match="one frame of one stream"):
        vad.speech_probs(frames[:2], [fresh, fresh])
    with pytest.raises(ValueError, match="another stream"):
        vad.speech_probs(frames[:1], [state])


def test_stream_gates_real_speech_with_the_packaged_vad() -> None:
    speech, _ = soundfile.read(str(SPEECH), dtype="float32")
    audio = np.concatenate([np.zeros(RATE // 2, np.float32), speech, np.zeros(RATE, np.float32)])
    stream = PeerStream("a", PeerSettings(), PackagedSileroVad(), ScriptedDecoder(loud=0.01))
    finals = [o for o in feed(stream, audio) if isinstance(o, FinalObservation)]
    assert [f.reason for f in finals] == ["silence"]


def test_an_8khz_stream_keeps_its_last_millisecond_like_the_engine() -> None:
    stream = PeerStream("a", PeerSettings(), EnergyVad(), ScriptedDecoder())
    audio = np.zeros(4000, dtype=np.float32)
    stream.accept(audio[:2000], RATE // 2, capture_ms=0)
    stream.accept(audio[2000:], RATE // 2, capture_ms=250, end_of_stream=True)
    assert stream._total == 2 * len(audio) + DELAY_SAMPLES
