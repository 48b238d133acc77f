"""``jlprof --windowed``: the windowed engine's files equal the whole-trace run's, byte for byte.

Each export is analysed twice by the command line, ``--windowed false`` (the whole trace)
and ``--windowed true`` with windows of a few calls (every iteration edge a window edge),
and every file is compared as bytes: CSV and JSON of all eight reports, and DLProf's
database (the windowed run writes it part by part, read again in row order). PyTorch runs too:
their expert checks read the windows' sums (``StepEvidence``). Exports whose analysis needs
every row (an nvprof database, a key node that is not a range) fall back to the whole trace
and say so.
"""

from __future__ import annotations

import pytest

from jlprof.cli import main
from jlprof.engine.aggregate import aggregate
from jlprof.engine.windowed import windowed_run
from tests.fixtures.loops import small_training_export
from tests.fixtures.scenarios import KEY_NODE, cpu_only_db, real_data_dir, real_traces, rich_db


def _exports(tmp_path):
    yield rich_db().write(tmp_path / "rich.sqlite"), KEY_NODE
    yield cpu_only_db().write(tmp_path / "cpu.sqlite"), None
    yield small_training_export(tmp_path / "loop.sqlite", steps=7), "optimizer_step"
    for path in real_traces():
        yield path, None


def _windowed_runs(monkeypatch) -> list[int]:
    """Each windowed run's number of windows, as the runs come (a run sent to the whole
    trace adds none)."""
    runs: list[int] = []
    real = windowed_run.WindowedRun.windows

    def counted(run):
        runs.append(run.n_windows)
        return real(run)

    monkeypatch.setattr(windowed_run.WindowedRun, "windows", counted)
    return runs


def _run(db, key, out, windowed: str, extra: tuple[str, ...] = ()) -> None:
    args = [f"--database={db}", "--reports=all", "--formats=csv,json",
            f"--output_path={out}", "-f", "true", "-v", "quiet",
            f"--windowed={windowed}", *extra]  # fmt: skip
    if key:
        args.append(f"--key_node={key}")
    assert main(args) == 0


@pytest.mark.parametrize("calls", [3, 1000])
def test_windowed_files_are_the_whole_runs(tmp_path, monkeypatch, calls):
    monkeypatch.setattr(windowed_run, "WINDOW_CALLS", calls)
    for n, (db, key) in enumerate(_exports(tmp_path)):
        whole, win = tmp_path / f"whole{n}", tmp_path / f"win{n}"
        _run(db, key, whole, "false")
        _run(db, key, win, "true")
        names = sorted(p.name for p in whole.iterdir())
        assert names == sorted(p.name for p in win.iterdir()), db
        assert any(name.endswith("iteration.csv") for name in names)
        for name in names:
            assert (win / name).read_bytes() == (whole / name).read_bytes(), (db, name)


@pytest.mark.parametrize("first, last", [(0, 0), (1, 2), (-1, -1)])
def test_windowed_files_for_a_range_are_the_whole_runs(tmp_path, monkeypatch, first, last):
    """--iter_start/--iter_stop: the command keeps that range's op and kernel figures
    combined (range_only, not per iteration), read whole or by windows; its files are still
    those of a per-iteration cube combined over the range, for the first iteration, a middle
    part and the last (-1: the last iteration)."""
    from jlprof import profile
    from jlprof.engine import analysis

    built, load = [], profile.load
    per_iteration = False

    def load_as_asked(*args, range_only=False, **kwargs):
        return load(*args, range_only=range_only and not per_iteration, **kwargs)

    monkeypatch.setattr(profile, "load", load_as_asked)

    def build_cube(*args, only=None, **kwargs):
        built.append(only)
        return aggregate.build_cube(*args, only=only, **kwargs)

    monkeypatch.setattr(analysis, "build_cube", build_cube)
    exports = [
        (rich_db().write(tmp_path / "rich.sqlite"), KEY_NODE, 4),
        (small_training_export(tmp_path / "loop.sqlite", steps=7), "optimizer_step", 8),
    ]
    for n, (db, key, count) in enumerate(exports):
        lo, hi = (count - 1, count - 1) if first < 0 else (first, last)
        extra = (f"--iter_start={lo}", f"--iter_stop={hi}")
        whole, win = tmp_path / f"whole{n}", tmp_path / f"win{n}"
        _run(db, key, whole, "false", extra)
        _run(db, key, win, "true", extra)
        per_iteration = True
        _run(db, key, tmp_path / f"per{n}", "false", extra)
        per_iteration = False
        assert built[-3:] == [(lo, hi), (lo, hi), None]  # the last: a per-iteration cube
        names = sorted(p.name for p in whole.iterdir())
        assert any(name.endswith("iteration.csv") for name in names)
        for other in (win, tmp_path / f"per{n}"):
            assert names == sorted(p.name for p in other.iterdir()), db
            for name in names:
                assert (other / name).read_bytes() == (whole / name).read_bytes(), (db, name)


def _by_windows_as_whole(db, mode, tmp_path, capsys):
    """Run ``db`` whole and by windows (in ``mode``), check the windows were read and every
    file is the whole run's; the whole run's folder."""
    extra = (f"--mode={mode}",) if mode else ()
    whole, win = tmp_path / "whole", tmp_path / "win"
    _run(db, None, whole, "false", extra)
    capsys.readouterr()
    _run(db, None, win, "true", (*extra, "-v", "detailed"))
    err = capsys.readouterr().err
    assert "correlating window 1 of" in err and "reading the whole trace" not in err
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(p.name for p in win.iterdir())
    for name in names:
        assert (win / name).read_bytes() == (whole / name).read_bytes(), name
    return whole


#: PyTorch runs (tests/fixtures/torch_loops.py), each built to fire one of the PyTorch checks
#: that read GPU rows and calls (expert_pytorch: summed by windows in StepEvidence)
TORCH_RUNS = {
    "Host-Bound Gap Detector": {"gap_ns": 300_000},
    "Launch-Bound Step Detector": {"tiny_kernels": 150},
    "Synchronous/Pageable Copy Detector": {"pageable": True, "sync_memcpy": True},
    "Copies In Step Detector": {"htod_in_model": True, "item": True},
    "Device Sync Detector": {"item": True},
}


@pytest.mark.parametrize("calls", [3, 1000])
@pytest.mark.parametrize("detector", sorted(TORCH_RUNS))
@pytest.mark.parametrize("mode", [None, "pytorch"])
def test_pytorch_runs_by_windows_are_the_whole_runs(
    tmp_path, monkeypatch, capsys, calls, detector, mode
):
    """A PyTorch run (emit_nvtx ranges, jlprof.torch marks) is read by windows too, every file
    the whole run's, with the finding of the check it was built to fire."""
    from tests.fixtures.torch_loops import Knobs, torch_training_export

    monkeypatch.setattr(windowed_run, "WINDOW_CALLS", calls)
    db = torch_training_export(tmp_path / "t.sqlite", Knobs(**TORCH_RUNS[detector]))
    whole = _by_windows_as_whole(db, mode, tmp_path, capsys)
    assert detector in (whole / "dlprof_expert_systems.csv").read_text()


@pytest.mark.parametrize("calls", [3, 1000])
@pytest.mark.parametrize(
    "export, mode",
    [("tf1", "tensorflow1"), ("tf2", "tensorflow2"), ("trt", "tensorrt"), ("tf2", None)],
)
def test_framework_modes_by_windows_are_the_whole_runs(
    tmp_path, monkeypatch, capsys, calls, export, mode
):
    """TensorFlow and TensorRT runs in their modes (op names from scopes and layers, their
    expert checks) read by windows: every file the whole run's."""
    from tests.fixtures.framework_traces import tf_export, trt_export

    monkeypatch.setattr(windowed_run, "WINDOW_CALLS", calls)
    db = tmp_path / f"{export}.sqlite"
    if export == "trt":
        trt_export(db)
    else:
        tf_export(db, fused=export == "tf2")
    whole = _by_windows_as_whole(db, mode, tmp_path, capsys)
    if mode == "tensorflow1":  # a framework check's finding among them
        assert "Fusion appears disabled" in (whole / "dlprof_expert_systems.csv").read_text()


def test_a_pytorch_run_is_read_by_windows(tmp_path, capsys):
    (db,) = sorted((real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu").glob("*.sqlite"))
    main([f"--database={db}", "--reports=kernel", "--dldb=false", f"--output_path={tmp_path}",
          "--windowed=true", "-v", "detailed"])  # fmt: skip
    err = capsys.readouterr().err
    assert "correlating window 1 of" in err and "reading the whole trace" not in err
    assert (tmp_path / "dlprof_kernel.csv").exists()


@pytest.mark.parametrize("call", [False, True])
def test_ranges_named_like_unassociated_work_read_the_whole_trace(tmp_path, capsys, call):
    """Ranges named like jlprof's unassociated ops (``unassociated_*``) that hold other ranges:
    an unassociated instance may then share their path and bring a (path, iteration) pair the
    group nodes' windowed figures would miss (``call``: one only an unassociated API call
    brings). The command says so before any window, reads the whole trace, and writes the
    whole run's files."""
    from tests.engine.test_group_parts import odd_export

    db = odd_export(tmp_path / "odd.sqlite", call)
    whole, win = tmp_path / "whole", tmp_path / "win"
    _run(db, "step", whole, "false")
    capsys.readouterr()
    _run(db, "step", win, "true", ("-v", "detailed"))
    assert "reading the whole trace: ranges named like unassociated work" in capsys.readouterr().err
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(p.name for p in win.iterdir())
    for name in names:
        assert (win / name).read_bytes() == (whole / name).read_bytes(), name


@pytest.mark.parametrize("broken", ["carry", "group parts"])
def test_a_window_that_needs_the_whole_trace_leaves_no_database_behind(
    tmp_path, monkeypatch, capsys, broken
):
    """A window can find that windows cannot be exact (``CarryBroken``: work before an
    earlier window's horizon; ``GroupPartsInexact``) after DLProf's database was begun beside
    the windows. The command says so, reads the whole trace and writes the whole run's files,
    that database included, and ends: the abandoned database's writer once kept it waiting
    for ever."""
    import threading

    from jlprof.engine.windowed import cube_parts, windowed
    from jlprof.engine.windowed.group_parts import GroupPartsInexact

    db = small_training_export(tmp_path / "loop.sqlite", steps=7)
    whole, win = tmp_path / "whole", tmp_path / "win"
    _run(db, "optimizer_step", whole, "false")
    monkeypatch.setattr(windowed_run, "WINDOW_CALLS", 3)
    cls, exc = (
        (windowed.WorkPass, windowed.CarryBroken("work before the horizon"))
        if broken == "carry"
        else (cube_parts.CubeParts, GroupPartsInexact("a pair the windows miss"))
    )
    seen = []

    def add(self, *a, orig=cls.add):
        seen.append(1)
        if len(seen) == 2:  # the second window: the database holds the first one's rows
            raise exc
        return orig(self, *a)

    monkeypatch.setattr(cls, "add", add)
    capsys.readouterr()
    done = []
    run = threading.Thread(
        target=lambda: done.append(_run(db, "optimizer_step", win, "true", ("-v", "detailed"))),
        daemon=True,
    )
    run.start()
    run.join(120)
    assert done, "the command did not end"
    assert f"reading the whole trace: {exc}" in capsys.readouterr().err
    names = sorted(p.name for p in whole.iterdir())
    assert "dlprof_dldb.sqlite" in names
    assert names == sorted(p.name for p in win.iterdir())  # no temporary file left
    for name in names:
        assert (win / name).read_bytes() == (whole / name).read_bytes(), name


def test_analyses_beyond_dlprof_read_the_whole_trace_when_they_read_every_row(tmp_path, capsys):
    """jlprof's own analyses that read every row (reports.EVERY_ROW): with them the run reads
    the whole trace, says so, and writes what the whole run writes; the others are read by
    windows, to the same files."""
    from jlprof.reports import ANALYSES, EVERY_ROW, OTHER_TOOLS

    db = rich_db().write(tmp_path / "rich.sqlite")
    assert set(EVERY_ROW) < set(ANALYSES + OTHER_TOOLS)
    for name in ANALYSES + OTHER_TOOLS:
        outs = []
        for windowed in ("true", "false"):
            out = tmp_path / f"{name}-{windowed}"
            assert main([f"--database={db}", f"--reports=kernel,{name}", "--dldb=false",
                         f"--output_path={out}", f"--windowed={windowed}", "-v", "detailed",
                         f"--key_node={KEY_NODE}"]) == 0  # fmt: skip
            outs.append(out)
        err = capsys.readouterr().err
        whole = f"reading the whole trace: --reports {name} reads every row" in err
        assert whole is (name in EVERY_ROW), (name, err)
        assert ("planning windows" in err) is (name not in EVERY_ROW), (name, err)
        files = sorted(p.name for p in outs[0].iterdir())
        assert f"dlprof_{name}.csv" in files
        assert files == sorted(p.name for p in outs[1].iterdir())
        for f in files:
            assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), (name, f)


@pytest.mark.parametrize("calls", [3, 1000])
def test_idle_causes_by_windows_are_the_whole_runs(tmp_path, monkeypatch, calls):
    """The idle_causes report summed window by window (engine.windowed.idle_parts) is the
    whole run's file on every export: fixtures (a CPU-only one among them) and the real
    traces, by windows of a few calls and of many."""
    monkeypatch.setattr(windowed_run, "WINDOW_CALLS", calls)
    runs = _windowed_runs(monkeypatch)
    for n, (db, key) in enumerate(_exports(tmp_path)):
        files = []
        for windowed in ("false", "true"):
            out = tmp_path / f"{windowed}{n}"
            args = [f"--database={db}", "--reports=idle_causes", "--dldb=false",
                    f"--output_path={out}", f"--windowed={windowed}", "-v", "quiet"]  # fmt: skip
            assert main(args + ([f"--key_node={key}"] if key else [])) == 0
            files.append((out / "dlprof_idle_causes.csv").read_bytes())
        assert files[0] == files[1], db.name
        assert files[0].count(b"\n") > 1
    # every export by windows, but the rich fixture by windows of 3 calls: it stores a call
    # late, among a later window's calls (windows.Misplaced sends it to the whole trace)
    assert len(runs) == n + 1 - (calls == 3), runs


def test_auto_reads_by_windows_only_when_memory_is_short(tmp_path, monkeypatch, capsys):
    """``--windowed auto`` (the default) keeps the faster whole-trace path while the trace
    fits in half the memory available, and reads by windows past it."""
    import jlprof.engine.memory as memory

    db = rich_db().write(tmp_path / "rich.sqlite")
    args = [f"--database={db}", "--reports=kernel", "--dldb=false", "-v", "detailed",
            f"--key_node={KEY_NODE}"]  # fmt: skip
    monkeypatch.setattr(memory, "available_bytes", lambda: 64 << 30)
    assert main([*args, f"--output_path={tmp_path / 'a'}"]) == 0
    assert "planning windows" not in capsys.readouterr().err
    monkeypatch.setattr(memory, "available_bytes", lambda: 100 << 20)  # < 2 x the 200 MB base
    assert main([*args, f"--output_path={tmp_path / 'b'}"]) == 0
    assert "planning windows" in capsys.readouterr().err
    kernel = "dlprof_kernel.csv"
    assert (tmp_path / "a" / kernel).read_bytes() == (tmp_path / "b" / kernel).read_bytes()


def test_a_windowed_run_warns_when_memory_looks_short_even_for_it(tmp_path, monkeypatch, capsys):
    """Past what even the windowed path holds (it still grows with the trace), the command
    says so before it starts, with the export's events and the memory it would take, and
    runs on; with memory enough, or on the whole path, no word."""
    import jlprof.engine.memory as memory
    from jlprof import cli
    from jlprof.engine.windowed.windows import events_at_most

    db = rich_db().write(tmp_path / "rich.sqlite")
    events = events_at_most(db)
    need = cli.WINDOWED_BYTES_BASE + cli.WINDOWED_BYTES_PER_EVENT * events
    args = [f"--database={db}", "--reports=kernel", "--dldb=false", "-v", "minimal",
            f"--key_node={KEY_NODE}"]  # fmt: skip
    for n, (free, windowed, warned) in enumerate([
        (need - 1, "auto", True),  # auto goes by windows: too little even for them
        (need - 1, "true", True),
        (need, "true", False),  # just enough
        (64 << 30, "true", False),
        (need - 1, "false", False),  # the whole path: the user chose it
    ]):  # fmt: skip
        monkeypatch.setattr(memory, "available_bytes", lambda free=free: free)
        out = f"--output_path={tmp_path / str(n)}"
        assert main([*args, out, f"--windowed={windowed}"]) == 0
        err = capsys.readouterr().err
        assert ("may stop it for lack of memory" in err) is warned, (free, windowed, err)
        if warned:
            assert f"{events:,} events" in err and f"{need / 2**30:.1f} GiB" in err
        assert (tmp_path / str(n) / "dlprof_kernel.csv").exists()


@pytest.mark.parametrize("suffix", [".jlprof", ".sqlite"])
def test_windowed_save_db_and_model_data_are_the_whole_runs(tmp_path, monkeypatch, suffix):
    """--save_db and --dump_model_data by windows: the saved database is written from the
    windows' own frames beside DLProf's (a .jlprof zip or SQLite, as the name says) and holds
    what the whole run saves (SQLite: the same bytes; a zip: the same members, whose own
    bytes carry the time they were written); the model data and every report are the same
    files; the run went by windows."""
    import zipfile

    monkeypatch.setattr(windowed_run, "WINDOW_CALLS", 3)
    windows = _windowed_runs(monkeypatch)
    (fsdp,) = sorted((real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu").glob("*.sqlite"))
    # the loop by 8 windows; the real two-GPU run (one iteration: one window)
    exports = [
        (small_training_export(tmp_path / "loop.sqlite", steps=7), "optimizer_step"),
        (fsdp, None),
    ]
    for n, (db, key) in enumerate(exports):
        saved = {w: tmp_path / f"saved{n}_{w}{suffix}" for w in ("false", "true")}
        for w in ("false", "true"):
            extra = (f"--save_db={saved[w]}", "--dump_model_data=true")
            _run(db, key, tmp_path / f"{w}{n}", w, extra)
        assert len(windows) == n + 1, (db, windows)  # by windows, not sent to the whole path
        whole, win = tmp_path / f"false{n}", tmp_path / f"true{n}"
        names = sorted(p.name for p in whole.iterdir())
        assert "dlprof_model_data.json" in names and names == sorted(p.name for p in win.iterdir())
        for name in names:
            assert (win / name).read_bytes() == (whole / name).read_bytes(), (db, name)
        if suffix == ".sqlite":
            assert saved["true"].read_bytes() == saved["false"].read_bytes(), db
            continue
        with zipfile.ZipFile(saved["false"]) as a, zipfile.ZipFile(saved["true"]) as b:
            assert sorted(a.namelist()) == sorted(b.namelist()) and len(a.namelist()) == 7
            for member in a.namelist():
                assert a.read(member) == b.read(member), (db, member)
    assert windows[0] > 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_a_windowed_save_db_on_a_full_disk_leaves_none(tmp_path, monkeypatch, capsys):
    """The jlprof database written beside the windows hits a full disk: one line naming the
    file, the flag and the fix, exit status 2, and no file of it, whole or cut."""
    import errno

    from jlprof.engine.read import store

    def full(self, name):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.ZipWriter, "_member", full)
    db = rich_db().write(tmp_path / "rich.sqlite")
    out, target = tmp_path / "out", tmp_path / "saved" / "x.jlprof"
    argv = [f"--database={db}", f"--output_path={out}", f"--save_db={target}",
            f"--key_node={KEY_NODE}", "--windowed=true", "--reports=kernel",
            "-v", "minimal"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "x.jlprof" in err[0] and "--save_db" in err[0], err
    assert list((tmp_path / "saved").iterdir()) == []


@pytest.mark.parametrize("calls", [7, 300])
def test_the_database_from_windows_is_the_whole_reads(tmp_path, calls):
    """DLProf's database written from the windows' own frames (WindowsDldb) is byte for byte
    what save_trace writes of the whole read, on two GPUs with many streams, where GPU rows
    of a later window come before an earlier window's in the kernel table (the reorder
    buffer holds them)."""
    from jlprof.engine.read.read import read_trace
    from jlprof.engine.read.store import save_trace
    from jlprof.engine.windowed.windowed import WorkPass
    from jlprof.engine.windowed.windowed_run import WindowedRun, WindowsDldb
    from jlprof.engine.windowed.windows import plan_windows

    (db,) = sorted((real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu").glob("*.sqlite"))
    sinks = []
    run = WindowedRun(
        db,
        mode="simple",
        on_read=lambda small: sinks.append(WindowsDldb(small, tmp_path / "win.sqlite")),
    )
    # windows of ``calls`` calls (not whole iterations: this export stores a launching call
    # late, which windows of whole iterations refuse), so GPU rows interleave between them
    run.plan = plan_windows(db, calls)
    run.work = WorkPass(run.ranges)
    (sink,) = sinks
    sink.planned(run)
    held = []
    for k, (win, _res) in enumerate(run.windows()):
        sink.put(k, win)
        held.append(len(sink.rows))
    sink.done()
    sink.job.wait()
    assert max(held) > 0  # rows did wait for a later window
    save_trace(read_trace(db), tmp_path / "whole.sqlite")
    assert (tmp_path / "win.sqlite").read_bytes() == (tmp_path / "whole.sqlite").read_bytes()


def test_a_late_call_that_launched_work_falls_back(tmp_path):
    """nsys stores a few calls late; one that launched GPU work would put that work in no
    window of its iteration: windows of whole iterations refuse the export (the CLI then
    reads the whole trace)."""
    from jlprof.engine.windowed.windowed_run import Unsuitable, WindowedRun

    (db,) = sorted((real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu").glob("*.sqlite"))
    with pytest.raises(Unsuitable, match="stored among a later window's calls launched GPU work"):
        WindowedRun(db, key_node="aten::add", mode="simple", calls_per_window=7)


@pytest.mark.parametrize("fault", ["damaged", "interrupted", "disk full"])
def test_a_windowed_run_that_fails_midway_leaves_no_file_and_no_thread(
    tmp_path, monkeypatch, capsys, fault
):
    """A window that cannot be read (a damaged page), Ctrl-C, or a full disk while the
    iteration report and the database are being written window by window: one line saying
    what went wrong, the exit status of that cause, no file in the output folder (not even a
    hidden temporary one: the iteration report written so far and the database are let go)
    and no reader or writer thread left running."""
    import errno
    import sqlite3
    import threading

    from jlprof.engine.windowed import windows
    from jlprof.reports import writers

    db = small_training_export(tmp_path / "loop.sqlite", steps=9)
    monkeypatch.setattr(windowed_run, "WINDOW_CALLS", 3)
    read, write, calls = windows.WindowReader._gpu, writers.write_frames, []
    out, held = tmp_path / "out", []  # what the output folder held when the fault came

    def fault_now() -> None:
        held.extend(p.name for p in out.iterdir())

    def failing_read(self, index):
        calls.append(len(index))
        if len(calls) == 3:  # two windows handed over and written first
            fault_now()
            if fault == "damaged":
                raise sqlite3.DatabaseError("database disk image is malformed")
            raise KeyboardInterrupt
        return read(self, index)

    def failing_write(streams, part):
        calls.append(len(part))
        if len(calls) == 3:  # the third window's rows of the iteration report
            fault_now()
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(streams, part)

    if fault == "disk full":
        monkeypatch.setattr(writers, "write_frames", failing_write)
    else:
        monkeypatch.setattr(windows.WindowReader, "_gpu", failing_read)
    rc = main([f"--database={db}", "--key_node=optimizer_step", "--reports=all",
               "--formats=csv,json", f"--output_path={out}", "--windowed=true",
               "-v", "minimal"])  # fmt: skip
    err = capsys.readouterr().err
    assert len(calls) >= 3
    assert rc == {"damaged": 2, "interrupted": 130, "disk full": 2}[fault], err
    if fault == "damaged":
        assert "loop.sqlite" in err and "malformed" in err, err
    if fault == "disk full":
        assert "no space left on the device" in err and "--output_path" in err, err
    assert len(err.strip().splitlines()) == 1, err  # one line, no traceback
    assert held, "the fault came before anything was being written"
    assert sorted(p.name for p in out.iterdir()) == [], held
    live = [t.name for t in threading.enumerate() if t.name.startswith("jlprof")]
    assert live == [], live


def test_the_roofline_gpu_by_windows_is_the_busiest(tmp_path):
    """Two GPU models, all the work on the one listed second: the detail report's roofline
    peaks are the busiest GPU's (summed from the windows' rows, not the first GPU listed),
    the whole run's, and that model's own peak (``gpu_peaks``)."""
    import sqlite3

    import pandas as pd

    from jlprof.engine.analyses.gpu_peaks import gpu_peaks
    from tests.fixtures.torch_traces import emit_nvtx_db

    db = emit_nvtx_db(4).write(tmp_path / "two_models.sqlite")
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    row = dict(con.execute("SELECT * FROM TARGET_INFO_GPU WHERE id = 0").fetchone())
    row.update(id=7, cuDevice=7, name="NVIDIA H100 80GB HBM3")
    con.execute(f"INSERT INTO TARGET_INFO_GPU ({', '.join(row)}) VALUES "
                f"({', '.join('?' * len(row))})", list(row.values()))  # fmt: skip
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET"):  # fmt: skip
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            con.execute(f"UPDATE {table} SET deviceId = 7")
    con.commit()
    con.close()
    for windowed in ("false", "true"):
        _run(db, "Batch #", tmp_path / windowed, windowed)
    name = "dlprof_detailed.csv"
    assert (tmp_path / "true" / name).read_bytes() == (tmp_path / "false" / name).read_bytes()
    d = pd.read_csv(tmp_path / "true" / name).set_index(["Op Name", "Direction"])
    row = d.loc[("aten::linear", "fprop")]
    assert row["Roofline Data Type"] == "fp32"
    assert row["Peak TFLOP/s"] == gpu_peaks("NVIDIA H100 80GB HBM3")[1]["fp32"] / 1e12


def test_a_strided_convs_flops_by_windows_are_the_whole_runs(tmp_path):
    """A PyProf conv call with stride 2, padding 1, dilation 2 and 2 groups: its FLOPs come
    from its range text's args, which the windowed run reads in its range pass (it lets the
    texts go before the reports): the detail report equals the whole run's, and its FLOPs
    per call are the conv formula's with those args (output 13 x 13, not the stride-1
    estimate's 32 x 32)."""
    import pandas as pd

    from tests.fixtures.nsysdb import NsysDb
    from tests.fixtures.torch_traces import STRIDED_CONV as conv

    db = NsysDb()
    db.gpu(0, "NVIDIA A100-SXM4-40GB")
    main_thread = db.process(500, "python").thread()
    for i in range(5):
        b = 1_000 + i * 10_000
        main_thread.push_pop("step", b, b + 5_000)
        main_thread.push_pop(conv, b + 20, b + 1_980)
        main_thread.launch("sm80_xmma_fprop_implicit_gemm", b + 40, b + 50, b + 60, b + 2_060)
    path = db.write(tmp_path / "conv.sqlite")
    for windowed in ("false", "true"):
        _run(path, "step", tmp_path / windowed, windowed)
    name = "dlprof_detailed.csv"
    assert (tmp_path / "true" / name).read_bytes() == (tmp_path / "false" / name).read_bytes()
    d = pd.read_csv(tmp_path / "true" / name)
    row = d[d["Op Type"].astype(str).str.contains("conv2d")].iloc[0]
    out = 2 * 16 * 13 * 13  # (32 + 2*1 - 2*(5-1) - 1) // 2 + 1 = 13
    assert row["FLOPs per Call"] == 2 * out * 4 * 25


def test_the_analyses_from_aggregates_run_by_windows(tmp_path, monkeypatch):
    """jlprof's analyses that read no row (iteration outliers, GPU metrics samples, the
    roofline) and the launch statistics (from the launches kept window by window, put back
    in start order) are written by windows, each file the whole run's, GPU metrics samples
    included, and the idle causes (summed as the windows come); PyProf's table, which reads
    every row, sends the command to the whole trace; a windowed profile refuses it, launch
    statistics and idle causes it did not keep and an ncu report to join, in one line."""
    import pandas as pd

    from jlprof.engine.analyses.launch import launches
    from jlprof.errors import AnalysisError
    from jlprof.profile import load, load_windowed
    from tests.test_gpu_metrics import _new_layout

    monkeypatch.setattr(windowed_run, "WINDOW_CALLS", 3)
    runs = _windowed_runs(monkeypatch)
    db = small_training_export(tmp_path / "loop.sqlite", steps=6)
    assert len(_new_layout(db)) > 0
    aggregates = "--reports=iteration_outliers,gpu_metrics,roofline,launch_stats,idle_causes"
    for windowed in ("false", "true"):
        _run(db, "optimizer_step", tmp_path / windowed, windowed, (aggregates,))
    assert len(runs) == 1 and runs[0] > 1
    names = sorted(p.name for p in (tmp_path / "false").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "true").iterdir())
    assert {"dlprof_gpu_metrics.csv", "dlprof_roofline.json", "dlprof_launch_stats.csv",
            "dlprof_idle_causes.csv"} <= set(names)  # fmt: skip
    for name in names:
        assert (tmp_path / "true" / name).read_bytes() == (tmp_path / "false" / name).read_bytes()
    kept = load_windowed(db, key_node="optimizer_step", launch_stats=True, idle_causes=True)
    assert len(runs) == 2 and runs[1] > 1
    whole = load(db, key_node="optimizer_step")
    # every launch, in the whole trace's order, as the whole trace's rows give them
    pd.testing.assert_frame_equal(
        kept.window_launches, launches(whole.correlated, whole.iterations)
    )
    pd.testing.assert_frame_equal(kept.idle_causes(by="gpu"), whole.idle_causes(by="gpu"))
    prof = load_windowed(db, key_node="optimizer_step")
    for name in ("idle_causes", "launch_stats", "prof"):
        with pytest.raises(AnalysisError, match="load the trace whole"):
            prof.report(name)
    with pytest.raises(AnalysisError, match="launch_stats=True"):
        prof.launch_stats(per_launch=True)  # not an empty frame
    with pytest.raises(AnalysisError, match="idle_causes=True"):
        prof.idle_causes(by="gpu")  # not past the report's name: where the rows are read
    with pytest.raises(AnalysisError, match=r"load the trace whole \(jlprof.load\)"):
        prof.attach_ncu(tmp_path / "any.ncu-rep")  # refused before the file is read
