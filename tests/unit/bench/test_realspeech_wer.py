"""The real-speech WER benchmark's pure parts, on small synthetic inputs (no model, no audio
of ../shared/speech): refs parsing, source grouping, the quick subset, μ-law WAV decoding,
offline windows, the edit split per source and the tables' shape."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from bench.common import FixtureClip
from bench.engine_wer import offline_windows
from bench.realspeech_wer import (
    REFS_COLUMNS,
    SYSTEMS,
    Reference,
    dataset_of,
    dataset_rows,
    markdown,
    mulaw_wav_samples,
    parse_refs,
    pooled_rows,
    quick_subset,
    summarize_band,
)
from pipeline.contracts.g711 import mulaw_decode, mulaw_encode

HEADER = "\t".join(REFS_COLUMNS)


def _row(utterance_id: str, text: str = "a b", license_text: str = "", source: str = "") -> str:
    return "\t".join([utterance_id, "1.5", text, source, license_text, "speaker", "high"])


def test_refs_are_split_on_tabs_only_and_keep_quotes() -> None:
    text = "\n".join(
        [HEADER, _row("lj_X-1", 'He said "no", twice.'), "", _row("ps_cmd", "go forward")]
    )
    references = parse_refs(text)
    assert [r.utterance_id for r in references] == ["lj_X-1", "ps_cmd"]
    assert references[0].text == 'He said "no", twice.'
    assert references[0].duration_s == 1.5
    assert [r.dataset for r in references] == ["LJSpeech", "pocketsphinx"]


@pytest.mark.parametrize(
    "text",
    ["id\ttext\n" + _row("a_1"), HEADER + "\nlj_1\t1.0\tonly three"],
)
def test_refs_of_another_shape_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"refs\.tsv"):
        parse_refs(text)


@pytest.mark.parametrize(
    ("utterance_id", "license_text", "source", "dataset"),
    [
        # The id decides before the columns: pocketsphinx's repository carries LibriVox audio,
        # Leopard's a LibriSpeech utterance, DeepSpeech's the TIMIT sample.
        ("librivox_sns01-0920", "LibriVox public domain; pocketsphinx BSD-2", "", "LibriVox"),
        ("ls_dev-clean_1", "LibriSpeech CC-BY-4.0; Leopard repo Apache-2.0", "", "LibriSpeech"),
        ("timit_ldc93s1_8k", "", "github:mozilla/DeepSpeech@x:data/LDC93S1.wav", "TIMIT"),
        ("ps_goforward", "pocketsphinx BSD-2", "", "pocketsphinx"),
        ("so762_000010011", "", "", "speechocean762"),
        # Unknown ids fall back to a corpus named in the licence, then in the source.
        ("utt7", "LibriSpeech CC-BY-4.0", "github:Picovoice/leopard@x:a.wav", "LibriSpeech"),
        ("utt8", "MIT", "github:openai/whisper@x:tests/jfk.flac", "JFK"),
        ("newcorpus_001", "CC0", "github:o/r@x:a.wav", "newcorpus"),
    ],
)
def test_source_names(utterance_id: str, license_text: str, source: str, dataset: str) -> None:
    assert dataset_of(utterance_id, license_text, source) == dataset


def _reference(utterance_id: str) -> Reference:
    return Reference(utterance_id, 1.0, "a", "", "", "", "high", dataset_of(utterance_id))


def test_quick_subset_keeps_one_utterance_per_source_in_order() -> None:
    ids = ["lj_LJ001-0001", "ls_a", "lj_LJ050-0115", "lj_LJ002-0020", "ls_b", "jfk_x"]
    chosen = quick_subset([_reference(i) for i in ids])
    # LJSpeech is represented by the onset example, the others by their first.
    assert [r.utterance_id for r in chosen] == ["ls_a", "lj_LJ050-0115", "jfk_x"]


def _wav(codes: np.ndarray, extra_chunk: bytes = b"", format_tag: int = 7) -> bytes:
    fmt = (
        format_tag.to_bytes(2, "little")
        + (1).to_bytes(2, "little")
        + (8000).to_bytes(4, "little")
        + (8000).to_bytes(4, "little")
        + (1).to_bytes(2, "little")
        + (8).to_bytes(2, "little")
    )
    body = b"WAVE" + b"fmt " + len(fmt).to_bytes(4, "little") + fmt + extra_chunk
    body += b"data" + len(codes).to_bytes(4, "little") + codes.tobytes()
    return b"RIFF" + len(body).to_bytes(4, "little") + body


def test_mulaw_wav_is_decoded_as_a_telephone_chunk_is() -> None:
    pcm = (np.sin(np.arange(800) / 7.0) * 20000).astype(np.int16)
    codes = mulaw_encode(pcm)
    odd_chunk = b"LIST" + (3).to_bytes(4, "little") + b"abc" + b"\x00"  # padded to even
    samples, rate = mulaw_wav_samples(_wav(codes, odd_chunk))
    assert rate == 8000
    assert samples.dtype == np.float32
    np.testing.assert_array_equal(samples, mulaw_decode(codes) / np.float32(32768))


def test_mulaw_wav_written_by_libsndfile_reads_back() -> None:
    tone = (0.5 * np.sin(np.arange(4000) / 5.0)).astype(np.float32)
    buffer = io.BytesIO()
    soundfile.write(buffer, tone, 8000, subtype="ULAW", format="WAV")
    samples, rate = mulaw_wav_samples(buffer.getvalue())
    assert (rate, len(samples)) == (8000, len(tone))
    assert np.max(np.abs(samples - tone)) < 0.02  # μ-law's quantization at this level


def test_a_pcm_wav_is_refused() -> None:
    with pytest.raises(ValueError, match="μ-law"):
        mulaw_wav_samples(_wav(np.zeros(8, np.uint8), format_tag=1))
    with pytest.raises(ValueError, match="RIFF"):
        mulaw_wav_samples(b"fLaC" + bytes(40))


def test_offline_windows_tile_the_audio_and_cut_where_it_is_quiet() -> None:
    audio = np.ones(2500, dtype=np.float32)
    audio[1520:1840] = 0.0  # a quiet 20 ms in the last 800 samples of the first window
    windows = offline_windows(audio, window_samples=2000, search_samples=800)
    assert sum(len(w) for w in windows) == len(audio)
    assert all(len(w) <= 2000 for w in windows)
    assert 1520 < len(windows[0]) < 1840
    np.testing.assert_array_equal(np.concatenate(windows), audio)
    assert len(offline_windows(audio[:2000], window_samples=2000)) == 1


def _clip(clip_id: str, text: str) -> FixtureClip:
    return FixtureClip(clip_id, dataset_of(clip_id), 16000, np.zeros(16, np.float32), text)


def _results() -> dict[str, object]:
    clips = [_clip("lj_1", "a b c d"), _clip("lj_2", "e f"), _clip("ls_1", "g h i")]
    hypotheses = {
        "streaming": {"lj_1": "c d", "lj_2": "e f x", "ls_1": "g z i"},
        "fw_greedy": {"lj_1": "a b c d", "lj_2": "e f", "ls_1": "g h i"},
    }
    band = summarize_band(clips, hypotheses, {"streaming": 1.0, "fw_greedy": 2.0})
    bands = {
        "telephone": {"label": "tel", **band, "suppressed_by_guard": {"log_prob": 2}},
        "wideband": {"label": "wide", **band, "suppressed_by_guard": {}},
    }
    nonspeech = {"streaming": {"total": 0}, "fw_greedy": {"total": 3}}
    return {"bands": bands, "nonspeech": nonspeech}


def test_edits_are_split_per_source_and_pooled() -> None:
    band = _results()["bands"]["telephone"]  # type: ignore[index]
    wer = band["systems"]["streaming"]["wer"]
    assert (wer["LJSpeech"]["deletions"], wer["LJSpeech"]["insertions"]) == (2, 1)
    assert wer["LibriSpeech"]["substitutions"] == 1
    assert wer["all"]["errors"] == 4
    assert wer["all"]["reference_words"] == 9
    assert band["systems"]["fw_greedy"]["wer"]["all"]["wer"] == 0.0
    first = band["per_utterance"][0]
    assert (first["id"], first["dataset"], first["streaming"]["deletions"]) == (
        "lj_1",
        "LJSpeech",
        2,
    )


def test_tables_have_one_row_per_system_and_per_source() -> None:
    results = _results()
    pooled = pooled_rows(results)
    assert [row[0] for row in pooled] == [SYSTEMS["streaming"], SYSTEMS["fw_greedy"]]
    # system, then WER and D / I / S for each band, then words on non-speech
    assert pooled[0] == [SYSTEMS["streaming"], "44.4", "2 / 1 / 1", "44.4", "2 / 1 / 1", "0"]
    by_source = dataset_rows(results)
    assert [row[:3] for row in by_source] == [["LJSpeech", "2", "6"], ["LibriSpeech", "1", "3"]]
    assert len(by_source[0]) == 3 + 2 * 2  # two systems in two bands
    config = {"utterances": 3, "audio_s": 4.5, "streaming_overrides": {}}
    text = markdown(results, config)
    assert "| log_prob | 2 | 0 |" in text
    assert "| lj_1 | telephone | 2 (2) | 0 (0) |" in text
