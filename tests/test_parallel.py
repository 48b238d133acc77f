"""``make test``'s pytest-xdist units (tests/parallel.py): what shares a worker, what goes first."""

from __future__ import annotations

from pathlib import Path

from tests.parallel import FIRST, GROUPS, rank, unit

ROOT = Path(__file__).resolve().parents[1]


def test_a_files_tests_and_the_browser_tests_share_a_unit() -> None:
    assert unit("tests/test_cli.py::test_a[x::y]") == unit("tests/test_cli.py::test_b")
    assert unit("tests/test_cli.py::test_a") == "tests/test_cli.py"
    # one JupyterLab and one Chromium (session fixtures) for every browser test
    assert (
        unit("tests/ui/test_labext.py::test_a")
        == unit("tests/ui/test_dashboard.py::t")
        == ("tests/ui/")
    )
    assert unit("notebooks/dashboard.ipynb::Cell 3") == "notebooks/dashboard.ipynb"
    # the files that start nsys sessions never run at the same time
    assert unit("tests/test_nsys.py::t") == unit("notebooks/quickstart.ipynb::Cell 0") == "nsys"
    assert unit("tests/torch/test_names.py::t") == unit("tests/magics/test_inplace.py::t")


def test_the_longest_units_are_real_paths_and_go_first() -> None:
    paths = [p for ps in GROUPS.values() for p in ps] + [p for p in FIRST if p not in GROUPS]
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"tests/parallel.py names paths that are gone: {missing}"
    assert sorted(["tests/test_cli.py", "tests/ui/", "tests/test_wheel.py", "nsys"], key=rank) == [
        "nsys",
        "tests/ui/",
        "tests/test_wheel.py",
        "tests/test_cli.py",
    ]
