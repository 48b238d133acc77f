"""Run the TypeScript unit tests of the JupyterLab extension (jest) as part of pytest."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LABEXT = Path(__file__).resolve().parents[2] / "labextension"


def test_jest_unit_tests_pass() -> None:
    if not (LABEXT / "node_modules" / ".bin" / "jest").exists():
        pytest.fail(
            "labextension/node_modules is missing: `pip install -e .` (make install) builds the "
            "extension and installs its npm packages"
        )
    jlpm = shutil.which("jlpm", path=str(Path(sys.executable).parent)) or shutil.which("jlpm")
    assert jlpm, "jlpm not found: install the 'ui' extra (JupyterLab brings jlpm)"
    proc = subprocess.run(
        [jlpm, "test", "--ci"], cwd=LABEXT, capture_output=True, text=True, timeout=300
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "Tests:" in report and " failed" not in report.split("Tests:")[1].splitlines()[0]
