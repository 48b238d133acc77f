"""PyProf's kernel table (``jlprof.engine.analyses.prof``, the ``prof`` report, ``jlprof prof``).

Three independent checks: raw SQL per kernel on the real exports (silicon time, grid, block,
stream, device, thread), PyProf's own output on the real PyProf-marked trace (every column; the
differences by design named), and PyProf's formulas worked by hand on a fixture of one call per
modelled op (``pyprof/prof/{linear,conv,blas,pointwise,misc}.py``).
"""

from __future__ import annotations

import lzma
import sqlite3
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest

import jlprof
from jlprof.cli import main
from jlprof.engine.analyses.prof import COLUMNS, format_params, prof_table, short_name
from jlprof.reports.prof import HEADERS
from tests.fixtures.nsysdb import NsysDb
from tests.fixtures.scenarios import real_data_dir
from tests.fixtures.torch_traces import emit_nvtx_db, plugin_db

PYPROF_OUT = Path(__file__).parents[1] / "data" / "pyprof" / "mmagic-pyprof-a100.prof.csv.xz"
REAL = ("mmagic-pyprof-a100", "nsysai-fastvideo-wan-train-fsdp-2gpu",
        "nsysai-fastvideo-wan-infer-sp2-2gpu")  # fmt: skip


def _real(name: str) -> Path:
    return next((real_data_dir() / name).glob("*.sqlite"))


def _sql_kernels(path: Path) -> pd.DataFrame:
    """Each kernel by start time (then row), with its launching call's thread: plain SQL."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return pd.read_sql_query(
            "SELECT k.end - k.start AS sil, k.deviceId AS device, k.streamId AS stream, "
            "k.gridX || ',' || k.gridY || ',' || k.gridZ AS grid, "
            "k.blockX || ',' || k.blockY || ',' || k.blockZ AS block, "
            "(SELECT r.globalTid % 16777216 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE "
            " r.correlationId = k.correlationId AND r.globalTid / 16777216 = k.globalPid / "
            " 16777216) AS tid "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k ORDER BY k.start, k.rowid",
            con,
        )
    finally:
        con.close()


@pytest.mark.parametrize("name", REAL)
def test_kernel_facts_equal_raw_sql(name):
    path = _real(name)
    df = prof_table(jlprof.load(path).correlated)
    want = _sql_kernels(path)
    want["tid"] = want["tid"].fillna(-1).astype("int64")  # no launching call in the capture
    assert len(df) == len(want) > 300
    assert df["idx"].tolist() == list(range(1, len(want) + 1))
    for col in ("sil", "device", "stream", "grid", "block", "tid"):
        assert df[col].astype(str).tolist() == want[col].astype(str).tolist(), col


def test_emit_nvtx_real_trace_has_directions_and_sequence_ids():
    """The FSDP training trace (emit_nvtx ``seq =`` with ``op_id =``, which PyProf's own
    parser cannot read: ``int('47723, op_id ')``): each kernel's op is a range carrying its
    sequence id or an alternate one. Its 0.3 s window
    holds no backward node (no ``Backward0``/``evaluate_function`` range: plain SQL), so every
    kernel is forward."""
    path = _real("nsysai-fastvideo-wan-train-fsdp-2gpu")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    texts = [r[0] for r in con.execute(
        "SELECT coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) FROM NVTX_EVENTS"
    )]  # fmt: skip
    con.close()
    df = prof_table(jlprof.load(path).correlated)
    assert not any("Backward0" in t or "evaluate_function" in t for t in texts if t)
    assert set(df["dir"]) == {"fprop"}
    with_seq = df[df["seq"] != "-"]
    assert len(with_seq) > 100
    names: dict[str, set[str]] = {}  # seq id -> the names of the ranges carrying it
    for t in texts:
        if t and ", seq = " in t:
            names.setdefault(t.split(", seq = ")[1].split(",")[0], set()).add(t.split(",")[0])
    for seq, alt, op in zip(with_seq["seq"], with_seq["altseq"], with_seq["op"], strict=True):
        ids = [seq] + ([] if alt == "-" else alt.split(","))
        assert any(op in names[i] for i in ids), (seq, alt, op)


def test_mmagic_equals_pyprofs_own_output():
    """PyProf's printout for the same export (tests/data/pyprof/SOURCE.md): every column equal,
    but 33 kernel names PyProf printed empty, cutting ``at::native::<unnamed>::avg_pool3d...``
    at the first ``<``. The ops are PyProf's too: the outermost PyProf marker, here mostly
    ``torch.__getattr__`` ranges that were never popped (nsys closed all 702 at the trace's
    end), so every kernel is charged to them with ``T=[],[]`` and 0 FLOPs, in both."""
    ref = pd.read_csv(StringIO(lzma.decompress(PYPROF_OUT.read_bytes()).decode()), dtype=str,
                      keep_default_na=False)  # fmt: skip
    df = prof_table(jlprof.load(_real("mmagic-pyprof-a100")).correlated).astype(str)
    assert len(df) == len(ref) == 328
    for col in COLUMNS:
        if col != "kernel":
            assert df[col].tolist() == ref[HEADERS[col]].tolist(), col
    assert set(df["op"]) == {"__getattr__"} and set(df["flops"]) == {"0"}
    named = (ref["Kernel"] != "").to_numpy()
    assert df.loc[named, "kernel"].tolist() == ref.loc[named, "Kernel"].tolist()
    assert (~named).sum() == 33
    assert set(df.loc[~named, "kernel"]) == {
        "avg_pool3d_cuda_update_output", "CatArrayBatchedCopy_aligned16_contig",
        "upsample_bilinear2d_out_frame"}  # fmt: skip


def _t(shape, dtype):
    return {"name": "", "type": "tensor", "shape": tuple(shape), "dtype": dtype}


def _v(type_, value, name=""):
    return {"name": name, "type": type_, "value": value}


def _m(mod, op, *args):
    return str({"mod": mod, "op": op, "args": list(args)})


H884 = "volta_h884gemm_64x64_ldg8_nn"
BIAS = "void at::native::elementwise_kernel<128, 2>(int)"
SGEMM = "ampere_sgemm_32x32_sliced1x4_tn"
EW = "void at::native::vectorized_elementwise_kernel<4>(int)"
CONV = "void cudnn::detail::implicit_convolve_sgemm<float, 1024>(int)"
LINEAR = _m("torch.nn.functional", "linear", _t((32, 64), "float16"), _t((128, 64), "float16"),
            _t((128,), "float16"))  # fmt: skip

# (marker, kernel, params, flops, bytes, tc), each worked from PyProf's formulas by hand
CASES = [
    # linear, fprop GEMM: M = W rows, N = X rows, K; 2MNK; PyProf's MN + MK + NK * s
    (LINEAR, H884, "M=128,N=32,K=64,fp16,", 2 * 128 * 32 * 64, 4096 + 8192 + 2048 * 2, "1"),
    # its bias kernel: M*N FLOPs, 2*M*N elements read and written
    (LINEAR, BIAS, "M=128,N=32,fp16,", 128 * 32, 2 * 128 * 32 * 2, "-"),
    # addmm(C, A[8,32], B[32,16]): PyProf prints M=n, N=m
    (_m("torch", "addmm", _t((16,), "float32"), _t((8, 32), "float32"), _t((32, 16), "float32")),
     SGEMM, "M=16,N=8,K=32,fp32,", 2 * 8 * 16 * 32, 4 * (128 + 256 + 512), "0"),
    (_m("torch", "mm", _t((4, 6), "float32"), _t((6, 10), "float32")),
     SGEMM, "M=10,N=4,K=6,fp32,", 2 * 4 * 10 * 6, 4 * (40 + 24 + 60), "0"),
    (_m("torch", "bmm", _t((3, 4, 5), "float16"), _t((3, 5, 6), "float16")),
     H884, "B=3,M=6,N=4,K=5,fp16,", 2 * 3 * 4 * 6 * 5, 2 * 3 * (24 + 20 + 30), "1"),
    # matmul: batch (2,3) broadcast with (), bytes without the batch (as PyProf)
    (_m("torch", "matmul", _t((2, 3, 4, 5), "float32"), _t((5, 7), "float32")),
     SGEMM, "A=(2,3,4,5),B=(5,7),fp32,", 6 * 2 * 4 * 7 * 5, 4 * (28 + 20 + 35), "0"),
    # binary, broadcast [4,1] + [1,5] -> [4,5]: inputs + output bytes, one FLOP per output
    (_m("Tensor", "__add__", _t((4, 1), "float32"), _t((1, 5), "float32")),
     EW, "[4,1]fp32;[1,5]fp32", 20, 4 * (4 + 5 + 20), "-"),
    # transcendental: 20 FLOPs an element (PyProf's estimate), read + write
    (_m("torch", "exp", _t((10,), "float16")), EW, "[10]fp16", 200, 2 * 2 * 10, "-"),
    # scalar operand: a 0-d int32
    (_m("Tensor", "__mul__", _t((6,), "float32"), _v("int", 2)), EW, "[6]fp32;[]int32", 6,
     4 * 6 + 4 + 4 * 6, "-"),
    # conv2d stride 2, padding 1: P = Q = 1 + (8 + 2 - 3) // 2 = 4; 2NKPQCRS
    (_m("torch.nn.functional", "conv2d", _t((2, 3, 8, 8), "float32"),
        _t((4, 3, 3, 3), "float32"), _v("NoneType", None), _v("tuple", (2, 2)),
        _v("tuple", (1, 1)), _v("tuple", (1, 1)), _v("int", 1)),
     CONV, "N=2,C=3,H=8,W=8,K=4,P=4,Q=4,R=3,S=3,ph=1,pw=1,U=2,V=2,dh=1,dw=1,g=1,fp32,",
     2 * 2 * 4 * 4 * 4 * 3 * 3 * 3, 4 * (2 * 3 * 64 + 4 * 27 + 2 * 4 * 16), "-"),
    # copy_ float32 -> float16: read 4, write 2 bytes an element
    (_m("Tensor", "copy_", _t((3, 4), "float16"), _t((3, 4), "float32")),
     EW, "T=(3,4),fp32,fp16,", 0, 12 * (4 + 2), "-"),
    # softmax: 20 FLOPs an element for the denominator and 20 for the numerator; 2 reads 1 write
    (_m("torch.nn.functional", "softmax", _t((4, 10), "float32"), _v("int", 1, "dim")),
     EW, "[4,10]fp32", 40 * 40, 3 * 4 * 40, "-"),
    (_m("torch.nn.functional", "log_softmax", _t((4, 10), "float32")),
     EW, "[4,10]fp32", 21 * 40, 3 * 4 * 40, "-"),
    # embedding: read the indices, read and write the rows they pick; no FLOPs
    (_m("torch.nn.functional", "embedding", _t((35, 20), "int64"), _t((1000, 200), "float32")),
     EW, "[35,20]int64;[1000,200]fp32", 0, 8 * 700 + 2 * 700 * 200 * 4, "-"),
    # dropout: 5 FLOPs an element (RNG), read and write
    (_m("torch.nn.functional", "dropout", _t((35, 20, 200), "float32")),
     EW, "[35,20,200]fp32", 5 * 140000, 2 * 4 * 140000, "-"),
    # activation: one FLOP an element, read and write
    (_m("torch.nn.functional", "relu", _t((8, 16), "float16")), EW, "[8,16]fp16", 128,
     2 * 2 * 128, "-"),
    # norm: square, add, one sqrt; the tensor read once
    (_m("Tensor", "norm", _t((600, 200), "float32")), EW, "T=(600,200),fp32,",
     2 * 120000 + 1, 4 * 120000, "-"),
    # batch_norm: 8 FLOPs an element; 2 reads and 2 writes
    (_m("torch.nn.functional", "batch_norm", _t((8, 4, 5, 5), "float16")), EW, "[8,4,5,5]fp16",
     8 * 800, 4 * 2 * 800, "-"),
    # not modelled: PyProf's fallback (shapes, types, 0, 0)
    (_m("torch", "cumsum", _t((4, 10), "float32"), _v("int", 1, "dim")),
     EW, "T=[(4,10)],['float32']", 0, 0, "-"),
]  # fmt: skip


def _formula_db() -> NsysDb:
    db = NsysDb()
    db.gpu(0, "NVIDIA A100-SXM4-40GB")
    main_t = db.process(500, "python").thread()
    at = 1_000
    main_t.push_pop("layer:block1", 500, 500 + 1_000 * (len(CASES) + 1))
    for marker, kernel, *_ in CASES:
        main_t.push_pop(marker, at, at + 500)
        main_t.launch(kernel, at + 10, at + 20, at + 30, at + 130, grid=(4, 2, 1))
        at += 1_000
    return db


def test_flops_bytes_and_params_are_pyprofs_formulas(tmp_path):
    df = prof_table(jlprof.load(_formula_db().write(tmp_path / "f.sqlite")).correlated)
    assert len(df) == len(CASES)
    for (marker, kernel, params, flops, nbytes, tc), (_, row) in zip(
        CASES, df.iterrows(), strict=True
    ):
        got = (row["params"], row["flops"], row["bytes"], row["tc"])
        assert got == (params, flops, nbytes, tc), marker
        assert row["layer"] == "block1" and row["dir"] == "fprop" and row["sil"] == 100
        assert row["grid"] == "4,2,1" and row["kernel"] == short_name(kernel)
    assert df["op"].tolist()[:3] == ["linear", "bias", "addmm"]  # PyProf's name of the bias
    assert df["mod"].tolist()[:3] == ["torch.nn.functional"] * 2 + ["torch"]


def test_backward_kernels_take_the_forward_op_and_its_shapes(tmp_path):
    """PyProf's ``findFpropKernel``: a backward kernel without a PyProf marker takes the last
    forward kernel's with its sequence id; the linear's two backward GEMMs are dgrad
    (sub 0: M=K, N, K=M) and wgrad (sub 1: M=K, N=M, K=N)."""
    db = NsysDb()
    db.gpu(0, "NVIDIA A100-SXM4-40GB")
    proc = db.process(600, "python")
    fwd, bwd = proc.thread(), proc.thread(601, "pt_autograd_0")
    fwd.push_pop(LINEAR, 100, 900)
    fwd.push_pop("aten::linear, seq = 5, op_id = 1", 110, 890)
    fwd.launch(H884, 120, 130, 140, 240)
    fwd.push_pop(_m("torch", "exp", _t((10,), "float16")), 1_000, 1_500)
    fwd.push_pop("aten::exp, seq = 6, op_id = 2", 1_010, 1_490)
    fwd.launch(EW, 1_020, 1_030, 1_040, 1_090)
    bwd.push_pop("autograd::engine::evaluate_function: AddmmBackward0", 2_000, 3_000)
    bwd.push_pop("AddmmBackward0, seq = 5, op_id = 3", 2_010, 2_990)
    bwd.push_pop("aten::mm, seq = 0, op_id = 4", 2_020, 2_980)
    bwd.launch(H884, 2_030, 2_040, 2_050, 2_150)
    bwd.launch(H884, 2_200, 2_210, 2_220, 2_320)
    df = prof_table(jlprof.load(db.write(tmp_path / "b.sqlite")).correlated)
    assert df["dir"].tolist() == ["fprop", "fprop", "bprop", "bprop"]
    assert df["seq"].tolist() == ["5", "6", "5", "5"]
    assert df["sub"].tolist() == [0, 0, 0, 1]
    assert df["op"].tolist() == ["linear", "exp", "linear", "linear"]
    assert df["tid"].tolist() == [600, 600, 601, 601]
    assert df["params"].tolist()[2:] == ["M=64,N=32,K=128,fp16,", "M=64,N=128,K=32,fp16,"]
    assert df["flops"].tolist()[2:] == [2 * 128 * 32 * 64] * 2


def test_emit_nvtx_only_trace_names_ops_from_sequence_markers(tmp_path):
    """No PyProf marker: the op is the first sequence marker's name in PyProf's order (by the
    text after ``seq = ``, then the name: ``aten::addmm`` before ``aten::linear``), the
    backward kernel the forward op's (by seq); parameters and FLOPs unknown (``na=na,``, 0)."""
    df = prof_table(jlprof.load(emit_nvtx_db(1).write(tmp_path / "e.sqlite")).correlated)
    assert df["op"].tolist() == ["aten::conv2d", "aten::relu", "aten::addmm", "aten::addmm",
                                 "aten::relu", "aten::conv2d"]  # fmt: skip
    assert df["dir"].tolist() == ["fprop"] * 3 + ["bprop"] * 3
    assert df["seq"].tolist() == ["10", "11", "12", "12", "11", "10"]
    assert set(df["params"]) == {"na=na,"} and set(df["tc"]) == {"na"}
    assert (df["flops"] == 0).all()


def test_format_params_and_short_names():
    assert format_params({"M": 64, "N": (8, 4), "type": "float16"}) == "M=64,N=(8,4),fp16,"
    assert format_params({"T": [(4, 10)], "type": ["float32"]}) == "T=[(4,10)],['float32']"
    assert format_params("[4]fp32") == "[4]fp32"
    assert short_name("void at::native::vectorized_elementwise_kernel<4, at::native::X>(int)") \
        == "vectorized_elementwise_kernel"  # fmt: skip
    assert short_name("void at::native::<unnamed>::CatArrayBatchedCopy<float>(int)") == (
        "CatArrayBatchedCopy"
    )
    # nvprof stores mangled names
    assert short_name("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_4ReluEEEviT0_") == (
        "vectorized_elementwise_kernel"
    )
    assert short_name("_Z11flip_filterIffEvPT0_PKT_iiii") == "flip_filter"
    assert short_name("_ZN5cudnn6detail23implicit_convolve_sgemmIffLi1024EEEviii") == (
        "cudnn::detail::implicit_convolve_sgemm"
    )
    assert short_name("volta_h884gemm_64x64_ldg8_nn") == "volta_h884gemm_64x64_ldg8_nn"


def test_prof_report_and_its_range(tmp_path):
    path = plugin_db(3).write(tmp_path / "p.sqlite")
    p = jlprof.load(path, key_node="Conv2d")
    whole = p.report("prof")
    assert list(whole.columns) == [HEADERS[c] for c in COLUMNS]
    assert len(whole) == 6
    assert whole["FLOPs"].tolist() == [2 * 8 * 4 * 14 * 14 * 3 * 3 * 3, 0] * 3
    one = p.report("prof", iter_start=1, iter_stop=1)
    it = p.gpu_iter[prof_table(p.correlated)["gpu_row"].to_numpy()]
    assert one["Idx"].tolist() == (whole["Idx"][it == 1]).tolist()
    assert 0 < len(one) < len(whole)


def test_cli_writes_the_prof_report(tmp_path):
    db = plugin_db(2).write(tmp_path / "p.sqlite")
    out = tmp_path / "out"
    assert main([f"--database={db}", "--reports=prof", "--formats=csv", "--dldb=false",
                 f"--output_path={out}"]) == 0  # fmt: skip
    got = pd.read_csv(out / "dlprof_prof.csv")
    assert got.columns.tolist() == [HEADERS[c] for c in COLUMNS]
    assert got["Sil(ns)"].tolist() == [300, 600, 300, 600]


def test_prof_command_prints_pyprofs_three_layouts(tmp_path, capsys):
    db = _formula_db().write(tmp_path / "f.sqlite")
    assert main(["prof", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Idx Direction Sub Module Op Kernel Params Sil(ns)"
    assert lines[1] == f"1 fprop 0 torch.nn.functional linear {H884} M=128,N=32,K=64,fp16, 100"
    assert len(lines) == len(CASES) + 1
    assert main(["prof", "--csv", "-c", "idx,kernel,flops", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == '"Idx","Kernel","FLOPs"'
    assert lines[1] == f'"1","{H884}","{2 * 128 * 32 * 64}"'
    assert main(["prof", "-w", "130", "-c", "idx,dir,kernel,params,sil", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # PyProf's widths: idx 7, dir 5, sil 10; kernel and params share the rest (130-22)/2
    assert all(len(x) == 7 + 5 + 54 + 54 + 10 + 5 for x in lines)
    assert lines[1] == (f"{1:7d} {'fprop':<5} {H884:<54} {'M=128,N=32,K=64,fp16,':<54} "
                        f"{100:10d} ")  # fmt: skip
    assert main(["prof", "-w", "40", str(db)]) == 2
    assert "minimum width required to print idx,dir,sub,mod,op,kernel,params,sil = 55" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        main(["prof", "-c", "idx,nope", str(db)])
    assert "nope is not a valid column name" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["prof", "--csv", "-w", "100", str(db)])
    assert main(["prof", str(tmp_path / "missing.sqlite")]) == 2


def test_windowed_cli_reads_the_whole_trace_for_prof(tmp_path, capsys):
    db = plugin_db(2).write(tmp_path / "p.sqlite")
    out = tmp_path / "out"
    assert main([f"--database={db}", "--reports=prof", "--dldb=false", "--windowed=true",
                 f"--output_path={out}", "-v", "detailed"]) == 0  # fmt: skip
    assert "reading the whole trace: --reports prof reads every row" in capsys.readouterr().err
    assert len(pd.read_csv(out / "dlprof_prof.csv")) == 4


def test_prof_help_lists_pyprofs_columns(capsys):
    with pytest.raises(SystemExit) as e:
        main(["prof", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "default idx,dir,sub,mod,op,kernel,params,sil" in text
    assert all(f"{c}:" in text for c in COLUMNS)
