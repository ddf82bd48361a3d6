"""Whisper recognizer in torch, loaded from CTranslate2 model files.

One module per concern, in data-flow order: :mod:`.ct2_reader` (weights file),
:mod:`.model` (torch modules, :func:`load_whisper`), :mod:`.mel` (features),
:mod:`.tokenizer`, :mod:`.decoding` (batched greedy search), :mod:`.alignment`
(word timings).
"""

from pipeline.asr.whisper.alignment import WordTiming, align_words
from pipeline.asr.whisper.ct2_reader import Ct2Model, read_ct2_model
from pipeline.asr.whisper.decoding import (
    DecodingOptions,
    DecodingPrefix,
    DecodingResult,
    EncodedWindows,
    LogitsBias,
    StopReason,
    decode,
    encode_windows,
)
from pipeline.asr.whisper.mel import log_mel_spectrogram, pad_or_trim_frames
from pipeline.asr.whisper.model import WhisperConfig, WhisperDims, WhisperModel, load_whisper
from pipeline.asr.whisper.tokenizer import WhisperTokenizer

__all__ = [
    "Ct2Model",
    "DecodingOptions",
    "DecodingPrefix",
    "DecodingResult",
    "EncodedWindows",
    "LogitsBias",
    "StopReason",
    "WhisperConfig",
    "WhisperDims",
    "WhisperModel",
    "WhisperTokenizer",
    "WordTiming",
    "align_words",
    "decode",
    "encode_windows",
    "load_whisper",
    "log_mel_spectrogram",
    "pad_or_trim_frames",
    "read_ct2_model",
]
