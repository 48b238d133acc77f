"""nvprof databases (``jlprof.engine.read.nvprof``): the frames, then every report against an nsys
export of the same run, then ``jlprof prof`` against what PyProf printed for the database; then a
real nvprof database of a training step (tests/data/nvprof/profiling-lm-v100) against its
author's PyProf printout and NVIDIA/PyProf's.

The run (:func:`twin`) is written twice from one description: as nvprof writes it
(``tests/fixtures/nvprof.py``: callback ids, marker start/end rows, 12-byte object ids, 64-bit
pthread ids) and as nsys does (``tests/fixtures/nsysdb.py``).
"""

from __future__ import annotations

import io
import lzma
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jlprof
from jlprof.cli import main
from jlprof.engine.analyses.prof import prof_table
from jlprof.engine.read.nvprof import is_nvprof, read_nvprof
from jlprof.engine.read.read import read_trace
from jlprof.engine.read.schema import export_error
from tests.fixtures.nsysdb import NsysDb
from tests.fixtures.nvprof import LAUNCH_KERNEL, NvprofDb

PID = 4242
MAIN_TID = 0x7F3A_2B12_C700  # pthread ids as nvprof records them (64-bit)
BWD_TID = 0x7F3A_2A91_B700
GEMM = "volta_h884gemm_64x64_ldg8_nn"
EW = "elementwise_add_kernel"
LINEAR = ("{'mod': 'torch.nn.functional', 'op': 'linear', 'args': [{'name': '', 'type': "
          "'tensor', 'shape': (32, 64), 'dtype': 'float16'}, {'name': '', 'type': 'tensor', "
          "'shape': (128, 64), 'dtype': 'float16'}]}")  # fmt: skip
ADD = ("{'mod': 'Tensor', 'op': '__add__', 'args': [{'name': '', 'type': 'tensor', 'shape': "
       "(32, 128), 'dtype': 'float16'}, {'name': '', 'type': 'tensor', 'shape': (128,), "
       "'dtype': 'float16'}]}")  # fmt: skip
DATA = Path(__file__).parents[1] / "data"
PYPROF_OUT = DATA / "pyprof" / "nvprof-twin.prof.txt.xz"
LM = DATA / "nvprof" / "profiling-lm-v100"
ALL = ("idx,seq,altseq,tid,layer,trace,dir,sub,mod,op,kernel,params,sil,tc,device,stream,grid,"
       "block,flops,bytes")  # fmt: skip


def twin(iters: int = 3) -> tuple[NvprofDb, NsysDb]:
    """Per iteration: ``Batch i`` > PyProf linear > ``aten::linear, seq = s`` > GEMM; add >
    elementwise kernel; a host-to-device copy; on the autograd thread ``AddmmBackward0, seq =
    s`` > two GEMMs (dgrad, wgrad)."""
    nv, ns = NvprofDb(), NsysDb()
    nv.device(0, "Tesla V100-SXM2-16GB", 80, (7, 0))
    ns.gpu(0, "Tesla V100-SXM2-16GB")
    proc = ns.process(PID, "python")
    threads = {MAIN_TID: proc.thread(MAIN_TID & 0xFFFFFF), BWD_TID: proc.thread(BWD_TID & 0xFFFFFF)}

    def rng(tid, text, s, e):
        nv.range(PID, tid, text, s, e)
        threads[tid].push_pop(text, s, e)

    def launch(tid, name, at, dur, grid=(4, 2, 1)):
        nv.launch(PID, tid, name, at, at + 10, at + 20, at + 20 + dur, grid=grid)
        threads[tid].launch(name, at, at + 10, at + 20, at + 20 + dur, grid=grid,
                            api_name="cudaLaunchKernel_v7000")  # fmt: skip

    for i in range(iters):
        b, s = 10_000 * (i + 1), 100 + 2 * i
        rng(MAIN_TID, f"Batch {i}", b, b + 5_000)
        rng(MAIN_TID, LINEAR, b + 100, b + 900)
        rng(MAIN_TID, f"aten::linear, seq = {s}", b + 110, b + 890)
        launch(MAIN_TID, GEMM, b + 120, 300)
        rng(MAIN_TID, ADD, b + 1_000, b + 1_400)
        rng(MAIN_TID, f"aten::add, seq = {s + 1}", b + 1_010, b + 1_390)
        launch(MAIN_TID, EW, b + 1_020, 40, grid=(16, 1, 1))
        nv.memcpy(PID, MAIN_TID, 1, 4096, b + 1_500, b + 1_520, b + 1_530, b + 1_600)
        threads[MAIN_TID].memcpy("HtoD", 4096, b + 1_500, b + 1_520, b + 1_530, b + 1_600,
                                 pinned=True)  # fmt: skip
        rng(BWD_TID, f"AddmmBackward0, seq = {s}", b + 2_000, b + 3_000)
        launch(BWD_TID, GEMM, b + 2_010, 280)
        launch(BWD_TID, GEMM, b + 2_400, 260)
    return nv, ns


def test_frames_of_an_nvprof_database(tmp_path):
    nv, _ = twin()
    nv.mark(PID, MAIN_TID, 'jlprof:{"event": "step", "step": 1}', 40_000, value=7)
    path = nv.write(tmp_path / "net.sql")
    assert is_nvprof(path) and export_error(path) is None
    t = read_trace(path)  # the one reader entry point hands it to jlprof.engine.read.nvprof
    con = sqlite3.connect(path)
    k = con.execute("SELECT start, end, gridX, correlationId FROM "
                    "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ORDER BY start").fetchall()  # fmt: skip
    con.close()
    kern = t.gpu[t.gpu["kind"] == "kernel"]
    assert kern[["start_ns", "end_ns", "grid_x", "correlation_id"]].to_numpy().tolist() == [
        list(r) for r in k
    ]
    assert set(kern["name"].astype(str)) == {GEMM, EW}
    assert (t.gpu["kind"] == "memcpy").sum() == 3
    assert set(t.gpu.loc[t.gpu["kind"] == "memcpy", "name"]) == {"[CUDA memcpy HtoD]"}
    assert (t.gpu["global_pid"] == PID << 24).all()
    assert set(t.api["name"]) == {"cudaLaunchKernel", "cudaMemcpyAsync"}
    assert set(t.api["global_tid"]) == {PID << 24 | MAIN_TID & 0xFFFFFF,
                                        PID << 24 | BWD_TID & 0xFFFFFF}  # fmt: skip
    assert len(t.nvtx) == 3 * 6 and (t.nvtx["event_type"] == 59).all()
    batch = t.nvtx[t.nvtx["text"] == "Batch 1"]
    assert batch[["start_ns", "end_ns"]].to_numpy().tolist() == [[20_000, 25_000]]
    assert t.marks["int64_value"].tolist() == [7.0]
    assert t.gpus[["name", "sm_count", "compute_major"]].to_numpy().tolist() == [
        ["Tesla V100-SXM2-16GB", 80, 7]
    ]


def test_unknown_callback_ids_and_colliding_threads(tmp_path):
    nv = NvprofDb()
    nv.api(1, 0x10_000001, 9999, 0, 10)
    nv.api(1, 0x20_000001, LAUNCH_KERNEL, 20, 30, driver=True)  # same low 24 bits
    t = read_nvprof(nv.write(tmp_path / "x.nvvp"))
    assert t.api["name"].tolist() == ["cudaRuntime_cbid_9999", "cuDriver_cbid_211"]
    assert sorted(t.api["global_tid"] & 0xFFFFFF) == [1, 2]
    assert any("low 24 bits" in w for w in t.warnings)


def test_every_report_equals_the_nsys_twins(tmp_path):
    nv, ns = twin()
    a = jlprof.load(nv.write(tmp_path / "net.sql"), key_node="Batch #")
    b = jlprof.load(ns.write(tmp_path / "net.sqlite"), key_node="Batch #")
    assert a.iterations.count == b.iterations.count == 4  # N key nodes: N + 1
    for name in ("detail", "kernel", "iteration", "tensor", "op_type", "group_node", "prof"):
        pd.testing.assert_frame_equal(a.report(name), b.report(name), obj=name)
    sa, sb = a.summary(), b.summary()
    for key in ("Summary Report", "Iterations"):
        assert sa[key] == sb[key], key


def test_prof_prints_what_pyprof_printed(tmp_path, capsys):
    """``python -m pyprof.parse net.sql`` then ``python -m pyprof.prof`` (NVIDIA/PyProf at
    218dcc1, tests/data/pyprof/SOURCE.md) on this database printed these lines."""
    nv, _ = twin()
    path = nv.write(tmp_path / "net.sql")
    want = lzma.decompress(PYPROF_OUT.read_bytes()).decode().split("\n===\n")
    runs = (["prof", str(path)],
            ["prof", "--csv", "-c", "idx,seq,altseq,tid,layer,trace,dir,sub,mod,op,kernel,"
             "params,sil,tc,device,stream,grid,block,flops,bytes", str(path)],
            ["prof", "-w", "130", "-c", "idx,dir,kernel,params,sil", str(path)])  # fmt: skip
    for argv, expected in zip(runs, want, strict=True):
        assert main(argv) == 0
        got = capsys.readouterr().out
        if "--csv" in argv:  # PyProf prints the 32-bit thread id; nsys packing keeps 24 bits
            expected = expected.replace(f'"{MAIN_TID & 0xFFFFFFFF}"', f'"{MAIN_TID & 0xFFFFFF}"')
            expected = expected.replace(f'"{BWD_TID & 0xFFFFFFFF}"', f'"{BWD_TID & 0xFFFFFF}"')
        assert got.rstrip("\n") == expected.rstrip("\n"), argv


def test_dgrad_and_wgrad_of_the_backward_gemms(tmp_path):
    nv, _ = twin(1)
    df = prof_table(jlprof.load(nv.write(tmp_path / "net.sql")).correlated)
    bwd = df[df["dir"] == "bprop"]
    assert bwd["params"].tolist() == ["M=64,N=32,K=128,fp16,", "M=64,N=128,K=32,fp16,"]
    assert bwd["flops"].tolist() == [2 * 128 * 32 * 64] * 2
    assert bwd["sil"].tolist() == [280, 260]
    assert np.array_equal(df["seq"].to_numpy(), np.array(["100", "101", "100", "100"]))


@pytest.mark.parametrize("windowed", ["auto", "true"])
def test_cli_reads_nvprof_whole(tmp_path, capsys, windowed):
    nv, _ = twin()
    db = nv.write(tmp_path / "net.sqlite")
    out = tmp_path / "out"
    rc = main([f"--database={db}", "--reports=kernel", "--dldb=false", f"--output_path={out}",
               f"--windowed={windowed}"])  # fmt: skip
    if windowed == "true":
        assert rc == 2 and "not nvprof's" in capsys.readouterr().err
    else:
        assert rc == 0 and (out / "dlprof_kernel.csv").is_file()


def _xz_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(lzma.decompress(path.read_bytes()).decode()), dtype=str,
                       keep_default_na=False)  # fmt: skip


@pytest.fixture(scope="module")
def lm_sql(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lm") / "net.sql"
    path.write_bytes(lzma.decompress((LM / "net.sql.xz").read_bytes()))
    return path


def test_real_nvprof_database_reads_like_plain_sql(lm_sql):
    t = read_trace(lm_sql)
    con = sqlite3.connect(lm_sql)
    try:
        want = con.execute(
            "SELECT start, end, streamId, gridX, blockX FROM "
            "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ORDER BY start"
        ).fetchall()
        memory_ns = sum(
            con.execute(f"SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_{t}").fetchone()[0]
            for t in ("MEMCPY", "MEMSET")
        )
        n_api = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
        pairs = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MARKER a JOIN "
                            "CUPTI_ACTIVITY_KIND_MARKER b ON a.id = b.id AND a.flags = 2 AND "
                            "b.flags = 4").fetchone()[0]  # fmt: skip
    finally:
        con.close()
    k = t.gpu[t.gpu["kind"] == "kernel"]
    got = k[["start_ns", "end_ns", "stream_id", "grid_x", "block_x"]].to_numpy().tolist()
    assert got == [list(r) for r in want] and len(got) == 160
    assert len(t.api) == n_api == 1968 and len(t.nvtx) == pairs == 683
    assert t.api["name"].value_counts()["cudaLaunchKernel"] == 160
    assert t.gpus["name"].tolist() == ["Tesla V100-SXM2-16GB"]
    p = jlprof.load(lm_sql)
    for name in ("summary", "detail", "kernel", "iteration", "tensor", "op_type", "group_node"):
        assert len(p.report(name)), name
    total = sum(e - s for s, e, *_ in want) + memory_ns  # the kernel report lists memory work
    assert p.report("kernel")["Total GPU Time (ns)"].sum() == total == 7347329


def test_real_nvprof_prof_equals_its_authors_pyprof_printout(lm_sql, capsys):
    """The author's ``apex.pyprof.prof --csv -c kernel,mod,op,dir,sil,tc,flops,bytes,device,
    stream,block,grid`` (2020): every column equal but FLOPs and bytes, whose formulas
    apex.pyprof had then (floats such as ``140000.0``; 143500 where NVIDIA/PyProf and jlprof
    count 140000) and NVIDIA/PyProf changed later."""
    cols = "kernel,mod,op,dir,sil,tc,flops,bytes,device,stream,block,grid"
    assert main(["prof", "--csv", "-c", cols, str(lm_sql)]) == 0
    got = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype=str, keep_default_na=False)
    want = _xz_csv(LM / "lm.csv.xz")
    assert len(got) == len(want) == 160
    for col in want.columns:
        if col not in ("FLOPs", "Bytes"):
            assert got[col].tolist() == want[col].tolist(), col
    assert (got["FLOPs"].astype(float) == want["FLOPs"].astype(float)).sum() == 124  # of 160


def test_real_nvprof_prof_equals_nvidia_pyprof(lm_sql, capsys):
    """NVIDIA/PyProf (tests/data/pyprof/SOURCE.md) printed the first 144 kernels, then stopped
    on ``add_(-lr, grad)``: all 20 columns equal there, but the thread id (PyProf prints its
    32 bits, jlprof packs 24 as nsys does) and the kernel name (PyProf's, undemangled here: the
    author's printout checks names). The rest get PyProf's fallback."""
    assert main(["prof", "--csv", "-c", ALL, str(lm_sql)]) == 0
    got = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype=str, keep_default_na=False)
    want = _xz_csv(DATA / "pyprof" / "profiling-lm-v100.prof.csv.xz")
    assert len(want) == 144
    head = got.iloc[:144]
    for col in want.columns:
        if col not in ("TId", "Kernel"):
            assert head[col].tolist() == want[col].tolist(), col
    tid = want["TId"].astype(int) & 0xFFFFFF
    assert head["TId"].astype(int).tolist() == tid.tolist()
    rest = got.iloc[144:]
    assert rest.loc[rest["Op"] == "add_", "Params"].str.startswith("T=").all()


def test_windowed_load_sends_nvprof_to_the_whole_path(tmp_path):
    from jlprof.engine.windowed.windowed_run import Unsuitable
    from jlprof.profile import load_windowed

    nv, _ = twin()
    with pytest.raises(Unsuitable, match="nvprof database is read whole"):
        load_windowed(nv.write(tmp_path / "net.sqlite"))
