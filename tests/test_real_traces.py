"""Every real third-party export (tests/data/real): reads completely, both fetch paths agree,
and all reports (DLProf's eight and jlprof's analyses) build in a few seconds.

The exports come from other people's machines (nsys 2021.1 to 2025.5, Jetson to H200); see
their SOURCE.md files. NVIDIA's ``nsys stats`` cross-checks on them are in
``tests/reports/test_against_nsys.py``.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jlprof
from jlprof.engine.read import schema
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.trace import GLOBAL_PID_MASK
from jlprof.profile import REPORTS, Profile
from tests.fixtures.scenarios import real_traces

REAL = real_traces()
LOAD_LIMIT_S = 5.0  # the largest export here reads and correlates in about 0.3 s
REPORT_LIMIT_S = 3.0  # the slowest report (group_node on 1000-deep pyprof nesting) takes ~1 s


class Loaded:
    def __init__(self, path: Path) -> None:
        self.path = path
        t0 = time.perf_counter()
        self.prof: Profile = jlprof.load(path)
        self.load_s = time.perf_counter() - t0
        self.report_s: dict[str, float] = {}
        self.reports: dict[str, pd.DataFrame] = {}
        for r in REPORTS:
            t0 = time.perf_counter()
            self.reports[r] = self.prof.report(r)
            self.report_s[r] = time.perf_counter() - t0


_cache: dict[Path, Loaded] = {}


@pytest.fixture(scope="module", params=REAL, ids=[p.parent.name for p in REAL])
def real(request) -> Loaded:
    if request.param not in _cache:
        _cache[request.param] = Loaded(request.param)
    return _cache[request.param]


def sql_count(path: Path, table: str, where: str = "") -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if not con.execute("select 1 from sqlite_master where name = ?", (table,)).fetchone():
            return 0
        return con.execute(f"select count(*) from {table} {where}").fetchone()[0]
    finally:
        con.close()


def sql_strings(path: Path, table: str, column: str) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if not con.execute("select 1 from sqlite_master where name = ?", (table,)).fetchone():
            return []
        q = f"select distinct s.value from {table} t join StringIds s on s.id = t.{column}"
        return [r[0] for r in con.execute(q)]
    finally:
        con.close()


def test_loads_and_builds_all_reports_quickly(real: Loaded) -> None:
    assert real.load_s < LOAD_LIMIT_S, f"load took {real.load_s:.2f} s"
    slow = {r: round(s, 2) for r, s in real.report_s.items() if s > REPORT_LIMIT_S}
    assert not slow, f"reports slower than {REPORT_LIMIT_S} s: {slow}"
    for name, df in real.reports.items():
        assert isinstance(df, pd.DataFrame), name
    s = real.prof.summary()
    parts = [v for k, v in s["Summary Report"].items() if k.endswith("Duration %")]
    assert sum(parts) == pytest.approx(100.0, abs=0.05)
    assert 0.0 <= s["Summary Report"]["GPU Utilization %"] <= 100.0


def test_every_event_is_read(real: Loaded) -> None:
    path, t = real.path, real.prof.trace
    kinds = t.gpu["kind"].astype(str).value_counts().to_dict()
    assert kinds.get("kernel", 0) == sql_count(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert kinds.get("memcpy", 0) == sql_count(path, "CUPTI_ACTIVITY_KIND_MEMCPY")
    assert kinds.get("memset", 0) == sql_count(path, "CUPTI_ACTIVITY_KIND_MEMSET")
    assert len(t.api) == sql_count(path, "CUPTI_ACTIVITY_KIND_RUNTIME")
    types = ",".join(str(x) for x in schema.NVTX_RANGE_TYPES)
    nvtx = t.nvtx_table or "NVTX_EVENTS"  # the table the reader found (NVTX_EVENTS_V<n> too)
    assert len(t.nvtx) == sql_count(path, nvtx, f"where eventType in ({types})")
    assert len(t.marks) == sql_count(path, nvtx, f"where eventType = {schema.NVTX_MARK}")
    # names resolve: no unknown kernels or APIs, no NaN texts
    assert "<unknown kernel>" not in set(t.gpu["name"].astype(str))
    assert "<unknown api>" not in set(t.api["name"].astype(str))
    assert not t.nvtx["text"].isna().any()
    # CUPTI's version suffixes are gone, API names' own ones stay (cuGetProcAddress_v2)
    assert not t.api["name"].astype(str).str.contains(r"_v\d{4,}$").any()
    raw = set(sql_strings(path, "CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"))
    short = {n for n in raw if re.search(r"_v\d{1,3}$", n)}
    assert short <= set(t.api["name"].astype(str))
    # every GPU activity lands in the iteration report, every kernel in the kernel report
    it = real.reports["iteration"]
    assert len(it) == len(t.gpu)
    kr = real.reports["kernel"]
    total = int((t.gpu["end_ns"] - t.gpu["start_ns"]).sum())
    assert int(kr["Total GPU Time (ns)"].sum()) == total == int(it["GPU Time (ns)"].sum())


def test_correlation_respects_processes(real: Loaded) -> None:
    c = real.prof.correlated
    g, api = c.gpu, c.api
    linked = g["api"].to_numpy() >= 0
    if not linked.any():
        pytest.skip("no GPU work with a launching call in this export")
    a = g["api"].to_numpy()[linked]
    assert (g["correlation_id"].to_numpy()[linked] == api["correlation_id"].to_numpy()[a]).all()
    a_pid = api["global_tid"].to_numpy()[a] & GLOBAL_PID_MASK
    assert (g["global_pid"].to_numpy()[linked] == a_pid).all()


def test_connectorx_and_sqlite3_agree(real: Loaded) -> None:
    fast = real.prof.trace  # jlprof.load reads through connectorx when it is installed
    slow = read_trace(real.path, use_connectorx=False)
    for name in ("gpu", "api", "nvtx", "marks", "osrt", "gpus"):
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(slow, name), obj=name)
    assert fast.meta == slow.meta
    # equal frames, category order included, give equal reports (row order of ties too)
    pd.testing.assert_frame_equal(Profile(slow).report("detail"), real.reports["detail"])


def test_visible_gpus(real: Loaded) -> None:
    path, gpus = real.path, real.prof.trace.gpus
    listed = sql_count(path, "TARGET_INFO_GPU")
    narrowed = sql_count(path, "TARGET_INFO_CUDA_DEVICE")
    assert (len(gpus) == listed) if not narrowed else (0 < len(gpus) <= listed)
    lanes = real.prof.summary()["System Config"]["GPU Count"]
    used = set(real.prof.trace.gpu["device_id"])
    assert lanes >= len(gpus) and lanes >= len(used)
    assert np.isin(list(used), gpus["cu_device"].to_numpy()).all() or lanes > len(gpus)
