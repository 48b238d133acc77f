"""jlprof against NVIDIA's own ``nsys stats`` reports, on a built export and every real one.

* ``nvtxkernsum`` (NVTX Range Kernel Summary) vs
  ``jlprof.engine.aggregate.nvtxsum.range_kernel_summary``: every column per (NVTX Range, PID, TID,
  Kernel Name). nsys also lists kernels outside every range, as rows whose range, style (and PID/TID
  when the API record is missing) are ``None``; those are checked against the kernels jlprof finds
  in no range.
* ``gpukernsum`` (groups by demangled name, grid, block) vs the iteration report grouped by
  ``Long Kernel Name``; ``gpukernsum:base`` (short names) vs the kernel report summed over ops.
* ``cudaapisum`` vs the API frame. nsys 2022.4 strips only four-digit ``_vNNNN`` suffixes
  (``substr(name, -6, 2) = '_v'``), so ``cudaGraphLaunch_v10000`` stays long there; jlprof strips
  any length, and the nsys names are normalised the same way before comparing.

nsys skips a report ("SKIPPED: ... does not contain CUDA kernel data") when a table it needs is
missing; then jlprof's side must be empty too.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jlprof
from jlprof.engine.aggregate.nvtxsum import kernel_range_pairs, range_kernel_summary
from jlprof.engine.read import schema
from jlprof.profile import Profile
from tests.fixtures.nsys_stats import cached_stats, nsys_path
from tests.fixtures.scenarios import real_traces, rich_db

pytestmark = [
    pytest.mark.nsys,
    pytest.mark.skipif(nsys_path() is None, reason="nsys (Nsight Systems CLI) is not on PATH"),
]

REPORTS = ("nvtxkernsum", "gpukernsum", "gpukernsum:base", "cudaapisum")
NEEDS = {  # tables each nsys report checks for before it runs
    "nvtxkernsum": ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"),
    "gpukernsum": ("CUPTI_ACTIVITY_KIND_KERNEL",),
    "gpukernsum:base": ("CUPTI_ACTIVITY_KIND_KERNEL",),
    "cudaapisum": ("CUPTI_ACTIVITY_KIND_RUNTIME",),
}
KEY = ["NVTX Range", "PID", "TID", "Kernel Name"]
EXACT = ["NVTX Inst", "Kern Inst", "Total Time (ns)", "Min (ns)", "Max (ns)"]
ROUNDED = ["Avg (ns)", "Med (ns)", "StdDev (ns)"]  # nsys rounds these to 0.1 ns

REAL = real_traces()


def run_nsys(sqlite: Path, out: Path) -> dict[str, pd.DataFrame | None]:
    """nsys' four reports on ``sqlite`` (cached); None for a report nsys skipped."""
    return cached_stats(sqlite, REPORTS, out)


class Case:
    """One export: its jlprof profile, nsys' reports and its tables."""

    def __init__(self, path: Path, out: Path) -> None:
        self.path = path
        self.prof: Profile = jlprof.load(path)
        self.nsys = run_nsys(path, out)
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.tables = {r[0] for r in con.execute("select name from sqlite_master")}
        con.close()

    def report(self, name: str) -> pd.DataFrame | None:
        df = self.nsys[name]
        if df is None:  # a skip must be legitimate: a table the report needs is missing
            have = all(schema.table_name(self.tables, t) for t in NEEDS[name])
            assert not have, f"nsys skipped {name} on {self.path}"
        return df


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Case:
    out = tmp_path_factory.mktemp("nsys_rich")
    return Case(rich_db().write(out / "rich.sqlite"), out)


_real_cache: dict[Path, Case] = {}


@pytest.fixture(scope="module", params=REAL, ids=[p.parent.name for p in REAL])
def real(request, tmp_path_factory: pytest.TempPathFactory) -> Case:
    if request.param not in _real_cache:
        _real_cache[request.param] = Case(request.param, tmp_path_factory.mktemp("nsys_real"))
    return _real_cache[request.param]


def memory_names(prof: Profile) -> set[str]:
    g = prof.correlated.gpu
    return set(g.loc[(g["kind"] != "kernel").to_numpy(), "name"].astype(str))


# ---- nvtxkernsum --------------------------------------------------------------------------------


def unranged_kernels(prof: Profile) -> pd.DataFrame:
    """Kernels in no same-thread NVTX range, as nsys lists them: (PID, TID, name) -> count, total.

    PID/TID are those of the launching call; ``None`` when no call has the kernel's correlation id.
    """
    c = prof.correlated
    g, nv = c.gpu, c.nvtx
    k, r = kernel_range_pairs(c)
    ranged = np.zeros(len(g), dtype=bool)
    ranged[k[nv["end_global_tid"].to_numpy()[r] < 0]] = True
    sel = np.flatnonzero((g["kind"] == "kernel").to_numpy() & ~ranged)
    api = g["api"].to_numpy()[sel]
    tid = np.where(api >= 0, c.api["global_tid"].to_numpy()[np.maximum(api, 0)], -1)
    df = pd.DataFrame(
        {
            "PID": np.where(api >= 0, ((tid >> 24) & 0xFFFFFF).astype(str), "None"),
            "TID": np.where(api >= 0, (tid & 0xFFFFFF).astype(str), "None"),
            "Kernel Name": g["long_name"].astype(str).to_numpy()[sel],
            "dur": (g["end_ns"] - g["start_ns"]).to_numpy()[sel],
        }
    )
    out = df.groupby(["PID", "TID", "Kernel Name"])["dur"].agg(["size", "sum"])
    return out.rename(columns={"size": "Kern Inst", "sum": "Total Time (ns)"})


def check_nvtxkernsum(case: Case) -> tuple[int, int]:
    """Assert agreement; returns (ranged rows, unranged rows) compared."""
    theirs = case.report("nvtxkernsum")
    mine = range_kernel_summary(case.prof.correlated)
    if theirs is None:
        assert mine.empty
        return 0, 0
    none = (theirs["Style"] == "None").to_numpy()
    ranged = theirs[~none].astype({"PID": np.int64, "TID": np.int64})
    t = ranged.set_index(KEY).sort_index()
    m = mine.set_index(KEY).sort_index()
    assert t.index.is_unique and m.index.is_unique
    assert list(m.index) == list(t.index), (
        f"only nsys: {list(t.index.difference(m.index))[:5]}; "
        f"only jlprof: {list(m.index.difference(t.index))[:5]}"
    )
    assert m["Style"].tolist() == t["Style"].tolist()
    for col in EXACT:
        assert m[col].astype(np.int64).tolist() == t[col].astype(np.int64).tolist(), col
    for col in ROUNDED:
        np.testing.assert_allclose(m[col].to_numpy(float), t[col].to_numpy(float), atol=0.05 + 1e-9)
    # kernels outside every range
    un = theirs[none]
    assert (un["NVTX Range"] == "None").all() and (un["NVTX Inst"] == 0).all()
    want = (
        un.astype({"PID": str, "TID": str})
        .set_index(["PID", "TID", "Kernel Name"])[["Kern Inst", "Total Time (ns)"]]
        .sort_index()
    )
    got = unranged_kernels(case.prof).sort_index()
    assert got.index.tolist() == want.index.tolist()
    assert got.values.tolist() == want.values.tolist()
    return len(t), len(un)


def test_nvtxkernsum_on_built_export(rich: Case) -> None:
    ranged, unranged = check_nvtxkernsum(rich)
    assert (ranged, unranged) == (24, 3)
    # the cases the export was built for are really in nsys' answer
    t = rich.report("nvtxkernsum")
    names = set(t["NVTX Range"])
    assert {"Forward:forward", "Forward:layer1/conv", "Lib:cublas", "Backward:backward"} <= names
    assert {"warmup", "eval", "shutdown", "global_step"} <= names  # start/end, open range
    assert "handoff" not in names  # ended on another thread
    warm = t[t["NVTX Range"] == "warmup"].set_index("Kernel Name")
    assert warm.loc["void at::native::relu_kernel<float>(float*, int)", "Kern Inst"] == 1
    opt = t[t["NVTX Range"] == "optimizer_step"].iloc[0]
    assert (opt["NVTX Inst"], opt["Kern Inst"]) == (3, 6)  # graph launch: 2 kernels per call
    assert set(t.loc[t["Kernel Name"] == "void kernel_b<float>(float*)", "PID"]) == {"200"}


def test_nvtxkernsum_on_real_traces(real: Case) -> None:
    check_nvtxkernsum(real)


# ---- gpukernsum -------------------------------------------------------------------------------


def check_gpukernsum(case: Case) -> int:
    prof = case.prof
    it = prof.report("iteration")  # all iterations: every GPU activity
    kern = it[~it["Kernel Name"].astype(str).isin(memory_names(prof))]
    theirs = case.report("gpukernsum")
    if theirs is None:
        assert kern.empty
        return 0
    # nsys: one row per (demangled name, grid, block)
    t = theirs.groupby("Name").agg(
        n=("Instances", "sum"),
        total=("Total Time (ns)", "sum"),
        mn=("Min (ns)", "min"),
        mx=("Max (ns)", "max"),
    )
    m = kern.groupby(kern["Long Kernel Name"].astype(str))["GPU Time (ns)"].agg(
        n="size", total="sum", mn="min", mx="max"
    )
    pd.testing.assert_frame_equal(m.sort_index(), t.sort_index(), check_names=False)
    assert int(theirs["Instances"].sum()) == len(kern)
    # the kernel report: one kernel per demangled name, as gpukernsum tells them apart
    kr_all = prof.report("kernel")
    kr_long = kr_all[~kr_all["Kernel Name"].astype(str).isin(memory_names(prof))]
    by_long = kr_long.groupby(kr_long["Long Kernel Name"].astype(str))["Total GPU Time (ns)"]
    assert by_long.sum().sort_index().to_dict() == t["total"].sort_index().to_dict()
    # a Tensor Core verdict per distinct kernel: namesakes never share one by name only
    verdicts = kr_long.groupby(kr_long["Long Kernel Name"].astype(str))["Uses TC"].nunique()
    assert (verdicts == 1).all()
    assert int(theirs["Total Time (ns)"].sum()) == int(kern["GPU Time (ns)"].sum())

    # short names: nsys' gpukernsum:base vs jlprof's kernel report (one row per kernel x op)
    base = (
        case.report("gpukernsum:base")
        .groupby("Name")
        .agg(total=("Total Time (ns)", "sum"), mn=("Min (ns)", "min"), mx=("Max (ns)", "max"))
    )
    kr = prof.report("kernel")
    kr = kr[~kr["Kernel Name"].astype(str).isin(memory_names(prof))]
    # the kernel report tells "Kernel"/"kernel" apart (engine/correlate/kernel_names.py); nsys'
    # short name of each demangled one is the trace's
    g = prof.correlated.gpu
    nsys_short = dict(zip(g["long_name"].astype(str), g["name"].astype(str), strict=True))
    mk = kr.groupby(kr["Long Kernel Name"].astype(str).map(nsys_short)).agg(
        total=("Total GPU Time (ns)", "sum"),
        mn=("Min GPU Time (ns)", "min"),
        mx=("Max GPU Time (ns)", "max"),
    )
    pd.testing.assert_frame_equal(mk.sort_index(), base.sort_index(), check_names=False)
    counts = kern.groupby(kern["Kernel Name"].astype(str)).size().sort_index()
    nb = case.report("gpukernsum:base").groupby("Name")["Instances"].sum().sort_index()
    assert counts.to_dict() == nb.to_dict()
    return len(t)


def test_gpukernsum_on_built_export(rich: Case) -> None:
    assert check_gpukernsum(rich) == 11


def test_gpukernsum_on_real_traces(real: Case) -> None:
    check_gpukernsum(real)


# ---- cudaapisum -------------------------------------------------------------------------------


def check_cudaapisum(case: Case) -> int:
    api = case.prof.correlated.api
    theirs = case.report("cudaapisum")
    if theirs is None:
        assert api.empty
        return 0
    name = theirs["Name"].map(schema.strip_api_suffix)
    t = theirs.groupby(name).agg(
        n=("Num Calls", "sum"),
        total=("Total Time (ns)", "sum"),
        mn=("Min (ns)", "min"),
        mx=("Max (ns)", "max"),
    )
    dur = (api["end_ns"] - api["start_ns"]).rename("d")
    m = dur.groupby(api["name"].astype(str).to_numpy()).agg(
        n="size", total="sum", mn="min", mx="max"
    )
    pd.testing.assert_frame_equal(m.sort_index(), t.sort_index(), check_names=False)
    return len(t)


def test_cudaapisum_on_built_export(rich: Case) -> None:
    assert check_cudaapisum(rich) == 8
    # nsys' own names keep five-digit suffixes: the normalisation above is what makes them meet
    assert "cudaGraphLaunch_v10000" in set(rich.report("cudaapisum")["Name"])


def test_cudaapisum_on_real_traces(real: Case) -> None:
    check_cudaapisum(real)
