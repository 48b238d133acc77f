"""Nsight Compute below the kernel name (docs/kernels.md): the real CUTLASS reports of
tests/data/ncu/ read through jlprof and, independently, straight through NVIDIA's
``ncu_report``; ncu's raw CSV; the join to a trace's kernels; ``jlprof ncu``; the capture
command lines (no GPU here: the lines are checked, not run)."""

from __future__ import annotations

import csv
import io
import lzma
import shlex
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jlprof.cli import main
from jlprof.nsys import ncu
from tests.fixtures.nsysdb import NsysDb

DATA = Path(__file__).parent / "data" / "ncu" / "cutlass-b2bgemm-a100"
REPORTS = ("report", "report-s8", "384")


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("ncu")
    paths = {}
    for name in REPORTS:
        p = out / f"{name}.ncu-rep"
        p.write_bytes(lzma.decompress((DATA / f"{name}.ncu-rep.xz").read_bytes()))
        paths[name] = p
    return paths


def _independent(path: Path) -> list[dict]:
    """Each action's figures read straight through ncu_report, by ncu's metric names, with
    the definitions of docs/kernels.md worked here (FLOPs: ncu's roofline formula)."""
    ncu_report = pytest.importorskip("ncu_report")
    ctx = ncu_report.load_report(str(path))
    out = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for i in range(rng.num_actions()):
            a = rng.action_by_idx(i)

            def v(name, a=a):
                m = a.metric_by_name(name)
                return None if m is None else float(m.value())

            cycles = v("smsp__cycles_elapsed.avg")
            flops = 0.0
            for prec in "hfd":
                for op, w in (("add", 1), ("mul", 1), ("fma", 2)):
                    rate = v(f"smsp__sass_thread_inst_executed_op_{prec}{op}_pred_on"
                             ".sum.per_cycle_elapsed")  # fmt: skip
                    if rate is not None:  # --set full has no HADD/HMUL/HFMA rates on A100
                        flops += w * rate * cycles
            nv = a.nvtx_state()
            ranges = ["/".join(nv.domain_by_id(d).push_pop_ranges()) for d in nv.domains()]
            out.append({
                "kernel": a.name(ncu_report.IAction.NameBase_DEMANGLED),
                "nvtx": ";".join(x for x in ranges if x),
                "duration_ns": v("gpu__time_duration.sum"),
                "sm_throughput_pct": v("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
                "memory_throughput_pct": v(
                    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
                "achieved_occupancy_pct": v("sm__warps_active.avg.pct_of_peak_sustained_active"),
                "tensor_hmma_pct": v(
                    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
                "tensor_imma_pct": v(
                    "sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active"),
                "dram_bytes": v("dram__bytes_read.sum") + v("dram__bytes_write.sum"),
                "flops": flops,
                "grid_size": v("launch__grid_size"),
                "block_size": v("launch__block_size"),
            })  # fmt: skip
    return out


@pytest.mark.parametrize("name", REPORTS)
def test_every_imported_metric_equals_ncu_report_read_independently(reports, name):
    want = _independent(reports[name])
    got = ncu.measured_rows(ncu.read_ncu_report(reports[name], via="ncu_report"))
    assert len(got) == len(want) > 0
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        assert g["launch"] == i
        for key, value in w.items():
            if key == "flops":
                assert g[key] == pytest.approx(value, rel=1e-12), (name, i, key)
            else:
                assert g[key] == value, (name, i, key)
        assert g["tensor_pipe_pct"] == max(w["tensor_hmma_pct"], w["tensor_imma_pct"])


def test_the_reports_figures_as_pinned_by_hand(reports):
    """A few figures copied from the reports once (ncu_report 2026.3.1), so that a change of
    reader or of definition shows: the int8 GEMMs' tensor pipe is IMMA, not HMMA."""
    pytest.importorskip("ncu_report")
    rows = ncu.measured_rows(ncu.read_ncu_report(reports["report"]))
    assert [r["nvtx"] for r in rows] == ["Non-fused-GEMM", "Non-fused-GEMM", "Fused-GEMM"]
    assert [r["duration_ns"] for r in rows] == [11168.0, 10880.0, 25984.0]
    assert [r["tensor_hmma_pct"] for r in rows] == [0.0, 0.0, 0.0]
    assert rows[2]["tensor_imma_pct"] == pytest.approx(20.518539, abs=1e-6)
    assert rows[2]["dram_bytes"] == 1522944.0
    assert [r["grid_size"] for r in rows] == [96.0] * 3
    assert "B2bGemm" in rows[2]["kernel"] and "B2bGemm" not in rows[0]["kernel"]
    s8 = ncu.measured_rows(ncu.read_ncu_report(reports["report-s8"]))
    assert [r["nvtx"] for r in s8] == ["NCUTEST", "NCUTEST"]
    assert s8[1]["tensor_hmma_pct"] == pytest.approx(0.013841, abs=1e-6)
    assert s8[1]["duration_ns"] == 324096.0


RAW_CSV = """"ID","Process ID","Process Name","Host Name","thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active","launch__grid_size"
"","","","","","","","","","","","","usecond","Kbyte","byte","%",""
"0","4242","python","host","<default>:Fused-GEMM:none:none:none:none:none:none","void k<int>(int)","1","7","(128, 1, 1)","(96, 1, 1)","0","8.0","25.98","1,522.94","0","20.5","96"
"1","4242","python","host","","ampere_fp16_s16816gemm","1","7","(256, 1, 1)","(4, 2, 1)","0","8.0","1,234.5","n/a","2,048","0",""
"""  # noqa: E501


def test_ncus_raw_csv_units_separators_and_nvtx():
    la = ncu.parse_raw_csv(RAW_CSV)
    assert [x.kernel for x in la] == ["void k<int>(int)", "ampere_fp16_s16816gemm"]
    assert la[0].nvtx == ("Fused-GEMM",) and la[1].nvtx == ()
    m0, m1 = la[0].metrics, la[1].metrics
    assert m0["gpu__time_duration.sum"] == pytest.approx(25_980.0)  # us -> ns
    assert m0["dram__bytes_read.sum"] == pytest.approx(1_522_940.0)  # KB -> bytes, "1,522.94"
    assert m1["gpu__time_duration.sum"] == pytest.approx(1_234_500.0)
    assert "dram__bytes_read.sum" not in m1  # "n/a": not a number
    assert m1["dram__bytes_write.sum"] == 2048.0
    assert m1[ncu.GRID] == 8.0 and m1[ncu.BLOCK] == 256.0  # from "Grid Size" "(4, 2, 1)"
    rows = ncu.measured_rows(la)
    assert rows[0]["dram_bytes"] == pytest.approx(1_522_940.0)
    assert rows[1]["dram_bytes"] == 2048.0
    assert rows[0]["tensor_pipe_pct"] == 20.5 and rows[0]["tensor_imma_pct"] is None
    with pytest.raises(Exception, match="no header row"):
        ncu.parse_raw_csv("not,a,report\n")


def test_reading_without_a_reader_says_what_to_install(tmp_path, monkeypatch):
    f = tmp_path / "x.ncu-rep"
    f.write_bytes(b"NVR\0")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Exception, match="pip install ncu-report"):
        ncu.read_ncu_report(f, via="ncu")
    with pytest.raises(Exception, match="no such Nsight Compute report"):
        ncu.read_ncu_report(tmp_path / "missing.ncu-rep")
    (tmp_path / "run.sqlite").write_bytes(b"SQLite format 3\0")
    with pytest.raises(Exception, match="not an Nsight Compute report"):
        ncu.read_ncu_report(tmp_path / "run.sqlite")


def test_the_cli_ncu_listing(reports, capsys, tmp_path):
    pytest.importorskip("ncu_report")
    assert main(["ncu", str(reports["384"]), "--csv"]) == 0
    got = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    want = _independent(reports["384"])
    assert [r["launch"] for r in got] == ["0", "1", "2"]
    for g, w in zip(got, want, strict=False):
        assert g["kernel"] == w["kernel"] and g["nvtx"] == w["nvtx"]
        assert float(g["duration_ns"]) == w["duration_ns"]
        assert float(g["tensor_pipe_pct"]) == pytest.approx(w["tensor_imma_pct"], rel=1e-12)
        assert float(g["dram_bytes"]) == w["dram_bytes"]
    assert main(["ncu", str(reports["384"])]) == 0  # the table: short names
    table = capsys.readouterr().out
    assert "Fused-GEMM" in table and "Kernel" in table and "cutlass::" not in table
    out = tmp_path / "out"
    assert main(["ncu", str(reports["384"]), "--formats", "csv,json", "--output_path",
                 str(out)]) == 0  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == ["dlprof_ncu.csv", "dlprof_ncu.json"]
    assert len(pd.read_json(out / "dlprof_ncu.json")) == 3
    assert main(["ncu", str(reports["384"]), "--formats", "csv", "--output_path",
                 str(out)]) == 2  # fmt: skip
    assert "exists; pass -f" in capsys.readouterr().err
    assert main(["ncu", str(tmp_path / "none.ncu-rep")]) == 2
    assert "no such Nsight Compute report" in capsys.readouterr().err


# ---- capture: the ncu command line --------------------------------------------------------

GEMM = "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<int, (int)3>>(cutlass::Params)"
RELU = "void at::native::vectorized_elementwise_kernel<4, relu>(int)"
SGEMM = "ampere_sgemm_128x64_nn"


def test_function_base_is_ncus_function_name():
    assert ncu._function_base(GEMM) == "Kernel"
    assert ncu._function_base(RELU) == "vectorized_elementwise_kernel"
    assert ncu._function_base(SGEMM) == SGEMM


def test_capture_command_lines():
    c = ncu.capture_command(["python", "train.py", "--lr", "1"], "/o/run.ncu-rep",
                            kernels=[GEMM, SGEMM], nvtx_include=["train_step"],
                            launch_skip=10, launch_count=5)  # fmt: skip
    assert c.argv[:5] == ["ncu", "--target-processes", "all", "--export", "/o/run"]
    assert c.output == Path("/o/run.ncu-rep")
    i = c.argv.index("--kernel-name")
    assert c.argv[i - 2 : i] == ["--kernel-name-base", "function"]
    assert c.argv[i + 1] == "regex:^(Kernel|ampere_sgemm_128x64_nn)$"
    assert c.argv[c.argv.index("--nvtx") + 1 : c.argv.index("--nvtx") + 3] == [
        "--nvtx-include", "train_step/"]  # fmt: skip
    assert c.argv[c.argv.index("--launch-skip") + 1] == "10"
    assert c.argv[c.argv.index("--launch-count") + 1] == "5"
    metrics = c.argv[c.argv.index("--metrics") + 1].split(",")
    assert metrics == list(ncu.DL_METRICS) and "gpu__time_duration.sum" in metrics
    assert c.argv[-4:] == ["python", "train.py", "--lr", "1"]
    assert "--force-overwrite" not in c.argv
    r = ncu.capture_command(["python", "t.py"], "x", regex="gemm|conv", force=True,
                            nvtx_include=["dom@step/"])  # fmt: skip
    assert "regex:gemm|conv" in r.argv and "--force-overwrite" in r.argv
    assert "dom@step/" in r.argv and "--launch-skip" not in r.argv
    every = ncu.capture_command(["./a.out"], "x")
    assert "--kernel-name" not in every.argv and every.what == "every kernel"
    for bad in ({"kernels": [GEMM], "regex": "x"}, {"launch_skip": -1}, {"launch_count": 0}):
        with pytest.raises(Exception, match=r"kernels by name|launch"):
            ncu.capture_command(["python"], "x", **bad)
    with pytest.raises(Exception, match="no program"):
        ncu.capture_command([], "x")


def _three_kernel_export(path: Path) -> Path:
    """GEMM 50 us, RELU 10 us, SGEMM 30 us per step, 2 steps (totals 100, 20, 60 us)."""
    db = NsysDb()
    db.gpu(cu_device=0, name="NVIDIA A100-SXM4-40GB")
    t = db.process(pid=77).thread()
    now = 1_000_000
    for _ in range(2):
        for k, d in ((GEMM, 50_000), (RELU, 10_000), (SGEMM, 30_000)):
            t.launch(k, now, now + 1_000, now + 2_000, now + 2_000 + d)
            now += 3_000 + d
    return db.write(path)


def test_cli_ncu_kernels_topn_dry_run(tmp_path, capsys):
    db = _three_kernel_export(tmp_path / "run.sqlite")
    argv = ["ncu", "--database", str(db), "--kernels", "top2", "--launch-count", "3",
            "--dry_run", "python", "train.py", "--kernels", "x"]  # fmt: skip
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert "10-100x slower" in cap.err
    cmd = shlex.split(cap.out.strip())
    # top 2 by total GPU time: GEMM (100 us), then SGEMM (60 us); RELU (20 us) left out
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:^(Kernel|ampere_sgemm_128x64_nn)$"
    assert cmd[cmd.index("--launch-count") + 1] == "3"
    assert cmd[-4:] == ["python", "train.py", "--kernels", "x"]  # the program's own options
    assert main(["ncu", "--kernels", "gemm", "--dry_run", "python", "t.py"]) == 0
    assert "regex:gemm" in capsys.readouterr().out
    assert main(["ncu", "--kernels", "top2", "--dry_run", "python", "t.py"]) == 2
    assert "give --database" in capsys.readouterr().err
    assert main(["ncu", "--kernels", "(", "--dry_run", "python"]) == 2
    assert "neither topN nor a regex" in capsys.readouterr().err


# ---- the join: a trace of the same CUTLASS kernels, and its kernel report ----------------


def _cutlass_export(path: Path, launches: list) -> Path:
    """Two steps of: the non-fused GEMM twice under NVTX ``Non-fused-GEMM``, the fused one
    under ``Fused-GEMM`` (the order of the report's run); ``optimizer_step`` ends a step."""
    nonfused, _, fused = (la.kernel for la in launches)
    db = NsysDb()
    db.gpu(cu_device=0, name="NVIDIA A100 80GB PCIe")
    t = db.process(pid=9).thread()
    now = 1_000_000
    for _ in range(2):
        n0 = now
        for _ in range(2):
            t.launch(nonfused, now + 100, now + 900, now + 1_000, now + 12_000)
            now += 13_000
        t.push_pop("Non-fused-GEMM", n0, now)
        f0 = now
        t.launch(fused, now + 100, now + 900, now + 1_000, now + 27_000)
        now += 28_000
        t.push_pop("Fused-GEMM", f0, now)
        t.push_pop("optimizer_step", now, now + 1_000)
        now += 2_000
    return db.write(path)


def test_attach_ncu_joins_launches_and_the_kernel_report_measures(reports, tmp_path):
    pytest.importorskip("ncu_report")
    from jlprof.profile import load

    launches = ncu.read_ncu_report(reports["report"])
    db = _cutlass_export(tmp_path / "cutlass.sqlite", launches)
    plain = load(db).report("kernel")
    assert "TC Verdict" not in plain.columns
    p = load(db, ncu_report=reports["report"])
    # the trace's kernel rows by start, from SQL: the k-th profiled launch of a kernel is the
    # k-th launch of that kernel in the trace
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
        "ON s.id = k.demangledName ORDER BY k.start").fetchall()  # fmt: skip
    con.close()
    names = [r[0] for r in rows]
    gpu = p.correlated.gpu
    joined = p.ncu_launches
    got = [gpu["long_name"].iloc[r] for r in joined["gpu_row"]]
    assert got == [la.kernel for la in launches]
    starts = gpu["start_ns"].to_numpy()
    order = np.argsort(starts, kind="stable")
    rank = {int(r): i for i, r in enumerate(order)}
    # non-fused launches 0 and 1 are the trace's first two kernels; the fused is its third
    assert [rank[int(r)] for r in joined["gpu_row"]] == [0, 1, 2]
    assert [names[i] for i in (0, 1, 2)] == [la.kernel for la in launches]

    k = p.report("kernel").set_index("Long Kernel Name")
    nf, fu = k.loc[launches[0].kernel], k.loc[launches[2].kernel]
    nf_m = [la.metrics for la in launches[:2]]
    assert nf["Measured Launches"] == 2 and fu["Measured Launches"] == 1
    assert nf["Measured Duration (ns)"] == pytest.approx((11168.0 + 10880.0) / 2)
    assert fu["Measured Duration (ns)"] == 25984.0
    assert nf["SM Throughput (%)"] == pytest.approx(np.mean([m[ncu.SM_PCT] for m in nf_m]))
    assert fu["Memory Throughput (%)"] == launches[2].metrics[ncu.MEM_PCT]
    assert fu["Achieved Occupancy (%)"] == launches[2].metrics[ncu.OCCUPANCY]
    assert fu["Tensor Pipe (%)"] == launches[2].metrics[ncu.IMMA]
    assert fu["DRAM Bytes"] == 1522944.0
    assert fu["Measured FLOPs"] == pytest.approx(ncu.measured_flops(launches[2].metrics))
    # ncu measured the IMMA pipe busy: the verdict is measured, and agrees with the name rule
    by_name = plain.set_index("Long Kernel Name")
    assert by_name.loc[launches[2].kernel, "Uses TC"]
    assert fu["Uses TC"] and fu["TC Verdict"] == "measured" == nf["TC Verdict"]
    # launch-skip 1: ncu's first profiled non-fused launch is the trace's second
    skipped = p.attach_ncu(reports["report"], skip=1)
    assert [rank[int(r)] for r in skipped["gpu_row"][:2]] == [1, 3]


def test_join_uses_the_nvtx_range_and_leaves_unmatched_launches(reports):
    from jlprof.engine.analyses import ncu as engine_ncu

    gpu = pd.DataFrame({
        "kind": ["kernel"] * 4 + ["memcpy"],
        "start_ns": [10, 20, 30, 40, 5],
        "long_name": pd.Categorical(["A", "B", "A", "A", "[CUDA memcpy HtoD]"]),
    })  # fmt: skip
    nvtx = pd.Series(["step/warmup", "step", "step/train", "step/train", ""])
    measured = engine_ncu.measured_frame([
        {"launch": 0, "kernel": "A", "nvtx": "train"},
        {"launch": 1, "kernel": "A", "nvtx": ""},
        {"launch": 2, "kernel": "A", "nvtx": "train"},
        {"launch": 3, "kernel": "A", "nvtx": "train"},
        {"launch": 4, "kernel": "C", "nvtx": ""},
    ])  # fmt: skip
    j = engine_ncu.join(measured, gpu, nvtx)
    assert j["gpu_row"].tolist() == [2, 0, 3, -1, -1]
    assert engine_ncu.join(measured, gpu)["gpu_row"].tolist() == [0, 2, 3, -1, -1]
    assert engine_ncu.tc_verdict(False, None) == (False, "by name")
    assert engine_ncu.tc_verdict(True, 0.0) == (False, "measured")
    assert engine_ncu.tc_verdict(False, 3.5) == (True, "measured")


def test_the_magic_joins_an_ncu_report(reports, tmp_path):
    """``%dlprof --database=F --ncu_report=R``: the magic's analysis joins the report; a report
    it cannot read is a warning, the profile stays."""
    pytest.importorskip("ncu_report")
    from jlprof.magics.options import RunOptions
    from jlprof.magics.run import analyse

    launches = ncu.read_ncu_report(reports["report"])
    db = _cutlass_export(tmp_path / "cutlass.sqlite", launches)
    p, warnings = analyse(db, RunOptions(ncu_report=reports["report"]))
    k = p.report("kernel").set_index("Long Kernel Name")
    assert k.loc[launches[2].kernel, "Measured Duration (ns)"] == 25984.0
    assert not [w for w in warnings if "ncu" in w]
    p, warnings = analyse(db, RunOptions(ncu_report=tmp_path / "none.ncu-rep"))
    assert "TC Verdict" not in p.report("kernel").columns
    assert any(w.startswith("--ncu_report not joined: ") for w in warnings)


def test_jlprof_diff_of_two_ncu_reports(reports, capsys, tmp_path):
    """report.ncu-rep and 384.ncu-rep profiled the same two kernels (in another order): per
    kernel, each side's mean and the change, worked here from the launches."""
    pytest.importorskip("ncu_report")
    a = ncu.read_ncu_report(reports["report"])
    b = ncu.read_ncu_report(reports["384"])
    assert main(["diff", str(reports["report"]), str(reports["384"]), "--format", "csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("kernel")
    nonfused, fused = a[0].kernel, a[2].kernel
    assert list(df.index) == [nonfused, fused]
    assert df.loc[nonfused, "launches base"] == 2 and df.loc[nonfused, "launches new"] == 2
    base = (a[0].metrics[ncu.DURATION] + a[1].metrics[ncu.DURATION]) / 2  # 11024
    new = (b[1].metrics[ncu.DURATION] + b[2].metrics[ncu.DURATION]) / 2  # 10912
    assert df.loc[nonfused, "duration_ns base"] == base == 11024.0
    assert df.loc[nonfused, "duration_ns new"] == new == 10912.0
    assert df.loc[nonfused, "duration_ns change %"] == pytest.approx((new - base) / base * 100)
    assert df.loc[fused, "tensor_pipe_pct new"] == pytest.approx(b[0].metrics[ncu.IMMA])
    assert df.loc[fused, "dram_bytes change %"] == pytest.approx(
        (1523840.0 - 1522944.0) / 1522944.0 * 100)  # fmt: skip
    assert np.isnan(df.loc[nonfused, "flops change %"])  # base 0: no percentage
    assert main(["diff", str(reports["report"]), str(reports["384"])]) == 0
    assert "duration_ns change %" in capsys.readouterr().out
    md = tmp_path / "d.md"
    assert main(["diff", str(reports["report"]), str(reports["384"]), "--format", "markdown",
                 "--output_file", str(md)]) == 0  # fmt: skip
    assert md.read_text().startswith("| kernel | launches base |")


def test_profile_ncu_command_for_a_notebook(tmp_path):
    from jlprof.profile import load

    p = load(_three_kernel_export(tmp_path / "run.sqlite"))
    assert p.top_kernels(2) == [GEMM, SGEMM]
    c = p.ncu_command(["python", "train.py"], "top1", output=str(tmp_path / "g"),
                      launch_count=2)  # fmt: skip
    assert "regex:^(Kernel)$" in c.argv and c.output == tmp_path / "g.ncu-rep"
    assert "regex:relu" in p.ncu_command(["python", "t.py"], "relu").argv


def test_the_dashboards_kernel_table_says_measured(reports, tmp_path):
    """The kernel table's TC column: 'yes ncu' where ncu measured the tensor pipe busy, the
    name rule's yes/no elsewhere."""
    pytest.importorskip("ncu_report")
    from jlprof.profile import load
    from jlprof.widgets import data, static
    from jlprof.widgets.views import Views

    launches = ncu.read_ncu_report(reports["report"])
    db = _cutlass_export(tmp_path / "cutlass.sqlite", launches)
    plain = load(db)
    views = Views(int(plain.iterations.bounds_ns[0]), interactive=False)
    static.fill(views, plain)
    assert set(views.kernel_src.data["uses_tc"]) == {"yes"}
    p = load(db, ncu_report=reports["report"])
    rows = data.kernels(p, p.iter_start, p.iter_stop)
    assert set(rows["TC Verdict"]) == {"measured"}
    static.fill(views, p)
    assert set(views.kernel_src.data["uses_tc"]) == {"yes ncu"}


def test_the_roofline_tab_shows_measured_points(reports, tmp_path):
    """The roofline's ◆ points: launches ncu measured with FP work and DRAM traffic, in the
    range; the int8 GEMMs' MMA work is not in ncu's FLOP counts, so only the fused kernel (its
    FP32 epilogue) has a point, worked here from its figures."""
    pytest.importorskip("ncu_report")
    from jlprof.profile import load
    from jlprof.widgets import analyses as av

    launches = ncu.read_ncu_report(reports["report"])
    db = _cutlass_export(tmp_path / "cutlass.sqlite", launches)
    p = load(db, ncu_report=reports["report"])
    fused = ncu.measured_rows(launches)[2]
    pts = av.measured_roofline_data(p, p.iter_start, p.iter_stop)
    # the kernel as the reports show it: nsys' bare "Kernel" named by its namespace
    # (engine/correlate/kernel_names.py)
    assert len(pts) == 1 and pts["kernel"][0] == "cutlass::Kernel"
    assert pts["ai"][0] == pytest.approx(fused["flops"] / 1522944.0)
    assert pts["tflops"][0] == pytest.approx(fused["flops"] / 25984e-9 / 1e12)
    assert p.iterations.count == 3
    assert av.measured_roofline_data(p, 1, 2).empty  # the measured launch ran in iteration 0
    d = p.dashboard()
    d.analyses.expand()
    v = d.analyses.views
    assert list(v.roof_measured.data["tflops"]) == pytest.approx(list(pts["tflops"]))
    assert "1 launches measured by ncu" in v.roof_note.text
    assert av.measured_roofline_data(load(db), 0, 2).empty


def test_the_cli_joins_ncu_report_into_the_kernel_report(reports, tmp_path, capsys):
    pytest.importorskip("ncu_report")
    launches = ncu.read_ncu_report(reports["report"])
    db = _cutlass_export(tmp_path / "cutlass.sqlite", launches)
    out = tmp_path / "out"
    assert main(["--database", str(db), "--reports", "kernel", "--ncu_report",
                 str(reports["report"]), "--output_path", str(out), "--dldb", "false",
                 "--windowed", "true", "-v", "detailed"]) == 0  # fmt: skip
    assert "--ncu_report joins ncu's launches" in capsys.readouterr().err  # never windowed
    k = pd.read_csv(out / "dlprof_kernel.csv").set_index("Long Kernel Name")
    assert k.loc[launches[0].kernel, "Measured Duration (ns)"] == (11168.0 + 10880.0) / 2
    assert k.loc[launches[2].kernel, "TC Verdict"] == "measured"
    assert k.loc[launches[2].kernel, "DRAM Bytes"] == 1522944.0
    assert main(["--database", str(db), "--reports", "kernel", "--ncu_report",
                 str(tmp_path / "no.ncu-rep"), "--output_path", str(out), "-f", "true",
                 "--dldb", "false"]) == 2  # fmt: skip
    assert "no such Nsight Compute report" in capsys.readouterr().err


def test_reading_through_the_ncu_cli(tmp_path, monkeypatch):
    """Without ncu_report (or with via='ncu'), jlprof runs ncu's import; a stand-in ncu on PATH
    prints the raw CSV and logs the command line it was given; a failing ncu is one line."""
    import stat
    import sys

    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(b"NVR\0 stand-in")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake = bin_ / "ncu"
    fake.write_text(f"#!{sys.executable}\nimport sys\n"
                    f"open({str(tmp_path / 'argv')!r}, 'w').write(repr(sys.argv[1:]))\n"
                    f"sys.stdout.write({RAW_CSV!r})\n")  # fmt: skip
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_))
    la = ncu.read_ncu_report(rep, via="ncu")
    argv = eval((tmp_path / "argv").read_text())
    assert argv == ["--import", str(rep), "--csv", "--page", "raw", "--print-units", "base",
                    "--print-kernel-base", "demangled"]  # fmt: skip
    assert [x.kernel for x in la] == ["void k<int>(int)", "ampere_fp16_s16816gemm"]
    err = "sys.stderr.write('==ERROR== report version 9 is newer\\n'); sys.exit(1)\n"
    fake.write_text(f"#!{sys.executable}\nimport sys\n{err}")
    with pytest.raises(Exception, match=r"report version 9 is newer.*use ncu_report"):
        ncu.read_ncu_report(rep, via="ncu")


def test_ncu_report_with_several_databases_is_refused(tmp_path, capsys):
    a = _three_kernel_export(tmp_path / "a.sqlite")
    b = _three_kernel_export(tmp_path / "b.sqlite")
    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(b"NVR\0")
    assert main(["--database", str(a), str(b), "--ncu_report", str(rep), "--output_path",
                 str(tmp_path / "o")]) == 2  # fmt: skip
    assert "give one --database" in capsys.readouterr().err


def test_an_empty_range_keeps_the_measured_columns(reports, tmp_path):
    pytest.importorskip("ncu_report")
    from jlprof.profile import load

    launches = ncu.read_ncu_report(reports["report"])
    p = load(_cutlass_export(tmp_path / "c.sqlite", launches), ncu_report=reports["report"])
    full = p.report("kernel")
    empty = p.report("kernel", iter_start=2, iter_stop=2)  # after the last step: no kernel
    assert empty.empty and list(empty.columns) == list(full.columns)


def test_the_dashboards_kernel_table_shows_measured_columns(reports, tmp_path):
    """The kernel table's ncu columns: hidden without an ncu report; with one, each row's
    figures are the kernel report's measured columns (checked against ncu_report above), in
    the table's units (µs, %, MB), NaN where ncu did not profile the kernel."""
    pytest.importorskip("ncu_report")
    from jlprof.profile import load
    from jlprof.widgets import static
    from jlprof.widgets.views import MEASURED, Views

    launches = ncu.read_ncu_report(reports["report"])
    db = _cutlass_export(tmp_path / "cutlass.sqlite", launches)
    plain = load(db)
    views = Views(int(plain.iterations.bounds_ns[0]), interactive=False)
    static.fill(views, plain)
    assert [c.visible for c in views.measured_columns] == [False] * 6
    assert views.kernel_table.width == 480

    p = load(db, ncu_report=reports["report"])
    static.fill(views, p)
    assert [c.visible for c in views.measured_columns] == [True] * 6
    assert [c.title for c in views.measured_columns] == [
        "ncu µs", "SM %", "Mem %", "Occ. %", "TC pipe %", "DRAM MB",
    ]  # fmt: skip
    assert views.kernel_table.width > 480
    src = pd.DataFrame(views.kernel_src.data)
    k = p.report("kernel")
    assert len(src) == len(k) == 2
    expect = {
        "m_dur_us": ("Measured Duration (ns)", 1e3),
        "sm_pct": ("SM Throughput (%)", 1.0),
        "mem_pct": ("Memory Throughput (%)", 1.0),
        "occ_pct": ("Achieved Occupancy (%)", 1.0),
        "pipe_pct": ("Tensor Pipe (%)", 1.0),
        "dram_mb": ("DRAM Bytes", 1e6),
    }
    assert set(MEASURED) == set(expect)
    for _, row in src.iterrows():
        rep = k[k["Long Kernel Name"] == row["long"]]
        assert len(rep) == 1
        for field, (label, scale) in expect.items():
            assert row[field] == pytest.approx(rep[label].iloc[0] / scale, nan_ok=True)
    # the fused kernel's duration, as ncu measured it (25,984 ns; test above)
    fused = src[src["long"] == launches[2].kernel]
    assert fused["m_dur_us"].iloc[0] == pytest.approx(25.984)

    static.fill(views, plain)  # back to a profile without ncu: hidden again
    assert not any(c.visible for c in views.measured_columns)
    assert views.kernel_table.width == 480
