"""In-place mode: ``%%dlprof`` captures a cell in the notebook's own kernel, which runs under
``nsys launch`` (the ``jlprof-inplace`` kernelspec, or ``%dlprof enable`` through jlprof's server
extension). Each capture is ``nsys start`` ... ``nsys stop`` (:mod:`jlprof.nsys.session`), then the
sidecar's own analysis (:func:`jlprof.magics.run.analyse_capture`): same run folder, reports,
``_dlprof`` and dashboard. ``%dlprof start`` / ``%dlprof stop`` span cells.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jlprof.errors import JlprofError
from jlprof.magics import run
from jlprof.magics.options import RunOptions
from jlprof.nsys import session as nsys_session
from jlprof.nsys.files import wait_stable
from jlprof.nsys.locate import NsysFailed
from jlprof.sidecar.capture import Capture
from jlprof.sidecar.inplace import (
    ERROR_ENV,
    OPTS_ENV,
    PROVISIONER_ENV,
    launch_options,
    request_path,
)

COMMANDS = ("enable", "disable", "start", "stop")
KERNELSPEC = "jlprof-inplace"
HOW = (
    f"choose the kernel 'Python 3 (jlprof, in place)' ({KERNELSPEC}; VS Code, nbclient: "
    f"--kernel {KERNELSPEC}), or open the notebook in JupyterLab/Notebook with jlprof's server "
    "extension and run %dlprof enable"
)


def active() -> bool:
    """True when this kernel runs under ``nsys launch`` started by jlprof."""
    return bool(os.environ.get(nsys_session.SESSION_ENV))


def can_enable() -> bool:
    """True when jlprof's provisioner started this kernel (``%dlprof enable`` can restart it)."""
    return bool(os.environ.get(PROVISIONER_ENV))


@dataclass
class _Open:
    opts: RunOptions
    folder: Path
    output: Path
    capture: Capture
    cell_error: str | None = None


class InPlace:
    """The in-place captures of this kernel (one open at a time)."""

    def __init__(self) -> None:
        self.session = nsys_session.Session.from_env()
        self.current: _Open | None = None
        self._tmp: Path | None = None
        self.count = 0
        self.broken: str | None = None  # why captures can no longer work in this kernel

    def _session(self) -> nsys_session.Session:
        if self.session is None:
            why = self.broken or os.environ.get(ERROR_ENV)
            raise JlprofError(why or f"this kernel does not run under nsys: {HOW}")
        return self.session

    def start(self, opts: RunOptions, say: run.Say) -> None:
        """``nsys start`` into a private temporary folder; jlprof's NVTX range marks the end."""
        sess = self._session()
        if self.current is not None:
            raise JlprofError("a capture is already open: %dlprof stop ends it first")
        if opts.delay or opts.duration is not None:
            raise JlprofError(
                "--delay/--duration are not available in place (the capture is the whole cell): "
                "use %dlprof start / %dlprof stop around what to capture"
            )
        if opts.nsys_opts_given:
            raise JlprofError(
                "in place, nsys options apply when the kernel starts under nsys: give them to "
                "%dlprof enable (or JLPROF_INPLACE_NSYS_OPTS for the jlprof-inplace kernel)"
            )
        folder = run._run_folder(opts, None)
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="jlprof-inplace-"))
        self.count += 1
        output = self._tmp / f"capture{self.count}"
        sess.start(output)
        capture = Capture()
        try:  # the range only trims what nsys records after the cell; its absence is harmless
            capture.begin("nvtx", 0.0, None)
        except RuntimeError as exc:
            say(f"capture end not marked ({exc}); the profile runs until nsys stop")
        self.current = _Open(opts, folder, output, capture)

    def stop(self, say: run.Say) -> run.RunResult:
        """``nsys stop`` and the sidecar's analysis of what it wrote."""
        sess = self._session()
        cur = self.current
        if cur is None:
            raise JlprofError("no capture is open: %dlprof start [options] opens one")
        self.current = None
        result = run.RunResult(folder=cur.folder)
        result.cell_error = cur.cell_error
        step = run._Steps(cur.opts, result.timings_s)
        with contextlib.suppress(RuntimeError):
            cur.capture.end()
        step(run.STEPS[1])
        try:
            raw = sess.stop(cur.output)
        except NsysFailed as exc:  # a timeout has run the recovery ladder; the run says so
            if isinstance(exc, nsys_session.NsysTimeout) and sess.log and not self._kept(sess):
                self.session = None
                self.broken = (
                    "the nsys session was ended after a stuck nsys stop: restart this kernel "
                    "(or %dlprof enable) to profile in place again"
                )
            result.status, result.error = "analysis_failed", str(exc)  # jlprof-run/1 statuses
            step.done("capture failed")
            run._write_manifest(result, cur.opts)
            return result
        if raw is None or not raw.exists():
            result.status = "capture_empty"
            result.error = f"nsys stop wrote no report (expected {cur.output}.qdstrm)"
            step.done("nothing captured")
            run._write_manifest(result, cur.opts)
            return result
        wait_stable(raw, time.monotonic() + 30)  # nsys stop may return first
        return run.analyse_capture(raw, result, cur.opts, step)

    @staticmethod
    def _kept(sess: nsys_session.Session) -> bool:
        """Whether the session survived its recovery (``nsys cancel`` brought it back)."""
        try:
            return sess.state() == "Launched"
        except NsysFailed:
            return False

    def run_cell(
        self, opts: RunOptions, code: str, run_cell: Callable[[str], Any], say: run.Say
    ) -> run.RunResult:
        """``%%dlprof`` in place: the cell runs in this kernel between start and stop."""
        self.start(opts, say)
        assert self.current is not None
        try:
            res = run_cell(code)
            err = getattr(res, "error_in_exec", None) or getattr(res, "error_before_exec", None)
            if err is not None:
                self.current.cell_error = f"{type(err).__name__}: {err}"
        finally:
            result = self.stop(say)
        return result

    def status(self) -> str:
        if self.session is None:
            return self.broken or os.environ.get(ERROR_ENV) or f"in place: off ({HOW})"
        try:
            state = self.session.state()
        except JlprofError as exc:
            state = f"unknown ({exc})"
        opened = ", a capture is open (%dlprof stop)" if self.current else ""
        return f"in place: nsys session {self.session.name}, state {state}{opened}"


def _kernel_id() -> str | None:
    """This kernel's id: the provisioner's, else from its connection file (``kernel-<id>``)."""
    given = os.environ.get(PROVISIONER_ENV, "")
    if given and given != "1":
        return given
    with contextlib.suppress(Exception):
        from ipykernel import get_connection_file

        return Path(get_connection_file()).stem.removeprefix("kernel-")
    return None


def restart_with(enabled: bool, nsys_opts: str, say: run.Say) -> None:
    """``%dlprof enable|disable``: ask jlprof's provisioner to (re)start this kernel under nsys
    (or without it) and end this process; the server restarts the kernel at once."""
    if not can_enable():
        if enabled and active():
            say("in place: already on (this kernel was started under nsys)")
            return
        raise JlprofError(
            f"%dlprof {'enable' if enabled else 'disable'} needs jlprof's server extension "
            f"(JupyterLab/Notebook) to restart this kernel: {HOW}"
        )
    if enabled:
        launch_options(nsys_opts)  # checked now, not after the restart
    kid = _kernel_id()
    if kid is None:
        raise JlprofError("cannot tell this kernel's id (no connection file): restart it by hand")
    path = request_path(kid)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"enabled": enabled, OPTS_ENV: nsys_opts}))
    os.replace(tmp, path)
    say(
        "restarting this kernel "
        + ("under nsys launch (in-place mode)" if enabled else "without nsys")
        + ": its variables are lost; run your cells again once it is back"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    threading.Timer(0.5, os._exit, args=(0,)).start()  # the reply goes out first


def split_command(line: str) -> tuple[str, str] | None:
    """``('enable', rest)`` when the line magic starts with an in-place command."""
    words = line.strip().split(None, 1)
    if words and words[0] in COMMANDS:
        return words[0], words[1] if len(words) > 1 else ""
    return None


__all__ = ["COMMANDS", "InPlace", "active", "restart_with", "split_command"]
