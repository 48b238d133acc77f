"""Capture control inside the sidecar: delay, duration and the PyTorch hook (no nsys needed:
outside nsys the NVTX calls record nothing, the timing logic is the same)."""

from __future__ import annotations

import sys
import time
import types

from jlprof.sidecar import capture


def test_capture_runs_until_end():
    cap = capture.Capture()
    t0 = time.time()
    cap.begin("nvtx")
    time.sleep(0.2)
    info = cap.end()
    assert info == {"captured": True, "count": 1, "error": None}
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
