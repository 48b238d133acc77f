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


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("levels", [["op"], ["kernel", "op"]])
@pytest.mark.parametrize("dense", [True, False])
def test_combine_with_unused_levels_late_iterations_and_either_code_path(
    seed, levels, dense, monkeypatch
):
    """The layout's group codes come from a table over every label combination (dense) or
    from a sorted factorize; rows dropped after the index was built leave unused levels,
    and iterations that do not start at 0: both agree with the group-by."""
    from jlprof.engine.aggregate import aggregate

    if not dense:
        monkeypatch.setattr(aggregate, "DENSE_MIN_SLOTS", 0)
        monkeypatch.setattr(aggregate, "DENSE_SLOTS_PER_ROW", 0)
    f = cube_frame(seed, levels, iteration_major=seed % 2 == 0)
    level = levels[0] if len(levels) == 1 else levels
    rng = np.random.default_rng(seed)
    frames = {
        # the index keeps every level value: the first group label is left with no row
        "unused levels": f[(f.index.codes[0] != 0) & (rng.random(len(f)) < 0.8)],
        "late iterations": f.set_axis(  # iterations from 1000 on: it0 is not 0
            f.index.set_levels(f.index.levels[-1] + 1000, level="iteration")
        ),
    }
    for name, g in frames.items():
        assert name != "unused levels" or any(
            len(lv) > len(np.unique(c)) for lv, c in zip(g.index.levels, g.index.codes, strict=True)
        )
        off = 1000 if name == "late iterations" else 0
        for lo, hi in [(0, 11), (3, 3), (2, 7), (5, 4)]:
            lo, hi = lo + off, hi + off
            pd.testing.assert_frame_equal(
                combine(g, level, lo, hi), combine_reference(g, level, lo, hi), obj=name
            )
