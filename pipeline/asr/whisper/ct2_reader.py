"""Reader for the CTranslate2 ``model.bin`` binary format.

The file is a flat little-endian stream (binary format version 6)::

    u32 binary_version
    str spec_name            e.g. "WhisperSpec"
    u32 spec_revision
    u32 n_variables
    n_variables × {
        str name             scope path joined by "/", e.g. "encoder/layer_0/ffn/linear_0/weight"
        u8  rank
        u32 dim × rank
        u8  dtype id         index into (float32, int8, int16, int32, float16, bfloat16)
        u32 n_bytes
        u8  data[n_bytes]    row-major
    }
    u32 n_aliases
    n_aliases × { str alias; str target }

where ``str`` is ``u16 length`` (including a trailing NUL) followed by that many bytes.
Aliases appear when the converter found two identical variables (Whisper: the output
projection *is* the token embedding); they are resolved here so callers see every name.

Contract: :func:`read_ct2_model` never mutates the file, returns numpy arrays that own
their memory (safe to keep after the file is closed) and raises
:class:`~pipeline.errors.ModelLoadError` for anything it does not understand.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from pipeline.errors import ModelLoadError

__all__ = ["SUPPORTED_BINARY_VERSIONS", "Ct2Model", "read_ct2_model"]

SUPPORTED_BINARY_VERSIONS = (6,)

# Order fixed by the CTranslate2 DataType enum. bfloat16 has no numpy dtype: it is read as
# uint16 bit patterns and widened to float32 (bfloat16 is the top half of a float32).
_DTYPES: tuple[str, ...] = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
_ITEM_SIZE = {"float32": 4, "int8": 1, "int16": 2, "int32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True, slots=True)
class Ct2Model:
    """The decoded content of one ``model.bin``.

    ``variables`` maps every name, aliases included, to its array; an alias maps to the very
    same array object as its target. ``aliases`` records alias → target as written in the file.
    """

    spec_name: str
    spec_revision: int
    binary_version: int
    variables: dict[str, npt.NDArray[np.generic]]
    aliases: dict[str, str]

    def scalar(self, name: str) -> int | float:
        """Value of a rank-0 variable (e.g. ``encoder/num_heads``) as a Python number."""
        array = self.variables[name]
        if array.size != 1:
            raise ModelLoadError(f"variable {name!r} is not a scalar (shape {array.shape})")
        item = array.reshape(()).item()
        if isinstance(item, (int, float)):
            return item
        raise ModelLoadError(f"variable {name!r} holds a non-numeric scalar")


class _Cursor:
    """Sequential little-endian reads with a clear error on truncation."""

    def __init__(self, stream: BinaryIO, path: Path) -> None:
        self._stream = stream
        self._path = path

    def take(self, n_bytes: int) -> bytes:
        data = self._stream.read(n_bytes)
        if len(data) != n_bytes:
            raise ModelLoadError(f"{self._path}: truncated (wanted {n_bytes} bytes)")
        return data

    def u8(self) -> int:
        return int(self.take(1)[0])

    def u16(self) -> int:
        value: int = struct.unpack("<H", self.take(2))[0]
        return value

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.take(4))[0]
        return value

    def string(self) -> str:
        length = self.u16()
        raw = self.take(length)
        if not raw or raw[-1] != 0:
            raise ModelLoadError(f"{self._path}: malformed string record")
        return raw[:-1].decode("utf-8")


def _read_array(cursor: _Cursor, name: str) -> npt.NDArray[np.generic]:
    rank = cursor.u8()
    shape = tuple(cursor.u32() for _ in range(rank))
    type_id = cursor.u8()
    if type_id >= len(_DTYPES):
        raise ModelLoadError(f"variable {name!r}: unknown dtype id {type_id}")
    dtype_name = _DTYPES[type_id]
    n_bytes = cursor.u32()
    n_items = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if n_bytes != n_items * _ITEM_SIZE[dtype_name]:
        raise ModelLoadError(
            f"variable {name!r}: {n_bytes} bytes do not fit shape {shape} of {dtype_name}"
        )
    raw = cursor.take(n_bytes)
    if dtype_name == "bfloat16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=np.dtype(dtype_name).newbyteorder("<")).reshape(shape).copy()


def read_ct2_model(path: Path) -> Ct2Model:
    """Read a CTranslate2 ``model.bin`` (a file, or a model directory containing one).

    Raises :class:`ModelLoadError` when the file is missing, truncated, of an unsupported
    binary version, or has an alias that points nowhere.
    """
    file_path = path / "model.bin" if path.is_dir() else path
    try:
        stream = file_path.open("rb")
    except OSError as exc:
        raise ModelLoadError(f"cannot open CTranslate2 model {file_path}: {exc}") from exc
    with stream:
        cursor = _Cursor(stream, file_path)
        binary_version = cursor.u32()
        if binary_version not in SUPPORTED_BINARY_VERSIONS:
            raise ModelLoadError(
                f"{file_path}: binary version {binary_version} is not supported "
                f"(supported: {SUPPORTED_BINARY_VERSIONS})"
            )
        spec_name = cursor.string()
        spec_revision = cursor.u32()
        variables: dict[str, npt.NDArray[np.generic]] = {}
        for _ in range(cursor.u32()):
            name = cursor.string()
            variables[name] = _read_array(cursor, name)
        aliases: dict[str, str] = {}
        for _ in range(cursor.u32()):
            alias = cursor.string()
            aliases[alias] = cursor.string()
        if stream.read(1):
            raise ModelLoadError(f"{file_path}: trailing bytes after the alias table")
    for alias, target in aliases.items():
        if target not in variables:
            raise ModelLoadError(f"{file_path}: alias {alias!r} points to missing {target!r}")
        variables[alias] = variables[target]
    return Ct2Model(
        spec_name=spec_name,
        spec_revision=spec_revision,
        binary_version=binary_version,
        variables=variables,
        aliases=aliases,
    )
