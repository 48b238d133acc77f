"""Many ranks on Dask: cross-rank reports, straggler detection, per-rank reports, and a real
``dask scheduler`` + ``dask worker`` cluster giving the same files as the local cluster."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed")

import jlprof
from jlprof.cli import main
from jlprof.distributed import SCHEDULER_ENV, rank_paths
from jlprof.errors import InputError
from jlprof.reports.writers import summary_csv
from tests.fixtures.ranks import rank_exports

N_RANKS, STRAGGLER, STEPS = 6, 4, 6


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("job")
    rank_exports(folder, N_RANKS, straggler=STRAGGLER, steps=STEPS)
    return folder


@pytest.fixture(scope="module")
def shared():
    """One LocalCluster for the tests that are not about starting one (saves ~3 s each)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None, silence_logs=40) as cluster:  # fmt: skip
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def local_run(job, tmp_path_factory) -> Path:
    """The CLI on the job's folder with the default LocalCluster."""
    out = tmp_path_factory.mktemp("local")
    argv = [f"--database={job}", "--reports=summary,iteration,kernel", "--formats=csv,json",
            f"--output_path={out}", "-v", "quiet"]  # fmt: skip
    assert main(argv) == 0
    return out


def _files(folder: Path) -> dict[str, bytes]:
    """The report files (the single-file CLI also writes its DLProf database, not compared)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*.*"))
        if not p.name.endswith("_dldb.sqlite")
    }


def _kernel_sums(db: Path) -> tuple[int, int]:
    """Independent figures straight from the export: all kernel time, NCCL kernel time."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName"
        ).fetchall()
    total = sum(d for _, d in rows)
    return total, sum(d for n, d in rows if n.startswith("nccl"))


def test_only_the_slowed_rank_is_a_straggler(local_run):
    ranks = pd.read_csv(local_run / "dlprof_ranks.csv")
    assert ranks["Rank"].tolist() == list(range(N_RANKS))
    assert ranks.loc[ranks["Straggler"], "Rank"].tolist() == [STRAGGLER]
    # every key-node-delimited step of the straggler is flagged (the last interval is empty)
    assert ranks.loc[STRAGGLER, "Straggler Iterations"] == " ".join(map(str, range(STEPS)))
    expert = pd.read_csv(local_run / "dlprof_ranks_expert_systems.csv")
    strag = expert[expert["Detector"] == "Straggler Detector"]
    assert len(strag) == 1 and f"Rank {STRAGGLER} is a straggler" in strag["Problem"].iloc[0]
    ev = json.loads(strag["Evidence"].iloc[0])
    assert ev["iterations"] == list(range(STEPS)) and 1.5 < ev["ratio_to_median"] < 1.7
    imb = expert[expert["Detector"] == "Load Imbalance Detector"]
    assert json.loads(imb["Evidence"].iloc[0])["busiest_ranks"] == [STRAGGLER] * STEPS


def test_per_rank_figures_match_single_file_runs(job, local_run, tmp_path):
    ranks = pd.read_csv(local_run / "dlprof_ranks.csv")
    per_it = pd.read_csv(local_run / "dlprof_rank_iterations.csv")
    for r, db in enumerate(sorted(job.glob("*.sqlite"))):
        row = ranks.loc[r]
        assert row["Database"] == str(db)
        total, nccl = _kernel_sums(db)
        assert row["Total GPU Time (ns)"] == total
        assert row["Communication Time (ns)"] == nccl == STEPS * 50_000
        # by construction 20 µs of each 50 µs all-reduce overlaps the backward kernel
        assert row["Exposed Communication Time (ns)"] == STEPS * 30_000
        assert row["Compute/Communication Overlap %"] == pytest.approx(40.0)
        prof = jlprof.load(db)
        summary = prof.summary()["Iterations"]
        assert row["Iterations"] == summary["Total Iterations"]
        assert row["Avg. Iteration Time (ns)"] == pytest.approx(
            summary["Average Iteration Time (ns)"], abs=0.1
        )
        mine = per_it[per_it["Rank"] == r]
        assert mine["Iteration Time (ns)"].tolist() == prof.iterations.durations_ns().tolist()
        # the worker's rank<N>/ reports are byte for byte the single-file CLI's
        single = tmp_path / f"single{r}"
        argv = [f"--database={db}", "--reports=summary,iteration,kernel", "--formats=csv,json",
                f"--output_path={single}", "-v", "quiet"]  # fmt: skip
        assert main(argv) == 0
        assert _files(single) == _files(local_run / f"rank{r}")


@pytest.fixture
def dask_cluster(tmp_path):
    """A real ``dask scheduler`` and two ``dask worker`` processes on loopback, killed after."""
    sched_file = tmp_path / "scheduler.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path.cwd()),
               os.environ.get("PYTHONPATH")])))  # fmt: skip
    common = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dask",
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            **common,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sched_file.exists(), "dask scheduler did not start in 60 s"
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dask",
                    "worker",
                    "--scheduler-file",
                    str(sched_file),
                    "--nworkers",
                    "2",
                    "--nthreads",
                    "1",
                    "--host",
                    "127.0.0.1",
                    "--no-dashboard",
                ],
                **common,
            )
        )
        address = json.loads(sched_file.read_text())["address"]
        from distributed import Client

        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=90)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_real_scheduler_and_workers_write_the_same_files(job, local_run, dask_cluster, tmp_path,
                                                         monkeypatch):  # fmt: skip
    out = tmp_path / "remote"
    monkeypatch.setenv(SCHEDULER_ENV, dask_cluster)  # the environment variable's path
    argv = [f"--database={job}", "--reports=summary,iteration,kernel", "--formats=csv,json",
            f"--output_path={out}", "-v", "quiet"]  # fmt: skip
    assert main(argv) == 0
    assert _files(out) == _files(local_run)
    # --scheduler and the Python API: the same cross-rank table
    monkeypatch.delenv(SCHEDULER_ENV)
    ranks = jlprof.load_ranks(sorted(job.glob("*.sqlite")), scheduler=dask_cluster, progress=False)
    local = pd.read_csv(local_run / "dlprof_ranks.csv", keep_default_na=False)
    pd.testing.assert_frame_equal(ranks.report("ranks"), local)


def test_rank_order_rule(tmp_path):
    for name in ("b.sqlite", "a.sqlite", "a.nsys-rep", "c.nsys-rep", "notes.txt",
                 "dlprof_dldb.sqlite"):  # fmt: skip
        (tmp_path / name).write_bytes(b"")
    got = [p.name for p in rank_paths(tmp_path)]
    # sorted; a.sqlite is a.nsys-rep's export; a single-file run's DLProf database is no rank
    assert got == ["a.sqlite", "b.sqlite", "c.nsys-rep"]
    assert [p.name for p in rank_paths(str(tmp_path / "*.sqlite"))] == ["a.sqlite", "b.sqlite"]
    for name in ("r10.sqlite", "r2.sqlite", "r1.sqlite"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in rank_paths(str(tmp_path / "r*"))] == [
        "r1.sqlite",
        "r2.sqlite",
        "r10.sqlite",
    ]
    given = [tmp_path / "b.sqlite", tmp_path / "a.sqlite"]
    assert rank_paths(given) == given  # a list keeps its order
    with pytest.raises(InputError, match="no such file"):
        rank_paths([tmp_path / "missing.sqlite"])
    with pytest.raises(InputError, match="matches no file"):
        rank_paths(str(tmp_path / "*.qdrep"))


def test_a_bad_rank_is_named(job, tmp_path, capsys):
    bad = tmp_path / "broken.sqlite"
    bad.write_bytes(b"not a database")
    files = [*sorted(job.glob("*.sqlite"))[:2], bad]
    argv = ["--database", *map(str, files), f"--output_path={tmp_path / 'o'}", "-v", "quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "rank 2 (" in err and "broken.sqlite" in err


def test_clock_offsets_do_not_matter(tmp_path, shared):
    """Ranks are aligned by key-node instance: the same rank under another clock is identical."""
    a = rank_exports(tmp_path / "a", 3)
    from tests.fixtures.ranks import rank_export

    b = [rank_export(tmp_path / f"b{r}.sqlite", r, clock_offset_ns=10**12 * (r + 1))
         for r in range(3)]  # fmt: skip
    ra = jlprof.load_ranks(a, scheduler=shared, progress=False).report("rank_iterations")
    rb = jlprof.load_ranks(b, scheduler=shared, progress=False).report("rank_iterations")
    pd.testing.assert_frame_equal(ra, rb)
    assert not np.any(ra["Outlier"])


def _merged(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _exposed_by_sweep(db: Path) -> int:
    """NCCL time not covered by other kernels on the same GPU: a plain two-list sweep."""
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT k.deviceId, k.start, k.end, s.value LIKE 'nccl%' "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName"
        ).fetchall()
    total = 0
    for dev in {r[0] for r in rows}:
        comm = _merged([(s, e) for d, s, e, c in rows if d == dev and c])
        comp = _merged([(s, e) for d, s, e, c in rows if d == dev and not c])
        covered, j = 0, 0
        for s, e in comm:
            while j < len(comp) and comp[j][1] <= s:
                j += 1
            k = j
            while k < len(comp) and comp[k][0] < e:
                covered += min(e, comp[k][1]) - max(s, comp[k][0])
                k += 1
        total += sum(e - s for s, e in comm) - covered
    return total


def test_real_two_gpu_traces_as_ranks(shared):
    """Two real 2-GPU exports analysed as a job: FSDP training (NCCL SendRecv kernels on both
    GPUs) and sequence-parallel inference (no NCCL kernel in its window). The figures match SQL
    sums and an independent sweep."""
    from tests.fixtures.scenarios import real_data_dir

    names = ["nsysai-fastvideo-wan-train-fsdp-2gpu", "nsysai-fastvideo-wan-infer-sp2-2gpu"]
    files = [real_data_dir() / n / f"{n}.sqlite" for n in names]
    table = jlprof.load_ranks(files, scheduler=shared, progress=False).report("ranks")
    for r, db in enumerate(files):
        row = table.loc[r]
        total, nccl = _kernel_sums(db)
        assert (nccl > 0) == (r == 0)
        assert row["Total GPU Time (ns)"] == total
        assert row["Communication Time (ns)"] == nccl
        assert row["Iterations"] == 1  # no key node in these windows: one iteration
        assert row["Exposed Communication Time (ns)"] == _exposed_by_sweep(db)
    # in this window no compute kernel runs while a SendRecv does (checked in SQL as well):
    # every nanosecond of communication is exposed
    assert (
        table.loc[0, "Exposed Communication Time (ns)"] == table.loc[0, "Communication Time (ns)"]
    )
    assert table.loc[1, "Compute/Communication Overlap %"] == 0.0
    assert not table["Straggler"].any()  # two ranks: no median to stray from


def test_a_rank_the_trace_carries_wins(tmp_path, shared):
    """Files named against their ranks: the capture environment's RANK decides (both forms)."""
    from tests.fixtures.ranks import rank_export

    carried = {"a": 2, "b": 0, "c": 3, "d": 1}  # file name -> RANK in its environment
    files = []
    for i, (name, rank) in enumerate(carried.items()):
        env = {"RANK": str(rank)} if i % 2 else {"PROCESS_0:ENV_7": f"RANK={rank}"}
        files.append(rank_export(tmp_path / f"{name}.sqlite", rank, slow=1.6 if rank == 1 else 1,
                                 env=env))  # fmt: skip
    out = tmp_path / "out"
    ranks = jlprof.load_ranks(
        tmp_path, output_path=out, reports=["summary"], scheduler=shared, progress=False
    )
    table = ranks.report("ranks")
    assert table["Rank"].tolist() == [0, 1, 2, 3]
    assert [Path(d).stem for d in table["Database"]] == ["b", "d", "a", "c"]
    assert table.loc[table["Straggler"], "Rank"].tolist() == [1]
    assert ranks.path(1).name == "d.sqlite"
    for name, rank in carried.items():  # each rank<N>/ holds that rank's file's reports
        single = jlprof.load(tmp_path / f"{name}.sqlite").summary()
        assert (out / f"rank{rank}" / "dlprof_summary.csv").read_text() == summary_csv(single)
    rank_export(tmp_path / "e.sqlite", 4)  # carries no rank: a mix is refused
    with pytest.raises(InputError, match="some traces carry a rank"):
        jlprof.load_ranks(tmp_path, scheduler=shared, progress=False)


def test_iteration_range_applies_to_the_cross_rank_figures(job, shared):
    ranks = jlprof.load_ranks(job, key_node="optimizer_step", iter_start=2, iter_stop=4,
                              scheduler=shared, progress=False)  # fmt: skip
    table, per_it = ranks.report("ranks"), ranks.report("rank_iterations")
    assert (table["Iterations"] == 3).all()
    assert table.loc[STRAGGLER, "Straggler Iterations"] == "2 3 4"
    assert per_it["Iteration"].nunique() == STEPS + 1  # the heatmap still has them all
    for r, db in enumerate(sorted(job.glob("*.sqlite"))):
        single = jlprof.load(db, key_node="optimizer_step", iter_start=2, iter_stop=4)
        its = single.summary()["Iterations"]
        assert table.loc[r, "Avg. Iteration Time (ns)"] == pytest.approx(
            its["Average Iteration Time (ns)"], abs=0.1
        )
        mine = per_it[(per_it["Rank"] == r) & per_it["Iteration"].between(2, 4)]
        assert table.loc[r, "Compute Time (ns)"] == mine["Compute Time (ns)"].sum()
        assert table.loc[r, "Communication Time (ns)"] == 3 * 50_000


def test_single_file_options_are_refused_for_a_job(job, tmp_path, capsys):
    argv = [f"--database={job}", f"--save_db={tmp_path / 'x.jlprof'}", f"--output_path={tmp_path}"]
    assert main(argv) == 2
    assert "--save_db and --dump_model_data take one database" in capsys.readouterr().err
