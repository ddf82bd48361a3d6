from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.asr.whisper.model import bundled_model_dir
from pipeline.asr.whisper.tokenizer import WhisperTokenizer, load_tokenizer
from pipeline.errors import ModelLoadError


@pytest.fixture(scope="module")
def tokenizer() -> WhisperTokenizer:
    return load_tokenizer(bundled_model_dir(), multilingual=False)


def test_special_tokens_of_english_only_model(tokenizer: WhisperTokenizer) -> None:
    assert tokenizer.eot == 50256
    assert tokenizer.sot == 50257
    assert tokenizer.translate == 50357
    assert tokenizer.transcribe == 50358
    assert tokenizer.sot_lm == 50359
    assert tokenizer.sot_prev == 50360
    assert tokenizer.no_speech == 50361  # spelled <|nocaptions|> in this vocabulary
    assert tokenizer.no_timestamps == 50362
    assert tokenizer.timestamp_begin == 50363
    assert tokenizer.sot_sequence() == [tokenizer.sot]


def test_multilingual_sot_sequence_has_language_and_task(tokenizer: WhisperTokenizer) -> None:
    multilingual = WhisperTokenizer(tokenizer._tokenizer, multilingual=True)
    assert multilingual.sot_sequence("en", "transcribe") == [50257, 50258, 50358]
    assert multilingual.sot_sequence("en", "translate")[-1] == multilingual.translate
    with pytest.raises(ValueError, match="language"):
        multilingual.sot_sequence("xx")
    with pytest.raises(ValueError, match="task"):
        multilingual.sot_sequence("en", "summarise")


@pytest.mark.parametrize(
    "text",
    [
        " Hello world, it's 3 p.m.",
        " I would like to reset my password, please.",
        " naïve café — 100% «quoted»",
        " 日本語のテキスト",
        "",
    ],
)
def test_encode_decode_round_trip(tokenizer: WhisperTokenizer, text: str) -> None:
    tokens = tokenizer.encode(text)
    assert all(0 <= t < tokenizer.eot for t in tokens)
    assert tokenizer.decode(tokens) == text


def test_decode_drops_special_and_timestamp_tokens(tokenizer: WhisperTokenizer) -> None:
    text = tokenizer.encode(" Hi there")
    tokens = [tokenizer.sot, tokenizer.no_timestamps, *text, tokenizer.timestamp_begin + 5]
    assert tokenizer.decode([*tokens, tokenizer.eot]) == " Hi there"
    rendered = tokenizer.decode_with_timestamps([*text, tokenizer.timestamp_begin + 54])
    assert rendered == " Hi there<|1.08|>"


def test_split_to_word_tokens_on_spaces_and_punctuation(tokenizer: WhisperTokenizer) -> None:
    tokens = tokenizer.encode(" Hello world, it's 3 p.m.")
    words, groups = tokenizer.split_to_word_tokens([*tokens, tokenizer.eot])
    # "." starts a word (punctuation), "m" continues it; special tokens render empty.
    assert words == [" Hello", " world", ",", " it's", " 3", " p", ".m", ".", ""]
    assert [t for group in groups for t in group] == [*tokens, tokenizer.eot]


def test_multibyte_characters_stay_in_one_word(tokenizer: WhisperTokenizer) -> None:
    tokens = tokenizer.encode(" 日本語")
    words, groups = tokenizer.split_to_word_tokens(tokens)
    assert "".join(words) == " 日本語"
    assert all("\ufffd" not in word for word in words)
    assert sum(len(g) for g in groups) == len(tokens)


def test_word_start_table(tokenizer: WhisperTokenizer) -> None:
    table = tokenizer.word_start_table
    assert table.shape == (tokenizer.timestamp_begin,)
    (hello,) = tokenizer.encode(" Hello")
    apostrophe_s = tokenizer.encode(" it's")[1]
    assert table[hello]
    assert not table[apostrophe_s]
    assert not table[tokenizer.eot]


def test_missing_tokenizer_file_raises(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="tokenizer"):
        load_tokenizer(tmp_path, multilingual=False)
