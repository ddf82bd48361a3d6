from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.asr.whisper.alignment import dtw_path, median_filter


def reference_dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whisper's cell-by-cell DTW, kept deliberately naive as the oracle."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf)
    cost[0, 0] = 0
    trace = -np.ones((n + 1, m + 1))
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            cost[i, j] = x[i - 1, j - 1] + c
            trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        if trace[i, j] == 0:
            i, j = i - 1, j - 1
        elif trace[i, j] == 1:
            i -= 1
        else:
            j -= 1
    steps = np.array(path[::-1])
    return steps[:, 0], steps[:, 1]


@pytest.mark.parametrize("seed", range(25))
def test_dtw_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((int(rng.integers(1, 15)), int(rng.integers(1, 60))))
    rows, cols = dtw_path(x)
    ref_rows, ref_cols = reference_dtw(x)
    np.testing.assert_array_equal(rows, ref_rows)
    np.testing.assert_array_equal(cols, ref_cols)


def test_dtw_path_is_monotonic_and_complete() -> None:
    x = np.random.default_rng(7).standard_normal((6, 40))
    rows, cols = dtw_path(x)
    assert (rows[0], cols[0]) == (0, 0)
    assert (rows[-1], cols[-1]) == (5, 39)
    steps = np.stack([np.diff(rows), np.diff(cols)], axis=1)
    assert {tuple(s) for s in steps} <= {(0, 1), (1, 0), (1, 1)}


def test_dtw_follows_a_clear_diagonal() -> None:
    cost = np.ones((4, 8))
    for token, frame in enumerate((1, 3, 5, 7)):
        cost[token, frame] = -5.0
    rows, cols = dtw_path(cost)
    for token, frame in enumerate((1, 3, 5, 7)):
        assert frame in cols[rows == token]


def test_median_filter_matches_numpy() -> None:
    x = torch.randn(3, 5, 30, generator=torch.Generator().manual_seed(0))
    width = 7
    padded = np.pad(x.numpy(), ((0, 0), (0, 0), (3, 3)), mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    expected = np.median(windows, axis=-1)
    np.testing.assert_allclose(median_filter(x, width).numpy(), expected)


def test_median_filter_leaves_short_inputs_and_rejects_even_width() -> None:
    x = torch.arange(3.0)[None, :]
    assert torch.equal(median_filter(x, 7), x)
    with pytest.raises(ValueError, match="odd"):
        median_filter(x, 4)
