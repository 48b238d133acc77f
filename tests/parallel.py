"""How ``make test`` spreads the suite over pytest-xdist workers (``-n auto --dist loadfile``).

A file's tests stay on one worker, so its module fixtures (a real-trace CLI run, nsys captures, a
notebook's cells under nbval sharing one kernel) run once. The files that start nsys sessions
are one unit, so no two of them overlap, as without xdist (the browser tests among them: one
JupyterLab and one Chromium per session). The longest units start
first (measured with ``--durations`` on the 2-core box): a long file left for the end would keep
one worker busy while the other idles. The order only changes the wall time, never what runs.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from xdist.scheduler import LoadFileScheduling

GROUPS = {
    # every file that starts nsys sessions (profile, launch, the sidecar, kernels under nsys in
    # JupyterLab), one after another as in a serial run: two nsys 2022.4 sessions started
    # together can hang or fail with "End of file" (nsys.start_lock covers jlprof's own starts,
    # not the tests' direct nsys calls nor an in-place capture's nsys start). The browser tests
    # are among them, sharing one JupyterLab and one Chromium as before.
    "nsys": (
        "tests/magics/",
        "tests/server/",
        "tests/sidecar/test_process.py",
        "tests/test_gpu_metrics.py",
        "tests/test_nsys.py",
        "tests/test_nsys_session.py",
        "tests/test_options.py",
        "tests/test_profile_command.py",
        "tests/test_readme.py",
        "tests/test_wheel.py",
        "tests/torch/",
        "tests/ui/",
        "notebooks/inplace/",
        "notebooks/quickstart.ipynb",
        "notebooks/plain_kernel.ipynb",
    ),
}
"""Units of several files: their name and the paths (files or folders) they hold."""

FIRST = (
    "nsys",  # ~500 s: nsys ~240, JupyterLab + Chromium ~150, the wheel ~100
    "tests/engine/test_windowed.py",
    "tests/test_cli_windowed.py",
    "tests/engine/test_store_parts.py",
    "tests/engine/test_windows.py",
    "tests/test_ranks.py",
    "tests/engine/test_cube_range.py",
    "tests/test_diff.py",
    "tests/engine/test_kernel_parts.py",
    "tests/test_viewer.py",
    "tests/test_reliability.py",
    "tests/engine/test_time_parts.py",
)
"""The longest units, longest first (serial seconds from ``--durations``); the rest follow in
pytest-xdist's order."""


def unit(nodeid: str) -> str:
    """The scheduling unit of a test: the group holding its file, or its file."""
    path = nodeid.split("::", 1)[0]
    return next((g for g, paths in GROUPS.items() if path.startswith(paths)), path)


def rank(scope: str) -> int:
    return FIRST.index(scope) if scope in FIRST else len(FIRST)


class FileGroups(LoadFileScheduling):
    """``--dist loadfile`` with the units of :data:`GROUPS`, longest units first."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return unit(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ordered:  # the queue is whole before the first unit leaves
            self.workqueue = OrderedDict(
                sorted(self.workqueue.items(), key=lambda item: rank(item[0]))
            )
            self._ordered = True
        super()._assign_work_unit(node)
