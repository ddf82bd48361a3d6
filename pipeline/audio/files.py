"""Reading call audio from files (WAV, FLAC, … via soundfile) into labelled channels."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile

from pipeline.audio.pcm import to_int16
from pipeline.contracts.audio_chunk import MONO_CHANNEL, STEREO_CHANNELS
from pipeline.errors import ConfigError

__all__ = ["CallAudio", "CallFrames", "read_call_audio", "read_call_frames"]


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
    with _opened(source) as sound:
        labels = _labels(sound, source)
        data = sound.read(dtype="float32", always_2d=True)
    channels = {label: np.ascontiguousarray(data[:, i]) for i, label in enumerate(labels)}
    return CallAudio(call_id or source.stem, sound.samplerate, channels)


@dataclass(frozen=True, slots=True)
class CallFrames:
    """A call's audio as sent: int16 frames of shape ``(samples, len(channels))``."""

    sample_rate_hz: int
    channels: tuple[str, ...]
    frames: npt.NDArray[np.int16]


READ_BLOCK_FRAMES = 1 << 16
"""Frames read (as float) and converted at a time by ``read_call_frames``."""


def read_call_frames(
    path: Path | str, check_rate: Callable[[int], None] | None = None
) -> CallFrames:
    """Read a mono or stereo audio file (labelled as ``read_call_audio`` does) as int16 frames.

    Read and converted a block at a time into one int16 array (``to_int16``'s rounding, so
    16-bit audio comes back exactly), a file costs about its int16 size in memory; reading it
    whole as float and converting took about 7.5 times that. ``check_rate`` is called with the
    file's sample rate before any sample is read, and raises to refuse the file unread.

    Raises:
        ConfigError: unreadable file, or more than two channels.
    """
    source = Path(path)
    with _opened(source) as sound:
        labels = _labels(sound, source)
        if check_rate is not None:
            check_rate(sound.samplerate)
        frames = np.empty((sound.frames, len(labels)), np.int16)
        filled = 0
        for block in sound.blocks(READ_BLOCK_FRAMES, dtype="float32", always_2d=True):
            end = filled + len(block)
            for column in range(len(labels)):
                frames[filled:end, column] = to_int16(block[:, column])
            filled = end
    return CallFrames(sound.samplerate, labels, frames[:filled])


@contextlib.contextmanager
def _opened(source: Path) -> Iterator[soundfile.SoundFile]:
    """``source`` open for reading; any failure to open or read it is a ``ConfigError``."""
    if not source.is_file():
        what = "not a file" if source.exists() else "no such file"
        raise ConfigError(f"cannot read audio file {source}: {what}")
    try:
        # Opened here and read from the file object: libsndfile takes a path as UTF-8, so a
        # name in another encoding (bytes the shell passed undecoded) could not be opened.
        with source.open("rb") as file, soundfile.SoundFile(file) as sound:
            yield sound
    except (OSError, RuntimeError, TypeError, ValueError, soundfile.LibsndfileError) as error:
        # TypeError: a headerless file (.raw), whose rate and format soundfile must be told
        hint = _HEADERLESS_HINTS.get(source.suffix.lower(), "")
        raise ConfigError(f"cannot read audio file {source}: {error}{hint}") from None


def _labels(sound: soundfile.SoundFile, source: Path) -> tuple[str, ...]:
    if sound.channels == 1:
        return (MONO_CHANNEL,)
    if sound.channels == 2:
        return STEREO_CHANNELS
    raise ConfigError(f"{source}: {sound.channels} channels; mono or stereo (agent, customer)")
