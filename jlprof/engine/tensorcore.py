"""Placeholder replaced by the tensorcore branch."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

_TC = re.compile(r"884|1688|16816|xmma|hmma|tensorop|gmma|nvjet", re.I)
_ELIG = re.compile(r"conv|matmul|linear|addmm|bmm|einsum|lstm|gru|attention", re.I)


def kernel_uses_tc(names: pd.Series) -> np.ndarray:
    s = pd.Series(names).astype(str)
    return s.str.contains(_TC).to_numpy(bool)


def op_type_tc_eligible(op_types: pd.Series) -> np.ndarray:
    s = pd.Series(op_types).astype(str)
    return s.str.contains(_ELIG).to_numpy(bool)
