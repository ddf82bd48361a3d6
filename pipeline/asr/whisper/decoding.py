"""Batched greedy decoding for the torch Whisper port.

One call decodes B windows together: one encoder pass, one decoder pass over all prompts,
then one decoder step per generated token for the items still running.

Batching contract: windows may have different lengths. They are zero-padded to the longest
and masked (see :mod:`pipeline.asr.whisper.model`), and prompts of different lengths are
left-padded and masked, with each item's learned positions starting at 0. An item's result
therefore does not depend on the other items in its batch (up to float rounding). Batching
windows of similar length wastes the least compute; that is the caller's choice.

Per item, the decoder input is::

    [<|startofprev|> prompt…]  <|startoftranscript|> [lang task]  <|notimestamps|>  text…
     context (not decoded)      sot sequence                                   forced prefix

``text_tokens`` is text already committed for this window (e.g. by an earlier streaming hop):
it is forced, not re-decoded, and the result reports only what follows it (plus the full
text). Timestamps are never predicted (``<|notimestamps|>``; timestamp tokens suppressed).

Greedy search per step: raw logits → optional per-item :class:`LogitsBias` → suppression
(``suppress_tokens``, every special token except end-of-text, and on the first step
``suppress_ids_begin`` when ``suppress_blank`` and the item has no forced text) → argmax.
Log-probabilities are taken after biasing and suppression, as in Whisper.

Loop guards (a window cut tight to the audio often never emits end-of-text): a token budget
(``max_new_tokens``), a repetition cut (a tail that repeats a block of tokens is cut back to
one occurrence), and a words-per-second cap against the window's audio duration. Each
result says why it stopped.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch

from pipeline.asr.whisper.mel import FRAMES_PER_SECOND
from pipeline.asr.whisper.model import WhisperModel
from pipeline.errors import ConfigError

__all__ = [
    "DecodingOptions",
    "DecodingPrefix",
    "DecodingResult",
    "EncodedWindows",
    "LogitsBias",
    "StopReason",
    "compression_ratio",
    "decode",
    "encode_windows",
]


class StopReason(StrEnum):
    """Why decoding of one item ended."""

    END_OF_TEXT = "end_of_text"
    MAX_TOKENS = "max_tokens"
    REPETITION = "repetition"
    WORDS_PER_SECOND = "words_per_second"


class LogitsBias(Protocol):
    """Hook that biases one item's next-token logits (hotwords plug in here).

    Called once per decoding step for the item it is attached to, with that item's text
    tokens so far (forced prefix followed by generated tokens). Returns token id → bonus
    added to the raw logits before suppression (suppressed tokens stay suppressed); an empty
    mapping means no bias at this step. Must be cheap and must not keep the sequence.
    """

    def __call__(self, text_tokens: Sequence[int]) -> Mapping[int, float]: ...


@dataclass(frozen=True, slots=True)
class DecodingOptions:
    """Settings shared by every item of one :func:`decode` call.

    ``suppress_tokens=None`` means the model's ``config.json`` ``suppress_ids`` (Whisper's
    ``-1``); ``()`` suppresses nothing beyond the special tokens. ``max_new_tokens=None`` is
    half the decoder context (224 for Whisper), also capped by the room left after the prompt.
    ``max_words_per_second=None`` disables the words-per-second cap; otherwise an item stops
    before the word that would exceed ``max_words_per_second × audio seconds + words_slack``
    (forced prefix words count). ``repetition_guard`` cuts a tail in which a block of
    ``p <= repetition_max_period_tokens`` tokens repeats ``max(repetition_min_repeats,
    ceil(repetition_min_span_tokens / p))`` times back to one occurrence. The defaults (3
    repeats, 24 tokens) keep a sentence a caller says twice, or a short question said three
    times, whole: Whisper loops run on until a cap, real repeats stop (the ``repeats`` fixtures;
    2 repeats over 16 tokens cut 22 of their 62 words, with no gain on the other fixtures).
    ``max_prompt_tokens=None`` keeps the last ``n_text_ctx // 2 - 1`` context tokens.
    ``language``/``task`` are used by multilingual models only.
    """

    language: str | None = "en"
    task: str = "transcribe"
    max_new_tokens: int | None = None
    suppress_tokens: tuple[int, ...] | None = None
    suppress_blank: bool = True
    max_words_per_second: float | None = 6.0
    words_slack: int = 3
    repetition_guard: bool = True
    repetition_max_period_tokens: int = 48
    repetition_min_repeats: int = 3
    repetition_min_span_tokens: int = 24
    max_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.task not in ("transcribe", "translate"):
            raise ConfigError(f"task must be 'transcribe' or 'translate', got {self.task!r}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.max_words_per_second is not None and not self.max_words_per_second > 0:
            raise ConfigError(
                f"max_words_per_second must be > 0 or None, got {self.max_words_per_second}"
            )
        if self.words_slack < 0:
            raise ConfigError(f"words_slack must be >= 0, got {self.words_slack}")
        if self.repetition_max_period_tokens < 1:
            raise ConfigError("repetition_max_period_tokens must be >= 1")
        if self.repetition_min_repeats < 2:
            raise ConfigError("repetition_min_repeats must be >= 2")
        if self.repetition_min_span_tokens < 2:
            raise ConfigError("repetition_min_span_tokens must be >= 2")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 0:
            raise ConfigError(f"max_prompt_tokens must be >= 0, got {self.max_prompt_tokens}")
        if self.suppress_tokens is not None and any(t < 0 for t in self.suppress_tokens):
            raise ConfigError("suppress_tokens must be token ids >= 0 (None = model default)")


@dataclass(frozen=True, slots=True)
class DecodingPrefix:
    """Per-item tokens placed before decoding starts.

    ``text_tokens``: forced after ``<|notimestamps|>`` (committed text of this window).
    ``prompt_tokens``: context after ``<|startofprev|>`` (e.g. previous utterance, or a
    hotword prompt); it conditions the decoder but is not part of the result.
    """

    text_tokens: tuple[int, ...] = ()
    prompt_tokens: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DecodingResult:
    """The greedy hypothesis for one window, with the inputs of hallucination guards.

    ``tokens`` are the generated text tokens after the forced ``prefix_tokens`` (never
    special tokens), ``token_logprobs`` their log-probabilities. ``text`` is the whole
    hypothesis (prefix + generated), stripped. ``avg_logprob`` is Whisper's: sum of the
    generated tokens' and end-of-text's log-probs over ``len(tokens) + 1`` when end-of-text
    was emitted, else the mean over ``tokens`` (0.0 if none); ``model_avg_logprob`` the same
    without the hotword bonuses (equal to it when no bias was given). ``no_speech_prob`` is the
    probability of the no-speech token at the step after ``<|startoftranscript|>`` (raw
    logits). ``compression_ratio`` is the zlib ratio of ``text``.
    """

    prefix_tokens: tuple[int, ...]
    tokens: tuple[int, ...]
    token_logprobs: tuple[float, ...]
    text: str
    avg_logprob: float
    model_avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    stop_reason: StopReason

    @property
    def all_tokens(self) -> tuple[int, ...]:
        """Prefix followed by generated tokens: the full hypothesis."""
        return self.prefix_tokens + self.tokens


@dataclass(frozen=True, slots=True, eq=False)
class EncodedWindows:
    """Encoder output of a batch of windows, reusable for decoding and word alignment.

    ``features`` is ``(batch, n_positions, n_audio_state)``; ``valid`` is ``(batch,
    n_positions)`` bool or ``None`` (no padding). ``frame_lengths`` is each window's length in
    mel frames (10 ms); ``content_frames`` how many of them hold audio (the rest is margin
    or padding chosen by the caller).
    """

    features: torch.Tensor
    valid: torch.Tensor | None
    frame_lengths: tuple[int, ...]
    content_frames: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.frame_lengths)


def compression_ratio(text: str) -> float:
    """``len(utf8) / len(zlib(utf8))`` of ``text`` (0.0 for empty text); high = repetitive."""
    raw = text.encode("utf-8")
    if not raw:
        return 0.0
    return len(raw) / len(zlib.compress(raw))


def _check_window(model: WhisperModel, n_mels: int, n_frames: int) -> None:
    if n_mels != model.dims.n_mels:
        raise ValueError(f"each window must have {model.dims.n_mels} mel bins, got {n_mels}")
    if not 1 <= n_frames <= model.dims.max_mel_frames:
        raise ValueError(
            f"window length must be 1..{model.dims.max_mel_frames} mel frames, got {n_frames}"
        )


def _stack_windows(
    model: WhisperModel, mel_batch: torch.Tensor | Sequence[torch.Tensor]
) -> tuple[torch.Tensor, list[int]]:
    """One zero-padded ``(batch, n_mels, longest)`` tensor on the model's device and dtype,
    and each window's length in frames. A 3-D tensor is taken as equal-length windows."""
    if isinstance(mel_batch, torch.Tensor):
        if mel_batch.ndim != 3 or mel_batch.shape[0] == 0:
            raise ValueError(
                f"mel batch must be (batch, n_mels, n_frames), got {tuple(mel_batch.shape)}"
            )
        _check_window(model, mel_batch.shape[1], mel_batch.shape[2])
        mel = mel_batch.to(model.device, model.dtype)
        return mel, [int(mel_batch.shape[2])] * mel_batch.shape[0]
    windows = list(mel_batch)
    if not windows:
        raise ValueError("empty batch")
    for window in windows:
        if window.ndim != 2:
            raise ValueError(f"each window must be (n_mels, n_frames), got {tuple(window.shape)}")
        _check_window(model, window.shape[0], window.shape[1])
    lengths = [int(window.shape[1]) for window in windows]
    mel = torch.zeros(
        (len(windows), model.dims.n_mels, max(lengths)), dtype=model.dtype, device=model.device
    )
    for row, window in enumerate(windows):
        mel[row, :, : window.shape[1]] = window.to(model.device, model.dtype)
    return mel, lengths


@torch.inference_mode()
def encode_windows(
    model: WhisperModel,
    mel_batch: torch.Tensor | Sequence[torch.Tensor],
    content_frames: Sequence[int] | None = None,
) -> EncodedWindows:
    """Run the encoder once over a batch of mel windows.

    ``mel_batch`` is a ``(batch, n_mels, n_frames)`` tensor or a sequence of ``(n_mels,
    n_frames_i)`` windows (1 ≤ n_frames_i ≤ 3000). ``content_frames`` (default: each
    window's length) bounds the audio duration used by the words-per-second cap and by word
    alignment; pass it when the window carries a margin or zero padding (a 30 s window).
    """
    mel, lengths = _stack_windows(model, mel_batch)
    if content_frames is None:
        content = tuple(lengths)
    else:
        content = tuple(int(c) for c in content_frames)
        if len(content) != len(lengths):
            raise ValueError("content_frames must have one entry per window")
        if any(not 0 <= c <= n for c, n in zip(content, lengths, strict=True)):
            raise ValueError("content_frames must be within 0..window length")
    frame_lengths = torch.tensor(lengths, device=model.device)
    features, valid = model.encoder(mel, frame_lengths)
    return EncodedWindows(features, valid, tuple(lengths), content)


@dataclass(frozen=True, slots=True, eq=False)
class _PromptBatch:
    """Left-padded decoder prompts: ``tokens``/``positions`` ``(batch, longest)``,
    ``key_valid`` ``(batch, longest + max_new)`` (false on padding), the row of each item's
    ``<|startoftranscript|>`` and each prompt's unpadded length."""

    tokens: torch.Tensor
    positions: torch.Tensor
    key_valid: torch.Tensor
    sot_rows: torch.Tensor
    lengths: npt.NDArray[np.int64]
    max_new: int


def _build_prompts(
    model: WhisperModel, options: DecodingOptions, prefixes: Sequence[DecodingPrefix]
) -> _PromptBatch:
    tokenizer = model.tokenizer
    sot_sequence = tokenizer.sot_sequence(options.language, options.task)
    max_context = (
        model.dims.n_text_ctx // 2 - 1
        if options.max_prompt_tokens is None
        else options.max_prompt_tokens
    )
    prompts: list[list[int]] = []
    sot_indices: list[int] = []
    for prefix in prefixes:
        if any(not 0 <= t < tokenizer.eot for t in prefix.text_tokens + prefix.prompt_tokens):
            raise ValueError("prefix tokens must be text tokens (0 <= id < end-of-text)")
        context = list(prefix.prompt_tokens[-max_context:]) if max_context > 0 else []
        head = [tokenizer.sot_prev, *context] if context else []
        sot_indices.append(len(head))
        prompts.append([*head, *sot_sequence, tokenizer.no_timestamps, *prefix.text_tokens])

    lengths = np.array([len(p) for p in prompts], dtype=np.int64)
    longest = int(lengths.max())
    budget = (
        model.dims.n_text_ctx // 2 if options.max_new_tokens is None else options.max_new_tokens
    )
    max_new = min(budget, model.dims.n_text_ctx - longest)
    if max_new < 1:
        raise ValueError(
            f"prompt of {longest} tokens leaves no room in the {model.dims.n_text_ctx}-token "
            "decoder context"
        )
    pads = longest - lengths
    tokens = torch.full((len(prompts), longest), tokenizer.eot, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        tokens[row, int(pads[row]) :] = torch.tensor(prompt, dtype=torch.long)
    columns = torch.arange(longest)[None, :]
    pads_column = torch.from_numpy(pads)[:, None]
    key_valid = torch.ones((len(prompts), longest + max_new), dtype=torch.bool)
    key_valid[:, :longest] = columns >= pads_column
    device = model.device
    return _PromptBatch(
        tokens=tokens.to(device),
        positions=(columns - pads_column).clamp(min=0).to(device),
        key_valid=key_valid.to(device),
        sot_rows=torch.from_numpy(pads + np.array(sot_indices, dtype=np.int64)).to(device),
        lengths=lengths,
        max_new=max_new,
    )


class _LogitFilters:
    """Suppression applied to every step's logits, in place."""

    def __init__(
        self, model: WhisperModel, options: DecodingOptions, prefixes: Sequence[DecodingPrefix]
    ) -> None:
        tokenizer = model.tokenizer
        n_vocab = model.dims.n_vocab
        suppressed = torch.zeros(n_vocab, dtype=torch.bool)
        ids = (
            model.config.suppress_ids
            if options.suppress_tokens is None
            else options.suppress_tokens
        )
        suppressed[[t for t in ids if 0 <= t < n_vocab]] = True
        # Every special and timestamp token except end-of-text, whatever the config says.
        suppressed[tokenizer.eot + 1 :] = True
        suppressed[tokenizer.eot] = False
        begin = list(model.config.suppress_ids_begin) or [
            *tokenizer.encode(" ")[:1],
            tokenizer.eot,
        ]
        at_begin = torch.zeros(n_vocab, dtype=torch.bool)
        at_begin[[t for t in begin if 0 <= t < n_vocab]] = True
        # Blank suppression only where nothing is forced: after committed text, ending at
        # once is the right answer when the window holds nothing new.
        blank_rows = torch.tensor([options.suppress_blank and not p.text_tokens for p in prefixes])
        self._suppressed = suppressed.to(model.device)
        self._first_step = (blank_rows[:, None] & at_begin[None, :]).to(model.device)
        self._any_blank = bool(blank_rows.any())

    def apply(self, logits: torch.Tensor, step: int) -> None:
        logits.masked_fill_(self._suppressed, float("-inf"))
        if step == 0 and self._any_blank:
            logits.masked_fill_(self._first_step, float("-inf"))


def _apply_biases(
    logits: torch.Tensor,
    active: npt.NDArray[np.int64],
    biases: Sequence[LogitsBias | None],
    text_so_far: Callable[[int], list[int]],
) -> None:
    for row, item in enumerate(active.tolist()):
        bias = biases[item]
        if bias is None:
            continue
        bonus = bias(text_so_far(item))
        if bonus:
            ids = torch.tensor(list(bonus.keys()), dtype=torch.long, device=logits.device)
            values = torch.tensor(list(bonus.values()), dtype=logits.dtype, device=logits.device)
            logits[row].index_add_(0, ids, values)


def _repetition_cut(
    tokens: npt.NDArray[np.int64], n_tokens: int, options: DecodingOptions
) -> npt.NDArray[np.int64]:
    """For each row of ``tokens[:, :n_tokens]``, the length to cut back to so that a
    repeating tail keeps one occurrence, or -1 when the tail does not repeat enough.

    A period is only examined when some row's newest token equals the token one period
    back, which rules out almost all periods with one vectorised comparison. The smallest
    repeating period wins.
    """
    cut = np.full(tokens.shape[0], -1, dtype=np.int64)
    max_period = min(options.repetition_max_period_tokens, n_tokens // 2)
    if max_period < 1:
        return cut
    periods = np.arange(1, max_period + 1)
    newest = tokens[:, n_tokens - 1]
    candidates = tokens[:, n_tokens - 1 - periods] == newest[:, None]
    for period in periods[candidates.any(axis=0)].tolist():
        repeats = max(
            options.repetition_min_repeats, math.ceil(options.repetition_min_span_tokens / period)
        )
        span = period * repeats
        if span > n_tokens:
            continue
        tail = tokens[:, n_tokens - span : n_tokens]
        repeating = (tail[:, period:] == tail[:, :-period]).all(axis=1) & (cut < 0)
        cut[repeating] = n_tokens - span + period
    return cut


class _Hypotheses:
    """Host-side (numpy) bookkeeping of one decode call, indexed by item.

    ``active`` maps the rows of the device tensors (which shrink as items finish) to items.
    """

    def __init__(
        self,
        model: WhisperModel,
        options: DecodingOptions,
        prefixes: Sequence[DecodingPrefix],
        content_frames: Sequence[int],
        max_new: int,
    ) -> None:
        batch = len(prefixes)
        self._options = options
        self._prefixes = prefixes
        self._eot = model.tokenizer.eot
        self._word_starts = model.tokenizer.word_start_table
        self.active = np.arange(batch)
        self.generated = np.zeros((batch, max_new), dtype=np.int64)
        self.logprobs = np.zeros((batch, max_new), dtype=np.float64)
        self.model_logprobs = np.zeros((batch, max_new), dtype=np.float64)
        self.n_generated = np.zeros(batch, dtype=np.int64)
        self.eot_logprob = np.full(batch, np.nan, dtype=np.float64)
        self.model_eot_logprob = np.full(batch, np.nan, dtype=np.float64)
        self.stop = np.full(batch, "", dtype=object)
        self.words = np.array(
            [int(self._word_starts[list(p.text_tokens)].sum()) for p in prefixes], dtype=np.int64
        )
        if options.max_words_per_second is None:
            self.word_caps = np.full(batch, np.iinfo(np.int64).max, dtype=np.int64)
        else:
            seconds = np.asarray(content_frames, dtype=np.float64) / FRAMES_PER_SECOND
            self.word_caps = np.floor(options.max_words_per_second * seconds).astype(np.int64)
            self.word_caps += options.words_slack

    def text_so_far(self, item: int) -> list[int]:
        step = int(self.n_generated[item])
        return [*self._prefixes[item].text_tokens, *self.generated[item, :step].tolist()]

    def record(
        self,
        step: int,
        tokens: npt.NDArray[np.int64],
        logprobs: npt.NDArray[np.float64],
        model_logprobs: npt.NDArray[np.float64],
    ) -> npt.NDArray[np.bool_]:
        """Record the tokens chosen for the active rows, with their log-probs as decoded and
        as the model alone gives them (without hotword bonuses); returns which rows are
        finished."""
        active = self.active
        is_eot = tokens == self._eot
        starts_word = self._word_starts[np.minimum(tokens, len(self._word_starts) - 1)] & ~is_eot
        over_cap = starts_word & (self.words[active] + starts_word > self.word_caps[active])
        take = ~is_eot & ~over_cap
        taken = active[take]
        self.generated[taken, step] = tokens[take]
        self.logprobs[taken, step] = logprobs[take]
        self.model_logprobs[taken, step] = model_logprobs[take]
        self.n_generated[taken] = step + 1
        self.words[taken] += starts_word[take]
        self.eot_logprob[active[is_eot]] = logprobs[is_eot]
        self.model_eot_logprob[active[is_eot]] = model_logprobs[is_eot]
        self.stop[active[is_eot]] = StopReason.END_OF_TEXT
        self.stop[active[over_cap]] = StopReason.WORDS_PER_SECOND
        finished: npt.NDArray[np.bool_] = ~take
        if self._options.repetition_guard and taken.size:
            cut = _repetition_cut(self.generated[taken], step + 1, self._options)
            repeated = cut >= 0
            self.n_generated[taken[repeated]] = cut[repeated]
            self.stop[taken[repeated]] = StopReason.REPETITION
            finished[np.flatnonzero(take)[repeated]] = True
        return finished

    def out_of_budget(self, finished: npt.NDArray[np.bool_]) -> None:
        self.stop[self.active[~finished]] = StopReason.MAX_TOKENS

    def results(
        self, model: WhisperModel, no_speech_probs: npt.NDArray[np.floating]
    ) -> list[DecodingResult]:
        results = []
        for item, prefix in enumerate(self._prefixes):
            count = int(self.n_generated[item])
            tokens = tuple(int(t) for t in self.generated[item, :count])
            token_logprobs = tuple(float(lp) for lp in self.logprobs[item, :count])
            ended = self.stop[item] == StopReason.END_OF_TEXT
            avg_logprob = _average(token_logprobs, self.eot_logprob[item] if ended else None)
            model_avg_logprob = _average(
                [float(lp) for lp in self.model_logprobs[item, :count]],
                self.model_eot_logprob[item] if ended else None,
            )
            text = model.tokenizer.decode(prefix.text_tokens + tokens).strip()
            results.append(
                DecodingResult(
                    prefix_tokens=prefix.text_tokens,
                    tokens=tokens,
                    token_logprobs=token_logprobs,
                    text=text,
                    avg_logprob=avg_logprob,
                    model_avg_logprob=model_avg_logprob,
                    no_speech_prob=float(no_speech_probs[item]),
                    compression_ratio=compression_ratio(text),
                    stop_reason=StopReason(self.stop[item]),
                )
            )
        return results


def _average(token_logprobs: Sequence[float], eot_logprob: float | None) -> float:
    """Whisper's average log-prob: with end-of-text, over the tokens and it; else the tokens'
    mean (0.0 for none)."""
    if eot_logprob is not None:
        return (sum(token_logprobs) + float(eot_logprob)) / (len(token_logprobs) + 1)
    return sum(token_logprobs) / len(token_logprobs) if token_logprobs else 0.0


@torch.inference_mode()
def decode(
    model: WhisperModel,
    mel_batch: torch.Tensor | Sequence[torch.Tensor] | EncodedWindows,
    options: DecodingOptions | None = None,
    prefixes: Sequence[DecodingPrefix | None] | None = None,
    *,
    content_frames: Sequence[int] | None = None,
    biases: Sequence[LogitsBias | None] | None = None,
) -> list[DecodingResult]:
    """Greedy-decode a batch of windows; returns one result per window, in input order.

    ``mel_batch``: mel windows (see :func:`encode_windows`) or an already encoded batch (then
    ``content_frames`` is taken from it). ``prefixes`` and ``biases``: one entry (or ``None``)
    per window. Raises ``ValueError`` for malformed inputs or a prompt that leaves no room
    in the decoder context.
    """
    options = DecodingOptions() if options is None else options
    if isinstance(mel_batch, EncodedWindows):
        if content_frames is not None:
            raise ValueError("content_frames comes from the EncodedWindows")
        encoded = mel_batch
    else:
        encoded = encode_windows(model, mel_batch, content_frames)
    item_prefixes = [p or DecodingPrefix() for p in (prefixes or [None] * len(encoded))]
    item_biases = list(biases) if biases is not None else [None] * len(encoded)
    if len(item_prefixes) != len(encoded) or len(item_biases) != len(encoded):
        raise ValueError("prefixes and biases must have one entry per window")

    prompt = _build_prompts(model, options, item_prefixes)
    cache = model.decoder.new_cache(encoded.features, encoded.valid, prompt.key_valid)
    hidden = model.decoder(prompt.tokens, prompt.positions, cache)
    rows = torch.arange(len(encoded), device=model.device)
    sot_logits = model.decoder.logits(hidden[rows, prompt.sot_rows])
    no_speech_probs = sot_logits.softmax(dim=-1)[:, model.tokenizer.no_speech].cpu().numpy()
    logits = model.decoder.logits(hidden[:, -1])

    filters = _LogitFilters(model, options, item_prefixes)
    hypotheses = _Hypotheses(model, options, item_prefixes, encoded.content_frames, prompt.max_new)
    biased = any(bias is not None for bias in item_biases)
    next_positions = torch.from_numpy(prompt.lengths).to(model.device)[:, None]
    for step in range(prompt.max_new):
        bias_added = None
        if biased:
            unbiased = logits.clone()
            _apply_biases(logits, hypotheses.active, item_biases, hypotheses.text_so_far)
            bias_added = logits - unbiased
        filters.apply(logits, step)
        next_tokens = logits.argmax(dim=-1)
        next_logprobs = logits.log_softmax(dim=-1).gather(1, next_tokens[:, None])[:, 0]
        # The model's own log-prob of the chosen token, without the hotword bonus (suppressed
        # entries stay -inf): what the no-speech guard weighs, so that a boosted name decoded
        # on hold music does not look like confident speech.
        model_logprobs = (
            next_logprobs
            if bias_added is None
            else (logits - bias_added).log_softmax(dim=-1).gather(1, next_tokens[:, None])[:, 0]
        )
        chosen = (
            torch.stack([next_tokens.double(), next_logprobs.double(), model_logprobs.double()])
            .cpu()
            .numpy()
        )
        finished = hypotheses.record(step, chosen[0].astype(np.int64), chosen[1], chosen[2])
        if step == prompt.max_new - 1:
            hypotheses.out_of_budget(finished)
            break
        if finished.all():
            break
        if finished.any():
            keep = torch.from_numpy(np.flatnonzero(~finished)).to(model.device)
            cache = cache.select(keep)
            next_tokens = next_tokens.index_select(0, keep)
            next_positions = next_positions.index_select(0, keep)
            hypotheses.active = hypotheses.active[~finished]
        hidden = model.decoder(next_tokens[:, None], next_positions + step, cache)
        logits = model.decoder.logits(hidden[:, -1])
    return hypotheses.results(model, no_speech_probs)
