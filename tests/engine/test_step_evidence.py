"""StepEvidence's sums: batch by batch they give what the PyTorch checks computed from every row."""

from __future__ import annotations

import numpy as np
import pytest

from jlprof.engine.aggregate.step_evidence import Counts


@pytest.mark.parametrize("n", [1, 2, 7, 10, 1001])
def test_counts_give_numpys_median_and_sum_batch_by_batch(n):
    rng = np.random.default_rng(n)
    values = rng.integers(0, 50, n) * 1_000 + rng.integers(0, 3, n)  # repeats, as real durations
    c = Counts()
    for part in np.array_split(values, 4):
        c.add(part)
    assert c.n == n
    assert c.total() == int(values.sum())
    assert c.median() == float(np.median(values))
    assert np.array_equal(np.repeat(c.values, c.counts), np.sort(values))


def test_counts_of_nothing_are_empty():
    c = Counts()
    c.add(np.zeros(0, np.int64))
    assert c.n == 0 and c.total() == 0
