"""An in-process IPython shell with ``%load_ext jlprof``, shared by the magic tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import ExecutionResult, InteractiveShell
from IPython.utils.capture import CapturedIO, capture_output


class Shell:
    """Runs magics like a notebook user would and returns what they printed and displayed."""

    def __init__(self, ip: InteractiveShell, cwd: Path) -> None:
        self.ip = ip
        self.cwd = cwd
        self.result: ExecutionResult | None = None  # the last cell's: failed or not

    def cell(self, line: str, body: str) -> CapturedIO:
        with capture_output() as out:
            self.result = self.ip.run_cell(f"%%dlprof {line}\n{body}")
        return out

    def line(self, line: str) -> CapturedIO:
        with capture_output() as out:
            self.result = self.ip.run_cell(f"%dlprof {line}")
        return out

    @property
    def failure(self) -> str | None:
        """The one line a failed ``%%dlprof`` cell ends with (the notebook cell fails), or None."""
        err = self.result.error_in_exec if self.result is not None else None
        if err is None:
            return None
        return (
            "\n".join(err._render_traceback_()) if hasattr(err, "_render_traceback_") else repr(err)
        )

    @property
    def ns(self) -> dict:
        return self.ip.user_ns

    @property
    def magics(self):
        return self.ip.magics_manager.registry["DlprofMagics"]


@pytest.fixture(scope="session")
def ipshell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jlprof")
    return ip


@pytest.fixture(scope="module")
def shell(ipshell, tmp_path_factory) -> Iterator[Shell]:
    """The shell in a fresh working folder; the module's sidecar is shut down at the end."""
    cwd = tmp_path_factory.mktemp("notebook")
    old = Path.cwd()
    os.chdir(cwd)
    sh = Shell(ipshell, cwd)
    try:
        yield sh
    finally:
        sh.magics.session.shutdown()
        os.chdir(old)


@pytest.fixture(scope="module")
def need_nsys() -> None:
    if shutil.which("nsys") is None and not os.environ.get("JLPROF_NSYS"):
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
