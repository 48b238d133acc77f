"""The reader on exports built in code: every nsys flavor, both fetch paths, odd layouts.

The same events are written as each exporter version would (``tests/fixtures/nsys_schema``),
so whatever differs between the frames read back is a reader bug.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jlprof
from jlprof.engine.read import read as read_module
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.trace import (
    API_COLUMNS,
    GPU_COLUMNS,
    MARK_COLUMNS,
    NVTX_COLUMNS,
    OSRT_COLUMNS,
    Trace,
)
from jlprof.errors import InputError
from jlprof.profile import REPORTS
from tests.fixtures.nsys_schema import FLAVORS, FlavorName
from tests.fixtures.nsysdb import NsysDb, global_tid
from tests.fixtures.scenarios import (
    GEMM,
    LAST_NVTX,
    ORPHAN,
    PID_A,
    PID_B,
    SGEMM,
    WORKER_A,
    cpu_only_db,
    rich_db,
)

FRAMES = ("gpu", "api", "nvtx", "marks", "osrt", "gpus")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[FlavorName, Path]:
    db = rich_db()
    out = tmp_path_factory.mktemp("read")
    return {f: db.write(out / f"rich_{f}.sqlite", flavor=f) for f in FLAVORS}


@pytest.fixture(scope="module")
def traces(exports: dict[FlavorName, Path]) -> dict[FlavorName, Trace]:
    return {f: read_trace(p, use_connectorx=False) for f, p in exports.items()}


@pytest.fixture(scope="module")
def base(traces: dict[FlavorName, Trace]) -> Trace:
    return traces["2022.4"]


def assert_same_frames(a: Trace, b: Trace, frames=FRAMES) -> None:
    for name in frames:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)


# ---- flavors and fetch paths ------------------------------------------------------------------


@pytest.mark.parametrize("flavor", [f for f in FLAVORS if f != "2022.4"])
def test_every_flavor_reads_to_the_same_frames(traces, base, flavor: FlavorName) -> None:
    # 2025.1 narrows the visible GPUs (TARGET_INFO_CUDA_DEVICE), tested on its own below
    frames = [f for f in FRAMES if not (flavor == "2025.1" and f == "gpus")]
    assert_same_frames(traces[flavor], base, frames)


def test_the_frames_hold_every_event(base: Trace) -> None:
    assert base.gpu["kind"].value_counts().to_dict() == {"kernel": 30, "memcpy": 5, "memset": 3}
    assert len(base.api) == 41
    assert len(base.nvtx) == 27
    assert len(base.marks) == 1 and base.marks["text"].tolist() == ["amp=on"]
    assert base.marks["int64_value"].tolist() == [1]
    assert base.osrt["name"].tolist() == ["fread"] * 3
    assert base.gpus["cu_device"].tolist() == [0, 1, 2]  # the idle GPU 2 included
    assert list(base.gpu.columns) == GPU_COLUMNS and list(base.api.columns) == API_COLUMNS
    assert list(base.nvtx.columns) == NVTX_COLUMNS and list(base.marks.columns) == MARK_COLUMNS


@pytest.mark.parametrize("flavor", FLAVORS)
def test_connectorx_reads_every_table_of_a_clean_export(exports, flavor, monkeypatch) -> None:
    """A table connectorx cannot read goes to sqlite3 without a word (about 10x slower): a
    mistake on the Arrow path would hide there."""

    def by_sqlite3(df):
        raise AssertionError(f"read by sqlite3: {list(df.columns)}")

    monkeypatch.setattr(read_module, "_first_seen_categories", by_sqlite3)
    assert len(read_trace(exports[flavor], use_connectorx=True).nvtx)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_connectorx_and_sqlite3_give_identical_frames(exports, traces, flavor) -> None:
    fast = read_trace(exports[flavor], use_connectorx=True)
    assert_same_frames(fast, traces[flavor])
    assert fast.meta == traces[flavor].meta
    # category order included: reports list ops with equal totals in category order
    assert list(fast.nvtx["text"].cat.categories) == list(
        traces[flavor].nvtx["text"].cat.categories
    )


def test_connectorx_and_sqlite3_give_identical_reports(exports) -> None:
    a = jlprof.load(exports["2022.4"], use_connectorx=True)
    b = jlprof.load(exports["2022.4"], use_connectorx=False)
    for r in REPORTS:
        pd.testing.assert_frame_equal(a.report(r), b.report(r), obj=r)


# ---- NVTX -----------------------------------------------------------------------------------


def nvtx_rows(trace: Trace, text: str) -> pd.DataFrame:
    return trace.nvtx[trace.nvtx["text"].astype(str) == text]


def test_registered_strings_resolve_through_string_ids(exports, base) -> None:
    con = sqlite3.connect(exports["2022.4"])
    stored = con.execute(
        "select count(*), count(text), count(textId) from NVTX_EVENTS e "
        "join StringIds s on s.id = e.textId where s.value in ('global_step', 'layer1/conv')"
    ).fetchone()
    assert stored == (6, 0, 6)  # written as registered strings: text NULL, textId set
    assert len(nvtx_rows(base, "global_step")) == 3
    assert len(nvtx_rows(base, "layer1/conv")) == 3
    assert len(nvtx_rows(base, "backward")) == 2
    assert "" not in set(base.nvtx["text"].astype(str))


def test_domains_resolve_per_process(base) -> None:
    dom = {t: set(nvtx_rows(base, t)["domain"].astype(str)) for t in base.nvtx["text"].unique()}
    assert dom["forward"] == dom["layer1/conv"] == {"Forward"}  # domainId 1 in process 100
    assert dom["backward"] == {"Backward"}  # domainId 1 again, in process 200
    assert dom["cublas"] == {"Lib"}
    assert dom["global_step"] == dom["relu"] == dom["warmup"] == {""}  # default domain
    pids = (nvtx_rows(base, "backward")["global_tid"].to_numpy() >> 24) & 0xFFFFFF
    assert set(pids) == {PID_B}


def test_start_end_ranges(base) -> None:
    main, worker = global_tid(PID_A, PID_A), global_tid(PID_A, WORKER_A)
    warm = nvtx_rows(base, "warmup").iloc[0]
    assert (warm["event_type"], warm["start_ns"], warm["end_ns"]) == (60, 900, 5_050)
    assert warm["end_global_tid"] == -1
    hand = nvtx_rows(base, "handoff").iloc[0]
    assert (hand["event_type"], hand["global_tid"], hand["end_global_tid"]) == (60, main, worker)
    # a range never closed ends at the latest NVTX timestamp (as nsys stats closes it)
    shut = nvtx_rows(base, "shutdown").iloc[0]
    assert (shut["event_type"], shut["end_ns"]) == (59, LAST_NVTX)


def test_memcpy_and_memset_names_and_bytes(base) -> None:
    mem = base.gpu[base.gpu["kind"] != "kernel"]
    got = sorted(zip(mem["kind"].astype(str), mem["name"].astype(str), mem["bytes"], strict=True))
    assert got == sorted(
        [("memcpy", "[CUDA memcpy HtoD]", 1 << 20), ("memcpy", "[CUDA memcpy DtoH]", 2048)]
        + [("memcpy", "[CUDA memcpy HtoD]", 4096)] * 3
        + [("memset", "[CUDA memset]", 512)] * 3
    )
    assert (mem["name"].astype(str) == mem["long_name"].astype(str)).all()
    assert (base.gpu.loc[base.gpu["kind"] == "kernel", "bytes"] == 0).all()


def test_kernel_names_dims_and_graph_nodes(base) -> None:
    k = base.gpu[base.gpu["kind"] == "kernel"]
    relu = k[k["name"] == "relu_kernel"]
    assert set(relu["long_name"].astype(str)) == {
        "void at::native::relu_kernel<float>(float*, int)"
    }
    pid = (k["global_pid"].to_numpy() >> 24) & 0xFFFFFF
    gemm = k[(k["name"] == GEMM).to_numpy() & (pid == PID_A)]
    assert gemm[["grid_x", "grid_y", "grid_z"]].drop_duplicates().values.tolist() == [[64, 2, 1]]
    assert set(k.loc[k["name"] == SGEMM, "stream_id"]) == {9}
    graph = k[k["graph_node_id"] > 0]
    assert set(graph["name"]) == {"multi_tensor_apply_kernel"} and len(graph) == 6
    assert graph["graph_node_id"].nunique() == 6
    assert graph.groupby("correlation_id").size().tolist() == [2, 2, 2]
    assert k.loc[k["name"] == ORPHAN, "correlation_id"].tolist() == [99_999]
    # correlation ids repeat across the two processes
    assert set(k.loc[pid == PID_A, "correlation_id"]) & set(k.loc[pid == PID_B, "correlation_id"])


def test_api_names_lose_their_version_suffix(base) -> None:
    assert set(base.api["name"].astype(str)) == {
        "cudaLaunchKernel",
        "cudaGraphLaunch",  # _v10000: five digits (nsys 2022.4 itself strips only four)
        "cuLaunchKernel",  # driver API, no suffix, eventClass 1
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "cudaStreamSynchronize",
        "cudaMalloc",
        "cudaEventQuery",
    }
    assert set(base.api.loc[base.api["name"] == "cuLaunchKernel", "event_class"]) == {1}


def test_version_suffixes_of_four_digits_or_more(tmp_path: Path) -> None:
    db = NsysDb()
    t = db.process(1).thread()
    names = {
        "cudaC_v3020": "cudaC",
        "cudaGraphLaunch_v10000": "cudaGraphLaunch",  # nsys 2022.4 stats keeps this one long
        "cudaLaunchKernelExC_v11060": "cudaLaunchKernelExC",
        "cudaD_v123456": "cudaD",
        "cudaE": "cudaE",
        # a short _vN is part of the API's name (real exports: CUDA 12 driver and runtime)
        "cuGetProcAddress_v2": "cuGetProcAddress_v2",
        "cudaGetDeviceProperties_v2_v12000": "cudaGetDeviceProperties_v2",
        "cudaF_v2_x": "cudaF_v2_x",  # only a trailing _v<digits> is a version
        "cudaG_v": "cudaG_v",
    }
    for i, name in enumerate(names):
        t.api_only(name, 10 * i, 10 * i + 5)
    got = read_trace(db.write(tmp_path / "api.sqlite"), use_connectorx=False).api
    assert got["name"].astype(str).tolist() == list(names.values())


# ---- visible GPUs -----------------------------------------------------------------------------


def test_cuda_device_table_narrows_visible_gpus(traces, base) -> None:
    new = traces["2025.1"].gpus
    assert new["cu_device"].tolist() == [0, 1]  # GPU 2 was idle and unseen by both processes
    pd.testing.assert_frame_equal(new, base.gpus.iloc[:2])


def test_cuda_device_table_maps_ordinals(tmp_path: Path) -> None:
    # CUDA_VISIBLE_DEVICES=1: the process calls nsys GPU 3 (cuDevice 1) its device 0
    db = NsysDb()
    db.gpu(0, "NVIDIA H100 80GB HBM3")
    seen = db.gpu(1, "NVIDIA H100 80GB HBM3", gpu_id=3)
    p = db.process(9)
    p.cuda_device(0, seen)
    p.thread().launch("k", 0, 10, 20, 120, device=0)
    path = db.write(tmp_path / "ordinals.sqlite", flavor="2025.1")
    gpus = read_trace(path, use_connectorx=False).gpus
    assert gpus[["gpu_id", "cu_device"]].values.tolist() == [[3, 0]]
    s = jlprof.load(path, use_connectorx=False).summary()
    assert s["System Config"]["GPU Count"] == 1
    assert s["Summary Report"]["GPU Utilization %"] == pytest.approx(100 * 100 / 120, abs=0.01)


# ---- empty and missing tables -------------------------------------------------------------------


def check_zero_rows(trace: Trace, frames: tuple[str, ...]) -> None:
    columns = {"gpu": GPU_COLUMNS, "api": API_COLUMNS, "osrt": OSRT_COLUMNS, "nvtx": NVTX_COLUMNS}
    for name in frames:
        df = getattr(trace, name)
        assert len(df) == 0, name
        assert list(df.columns) == columns[name], name
        for col in df.columns:
            ok = isinstance(df[col].dtype, pd.CategoricalDtype) or df[col].dtype == np.int64
            assert ok, f"{name}.{col}: {df[col].dtype}"


def load_all_reports(path: Path, **kw) -> jlprof.profile.Profile:
    prof = jlprof.load(path, **kw)
    for r in REPORTS:
        assert isinstance(prof.report(r), pd.DataFrame), r
    return prof


@pytest.mark.parametrize("flavor", FLAVORS)
def test_cpu_only_export_without_cuda_tables(tmp_path: Path, flavor: FlavorName) -> None:
    path = cpu_only_db().write(tmp_path / "cpu.sqlite", flavor=flavor)
    tabs = {r[0] for r in sqlite3.connect(path).execute("select name from sqlite_master")}
    assert "NVTX_EVENTS" in tabs and not {"CUPTI_ACTIVITY_KIND_KERNEL", "OSRT_API"} & tabs
    trace = read_trace(path, use_connectorx=False)
    check_zero_rows(trace, ("gpu", "api", "osrt"))
    assert len(trace.nvtx) == 6 and len(trace.gpus) == 0
    prof = load_all_reports(path)
    assert prof.summary()["Iterations"]["Total Iterations"] == 4
    assert prof.report("detail")["Op Name"].tolist() == ["global_step", "cpu_work"]
    assert len(prof.report("kernel")) == len(prof.report("iteration")) == 0


@pytest.mark.parametrize("empty", [False, True])
def test_empty_tables_read_like_missing_ones(tmp_path: Path, empty: bool) -> None:
    lazy = read_trace(cpu_only_db().write(tmp_path / "lazy.sqlite"), use_connectorx=False)
    path = cpu_only_db().write(tmp_path / "eager.sqlite", empty_tables=empty)
    tabs = {r[0] for r in sqlite3.connect(path).execute("select name from sqlite_master")}
    assert ("CUPTI_ACTIVITY_KIND_KERNEL" in tabs) is empty
    for cx in [False, True]:
        eager = read_trace(path, use_connectorx=cx)
        assert_same_frames(eager, lazy, ("gpu", "api", "nvtx", "marks", "osrt"))
        check_zero_rows(eager, ("gpu", "api", "osrt"))
    load_all_reports(path)


def test_export_with_no_events_at_all(tmp_path: Path) -> None:
    for empty in (False, True):
        path = NsysDb().write(tmp_path / f"nothing_{empty}.sqlite", empty_tables=empty)
        trace = read_trace(path, use_connectorx=False)
        check_zero_rows(trace, ("gpu", "api", "osrt", "nvtx"))
        assert trace.warnings == ["the export holds no CUDA, NVTX or API events"]
        prof = load_all_reports(path)
        assert prof.summary()["Iterations"]["Total Iterations"] == 0


def test_rich_export_with_every_table_created(tmp_path: Path, base) -> None:
    path = rich_db().write(tmp_path / "eager.sqlite", empty_tables=True)
    assert_same_frames(read_trace(path, use_connectorx=False), base)


@pytest.mark.parametrize("cx", [True, False])
def test_all_texts_registered(tmp_path, cx):
    """Every NVTX text via textId (inline text column all NULL), as TensorRT writes them."""
    db = NsysDb()
    t = db.process(pid=7).thread()
    t.push_pop("layer1", 100, 200, registered=True)
    t.push_pop("layer2", 300, 400, registered=True)
    tr = read_trace(db.write(tmp_path / "reg.sqlite"), use_connectorx=cx)
    assert tr.nvtx["text"].astype(str).tolist() == ["layer1", "layer2"]


@pytest.mark.parametrize("use_cx", [False, True])
def test_null_columns_read_as_their_defaults(exports, tmp_path, use_cx) -> None:
    """NULLs are filled after reading (not by coalesce() in SQL): same defaults as before."""
    import shutil
    import sqlite3

    db = shutil.copy(exports["2022.4"], tmp_path / "nulls.sqlite")
    con = sqlite3.connect(db)
    k = con.execute("SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL, globalPid = NULL, "
        "graphNodeId = NULL WHERE rowid = ?",
        (k,),
    )
    a = con.execute("SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    con.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL, correlationId = NULL "
        "WHERE rowid = ?",
        (a,),
    )
    con.commit()
    con.close()
    ref = read_trace(exports["2022.4"], use_connectorx=False)
    got = read_trace(db, use_connectorx=use_cx)
    row = got.gpu.iloc[0]
    assert (row["correlation_id"], row["global_pid"], row["graph_node_id"]) == (-1, 0, 0)
    assert (got.api.iloc[0]["global_tid"], got.api.iloc[0]["correlation_id"]) == (0, -1)
    # integers, not floats: int32 where every value fits (trace.py), as these ids do here
    assert got.gpu["correlation_id"].dtype == np.int32 and got.api["global_tid"].dtype == np.int64
    # everything else as read from the untouched export; NVTX end/endGlobalTid NULLs included
    pd.testing.assert_frame_equal(got.gpu.iloc[1:], ref.gpu.iloc[1:])
    pd.testing.assert_frame_equal(got.nvtx, ref.nvtx)


@pytest.mark.parametrize("use_cx", [False, True])
def test_other_nvtx_event_kinds_are_dropped_and_do_not_close_open_ranges(
    exports, tmp_path, use_cx
) -> None:
    """NVTX rows are read without a WHERE on eventType: other kinds must still play no part."""
    import shutil
    import sqlite3

    db = shutil.copy(exports["2022.4"], tmp_path / "kinds.sqlite")
    con = sqlite3.connect(db)
    t_max, tid = con.execute(
        "SELECT max(coalesce(end, start)), globalTid FROM NVTX_EVENTS WHERE eventType = 59"
    ).fetchone()
    con.execute(  # an open push/pop range, then a thread-name event (kind 48) much later
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, NULL, 59, "
        "'open', ?), (?, NULL, 48, 'worker thread', ?)",
        (t_max + 10, tid, t_max + 10**9, tid),
    )
    con.commit()
    con.close()
    got = read_trace(db, use_connectorx=use_cx)
    assert "worker thread" not in got.nvtx["text"].astype(str).tolist()
    assert "worker thread" not in got.marks["text"].astype(str).tolist()
    opened = got.nvtx[got.nvtx["text"].astype(str) == "open"]
    assert opened["end_ns"].tolist() == [t_max + 10]  # closed at the last range time, not 1 s on


def test_without_connectorx_sqlite3_reads_with_a_one_line_notice(
    exports, traces, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """connectorx is a core dependency; an install without it still reads, says so once."""
    from jlprof.engine.read import read

    monkeypatch.setitem(sys.modules, "connectorx", None)  # `import connectorx` raises
    monkeypatch.setattr(read, "_said_slow_reader", False)
    for _ in range(2):  # three reader threads per read, two reads: one line in all
        assert_same_frames(read_trace(exports["2022.4"]), traces["2022.4"])
    err = capsys.readouterr().err
    assert err == read._SLOW_READER_NOTICE + "\n"
    with pytest.raises(InputError, match="pip install connectorx"):
        read_trace(exports["2022.4"], use_connectorx=True)


def test_an_arrow_table_of_several_chunks_becomes_first_seen_categoricals():
    """Text columns by chunk (connectorx reads a table in parts): one dictionary across the
    chunks, categories in order of first appearance, nulls as -1; numbers as they are; the
    table's names may repeat. Checked against pandas' own reading of the same values."""
    import pyarrow as pa

    from jlprof.engine.read.read import _arrow_frame, _one_dictionary

    texts = [["b", "a", None, "b"], ["c", "a", "d"], [], ["d", "e"]]
    nums = [[1, 2, 3, 4], [5, 6, 7], [], [8, 9]]
    tbl = pa.table(
        {
            "n": pa.chunked_array(nums, pa.int64()),
            "t": pa.chunked_array(texts, pa.large_string()),
            "u": pa.chunked_array(texts, pa.string()),
        }
    )
    df = _arrow_frame(tbl, ["n", "t", "t2"])
    flat = [t for chunk in texts for t in chunk]
    want = pd.Categorical(flat, categories=pd.unique(pd.Series([t for t in flat if t])))
    for col in ("t", "t2"):
        assert list(df[col].cat.categories) == list(want.categories) == ["b", "a", "c", "d", "e"]
        assert df[col].cat.codes.tolist() == list(want.codes)
    assert df["n"].tolist() == [x for chunk in nums for x in chunk]
    enc = pa.chunked_array(texts, pa.string()).dictionary_encode()
    assert _one_dictionary(enc)
    apart = pa.chunked_array([pa.array(c, pa.string()).dictionary_encode() for c in texts[:2]])
    assert not _one_dictionary(apart)
