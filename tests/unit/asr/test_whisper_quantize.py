"""int8 quantization of Whisper's linear layers (``pipeline.asr.whisper.quantize``)."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch
from torch import nn

from pipeline.asr.factory import check_quantization
from pipeline.asr.whisper.decoding import DecodingOptions, decode, encode_windows
from pipeline.asr.whisper.quantize import Int8Linear, Quantization, is_quantized, quantize_int8
from pipeline.asr.whisper_recognizer import WhisperRecognizer, WhisperSettings
from pipeline.errors import ConfigError
from pipeline.settings import AsrSettings
from tests.unit.asr.tiny_whisper import mel, tiny_whisper

NO_GUARDS = DecodingOptions(max_words_per_second=None, repetition_guard=False)


def _relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return float((ours - reference).norm() / reference.norm())


def test_an_int8_linear_computes_the_float_product_within_quantization_error() -> None:
    torch.manual_seed(1)
    linear = nn.Linear(384, 1536).requires_grad_(False)
    x = torch.randn(3, 50, 384)
    quantized = Int8Linear.of(linear)
    out = quantized(x)
    assert out.shape == (3, 50, 1536)
    assert out.dtype == torch.float32
    assert _relative_error(out, linear(x)) < 0.02


def test_weights_are_scaled_per_output_row() -> None:
    """A row of tiny weights next to a row of large ones keeps its precision (one scale per
    tensor would round it to zero)."""
    weight = torch.stack([torch.linspace(-1e-3, 1e-3, 64), torch.linspace(-10.0, 10.0, 64)])
    x = torch.randn(8, 64)
    out = Int8Linear(weight)(x)
    reference = x @ weight.T
    assert _relative_error(out[:, 0], reference[:, 0]) < 0.05
    assert _relative_error(out[:, 1], reference[:, 1]) < 0.05


def test_with_row_ranges_a_row_gives_the_same_result_alone_or_with_others() -> None:
    torch.manual_seed(2)
    linear = nn.Linear(64, 96).requires_grad_(False)
    rows = torch.randn(5, 64) * torch.tensor([[1.0], [100.0], [0.01], [5.0], [0.0]])
    by_row = Int8Linear.of(linear)
    together = by_row(rows)
    for i in range(len(rows)):
        assert torch.equal(by_row(rows[i : i + 1])[0], together[i])
    assert torch.equal(together[4], linear.bias)  # an all-zero row: just the bias
    per_call = Int8Linear.of(linear, row_ranges=False)
    # One range for the call: the small row next to a 10 000× larger one loses its precision.
    assert _relative_error(per_call(rows)[2] - linear.bias, linear(rows)[2] - linear.bias) > 0.05
    assert _relative_error(by_row(rows)[2] - linear.bias, linear(rows)[2] - linear.bias) < 0.05


def test_quantizing_swaps_every_linear_and_the_vocabulary_projection() -> None:
    model = tiny_whisper()
    assert not is_quantized(model)
    hidden = torch.randn(2, model.dims.n_text_state)
    float_logits = model.decoder.logits(hidden)
    quantize_int8(model)
    assert is_quantized(model)
    assert not [m for m in model.modules() if isinstance(m, nn.Linear)]
    linears = [m for m in model.modules() if isinstance(m, Int8Linear)]
    # Per encoder layer: qkv, out, 2 MLP; per decoder layer: also query, kv, out; + vocabulary.
    assert len(linears) == 4 * 1 + 7 * 2 + 1
    logits = model.decoder.logits(hidden)
    assert logits.shape == float_logits.shape
    assert _relative_error(logits, float_logits) < 0.02
    quantize_int8(model)  # idempotent
    assert len([m for m in model.modules() if isinstance(m, Int8Linear)]) == len(linears)


def test_a_quantized_model_decodes_a_batch_as_it_decodes_each_window() -> None:
    model = quantize_int8(tiny_whisper())
    windows = [mel(frames, seed) for seed, frames in enumerate((300, 180, 251))]
    batched = decode(model, encode_windows(model, windows), NO_GUARDS)
    alone = [decode(model, encode_windows(model, [w]), NO_GUARDS)[0] for w in windows]
    assert [r.tokens for r in batched] == [r.tokens for r in alone]


def test_a_quantized_encoder_encodes_each_window_as_alone() -> None:
    model = quantize_int8(tiny_whisper())
    windows = [mel(frames, seed) for seed, frames in enumerate((300, 180, 251))]
    batched = encode_windows(model, windows)
    for row, window in enumerate(windows):
        alone = encode_windows(model, [window]).features[0]
        assert torch.equal(batched.features[row, : alone.shape[0]], alone)


def test_only_a_float32_model_on_the_cpu_is_quantized() -> None:
    model = tiny_whisper().half()
    with pytest.raises(ValueError, match="float32 model on the CPU"):
        quantize_int8(model)


def test_a_recognizer_names_the_quantization_in_its_model_id() -> None:
    assert WhisperRecognizer(WhisperSettings(), model=tiny_whisper()).model_id == "whisper-tiny.en"
    quantized = quantize_int8(tiny_whisper())
    assert WhisperRecognizer(WhisperSettings(), model=quantized).model_id == "whisper-tiny.en-int8"


def test_a_model_given_to_the_recognizer_is_used_as_it_is() -> None:
    model = tiny_whisper()
    recognizer = WhisperRecognizer(WhisperSettings(quantization=Quantization.INT8), model=model)
    assert not is_quantized(model)
    assert recognizer.model_id == "whisper-tiny.en"


def test_a_padded_window_alone_is_encoded_as_without_its_padding() -> None:
    model = quantize_int8(tiny_whisper())
    window = mel(180, 4)
    padded = torch.zeros(1, 80, 300)
    padded[0, :, :180] = window
    states, valid = model.encoder(padded, torch.tensor([180]))
    alone, _ = model.encoder(window[None])
    assert valid is not None
    assert int(valid.sum()) == alone.shape[1]
    assert torch.equal(states[0, : alone.shape[1]], alone[0])


def test_int8_needs_the_x86_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.quantized, "engine", "qnnpack")
    with pytest.raises(ValueError, match="x86 kernels"):
        quantize_int8(tiny_whisper())
    settings = dataclasses.replace(AsrSettings(), quantization="int8")
    with pytest.raises(ConfigError, match=r"STREAMSCRIBE_QUANTIZATION=int8 needs torch's x86"):
        check_quantization(settings, "cpu")


def test_int8_on_cuda_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    settings = dataclasses.replace(AsrSettings(), quantization="int8")
    with caplog.at_level(logging.WARNING):
        check_quantization(settings, "cuda:0")
    assert "STREAMSCRIBE_QUANTIZATION=int8 is ignored on cuda:0" in caplog.text
