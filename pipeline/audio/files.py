"""Reading call audio from files (WAV, FLAC, … via soundfile) into labelled channels."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile

from pipeline.contracts.audio_chunk import MONO_CHANNEL, STEREO_CHANNELS
from pipeline.errors import ConfigError

__all__ = ["CallAudio", "read_call_audio"]


@dataclass(frozen=True, slots=True)
class CallAudio:
    """A call's audio: one float32 array in [-1, 1) per labelled channel, all of one rate."""

    call_id: str
    sample_rate_hz: int
    channels: dict[str, npt.NDArray[np.float32]]

    @property
    def duration_ms(self) -> int:
        """The longest channel's length in ms, rounded up: a loop over ``[0, duration_ms)``
        in chunks reaches the last sample (rounded down, the samples of the last partial
        millisecond were never sent, nor the end of stream with them)."""
        longest = max((len(s) for s in self.channels.values()), default=0)
        return -(-1000 * longest // self.sample_rate_hz)


def read_call_audio(path: Path | str, call_id: str | None = None) -> CallAudio:
    """Read a mono (channel ``mono``) or stereo (``agent``/``customer``) audio file.

    The call id defaults to the file name without its extension.

    Raises:
        ConfigError: unreadable file, or more than two channels.
    """
    source = Path(path)
    try:
        data, sample_rate_hz = soundfile.read(str(source), dtype="float32", always_2d=True)
    except (OSError, RuntimeError, TypeError, ValueError, soundfile.LibsndfileError) as error:
        # TypeError: a headerless file (.raw), whose rate and format soundfile must be told
        raise ConfigError(f"cannot read audio file {source}: {error}") from None
    if data.shape[1] == 1:
        channels = {MONO_CHANNEL: np.ascontiguousarray(data[:, 0])}
    elif data.shape[1] == 2:
        channels = {
            label: np.ascontiguousarray(data[:, index])
            for index, label in enumerate(STEREO_CHANNELS)
        }
    else:
        raise ConfigError(f"{source}: {data.shape[1]} channels; mono or stereo (agent, customer)")
    return CallAudio(call_id or source.stem, int(sample_rate_hz), channels)
