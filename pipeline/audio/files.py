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


_HEADERLESS_HINTS = {
    suffix: f" (headerless {name}: give it a header first, e.g. "
    f"sox -t {kind} -r 8000 in{suffix} out.wav)"
    for suffix, name, kind in (
        (".ul", "mu-law", "ul"),
        (".ulaw", "mu-law", "ul"),
        (".mulaw", "mu-law", "ul"),
        (".al", "A-law", "al"),
        (".alaw", "A-law", "al"),
        (".raw", "audio", "raw -e signed -b 16 -c 1"),
        (".pcm", "audio", "raw -e signed -b 16 -c 1"),
    )
}
"""Telephony platforms often export G.711 or PCM without a header, which no reader can guess."""


def read_call_audio(path: Path | str, call_id: str | None = None) -> CallAudio:
    """Read a mono (channel ``mono``) or stereo (``agent``/``customer``) audio file.

    The call id defaults to the file name without its extension.

    Raises:
        ConfigError: unreadable file, or more than two channels.
    """
    source = Path(path)
    if not source.is_file():
        what = "not a file" if source.exists() else "no such file"
        raise ConfigError(f"cannot read audio file {source}: {what}")
    try:
        # Opened here and read from the file object: libsndfile takes a path as UTF-8, so a
        # name in another encoding (bytes the shell passed undecoded) could not be opened.
        with source.open("rb") as file:
            data, sample_rate_hz = soundfile.read(file, dtype="float32", always_2d=True)
    except (OSError, RuntimeError, TypeError, ValueError, soundfile.LibsndfileError) as error:
        # TypeError: a headerless file (.raw), whose rate and format soundfile must be told
        hint = _HEADERLESS_HINTS.get(source.suffix.lower(), "")
        raise ConfigError(f"cannot read audio file {source}: {error}{hint}") from None
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
