"""Shared fixtures: ``stats`` runs NVIDIA's ``nsys stats`` reports (skipped without nsys)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.nsys_stats import nsys_path, nsys_stats

Stats = Callable[[Path, str], pd.DataFrame]


@pytest.fixture
def stats(tmp_path: Path) -> Stats:
    """``stats(sqlite_path, "gpukernsum")`` -> the report as a DataFrame (nsys' column names)."""
    if nsys_path() is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH: NVIDIA cross-checks cannot run")
    out = tmp_path / "nsys_stats"
    out.mkdir()
    return lambda path, report: nsys_stats(path, report, out)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` (``make test``): files, the browser tests as one unit, longest first
    (tests/parallel.py)."""
    if config.getoption("dist") != "loadfile":
        return None
    from tests.parallel import FileGroups

    return FileGroups(config, log)
