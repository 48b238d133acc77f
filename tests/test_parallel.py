"""``make test``'s pytest-xdist units (tests/parallel.py): what shares a worker, what goes first."""

from __future__ import annotations

import re
from pathlib import Path

from tests.parallel import FIRST, GROUPS, rank, unit

ROOT = Path(__file__).resolve().parents[1]


def test_a_files_tests_and_the_browser_tests_share_a_unit() -> None:
    assert unit("tests/test_cli.py::test_a[x::y]") == unit("tests/test_cli.py::test_b")
    assert unit("tests/test_cli.py::test_a") == "tests/test_cli.py"
    # one JupyterLab and one Chromium (session fixtures) for every browser test
    assert unit("tests/ui/test_labext.py::test_a") == unit("tests/ui/test_dashboard.py::t")
    assert unit("notebooks/dashboard.ipynb::Cell 3") == "notebooks/dashboard.ipynb"
    # the files that start nsys sessions never run at the same time
    assert unit("tests/test_nsys.py::t") == unit("notebooks/quickstart.ipynb::Cell 0") == "nsys"
    assert unit("tests/torch/test_names.py::t") == unit("tests/ui/test_inplace_ui.py::t") == "nsys"


# what starts an nsys session in a test file or notebook (a fixture, the magic, a run, a launch)
STARTS_NSYS = re.compile(
    r"need_nsys|%%dlprof|run_profile|nsys launch|inplace_lab|_inplace_kernel|Sidecar\(|\"profile\""
)


def test_every_file_that_starts_nsys_is_in_the_nsys_unit() -> None:
    """A new test file that starts nsys outside the unit would overlap another start (2022.4
    hangs or fails with "End of file")."""
    files = [*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("notebooks/**/*.ipynb")]
    outside = [
        f.relative_to(ROOT).as_posix()
        for f in files
        if f.name != "test_parallel.py"
        and STARTS_NSYS.search(f.read_text(encoding="utf-8"))
        and unit(f.relative_to(ROOT).as_posix() + "::t") != "nsys"
    ]
    assert not outside, f"start nsys but run beside the nsys unit: {outside}"


def test_the_longest_units_are_real_paths_and_go_first() -> None:
    paths = [p for ps in GROUPS.values() for p in ps] + [p for p in FIRST if p not in GROUPS]
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"tests/parallel.py names paths that are gone: {missing}"
    assert sorted(["tests/test_cli.py", "tests/engine/test_windowed.py", "nsys"], key=rank) == [
        "nsys",
        "tests/engine/test_windowed.py",
        "tests/test_cli.py",
    ]
