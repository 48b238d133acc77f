"""combine(): per-iteration partials over an iteration range, against a pandas group-by."""

import numpy as np
import pandas as pd
import pytest

from jlprof.engine.aggregate.aggregate import combine, combine_reference


def cube_frame(seed: int, levels: list[str], iteration_major: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n_it, rows = 12, []
    for it in range(n_it):
        for _ in range(int(rng.integers(0, 6))):  # some iterations have no rows at all
            rows.append([*(int(rng.integers(-1, 4)) for _ in levels), it])
    keys = pd.DataFrame(rows, columns=[*levels, "iteration"]).drop_duplicates()
    keys = keys.sort_values(["iteration", *levels] if iteration_major else [*levels, "iteration"])
    n = len(keys)
    idx = pd.MultiIndex.from_arrays([keys[c].to_numpy() for c in keys.columns], names=keys.columns)
    return pd.DataFrame(
        {
            "gpu_sum": rng.integers(0, 10**12, n),
            "gpu_min": rng.integers(0, 1000, n),
            "gpu_max": rng.integers(0, 1000, n),
            "calls": rng.integers(1, 5, n),
            "tc": rng.random(n) < 0.5,
        },
        index=idx,
    )


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("levels", [["op"], ["kernel", "op"]])
@pytest.mark.parametrize("iteration_major", [True, False])
def test_combine_matches_the_group_by(seed, levels, iteration_major):
    f = cube_frame(seed, levels, iteration_major)
    level = levels[0] if len(levels) == 1 else levels
    for lo, hi in [(0, 11), (3, 3), (2, 7), (-5, 4), (9, 40), (20, 30), (5, 4)]:
        got, ref = combine(f, level, lo, hi), combine_reference(f, level, lo, hi)
        pd.testing.assert_frame_equal(got, ref, obj=f"{levels} {lo}..{hi}")
