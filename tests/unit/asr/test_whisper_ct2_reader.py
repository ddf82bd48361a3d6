from __future__ import annotations

import re
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pipeline.asr.whisper.ct2_reader import Ct2Model, read_ct2_model
from pipeline.asr.whisper.model import bundled_model_dir
from pipeline.errors import ModelLoadError

_TYPE_IDS = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4, "bfloat16": 5}


def _string(text: str) -> bytes:
    raw = text.encode("utf-8") + b"\0"
    return struct.pack("<H", len(raw)) + raw


def _variable(name: str, array: np.ndarray, type_name: str | None = None) -> bytes:
    type_name = type_name or str(array.dtype)
    payload = array.tobytes()
    return (
        _string(name)
        + struct.pack("<B", array.ndim)
        + b"".join(struct.pack("<I", d) for d in array.shape)
        + struct.pack("<B", _TYPE_IDS[type_name])
        + struct.pack("<I", len(payload))
        + payload
    )


def _model_file(
    variables: list[bytes], aliases: list[tuple[str, str]], *, version: int = 6
) -> bytes:
    head = struct.pack("<I", version) + _string("WhisperSpec") + struct.pack("<I", 3)
    body = struct.pack("<I", len(variables)) + b"".join(variables)
    tail = struct.pack("<I", len(aliases)) + b"".join(_string(a) + _string(t) for a, t in aliases)
    return head + body + tail


@pytest.fixture(scope="module")
def bundled() -> Ct2Model:
    return read_ct2_model(bundled_model_dir())


def test_bundled_file_has_whisper_spec_layout(bundled: Ct2Model) -> None:
    assert bundled.spec_name == "WhisperSpec"
    assert bundled.binary_version == 6
    assert bundled.spec_revision == 3
    assert bundled.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    stored = {name: a for name, a in bundled.variables.items() if name not in bundled.aliases}
    # 139 float16 weights and 9 scalar settings are stored; the alias adds one name.
    assert len(stored) == 148
    assert sum(a.dtype == np.float16 for a in stored.values()) == 139
    assert len(bundled.variables) == 149


def test_bundled_file_shapes_and_scalars(bundled: Ct2Model) -> None:
    v = bundled.variables
    assert v["encoder/conv1/weight"].shape == (384, 80, 3)
    assert v["encoder/conv2/weight"].shape == (384, 384, 3)
    assert v["encoder/position_encodings/encodings"].shape == (1500, 384)
    assert v["decoder/embeddings/weight"].shape == (51864, 384)
    assert v["decoder/position_encodings/encodings"].shape == (448, 384)
    assert v["decoder/layer_3/self_attention/linear_0/weight"].shape == (3 * 384, 384)
    assert v["decoder/layer_0/attention/linear_1/weight"].shape == (2 * 384, 384)
    assert v["encoder/layer_0/self_attention/linear_0/weight"].dtype == np.float16
    assert bundled.scalar("encoder/num_heads") == 6
    assert bundled.scalar("decoder/num_heads") == 6
    layers = {m.group(0) for name in v if (m := re.match(r"encoder/layer_\d+/", name))}
    assert layers == {f"encoder/layer_{i}/" for i in range(4)}


def test_bundled_alias_is_the_embedding(bundled: Ct2Model) -> None:
    v = bundled.variables
    assert v["decoder/projection/weight"] is v["decoder/embeddings/weight"]


def test_fused_key_bias_is_zero(bundled: Ct2Model) -> None:
    # Q/K/V are stacked along the output axis; Whisper has no key bias.
    bias = bundled.variables["encoder/layer_0/self_attention/linear_0/bias"]
    assert not np.any(bias[384:768])
    assert np.any(bias[:384])


def test_synthetic_file_round_trip(tmp_path: Path) -> None:
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    half = np.array([1.5, -2.0], dtype=np.float16)
    bf16_bits = (np.array([1.0, -3.5], dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    data = _model_file(
        [
            _variable("a/weight", weight),
            _variable("a/half", half),
            _variable("a/bf16", bf16_bits, "bfloat16"),
            _variable("a/heads", np.array(4, dtype=np.int16)),
        ],
        [("b/weight", "a/weight")],
    )
    path = tmp_path / "model.bin"
    path.write_bytes(data)
    model = read_ct2_model(tmp_path)
    np.testing.assert_array_equal(model.variables["a/weight"], weight)
    np.testing.assert_array_equal(model.variables["a/half"], half)
    np.testing.assert_array_equal(model.variables["a/bf16"], np.array([1.0, -3.5], np.float32))
    assert model.scalar("a/heads") == 4
    assert model.variables["b/weight"] is model.variables["a/weight"]
    assert read_ct2_model(path).aliases == {"b/weight": "a/weight"}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[:-3], "truncated"),
        (lambda d: struct.pack("<I", 5) + d[4:], "binary version"),
        (lambda d: d + b"\0", "trailing bytes"),
    ],
)
def test_malformed_files_raise(
    tmp_path: Path, mutate: Callable[[bytes], bytes], message: str
) -> None:
    data = _model_file([_variable("x", np.zeros(2, np.float32))], [])
    path = tmp_path / "model.bin"
    path.write_bytes(mutate(data))
    with pytest.raises(ModelLoadError, match=message):
        read_ct2_model(path)


def test_dangling_alias_raises(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(_model_file([_variable("x", np.zeros(2, np.float32))], [("y", "nope")]))
    with pytest.raises(ModelLoadError, match="alias"):
        read_ct2_model(path)


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="cannot open"):
        read_ct2_model(tmp_path / "absent")
