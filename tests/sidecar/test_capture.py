"""Capture control inside the sidecar: delay, duration and the PyTorch hook (no nsys needed:
outside nsys the NVTX calls record nothing, the timing logic is the same)."""

from __future__ import annotations

import sys
import time
import types

import pytest

from jlprof.sidecar import capture, nvtxlib


class _Domain:
    """Stands in for jlprof's NVTX client outside nsys (where no tool attaches to it)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def push(self, message: str) -> None:
        self.calls.append(f"push {message}")

    def pop(self) -> None:
        self.calls.append("pop")


@pytest.fixture(autouse=True)
def domain(monkeypatch):
    fake = _Domain()
    monkeypatch.setattr(capture, "_DOMAIN", fake)
    return fake


def test_capture_runs_until_end(domain):
    cap = capture.Capture()
    t0 = time.time()
    cap.begin("nvtx")
    time.sleep(0.2)
    info = cap.end()
    assert info == {"captured": True, "count": 1, "error": None}
    assert domain.calls == [f"push {capture.RANGE}", "pop"]
    start, stop = cap.window_s
    assert t0 <= start and stop - start >= 0.2


def test_delay_longer_than_the_cell_captures_nothing():
    cap = capture.Capture()
    cap.begin("nvtx", delay=5.0)
    t0 = time.perf_counter()
    info = cap.end()
    assert time.perf_counter() - t0 < 1.0  # end() does not wait out the delay
    assert info["captured"] is False and cap.count == 0 and cap.window_s is None


def test_delay_and_duration_bound_the_window():
    cap = capture.Capture()
    t0 = time.time()
    cap.begin("nvtx", delay=0.2, duration=0.3)
    time.sleep(0.9)  # the cell runs on after the capture stopped
    info = cap.end()
    assert info["captured"] is True
    start, stop = cap.window_s
    assert 0.2 <= start - t0 < 0.5
    assert 0.3 <= stop - start < 0.6


def test_a_second_begin_while_capturing_is_refused():
    cap = capture.Capture()
    cap.begin("nvtx")
    try:
        try:
            cap.begin("nvtx")
        except RuntimeError as exc:
            assert "already running" in str(exc)
        else:
            raise AssertionError("a second capture started")
    finally:
        cap.end()


def test_pytorch_annotation_is_initialised_when_asked_or_torch_is_loaded(monkeypatch):
    calls = []
    fake = types.ModuleType("jlprof.torch")
    fake.init = lambda: calls.append(1)
    monkeypatch.setitem(sys.modules, "jlprof.torch", fake)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert capture.init_torch("simple") == "not needed" and calls == []
    assert capture.init_torch("pytorch") == "initialised" and calls == [1]
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    assert capture.init_torch("simple") == "initialised" and calls == [1, 1]

    def unavailable() -> None:
        raise ImportError("torch is not installed")

    fake.init = unavailable  # jlprof.torch.TorchUnavailable is an ImportError
    assert capture.init_torch("pytorch") == "not annotated: torch is not installed"
    monkeypatch.setitem(sys.modules, "jlprof.torch", None)  # a build without jlprof.torch
    assert capture.init_torch("pytorch") == "jlprof.torch not available"


def test_outside_nsys_the_range_says_why_it_cannot_open(monkeypatch):
    monkeypatch.setattr(capture, "_DOMAIN", None)
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.setattr(nvtxlib.Domain, "_client", None)
    with pytest.raises(RuntimeError, match="no NVTX tool is attached to this process"):
        capture.Capture().begin("nvtx")


@pytest.mark.parametrize(
    ("nvtx_version", "nsys_version", "noted"),
    [
        ("0.2.17", "2022.4.2.1", True),
        ("0.2.11", "2022.4.2.1", True),
        ("0.2.10", "2022.4.2.1", False),
        ("0.2.5", "2021.3.1.54", False),
        ("0.2.17", "2024.6.1.90", False),  # not seen to fail: no claim made
        (None, "2022.4.2.1", False),  # no nvtx package: nothing to warn about
    ],
)
def test_the_users_nvtx_is_checked_against_nsys(monkeypatch, nvtx_version, nsys_version, noted):
    def version(name: str) -> str:
        assert name == "nvtx"
        if nvtx_version is None:
            raise capture.metadata.PackageNotFoundError(name)
        return nvtx_version

    monkeypatch.setattr(capture.metadata, "version", version)
    note = capture.nvtx_note(nsys_version)
    assert (note is not None) is noted
    if noted:
        assert note.startswith(f"nsys {nsys_version} records no NVTX ranges of the nvtx package")
        assert "-m pip install 'nvtx==0.2.10'" in note and "newer nsys" in note
