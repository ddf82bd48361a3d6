"""Audio samples as 16-bit PCM, the form every chunk carries."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from pipeline.errors import ContractError

__all__ = ["to_int16"]


def to_int16(samples: npt.NDArray[Any]) -> npt.NDArray[np.int16]:
    """One channel's samples as int16: int16 as is, float in [-1, 1] scaled, rounded, clipped.

    Raises:
        ContractError: not 1-D, or neither int16 nor float.
    """
    if samples.ndim != 1:
        raise ContractError(f"one channel's samples must be 1-D, got shape {samples.shape}")
    if samples.dtype.kind == "f":
        # Round, not truncate: int16 audio read as float (k / 32768) must come back as exactly k.
        scaled = np.rint(samples.astype(np.float64) * 32768.0)
        return np.clip(scaled, -32768, 32767).astype(np.int16)
    if samples.dtype.kind == "i" and samples.dtype.itemsize == 2:
        return samples.astype(np.int16, copy=False)
    raise ContractError(f"samples must be int16 or float in [-1, 1], got {samples.dtype}")
