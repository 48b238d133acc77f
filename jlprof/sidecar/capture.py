"""Capture control, run INSIDE the sidecar kernel: start/stop nsys collection around a cell.

The magic executes ``begin()`` before the user's cell and ``end()`` after it. A helper thread owns
the capture range, so ``--delay``/``--duration`` can start and stop it while the cell runs, and the
NVTX push and pop of the jlprof range always happen on the same thread (NVTX push/pop ranges are
per thread). The range is opened through jlprof's own NVTX client (:mod:`nvtxlib`), never the
user's ``nvtx`` package, whose later versions record nothing under nsys 2022.4. Standard library
only; no Jupyter import.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import sys
import threading
import time
from importlib import metadata
from typing import Any

from jlprof.sidecar import nvtxlib

DOMAIN = "jlprof"
RANGE = "jlprof_capture"
NVTX_CAPTURE = f"{RANGE}@{DOMAIN}"
"""``--nvtx-capture`` value: nsys starts collecting when this range is pushed, stops at its pop."""


_DOMAIN: nvtxlib.Domain | None = None


def _domain() -> nvtxlib.Domain:
    """jlprof's NVTX domain, through its own client (created once, on first use)."""
    global _DOMAIN
    if _DOMAIN is None:
        try:
            _DOMAIN = nvtxlib.Domain(DOMAIN)
        except nvtxlib.NvtxUnavailable as exc:
            raise RuntimeError(f"cannot open jlprof's NVTX capture range: {exc}") from None
    return _DOMAIN


LAST_GOOD_NVTX = (0, 2, 10)
"""The last ``nvtx`` package whose ranges nsys 2022.4 records (later ones: nothing at all)."""
LAST_BLIND_NSYS = (2022, 4)
"""The newest nsys seen to record nothing of ``nvtx`` after 0.2.10 (Debian's 2022.4.2)."""


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def nvtx_note(nsys_version: str) -> str | None:
    """Why the user's own NVTX ranges will not be recorded here, with the fix; None when fine.

    Checked when the sidecar starts, before the first capture: with nsys 2022.4 the ``nvtx``
    package after 0.2.10 records nothing, so key nodes, ops and ``-m pytorch``'s op names
    would be missing from every profile (jlprof's capture range itself does not use it).
    """
    try:
        have = metadata.version("nvtx")
    except metadata.PackageNotFoundError:
        return None
    if _version(have) <= LAST_GOOD_NVTX or _version(nsys_version)[:2] > LAST_BLIND_NSYS:
        return None
    return (
        f"nsys {nsys_version} records no NVTX ranges of the nvtx package {have} (only 0.2.10 "
        "and older): your nvtx.annotate ranges and -m pytorch's op names would be missing. Fix: "
        f"{sys.executable} -m pip install 'nvtx==0.2.10' (then %dlprof kernel restart), or a "
        "newer nsys"
    )


def _cudart() -> Any:
    """The CUDA runtime already loaded in this process (PyTorch's or the system's)."""
    candidates = []
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            candidates = sorted({ln.split()[-1] for ln in fh if "libcudart" in ln})
    except OSError:
        pass
    found = ctypes.util.find_library("cudart")
    for name in [*candidates, found, "libcudart.so", "libcudart.so.12", "libcudart.so.11.0"]:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError("cudaProfilerApi capture needs the CUDA runtime (libcudart), not found")


class Capture:
    """One capture at a time: ``begin`` starts it (after ``delay`` s), ``end`` stops it."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._marker = False
        self.count = 0  # captures that actually started (nsys writes one report each)
        self.window_s: tuple[float, float] | None = None

    def _start(self, method: str) -> None:
        if method == "cudaProfilerApi":
            rc = _cudart().cudaProfilerStart()
            if rc != 0:
                raise RuntimeError(f"cudaProfilerStart failed (CUDA error {rc})")
        if method == "nvtx":
            _domain().push(RANGE)
        else:  # the marker that cuts the trace at the range's end; the range works without it
            try:
                _domain().push(RANGE)
                self._marker = True
            except RuntimeError:
                self._marker = False

    def _finish(self, method: str) -> None:
        if method == "nvtx" or self._marker:
            _domain().pop()
        if method == "cudaProfilerApi":
            _cudart().cudaProfilerStop()

    def begin(
        self, method: str = "nvtx", delay: float = 0.0, duration: float | None = None
    ) -> None:
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("a capture is already running in this sidecar")
        if method == "nvtx":
            _domain()  # fail here, in the cell, rather than silently in the thread
        self._stop.clear()
        self._started.clear()
        self._error = None
        self.window_s = None

        def run() -> None:
            try:
                if delay and self._stop.wait(delay):
                    return  # the cell ended before the delay: nothing to capture
                t0 = time.time()
                self._start(method)
                self._started.set()
                self.count += 1
                self._stop.wait(duration)
                self._finish(method)
                self.window_s = (t0, time.time())
            except BaseException as exc:  # reported by end()
                self._error = exc
                self._started.set()

        self._thread = threading.Thread(target=run, name="jlprof-capture", daemon=True)
        self._thread.start()
        if not delay:
            self._started.wait(60)
            if self._error is not None:
                raise RuntimeError(f"could not start capture: {self._error}")

    def end(self) -> dict[str, Any]:
        """Stop the capture (if still on); returns whether one ran, for the notebook side."""
        started = self._started.is_set() and self._error is None
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._thread = None
        return {
            "captured": started,
            "count": self.count,
            "error": None if self._error is None else str(self._error),
        }


CAPTURE = Capture()


def init_torch(mode: str) -> str:
    """Annotate PyTorch (issue 5's ``jlprof.torch``) in pytorch mode or when torch is imported."""
    if mode != "pytorch" and "torch" not in sys.modules:
        return "not needed"
    try:  # through sys.modules (not the package attribute), so a stand-in module is honoured
        jtorch = importlib.import_module("jlprof.torch")
    except ImportError:
        return "jlprof.torch not available"
    try:
        jtorch.init()
    except ImportError as exc:  # jlprof.torch.TorchUnavailable: torch or nvtx missing
        return f"not annotated: {exc}"
    return "initialised"
