"""A randomly initialised, very small Whisper sharing the real tiny.en tokenizer.

Its transcripts are meaningless, which is fine for batching, masking, guards, hooks and
quantization; real-weight behaviour is covered by the integration tests.
"""

from __future__ import annotations

import torch

from pipeline.asr.whisper.model import WhisperConfig, WhisperDims, WhisperModel, bundled_model_dir
from pipeline.asr.whisper.tokenizer import load_tokenizer


def tiny_whisper(seed: int = 0) -> WhisperModel:
    """A fresh model (float32, CPU, eval mode, no gradients)."""
    torch.manual_seed(seed)
    dims = WhisperDims(
        n_mels=80,
        n_audio_ctx=1500,
        n_audio_state=32,
        n_audio_head=2,
        n_audio_layer=1,
        n_vocab=51864,
        n_text_ctx=448,
        n_text_state=32,
        n_text_head=2,
        n_text_layer=2,
    )
    config = WhisperConfig(
        suppress_ids=(1, 2, 7, 50257, 50357, 50358, 50359, 50360, 50361),
        suppress_ids_begin=(220, 50256),
        alignment_heads=((0, 0), (1, 1)),
    )
    tokenizer = load_tokenizer(bundled_model_dir(), multilingual=False)
    tiny = WhisperModel(dims, config, tokenizer)
    with torch.no_grad():
        tiny.encoder.positional_embedding.normal_(std=0.1)
        tiny.decoder.positional_embedding.normal_(std=0.1)
    tiny.requires_grad_(False)
    return tiny.eval()


def mel(n_frames: int, seed: int) -> torch.Tensor:
    """A random log-mel window ``(80, n_frames)``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(80, n_frames, generator=generator) * 0.5
