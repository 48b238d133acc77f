"""Nsight Compute (``ncu``): read a ``.ncu-rep``'s measured metrics, and build the ``ncu``
command line that profiles the kernels chosen from an nsys profile (docs/kernels.md).

Reading goes through NVIDIA's own readers, never a vendored one: the ``ncu_report`` Python
module where installed (``pip install ncu-report``; its licence is NVIDIA's), else the ``ncu``
CLI (``ncu --import FILE --csv --page raw --print-units base``). Both give, per profiled launch
in the report's order, the raw metrics by their ncu names (base units: ns, byte, %), the
demangled kernel name and the NVTX push/pop ranges it ran in. Standard library only, like the
rest of :mod:`jlprof.nsys`.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jlprof.errors import InputError, JlprofError

# The ncu metrics jlprof reads (docs/kernels.md says what each means). Tensor FLOPs are not in
# the SASS thread counts: ``flops`` is the FP16/FP32/FP64 work of ncu's roofline.
DURATION = "gpu__time_duration.sum"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
HMMA = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
IMMA = "sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
GRID, BLOCK = "launch__grid_size", "launch__block_size"
CYCLES = "smsp__cycles_elapsed.avg"
# FP operations per SASS thread instruction (an FMA is two), by precision: add, mul, fma
FLOP_OPS = {f"{p}{op}": (2 if op == "fma" else 1) for p in "hfd" for op in ("add", "mul", "fma")}
_COUNT = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"

# What ``ncu --metrics`` collects for jlprof (the DL metric set of ``jlprof ncu --kernels``)
DL_METRICS = (DURATION, SM_PCT, MEM_PCT, OCCUPANCY, HMMA, IMMA, DRAM_READ, DRAM_WRITE, GRID,
              BLOCK, CYCLES, *(_COUNT.format(k) for k in FLOP_OPS))  # fmt: skip
SLOWDOWN_NOTE = (
    "ncu replays each profiled kernel many times to collect its counters: the profiled kernels "
    "run 10-100x slower than normal, and the run takes much longer than without ncu"
)
INSTALL_HINT = (
    "install NVIDIA's reader (`pip install ncu-report`) or Nsight Compute (`ncu` on PATH, at "
    "least as new as the report)"
)
REPORT_MAGIC = b"NVR\x00"  # the first bytes of every .ncu-rep
_CSV_TEXT = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
             "Stream", "Block Size", "Grid Size", "Device", "CC")  # fmt: skip
_TO_BASE = {"usecond": 1e3, "msecond": 1e6, "second": 1e9, "Kbyte": 1e3, "Mbyte": 1e6,
            "Gbyte": 1e9, "Tbyte": 1e12}  # fmt: skip


@dataclass
class Launch:
    """One profiled kernel launch: its demangled name, NVTX ranges and raw metrics."""

    index: int
    kernel: str
    nvtx: tuple[str, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)


def read_ncu_report(path: str | os.PathLike[str], *, via: str | None = None) -> list[Launch]:
    """Every profiled launch of ``path`` in the report's order; ``via`` = ``ncu_report`` or
    ``ncu`` forces a reader (default: the module where importable, else the CLI)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such Nsight Compute report; check the path.")
    with open(p, "rb") as fh:
        if fh.read(4) != REPORT_MAGIC:  # ncu_report reads anything else as an empty report
            raise InputError(f"{p}: not an Nsight Compute report (a .ncu-rep starts with "
                             "'NVR'); give the file `ncu -o` wrote.")  # fmt: skip
    if via not in (None, "ncu_report", "ncu"):
        raise JlprofError(f"unknown ncu reader {via!r}; use 'ncu_report' or 'ncu'.")
    if via in (None, "ncu_report"):
        try:
            import ncu_report  # noqa: F401  (optional, NVIDIA's licence)
        except ImportError:
            if via == "ncu_report":
                raise JlprofError(
                    f"the ncu_report module is not installed; {INSTALL_HINT}."
                ) from None
        else:
            return _read_module(p)
    exe = shutil.which("ncu")
    if exe is None:
        raise JlprofError(f"cannot read {p.name}: neither ncu_report nor ncu is here; "
                          f"{INSTALL_HINT}.")  # fmt: skip
    argv = [exe, "--import", str(p), "--csv", "--page", "raw", "--print-units", "base",
            "--print-kernel-base", "demangled"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise JlprofError(f"{shlex.join(argv)} failed ({tail[0]}); an older ncu cannot read a "
                          "newer report: use ncu_report or a newer ncu.")  # fmt: skip
    return parse_raw_csv(proc.stdout)


def _read_module(path: Path) -> list[Launch]:
    import ncu_report

    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as exc:  # the module raises its own error types
        raise InputError(f"{path}: ncu_report cannot read it ({exc}); is it a .ncu-rep?") from exc
    out: list[Launch] = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for i in range(rng.num_actions()):
            a = rng.action_by_idx(i)
            metrics: dict[str, float] = {}
            for name in a.metric_names():
                m = a.metric_by_name(name)
                if m.num_instances() == 0:
                    v = m.value()
                    if isinstance(v, (int, float)):
                        metrics[name] = float(v)
            nv = a.nvtx_state()
            ranges = tuple(
                "/".join(nv.domain_by_id(d).push_pop_ranges()) for d in nv.domains()
            ) if nv is not None else ()  # fmt: skip
            kernel = a.name(ncu_report.IAction.NameBase_DEMANGLED)
            out.append(Launch(len(out), kernel, tuple(x for x in ranges if x), metrics))
    return out


def parse_raw_csv(text: str) -> list[Launch]:
    """``ncu --import F --csv --page raw`` output: a header row, an optional units row (its ID
    cell empty), one row per launch. Numbers may carry thousands separators; a unit other than
    ncu's base one (us, ms, KB, ...) is scaled to it."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows) if r[:1] == ["ID"]), None)
    if start is None:
        raise InputError("ncu's raw CSV has no header row starting with \"ID\"; is it "
                         "`ncu --import F --csv --page raw` output?")  # fmt: skip
    head = rows[start]
    body = rows[start + 1 :]
    units = [""] * len(head)
    if body and body[0][:1] == [""]:
        units, body = body[0], body[1:]
    nvtx_cols = [j for j, h in enumerate(head) if "Push/Pop" in h or h.startswith("NVTX")]
    out: list[Launch] = []
    for r in body:
        if len(r) != len(head):
            continue
        metrics: dict[str, float] = {}
        for j, (h, cell) in enumerate(zip(head, r, strict=False)):
            if h in _CSV_TEXT or j in nvtx_cols:
                continue
            v = _number(cell)
            if v is not None:
                metrics[h] = v * _TO_BASE.get(units[j] if j < len(units) else "", 1.0)
        for h, metric in (("Grid Size", GRID), ("Block Size", BLOCK)):
            if h in head and metric not in metrics:
                size = _size(r[head.index(h)])
                if size is not None:
                    metrics[metric] = size
        nvtx = tuple(_nvtx_cell(head[j], r[j]) for j in nvtx_cols if r[j])
        kernel = r[head.index("Kernel Name")] if "Kernel Name" in head else ""
        out.append(Launch(len(out), kernel, tuple(x for x in nvtx if x), metrics))
    return out


_NUM = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?|-?\d+(\.\d*)?([eE][-+]?\d+)?")


def _number(cell: str) -> float | None:
    s = cell.strip()
    if not _NUM.fullmatch(s):
        return None
    return float(s.replace(",", ""))


def _size(cell: str) -> float | None:
    """``(96, 1, 1)`` → 96 (threads or blocks in all)."""
    nums = re.findall(r"\d+", cell)
    if not nums:
        return None
    total = 1.0
    for n in nums:
        total *= int(n)
    return total


def _nvtx_cell(header: str, cell: str) -> str:
    """The push/pop range of an NVTX cell: the header names its ``:``-separated fields
    (``thread Domain:Push/Pop_Range:PL_Type:...``); several stacked ranges (``;``/``|``)
    joined by '/'."""
    fields = header.split(":")
    at = next((i for i, f in enumerate(fields) if "Push/Pop" in f), 1 if len(fields) > 1 else 0)
    parts = [p for p in re.split(r"[;|]", cell) if p.strip()]
    names = [p.split(":")[at].strip() if len(p.split(":")) > at else p.strip() for p in parts]
    return "/".join(n for n in names if n and n != "none")


def measured_flops(metrics: dict[str, Any]) -> float | None:
    """FP16/32/64 operations (an FMA is two): the SASS thread counts, or their per-cycle rates
    times the elapsed cycles where only the rates were collected (``--set full``)."""
    total, seen = 0.0, False
    cycles = metrics.get(CYCLES)
    for op, weight in FLOP_OPS.items():
        count = metrics.get(_COUNT.format(op))
        if count is None and cycles is not None:
            rate = metrics.get(_COUNT.format(op) + ".per_cycle_elapsed")
            count = None if rate is None else rate * cycles
        if count is not None:
            total += weight * count
            seen = True
    return total if seen else None


# The measured columns, in order, with the ncu metric each is (flops and dram_bytes: sums)
MEASURED = (
    ("duration_ns", DURATION),
    ("sm_throughput_pct", SM_PCT),
    ("memory_throughput_pct", MEM_PCT),
    ("achieved_occupancy_pct", OCCUPANCY),
    ("tensor_hmma_pct", HMMA),
    ("tensor_imma_pct", IMMA),
)


def measured_rows(launches: Sequence[Launch]) -> list[dict[str, Any]]:
    """One dict per launch: index, kernel, NVTX path, the :data:`MEASURED` figures,
    ``tensor_pipe_pct`` (the busier of HMMA and IMMA), ``dram_bytes`` (read + write),
    ``flops`` (:func:`measured_flops`), grid and block size; None where not collected."""
    rows = []
    for la in launches:
        m = la.metrics
        row: dict[str, Any] = {"launch": la.index, "kernel": la.kernel,
                               "nvtx": ";".join(la.nvtx)}  # fmt: skip
        for col, metric in MEASURED:
            row[col] = m.get(metric)
        pipes = [v for v in (row["tensor_hmma_pct"], row["tensor_imma_pct"]) if v is not None]
        row["tensor_pipe_pct"] = max(pipes) if pipes else None
        dram = [m[k] for k in (DRAM_READ, DRAM_WRITE) if k in m]
        row["dram_bytes"] = sum(dram) if dram else None
        row["flops"] = measured_flops(m)
        row["grid_size"], row["block_size"] = m.get(GRID), m.get(BLOCK)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class NcuCommand:
    """An ``ncu`` command line, with what it profiles in words."""

    argv: list[str]
    output: Path
    what: str


def capture_command(
    app: Sequence[str],
    output: str | os.PathLike[str],
    *,
    kernels: Sequence[str] = (),
    regex: str | None = None,
    nvtx_include: Sequence[str] = (),
    launch_skip: int = 0,
    launch_count: int | None = None,
    metrics: Sequence[str] = DL_METRICS,
    force: bool = False,
    ncu: str = "ncu",
) -> NcuCommand:
    """``ncu`` argv profiling ``app``'s kernels named ``kernels`` (exact demangled names, one
    regex alternation) or matching ``regex``, in the NVTX ranges ``nvtx_include`` (ncu's
    ``Domain@Range/`` or ``Range/`` spellings), after ``launch_skip`` launches of them, at most
    ``launch_count``; ``output`` gets ``.ncu-rep``."""
    app = [os.fspath(a) for a in app]
    if not app or app[0].startswith("-"):
        raise JlprofError("no program to profile under ncu: give the command after the options.")
    if kernels and regex:
        raise JlprofError("choose kernels by name or by regex, not both.")
    if launch_skip < 0 or (launch_count is not None and launch_count < 1):
        raise JlprofError("--launch-skip is >= 0 and --launch-count >= 1.")
    base = Path(os.fspath(output))
    if base.suffix == ".ncu-rep":
        base = base.with_suffix("")
    argv = [ncu, "--target-processes", "all", "--export", str(base)]
    argv += ["--force-overwrite"] if force else []
    what = "every kernel"
    pattern = regex
    if kernels:
        pattern = "^(" + "|".join(re.escape(_function_base(k)) for k in kernels) + ")$"
        what = f"{len(kernels)} kernel(s): " + ", ".join(_function_base(k) for k in kernels)
    elif regex:
        re.compile(regex)
        what = f"kernels matching /{regex}/"
    if pattern:
        argv += ["--kernel-name-base", "function", "--kernel-name", f"regex:{pattern}"]
    if nvtx_include:
        argv += ["--nvtx"]
        for r in nvtx_include:
            argv += ["--nvtx-include", r if r.endswith("/") or "@" in r else r + "/"]
        what += " in NVTX range(s) " + ", ".join(nvtx_include)
    if launch_skip:
        argv += ["--launch-skip", str(launch_skip)]
    if launch_count is not None:
        argv += ["--launch-count", str(launch_count)]
    argv += ["--metrics", ",".join(metrics), *app]
    return NcuCommand(argv, base.with_name(base.name + ".ncu-rep"), what)


def _function_base(name: str) -> str:
    """A demangled kernel name's function name, as ncu's ``--kernel-name-base function`` sees
    it: ``void ns::k<T>(int)`` → ``k``."""
    s = name.strip()
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # drop the parameter list: the last top-level '('
        if ch in "<":
            depth += 1
        elif ch in ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
    s = s[:cut]
    depth, out = 0, []
    for ch in s:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    s = "".join(out).split()[-1] if "".join(out).split() else s
    return s.rsplit("::", 1)[-1]


__all__ = [
    "DL_METRICS",
    "INSTALL_HINT",
    "MEASURED",
    "SLOWDOWN_NOTE",
    "Launch",
    "NcuCommand",
    "capture_command",
    "measured_flops",
    "measured_rows",
    "parse_raw_csv",
    "read_ncu_report",
]
