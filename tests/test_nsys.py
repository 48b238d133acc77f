"""jlprof.nsys: command lines (unit) and the real Nsight Systems CLI (``-m nsys``).

The integration tests profile a small NVTX-annotated Python program twice (whole run, and an NVTX
capture range), once per module, and check the SQLite export with plain ``sqlite3`` queries and
against NVIDIA's own ``nsys stats`` reports.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import sys
import textwrap
from collections import Counter
from importlib import metadata
from pathlib import Path

import pytest

from jlprof import nsys as jn
from jlprof.errors import JlprofError
from tests.fixtures.scenarios import real_data_dir

FAKE_NSYS = jn.NsysInfo(Path("/opt/nsys/bin/nsys"), (2022, 4, 2, 1), "2022.4.2.1")
STEPS = 5


def build(app: list[str] | None = None, output: str = "/runs/r", **kw: object) -> jn.ProfileCommand:
    return jn.profile_command(app or ["python", "train.py"], output, nsys=FAKE_NSYS, **kw)  # type: ignore[arg-type]


def options(cmd: jn.ProfileCommand) -> list[str]:
    """The nsys options of ``cmd``: between ``profile`` and the program."""
    return cmd.argv[2:-2]


# --------------------------------------------------------------------------------------------------
# Command lines


def test_default_command_line() -> None:
    cmd = build()
    assert cmd.argv == [
        "/opt/nsys/bin/nsys",
        "profile",
        "--output=/runs/r",
        "--force-overwrite=false",
        "--trace=cuda,nvtx,osrt",
        "--sample=none",
        "--cpuctxsw=none",
        "python",
        "train.py",
    ]
    assert cmd.env == {}
    assert cmd.output_base == Path("/runs/r")
    assert not cmd.force


def test_all_jlprof_options() -> None:
    cmd = build(
        output="/runs/r.nsys-rep",
        trace_dl_libraries=True,
        capture_range="nvtx",
        nvtx_capture="jlprof_capture",
        capture_range_end="repeat",
        delay=2,
        duration=10.0,
        force=True,
    )
    assert options(cmd) == [
        "--output=/runs/r",
        "--force-overwrite=true",
        "--capture-range=nvtx",
        "--nvtx-capture=jlprof_capture",
        "--capture-range-end=repeat",
        "--delay=2",
        "--duration=10",
        "--trace=cuda,nvtx,osrt,cudnn,cublas",
        "--sample=none",
        "--cpuctxsw=none",
    ]
    assert cmd.env == {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    assert cmd.output_base == Path("/runs/r")


def test_cuda_profiler_api_capture_needs_no_env() -> None:
    cmd = build(capture_range="cudaProfilerApi", capture_range_end="stop")
    assert "--capture-range=cudaProfilerApi" in cmd.argv
    assert cmd.env == {}


def test_nsys_opts_string_is_split_like_a_shell_would() -> None:
    cmd = build(nsys_opts="--osrt-threshold 10000 -e 'A=b c' --cudabacktrace=all")
    assert options(cmd)[-5:] == ["--osrt-threshold", "10000", "-e", "A=b c", "--cudabacktrace=all"]
    assert build(nsys_opts=["-w", "false"]).argv[-4:-2] == ["-w", "false"]


def test_user_options_replace_the_defaults() -> None:
    cmd = build(nsys_opts="-t cuda,nvtx -s cpu --cpuctxsw=process-tree")
    assert not any(a.startswith(("--trace=", "--sample=", "--cpuctxsw=none")) for a in cmd.argv)
    assert options(cmd)[-5:] == ["-t", "cuda,nvtx", "-s", "cpu", "--cpuctxsw=process-tree"]


def test_user_capture_range_when_jlprof_sets_none() -> None:
    cmd = build(nsys_opts="-c nvtx -p step@mydomain")
    assert cmd.env == {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    assert options(cmd)[-4:] == ["-c", "nvtx", "-p", "step@mydomain"]


def test_option_repeating_jlprof_value_is_kept_once() -> None:
    cmd = build(output="/runs/r", force=True, nsys_opts="-o /runs/r.nsys-rep -f true")
    assert options(cmd) == [
        "--output=/runs/r",
        "--force-overwrite=true",
        "--trace=cuda,nvtx,osrt",
        "--sample=none",
        "--cpuctxsw=none",
    ]


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ("-o elsewhere", "conflicts with jlprof's own --output"),
        ("--output=elsewhere", "conflicts with jlprof's own --output"),
        ("--outp elsewhere", "conflicts with jlprof's own --output"),  # nsys accepts prefixes
        ("-oelsewhere", "conflicts with jlprof's own --output"),
        ("--export sqlite", "cannot use --export"),
        ("--command-file opts.txt", "cannot use --command-file"),
        ("-f true", "set it with force"),
    ],
)
def test_rejected_nsys_opts(opts: str, message: str) -> None:
    with pytest.raises(JlprofError, match=message):
        build(nsys_opts=opts)


@pytest.mark.parametrize(
    "opts",
    ["-c cudaProfilerApi", "--capture-range=none", "-p other", "--capture-range-end repeat"],
)
def test_capture_options_rejected_when_jlprof_controls_capture(opts: str) -> None:
    with pytest.raises(JlprofError, match=r"conflicts with jlprof's own --(capture|nvtx)"):
        build(capture_range="nvtx", nvtx_capture="jlprof_capture", nsys_opts=opts)


def test_delay_and_duration_conflicts() -> None:
    with pytest.raises(JlprofError, match="delay"):
        build(delay=3, nsys_opts="-y 5")
    with pytest.raises(JlprofError, match="duration"):
        build(duration=3, nsys_opts="--duration=5")
    assert options(build(nsys_opts="-y 5"))[-2:] == ["-y", "5"]  # not set by jlprof: passed on


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nsys_opts": "-t cuda train.py"}, "only nsys options"),
        ({"capture_range": "nvtx"}, "needs the name of the range"),
        ({"capture_range": "nvtx", "nvtx_capture": "x", "trace": ("cuda",)}, "needs NVTX tracing"),
        ({"capture_range": "cudaProfilerApi", "nsys_opts": "-t nvtx"}, "needs CUDA tracing"),
        ({"capture_range": "sometimes"}, "capture range must be one of"),
        ({"nvtx_capture": "x"}, "need capture_range"),
        ({"capture_range": "nvtx", "nvtx_capture": "x", "capture_range_end": "again"}, "end must"),
        ({"duration": 0.5}, "whole, non-negative"),
        ({"delay": -1}, "whole, non-negative"),
        ({"app": ["--help"]}, "cannot start with '-'"),
    ],
)
def test_invalid_options(kwargs: dict[str, object], message: str) -> None:
    app = kwargs.pop("app", None)
    with pytest.raises(JlprofError, match=message):
        build(app=app, **kwargs)  # type: ignore[arg-type]


def test_no_shell_anywhere() -> None:
    """Shell metacharacters stay inside single argv elements; strings are refused."""
    hostile = "/tmp/a b;rm -rf ~/x$(id)"
    cmd = build(app=["python", "-c", "print('$HOME; `id`')"], output=hostile)
    assert f"--output={hostile}" in cmd.argv
    assert cmd.argv[-3:] == ["python", "-c", "print('$HOME; `id`')"]
    with pytest.raises(TypeError):
        jn.profile_command("python train.py", "/runs/r", nsys=FAKE_NSYS)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        jn.run_profile("nsys profile python train.py")  # type: ignore[arg-type]
    with pytest.raises(JlprofError, match="no program"):
        jn.profile_command([], "/runs/r", nsys=FAKE_NSYS)


def test_generated_block_is_parsed() -> None:
    lines = [
        "Capture range ended in the application.",
        "Generated:",
        "    /tmp/x/r.1.qdstrm",
        "\t/tmp/x/r.2.qdstrm",
        "Importer error status: ...",
    ]
    assert jn._generated_paths(lines) == [Path("/tmp/x/r.1.qdstrm"), Path("/tmp/x/r.2.qdstrm")]


@pytest.mark.parametrize(
    ("header", "normal"),
    [
        ("Time (%)", "Time"),
        ("Time(%)", "Time"),
        ("Total Time (ns)", "Total Time"),
        ("Avg (ns)", "Avg"),
        ("Average", "Avg"),
        ("NVTX Range", "NVTX Range"),
    ],
)
def test_stats_header(header: str, normal: str) -> None:
    assert jn.stats_header(header) == normal


# --------------------------------------------------------------------------------------------------
# Finding nsys (real conditions: an environment without it)


def test_jlprof_nsys_pointing_nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JLPROF_NSYS", str(tmp_path / "no-such-nsys"))
    with pytest.raises(jn.NsysNotFound, match=r"JLPROF_NSYS=.*no-such-nsys") as caught:
        jn.find_nsys()
    assert "apt-get install nsight-systems" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, JlprofError)


def test_no_nsys_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JLPROF_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(jn.NsysNotFound, match=r"nsys not found on PATH.*contrib non-free"):
        jn.find_nsys(search_dirs=[str(tmp_path / "opt/nvidia/nsight-systems/*/bin")])


def test_nsys_that_does_not_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\necho 'segfault' >&2\nexit 139\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JLPROF_NSYS", str(tmp_path))
    with pytest.raises(jn.NsysNotFound, match=r"--version failed.*segfault"):
        jn.find_nsys()


def test_missing_input_is_named(tmp_path: Path) -> None:
    for name in ("gone.sqlite", "gone.nsys-rep", "gone.qdstrm"):
        with pytest.raises(JlprofError, match=f"{tmp_path / name}: no such file"):
            jn.ensure_sqlite(tmp_path / name)


def test_wrong_kind_of_input(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(JlprofError, match="not an nsys file"):
        jn.ensure_sqlite(text)
    fake_db = tmp_path / "fake.sqlite"
    fake_db.write_bytes(os.urandom(256))
    with pytest.raises(JlprofError, match="not an SQLite database"):
        jn.ensure_sqlite(fake_db)


# --------------------------------------------------------------------------------------------------
# The real nsys

PROGRAM = textwrap.dedent(
    f"""
    import sys, time
    import nvtx

    with nvtx.annotate("setup"):
        time.sleep(0.01)
    nvtx.push_range("jlprof_capture")
    for step in range({STEPS}):
        nvtx.push_range("optimizer_step")
        with nvtx.annotate("forward"):
            time.sleep(0.002)
        nvtx.push_range("backward")
        time.sleep(0.003)
        nvtx.pop_range()
        nvtx.pop_range()
    nvtx.pop_range()
    with nvtx.annotate("teardown"):
        time.sleep(0.01)
    print("program done")
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    """
)


@pytest.fixture(scope="module")
def nsys_info() -> jn.NsysInfo:
    try:
        return jn.find_nsys()
    except jn.NsysNotFound as exc:
        pytest.skip(f"needs Nsight Systems: {exc}")


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("nvtx", reason="needs the nvtx package (pip install nvtx==0.2.10)")
    version = tuple(int(p) for p in metadata.version("nvtx").split(".")[:3] if p.isdigit())
    assert version <= (0, 2, 10), "nvtx > 0.2.10 records no ranges under nsys 2022.4"
    path = tmp_path_factory.mktemp("program") / "train.py"
    path.write_text(PROGRAM)
    return path


@pytest.fixture(scope="module")
def whole_run(
    nsys_info: jn.NsysInfo, program: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[jn.ProfileResult, Path, list[str]]:
    """The whole program profiled with ``-t nvtx,osrt``; output and progress lines kept."""
    out = tmp_path_factory.mktemp("whole")
    cmd = jn.profile_command(
        [sys.executable, str(program)], out / "run", trace=("nvtx", "osrt"), nsys=nsys_info
    )
    said: list[str] = []
    shown: list[str] = []
    result = jn.run_profile(cmd, progress=said.append, on_output=shown.append, timeout=120)
    db = jn.ensure_sqlite(result.reports[0], nsys=nsys_info, progress=said.append)
    return result, db, said + shown


@pytest.fixture(scope="module")
def captured_run(
    nsys_info: jn.NsysInfo, program: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[jn.ProfileResult, Path]:
    """Only the ``jlprof_capture`` range, by NVTX capture; the program exits with status 3."""
    out = tmp_path_factory.mktemp("captured")
    cmd = jn.profile_command(
        [sys.executable, str(program), "3"],
        out / "run",
        trace=("nvtx", "osrt"),
        capture_range="nvtx",
        nvtx_capture="jlprof_capture",
        capture_range_end="stop",
        nsys=nsys_info,
    )
    result = jn.run_profile(cmd, on_output=lambda _line: None, timeout=120)
    return result, jn.ensure_sqlite(result.reports[0], nsys=nsys_info)


def nvtx_ranges(db: Path) -> list[tuple[str, int, int, int]]:
    """(name, start, end, globalTid) of every push/pop range, name resolved through StringIds."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return con.execute(
            """
            SELECT coalesce(s.value, e.text), e.start, e."end", e.globalTid
            FROM NVTX_EVENTS AS e LEFT JOIN StringIds AS s ON s.id = e.textId
            WHERE e.eventType = 59
            ORDER BY e.start
            """
        ).fetchall()


@pytest.mark.nsys
def test_profile_imports_and_exports(whole_run: tuple[jn.ProfileResult, Path, list[str]]) -> None:
    result, db, lines = whole_run
    assert result.returncode == 0
    assert [p.suffix for p in result.reports] == [".nsys-rep"]
    assert all(p.exists() for p in [*result.reports, *result.recordings])  # raw files are kept
    assert db == result.reports[0].with_suffix(".sqlite")
    assert "program done" in lines
    assert any(line.startswith("Profiling with nsys: ") for line in lines)
    if result.recordings:  # Debian's nsys: jlprof ran the importer itself
        assert any(line.startswith("Importing run.qdstrm") for line in lines)
        # nsys's own complaint about its importer is replaced by one note saying what jlprof did
        assert lines.count(jn.IMPORTER_NOTE) == 1
    assert not [ln for ln in lines if "importer" in ln.lower() and ln != jn.IMPORTER_NOTE]


@pytest.mark.nsys
def test_nvtx_ranges_counts_and_nesting(
    whole_run: tuple[jn.ProfileResult, Path, list[str]],
) -> None:
    ranges = nvtx_ranges(whole_run[1])
    counts = Counter(name for name, *_ in ranges)
    assert counts == {
        "setup": 1,
        "jlprof_capture": 1,
        "optimizer_step": STEPS,
        "forward": STEPS,
        "backward": STEPS,
        "teardown": 1,
    }
    assert len({tid for *_, tid in ranges}) == 1
    (capture,) = [r for r in ranges if r[0] == "jlprof_capture"]
    steps = [r for r in ranges if r[0] == "optimizer_step"]
    for _, start, end, _tid in steps:
        assert capture[1] <= start and end <= capture[2]
        inner = [r[0] for r in ranges if start < r[1] and r[2] <= end]
        assert inner == ["forward", "backward"]
    for name in ("setup", "teardown"):
        (outside,) = [r for r in ranges if r[0] == name]
        assert outside[2] <= capture[1] or outside[1] >= capture[2]


@pytest.mark.nsys
def test_nvidia_stats_agree_on_counts(
    whole_run: tuple[jn.ProfileResult, Path, list[str]], nsys_info: jn.NsysInfo
) -> None:
    db = whole_run[1]
    counts = Counter(name for name, *_ in nvtx_ranges(db))
    for report in ("nvtxsum", "nvtx_pushpop_sum"):  # 2022.4 name and 2023.2+ name
        rows = jn.run_stats(db, report, nsys=nsys_info)
        assert {r["Range"]: r["Instances"] for r in rows} == counts
        assert all(isinstance(r["Total Time (ns)"], int) for r in rows)
    rows = jn.run_stats(db, "nvtxsum", normalize=True, nsys=nsys_info)
    steps = next(r for r in rows if r["Range"] == "optimizer_step")
    assert steps["Style"] == "PushPop"
    assert steps["Min"] >= 5_000_000  # each step sleeps 5 ms
    assert jn.run_stats(db, "gpukernsum", nsys=nsys_info) == []  # SKIPPED: no CUDA here


@pytest.mark.nsys
def test_nvtx_capture_range(captured_run: tuple[jn.ProfileResult, Path]) -> None:
    result, db = captured_run
    assert result.returncode == 3  # the program's exit status; the report is still there
    counts = Counter(name for name, *_ in nvtx_ranges(db))
    assert counts == {
        "jlprof_capture": 1,
        "optimizer_step": STEPS,
        "forward": STEPS,
        "backward": STEPS,
    }


@pytest.mark.nsys
def test_qdstrm_is_imported_then_exported(
    whole_run: tuple[jn.ProfileResult, Path, list[str]], nsys_info: jn.NsysInfo, tmp_path: Path
) -> None:
    result, db, _ = whole_run
    if not result.recordings:
        pytest.skip("this nsys imports by itself and left no .qdstrm")
    raw = tmp_path / "copy.qdstrm"
    shutil.copy(result.recordings[0], raw)
    digest = hashlib.sha256(raw.read_bytes()).hexdigest()
    said: list[str] = []
    exported = jn.ensure_sqlite(raw, nsys=nsys_info, progress=said.append)
    assert hashlib.sha256(raw.read_bytes()).hexdigest() == digest  # the importer had a copy
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "copy.nsys-rep", "copy.qdstrm", "copy.sqlite"
    ]  # fmt: skip
    assert exported == tmp_path / "copy.sqlite"
    assert (tmp_path / "copy.nsys-rep").exists() and raw.exists()
    assert Counter(r[0] for r in nvtx_ranges(exported)) == Counter(r[0] for r in nvtx_ranges(db))
    assert [s.split()[0] for s in said] == ["Importing", "Exporting"]
    # Up to date now: a second call reuses both files.
    said.clear()
    assert jn.ensure_sqlite(raw, nsys=nsys_info, progress=said.append) == exported
    assert [s.split()[0] for s in said] == ["Using", "Using"]


@pytest.mark.nsys
def test_stale_export_needs_force(
    whole_run: tuple[jn.ProfileResult, Path, list[str]], nsys_info: jn.NsysInfo, tmp_path: Path
) -> None:
    rep = tmp_path / "r.nsys-rep"
    shutil.copy(whole_run[0].reports[0], rep)
    db = jn.ensure_sqlite(rep, nsys=nsys_info)
    os.utime(rep, ns=(db.stat().st_mtime_ns + 10**9,) * 2)  # the report was re-recorded
    with pytest.raises(JlprofError, match=r"older than .*force"):
        jn.ensure_sqlite(rep, nsys=nsys_info)
    with pytest.raises(JlprofError, match="already exists"):
        jn.export_sqlite(rep, nsys=nsys_info)
    assert jn.ensure_sqlite(rep, force=True, nsys=nsys_info) == db
    assert db.stat().st_mtime_ns >= rep.stat().st_mtime_ns
    assert not [p for p in tmp_path.iterdir() if "jlprof-" in p.name]  # no temporary left over


@pytest.mark.nsys
def test_read_only_folder_exports_to_cache(
    whole_run: tuple[jn.ProfileResult, Path, list[str]],
    nsys_info: jn.NsysInfo,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can write to read-only folders")
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(whole_run[0].reports[0], shared / "r.nsys-rep")
    shared.chmod(0o555)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    try:
        db = jn.ensure_sqlite(shared / "r.nsys-rep", nsys=nsys_info)
    finally:
        shared.chmod(0o755)
    assert db.parent == tmp_path / "cache/jlprof/exports"


@pytest.mark.nsys
def test_refuses_to_overwrite_a_recording(
    whole_run: tuple[jn.ProfileResult, Path, list[str]], nsys_info: jn.NsysInfo, program: Path
) -> None:
    base = whole_run[0].reports[0].with_suffix("")
    cmd = jn.profile_command([sys.executable, str(program)], base, nsys=nsys_info)
    with pytest.raises(JlprofError, match=r"run\.(nsys-rep|qdstrm) already exists: pass force"):
        jn.run_profile(cmd)


@pytest.mark.nsys
def test_corrupt_report_gives_nsys_message(nsys_info: jn.NsysInfo, tmp_path: Path) -> None:
    bad = tmp_path / "bad.nsys-rep"
    bad.write_bytes(os.urandom(64 * 1024))
    with pytest.raises(JlprofError, match=r"nsys export of .*bad\.nsys-rep failed.*: \S") as caught:
        jn.ensure_sqlite(bad, nsys=nsys_info)
    assert isinstance(caught.value, jn.NsysFailed) and caught.value.output
    assert "\n" not in str(caught.value)
    assert bad.exists() and not (tmp_path / "bad.sqlite").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.nsys-rep"]


@pytest.mark.nsys
def test_corrupt_qdstrm_gives_importer_message(nsys_info: jn.NsysInfo, tmp_path: Path) -> None:
    if nsys_info.importer is None:
        pytest.skip("no QdstrmImporter next to this nsys")
    bad = tmp_path / "bad.qdstrm"
    bad.write_bytes(os.urandom(64 * 1024))
    with pytest.raises(jn.NsysFailed, match=r"importing .*bad\.qdstrm .*failed.*: \S"):
        jn.ensure_sqlite(bad, nsys=nsys_info)
    assert [p.name for p in tmp_path.iterdir()] == ["bad.qdstrm"]


@pytest.mark.nsys
def test_jlprof_nsys_accepts_a_folder(
    nsys_info: jn.NsysInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JLPROF_NSYS", str(nsys_info.path.parent))
    found = jn.find_nsys()
    assert found.path == nsys_info.path.parent / "nsys"
    assert found.version == nsys_info.version >= (2019,)


@pytest.mark.nsys
def test_kernel_reports_on_a_real_gpu_export(nsys_info: jn.NsysInfo) -> None:
    """Column names and counts of the reports the engine is checked against (H100 capture)."""
    export = real_data_dir() / "nvfuser-matmul-h100/report1.sqlite"
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as con:
        kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        api_calls = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    gpukernsum = jn.run_stats(export, "gpukernsum", nsys=nsys_info)
    assert list(gpukernsum[0]) == [
        "Time (%)",
        "Total Time (ns)",
        "Instances",
        "Avg (ns)",
        "Med (ns)",
        "Min (ns)",
        "Max (ns)",
        "StdDev (ns)",
        "GridXYZ",
        "BlockXYZ",
        "Name",
    ]
    assert sum(r["Instances"] for r in gpukernsum) == kernels == 19
    nvtxkernsum = jn.run_stats(export, "nvtx_kern_sum", normalize=True, nsys=nsys_info)
    assert list(nvtxkernsum[0]) == [
        "NVTX Range",
        "Style",
        "PID",
        "TID",
        "NVTX Inst",
        "Kern Inst",
        "Total Time",
        "Avg",
        "Med",
        "Min",
        "Max",
        "StdDev",
        "Kernel Name",
    ]
    cudaapisum = jn.run_stats(export, "cudaapisum", nsys=nsys_info)
    assert sum(r["Num Calls"] for r in cudaapisum) == api_calls


@pytest.mark.nsys
def test_the_command_reads_a_report_by_windows(
    whole_run: tuple[jn.ProfileResult, Path, list[str]], tmp_path: Path, capsys
) -> None:
    """``jlprof --database r.nsys-rep``: the command makes the report's SQLite export first,
    as ``jlprof.load`` does, so the windowed engine reads it too; the files are the whole
    trace's."""
    from jlprof.cli import main

    rep = tmp_path / "r.nsys-rep"
    shutil.copy(whole_run[0].reports[0], rep)
    for windowed in ("true", "false"):
        argv = [f"--database={rep}", "--reports=all", "--formats=csv,json", "-v", "detailed",
                f"--output_path={tmp_path / windowed}", f"--windowed={windowed}"]  # fmt: skip
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert ("planning windows of API calls" in err) is (windowed == "true"), err
    assert (tmp_path / "r.sqlite").is_file()
    names = sorted(p.name for p in (tmp_path / "false").iterdir())
    assert "dlprof_summary.csv" in names and names == sorted(
        p.name for p in (tmp_path / "true").iterdir()
    )
    for name in names:
        assert (tmp_path / "true" / name).read_bytes() == (tmp_path / "false" / name).read_bytes()
