"""Word timings from cross-attention (Whisper's ``find_alignment``).

For a known token sequence, the decoder is run once over
``sot-sequence <|notimestamps|> text… <|endoftext|>`` while the pre-softmax cross-attention
scores of the model's alignment heads (``config.json`` ``alignment_heads``: ``[layer, head]``
pairs) are kept. Per head: softmax over the window's audio positions, standardise over
tokens, median-filter along time; then average the heads and find the monotonic
token→time path with dynamic time warping. A word starts where the path enters its first
token and ends where the next word starts. Times are in ms from the start of the window,
20 ms per encoder position. Punctuation is merged into its neighbouring word afterwards, as
Whisper does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch.nn import functional

from pipeline.asr.whisper.decoding import DecodingOptions, EncodedWindows
from pipeline.asr.whisper.model import WhisperModel

__all__ = [
    "APPENDED_PUNCTUATION",
    "MS_PER_AUDIO_POSITION",
    "PREPENDED_PUNCTUATION",
    "WordTiming",
    "align_words",
    "dtw_path",
    "median_filter",
]

MS_PER_AUDIO_POSITION = 20
PREPENDED_PUNCTUATION = "\"'“¿([{-"
APPENDED_PUNCTUATION = "\"'.。,，!！?？:：”)]}、"


@dataclass(frozen=True, slots=True)
class WordTiming:
    """One word (with its leading space, as decoded) and where it lies in the window.

    ``start_ms``/``end_ms`` are offsets from the window start (multiples of 20 ms,
    ``start_ms <= end_ms``); ``probability`` is the mean probability of the word's tokens
    under the model given the preceding text.
    """

    word: str
    tokens: tuple[int, ...]
    start_ms: int
    end_ms: int
    probability: float


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """Median over a sliding window of odd ``width`` along the last axis (reflect padding);
    returned unchanged when the axis is too short to reflect."""
    if width % 2 != 1:
        raise ValueError(f"median filter width must be odd, got {width}")
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    lead = x.shape[:-1]
    flat = x.reshape(1, -1, x.shape[-1])
    padded = functional.pad(flat, (pad, pad), mode="reflect")
    filtered = padded.unfold(-1, width, 1).median(dim=-1).values
    return filtered.reshape(*lead, x.shape[-1])


def dtw_path(cost: npt.NDArray[np.floating]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Minimum-cost monotonic path through ``cost`` ``(n_rows, n_cols)`` from (0, 0) to the
    last cell; returns the row and column index of each step.

    Rows are filled one at a time: within a row the recurrence
    ``C[j] = x[j] + min(a[j], C[j-1])`` (``a`` from the previous row) unrolls to a prefix
    minimum, so each row is a few vectorised numpy operations. Ties resolve like Whisper's
    reference (diagonal, then up, then left).
    """
    n_rows, n_cols = cost.shape
    total = np.full((n_rows + 1, n_cols + 1), np.inf)
    total[0, 0] = 0.0
    trace = np.full((n_rows + 1, n_cols + 1), -1, dtype=np.int8)
    x = cost.astype(np.float64)
    for i in range(1, n_rows + 1):
        diagonal = total[i - 1, :-1]
        up = total[i - 1, 1:]
        best_above = np.minimum(diagonal, up)
        prefix = np.cumsum(x[i - 1])
        with np.errstate(invalid="ignore"):
            row = prefix + np.minimum.accumulate(best_above - (prefix - x[i - 1]))
        total[i, 1:] = row
        left = total[i, :-1]
        step = np.where(
            (diagonal < up) & (diagonal < left), 0, np.where((up < diagonal) & (up < left), 1, 2)
        )
        trace[i, 1:] = step
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n_rows, n_cols
    path: list[tuple[int, int]] = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        move = trace[i, j]
        if move == 0:
            i, j = i - 1, j - 1
        elif move == 1:
            i -= 1
        else:
            j -= 1
    steps = np.array(path[::-1], dtype=np.int64)
    return steps[:, 0], steps[:, 1]


@dataclass(slots=True)
class _Word:
    word: str
    tokens: list[int]
    start_ms: int
    end_ms: int
    probability: float


def _merge_punctuation(words: list[_Word], prepended: str, appended: str) -> list[_Word]:
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        previous, following = words[i], words[j]
        if previous.word.startswith(" ") and previous.word.strip() in prepended:
            following.word = previous.word + following.word
            following.tokens = previous.tokens + following.tokens
            previous.word, previous.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        previous, following = words[i], words[j]
        if not previous.word.endswith(" ") and following.word in appended:
            previous.word = previous.word + following.word
            previous.tokens = previous.tokens + following.tokens
            following.word, following.tokens = "", []
        else:
            i = j
        j += 1
    return [w for w in words if w.word]


@torch.inference_mode()
def _align_one(
    model: WhisperModel,
    features: torch.Tensor,
    valid: torch.Tensor | None,
    content_frames: int,
    text_tokens: Sequence[int],
    options: DecodingOptions,
    medfilt_width: int,
    qk_scale: float,
) -> list[_Word]:
    tokenizer = model.tokenizer
    sot_sequence = tokenizer.sot_sequence(options.language, options.task)
    tokens = [*sot_sequence, tokenizer.no_timestamps, *text_tokens, tokenizer.eot]
    if len(tokens) > model.dims.n_text_ctx:
        raise ValueError(f"{len(text_tokens)} text tokens do not fit the decoder context")
    device = model.device
    key_valid = torch.ones((1, len(tokens)), dtype=torch.bool, device=device)
    cache = model.decoder.new_cache(features, valid, key_valid)
    token_ids = torch.tensor([tokens], dtype=torch.long, device=device)
    positions = torch.arange(len(tokens), device=device)[None, :]
    scores: list[torch.Tensor] = []
    hidden = model.decoder(token_ids, positions, cache, qk_out=scores)

    start = len(sot_sequence)
    logits = model.decoder.logits(hidden[0, start : start + len(text_tokens)])
    text_probs = logits[:, : tokenizer.eot].softmax(dim=-1)
    index = torch.tensor(list(text_tokens), dtype=torch.long, device=device)
    token_probs = text_probs[torch.arange(len(text_tokens), device=device), index]
    token_probs_np = token_probs.double().cpu().numpy()

    n_positions = max(1, min(content_frames // 2, scores[0].shape[-1]))
    weights = torch.stack([scores[layer][0, head] for layer, head in model.config.alignment_heads])
    weights = (weights[:, :, :n_positions] * qk_scale).softmax(dim=-1)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    weights = (weights - mean) / std.clamp(min=1e-10)
    weights = median_filter(weights, medfilt_width)
    matrix = weights.mean(dim=0)[start:-1]
    text_indices, time_indices = dtw_path(-matrix.double().cpu().numpy())

    words, word_tokens = tokenizer.split_to_word_tokens([*text_tokens, tokenizer.eot])
    if len(word_tokens) <= 1:
        return []
    boundaries = np.concatenate([[0], np.cumsum([len(t) for t in word_tokens[:-1]])])
    jumps = np.concatenate([[True], np.diff(text_indices) != 0])
    jump_ms = time_indices[jumps] * MS_PER_AUDIO_POSITION
    content_ms = content_frames * 10
    result = []
    for k in range(len(word_tokens) - 1):
        first, last = int(boundaries[k]), int(boundaries[k + 1])
        start_ms = min(int(jump_ms[first]), content_ms)
        end_ms = min(int(jump_ms[last]), content_ms)
        result.append(
            _Word(
                word=words[k],
                tokens=word_tokens[k],
                start_ms=start_ms,
                end_ms=max(start_ms, end_ms),
                probability=float(np.mean(token_probs_np[first:last])),
            )
        )
    return result


def align_words(
    model: WhisperModel,
    encoded: EncodedWindows,
    text_tokens: Sequence[Sequence[int]],
    options: DecodingOptions | None = None,
    *,
    medfilt_width: int = 7,
    qk_scale: float = 1.0,
    prepended_punctuation: str = PREPENDED_PUNCTUATION,
    appended_punctuation: str = APPENDED_PUNCTUATION,
) -> list[list[WordTiming]]:
    """Word timings for each window of ``encoded`` and its text tokens (one sequence per
    window, e.g. ``DecodingResult.all_tokens``). Only the window's ``content_frames`` are
    searched. ``options`` supplies language/task for multilingual models. Windows are
    aligned one at a time (alignment runs at finalisation, not on every hop).
    """
    options = DecodingOptions() if options is None else options
    if len(text_tokens) != len(encoded):
        raise ValueError("text_tokens must have one sequence per window")
    if not model.config.alignment_heads:
        raise ValueError("the model's config.json lists no alignment_heads")
    timings: list[list[WordTiming]] = []
    for row, tokens in enumerate(text_tokens):
        if not tokens:
            timings.append([])
            continue
        words = _align_one(
            model,
            encoded.features[row : row + 1],
            None if encoded.valid is None else encoded.valid[row : row + 1],
            encoded.content_frames[row],
            [int(t) for t in tokens],
            options,
            medfilt_width,
            qk_scale,
        )
        merged = _merge_punctuation(words, prepended_punctuation, appended_punctuation)
        timings.append(
            [
                WordTiming(w.word, tuple(w.tokens), w.start_ms, w.end_ms, w.probability)
                for w in merged
            ]
        )
    return timings
