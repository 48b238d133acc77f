"""Real runs of examples/torch_cnn.py under the real nsys, shared by the jlprof.torch tests.

Each run costs a few seconds, so the runs are session-scoped and each serves several tests:

* ``auto_run``: ``jlprof --mode=pytorch`` profiles the unmodified script (auto-enable path);
* ``debug_run``: the script calls ``jlprof.torch.init(stack_trace=True)`` itself, under plain
  ``nsys profile`` (simple mode), with ``detect_anomaly``, a ``loss.item()`` per step, bfloat16
  autocast and a slow Dataset (``SLOW_DATA_MS`` per sample).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("nvtx")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "torch_cnn.py"
STEPS, BATCH = 3, 8
SLOW_DATA_MS = 12.0  # per sample: > 10 % of a step even when a loaded box slows the steps


def _need_nsys() -> None:
    if shutil.which("nsys") is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")


@pytest.fixture(scope="session")
def auto_run(tmp_path_factory) -> Path:
    _need_nsys()
    out = tmp_path_factory.mktemp("torch_auto")
    argv = [sys.executable, "-m", "jlprof", "--mode=pytorch", "--reports=detail,expert_systems",
            "--formats=csv,json", f"--output_path={out}", "-f", "true", sys.executable,
            str(SCRIPT), "--steps", str(STEPS), "--batch", str(BATCH)]  # fmt: skip
    failures = []
    for _ in range(2):  # nsys 2022.4 fails now and then under load (DESIGN.md): one retry
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
        if proc.returncode == 0 and f"trained {STEPS} steps" in proc.stdout:
            return out
        failures.append(f"exit {proc.returncode}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    raise AssertionError("\n----\n".join(failures))


@pytest.fixture(scope="session")
def debug_run(tmp_path_factory) -> Path:
    _need_nsys()
    from jlprof.profiling import profile_command

    out = tmp_path_factory.mktemp("torch_debug")
    return profile_command(
        [sys.executable, str(SCRIPT), "--annotate", "--stack", "--anomaly", "--item", "--amp",
         "--slow-data", str(SLOW_DATA_MS), "--steps", str(STEPS), "--batch", str(BATCH)],
        output=out, force=True,
    )  # fmt: skip
