"""Dynamic int8 quantization of Whisper's linear layers, for CPU inference.

Every ``nn.Linear`` of the encoder and decoder, and the decoder's output projection onto the
vocabulary (the tied token embedding: the largest matrix of a small model, applied at every
decoded token), become :class:`Int8Linear`: weights quantized once to int8 with one scale per
output row (symmetric), activations quantized per call (dynamic), int8 × int8 products summed
in int32 by torch's fbgemm/x86 kernels, results in float32. Convolutions, layer norms,
attention products, embeddings and the mel front end stay float32.

What it buys and costs is measured, not assumed: ``bench.engine_rtf`` (time per decode) and
``bench.engine_wer`` (the int8 row against float32 on the same fixtures).

Those kernels are torch's eager quantized operators, which upstream marks as deprecated in
favour of torchao; the pinned torch (``constraints.txt``) has them, and the unit tests call
them, so an upgrade that removes them fails there, not in production.
"""

from __future__ import annotations

import enum
import math
import warnings

import torch
from torch import nn

from pipeline.asr.whisper.model import WhisperModel

__all__ = [
    "X86_ENGINES",
    "Int8Linear",
    "Quantization",
    "check_kernels",
    "is_quantized",
    "quantize_int8",
]

_INT8_MAX = 127
X86_ENGINES = ("x86", "fbgemm")
"""torch quantized engines whose kernels this module is written for (7-bit activations,
``reduce_range``; qnnpack on ARM ignores it and is not tested)."""
_TINY = 1e-30  # the scale of an all-zero row (any positive value gives zeros)


class Quantization(enum.StrEnum):
    """How the recognizer's weights run on the CPU (a CUDA device always runs float16)."""

    NONE = "none"  # float32
    INT8 = "int8"  # ``quantize_int8``


class Int8Linear(nn.Module):
    """``y = x Wᵀ + b`` with ``W`` stored as int8 (one scale per output row) and ``x``
    quantized per call. Input and output are float32, any leading shape ``(..., in_features)``;
    CPU only.

    The kernel quantizes its whole input with one range. With ``row_ranges`` each row gets its
    own instead, so a row's result does not depend on the other rows of the call (the decoder's
    rows are the windows of a batch): each row is divided by its largest magnitude, a last row
    holding +1 and -1 pins the kernel's range to [-1, 1] whatever the other rows, and each
    output row is multiplied back by its scale. That costs a few passes over the input; the
    encoder skips them and encodes one window per call instead (``quantize_int8``).
    """

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None = None, *, row_ranges: bool = True
    ) -> None:
        super().__init__()
        if weight.device.type != "cpu":
            raise ValueError("int8 quantization runs on the CPU only")
        weight = weight.detach().float()
        self.out_features, self.in_features = (int(n) for n in weight.shape)
        self.row_ranges = row_ranges
        scales = (weight.abs().amax(dim=1).double() / _INT8_MAX).clamp(min=1e-12)
        zero_points = torch.zeros(self.out_features, dtype=torch.long)
        with warnings.catch_warnings():
            # Quantized tensors are deprecated upstream (see the module docstring).
            warnings.filterwarnings("ignore", message=r".*quantiz.*deprecated", category=Warning)
            quantized = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
            packed_bias = None if row_ranges or bias is None else bias.detach().float()
            self._packed = torch.ops.quantized.linear_prepack(quantized, packed_bias)
        self.bias = None if bias is None or not row_ranges else bias.detach().float().clone()
        self._range_row = torch.zeros(self.in_features)
        self._range_row[:2] = torch.tensor([1.0, -1.0])

    @classmethod
    def of(cls, linear: nn.Linear, *, row_ranges: bool = True) -> Int8Linear:
        return cls(linear.weight, linear.bias, row_ranges=row_ranges)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # reduce_range: 7-bit activations, so that the x86 kernels' int16 pair sums cannot
        # saturate (what torch's own dynamic quantization does).
        if not self.row_ranges:
            whole: torch.Tensor = torch.ops.quantized.linear_dynamic(x.float(), self._packed, True)
            return whole
        leading = x.shape[:-1]
        rows = x.reshape(-1, self.in_features).float()
        scale = torch.linalg.vector_norm(rows, ord=math.inf, dim=1, keepdim=True)
        scale.clamp_(min=_TINY)
        normalized = torch.empty(rows.shape[0] + 1, self.in_features)
        torch.div(rows, scale, out=normalized[:-1])
        normalized[-1] = self._range_row
        out: torch.Tensor = torch.ops.quantized.linear_dynamic(normalized, self._packed, True)
        out = out[:-1].mul_(scale)
        if self.bias is not None:
            out.add_(self.bias)
        return out.reshape(*leading, self.out_features)

    def extra_repr(self) -> str:
        ranges = "per row" if self.row_ranges else "per call"
        return f"in_features={self.in_features}, out_features={self.out_features}, int8, {ranges}"


def quantize_int8(model: WhisperModel) -> WhisperModel:
    """Quantize ``model`` (float32, on the CPU) in place and return it; see the module docstring.

    Keeps the model's batching contract (a window's result does not depend on its batch): the
    decoder's linears quantize each row on its own, the encoder's each call, and the encoder
    then runs one window per call. Idempotent. Raises ValueError for a model that is not
    float32 on the CPU, or on a CPU without torch's x86 quantized kernels.
    """
    check_kernels()
    if model.device.type != "cpu" or model.dtype != torch.float32:
        raise ValueError(
            f"int8 quantization needs a float32 model on the CPU, not {model.dtype} "
            f"on {model.device}"
        )
    _swap_linears(model.encoder, row_ranges=False)
    model.encoder.one_window_per_pass = True
    _swap_linears(model.decoder, row_ranges=True)
    decoder = model.decoder
    if decoder.output_linear is None:
        decoder.output_linear = Int8Linear(decoder.output_weight)
    return model


def check_kernels() -> None:
    """Raise ValueError unless torch's quantized engine is one this module is written for
    (``X86_ENGINES``)."""
    engine = torch.backends.quantized.engine
    if engine not in X86_ENGINES:
        raise ValueError(f"needs torch's x86 kernels for int8; this CPU has {engine!r}")


def is_quantized(model: WhisperModel) -> bool:
    """Whether ``quantize_int8`` was applied to ``model``."""
    return model.decoder.output_linear is not None


def _swap_linears(module: nn.Module, *, row_ranges: bool) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, Int8Linear.of(child, row_ranges=row_ranges))
        else:
            _swap_linears(child, row_ranges=row_ranges)
