"""nsys GPU metrics sampling (docs/kernels.md, "GPU metrics"): both export layouts, built from
the documented export schema on a fixture training loop, per iteration against a by-hand
computation; the capture command line (no GPU here: checked, not run)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jlprof.cli import main
from jlprof.engine.analyses.gpu_metrics import UNAVAILABLE, figure_of, read_gpu_metrics
from tests.fixtures.loops import small_training_export

STEP_NS = 10_000  # one sample per GPU every 10 us


def _samples(con: sqlite3.Connection) -> list[tuple[int, int, dict[str, float]]]:
    """(gpu, timestamp, {name: value}) every 10 us over the NVTX span, two GPUs whose metric
    names differ as they do across nsys versions; values a deterministic pattern."""
    lo, hi = con.execute("SELECT min(start), max(end) FROM NVTX_EVENTS").fetchone()
    out = []
    for i, ts in enumerate(range(lo, hi, STEP_NS)):
        out.append((0, ts, {"SMs Active [Throughput %]": (i * 7) % 101,
                            "Tensor Active [Throughput %]": (i * 3) % 50,
                            "DRAM Read Bandwidth [Throughput %]": (i * 5) % 40,
                            "DRAM Write Bandwidth [Throughput %]": i % 9,
                            "GR Active [Throughput %]": 99}))  # fmt: skip
        out.append((1, ts + 1, {"SM Active": (i * 11) % 97,
                                "Tensor Active / FP16 Active": (i * 13) % 60,
                                "DRAM Read Bandwidth": (i * 2) % 30,
                                "DRAM Write Bandwidth": (i * 4) % 20}))  # fmt: skip
    return out


def _new_layout(db: Path) -> list:
    """nsys >= 2023.4: GPU_METRICS + TARGET_INFO_GPU_METRICS (the documented columns)."""
    con = sqlite3.connect(db)
    samples = _samples(con)
    con.executescript(
        "CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT "
        "NULL, typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL);"
        "CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER NOT NULL, metricId "
        "INTEGER NOT NULL, value INTEGER NOT NULL);"
    )
    types = {0: 0x1000001, 1: 0x1000002}  # serialized global ids, one type per GPU
    ids: dict[tuple[int, str], int] = {}
    for gpu, _, values in samples[:2]:
        for name in values:
            ids[(gpu, name)] = len(ids) + 3
            con.execute("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, 77, ?, ?, ?)",
                        (types[gpu], f"GPU {gpu} metrics", ids[(gpu, name)], name))  # fmt: skip
    con.executemany(
        "INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)",
        [(ts, types[g], ids[(g, n)], v) for g, ts, vals in samples for n, v in vals.items()],
    )
    con.commit()
    con.close()
    return samples


def _old_layout(db: Path) -> list:
    """nsys <= 2023.3: one JSON row per sample in GENERIC_EVENTS, source "GpuMetrics"."""
    con = sqlite3.connect(db)
    samples = _samples(con)
    con.executescript(
        "CREATE TABLE IF NOT EXISTS GENERIC_EVENT_SOURCES (sourceId INTEGER NOT NULL PRIMARY "
        "KEY, data TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS GENERIC_EVENT_TYPES (typeId INTEGER NOT NULL PRIMARY KEY, "
        "sourceId INTEGER NOT NULL, data TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS GENERIC_EVENTS (rawTimestamp INTEGER NOT NULL, timestamp "
        "INTEGER, typeId INTEGER NOT NULL, data TEXT NOT NULL);"
    )
    con.execute(
        "INSERT INTO GENERIC_EVENT_SOURCES VALUES (5, ?)", (json.dumps({"Name": "GpuMetrics"}),)
    )
    con.execute("INSERT INTO GENERIC_EVENT_SOURCES VALUES (6, ?)", (json.dumps({"Name": "ETW"}),))
    for gpu in (0, 1):
        con.execute("INSERT INTO GENERIC_EVENT_TYPES VALUES (?, 5, ?)",
                    (50 + gpu, json.dumps({"Name": f"GPU {gpu}"})))  # fmt: skip
    con.execute('INSERT INTO GENERIC_EVENT_TYPES VALUES (60, 6, \'{"Name": "etw"}\')')
    rows = [(ts - 3, ts, 50 + g, json.dumps({k: str(v) for k, v in vals.items()}))
            for g, ts, vals in samples]  # fmt: skip
    # an event of another source, with a metric's name: not a GPU metric
    rows.append((samples[0][1], samples[0][1], 60, json.dumps({"SM Active": "100"})))
    con.executemany("INSERT INTO GENERIC_EVENTS VALUES (?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return samples


def _by_hand(db: Path, samples: list, bounds0: int, bounds_last: int) -> dict:
    """Per (gpu, iteration): the mean of each figure over the iteration's samples, the
    iterations split at each optimizer_step's end (read by SQL), DRAM read + write."""
    con = sqlite3.connect(db)
    ends = sorted(e for (e,) in con.execute(
        "SELECT n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE coalesce(n.text, s.value) = 'optimizer_step'"))  # fmt: skip
    assert len(ends) == 5
    con.close()
    edges = [bounds0, *ends, bounds_last]
    acc: dict = {}
    for gpu, ts, vals in samples:
        if not edges[0] <= ts <= edges[-1]:
            continue
        it = sum(1 for e in edges[1:-1] if ts >= e)
        sm = next(v for k, v in vals.items() if k.startswith(("SM Active", "SMs Active")))
        tc = next(v for k, v in vals.items() if k.startswith("Tensor Active"))
        dram = sum(v for k, v in vals.items() if k.startswith("DRAM"))
        acc.setdefault((gpu, it), []).append((sm, tc, dram))
    return {k: [*np.mean(np.array(v, float), axis=0).tolist(), len(v)] for k, v in acc.items()}


@pytest.mark.parametrize("layout", [_new_layout, _old_layout], ids=["2023.4+", "to-2023.3"])
def test_gpu_metrics_per_iteration_by_hand(tmp_path, layout):
    from jlprof.profile import load

    db = small_training_export(tmp_path / "run.sqlite", steps=5)
    samples = layout(db)
    raw = read_gpu_metrics(db)
    assert sorted(raw["gpu"].unique()) == [0, 1]
    assert len(raw) == sum(len(v) - (1 if g == 0 else 0) for g, _, v in samples)  # GR Active
    p = load(db)
    b = p.iterations.bounds_ns
    want = _by_hand(db, samples, int(b[0]), int(b[-1]))
    rep = p.report("gpu_metrics")
    # 5 steps: 6 iterations, the last (after the 5th step's end) with no sample
    assert len(rep) == len(want) == 2 * 5
    for row in rep.itertuples(index=False):
        sm, tc, dram, n = want[(row.GPU, row.Iteration)]
        assert row.Samples == n
        assert row[3] == pytest.approx(sm) and row[4] == pytest.approx(tc)
        assert row[5] == pytest.approx(dram)
    part = p.report("gpu_metrics", iter_start=2, iter_stop=3)
    assert sorted(set(part["Iteration"])) == [2, 3]
    assert part.reset_index(drop=True).equals(
        rep[rep["Iteration"].between(2, 3)].reset_index(drop=True)
    )


def test_metric_names_across_versions():
    for name in ("SM Active", "SMs Active [Throughput %]", "SM Active [Throughput %]"):
        assert figure_of(name) == ("sm_active", 0)
    for name in ("Tensor Active", "Tensor Active / FP16 Active", "Tensor Active [Throughput %]"):
        assert figure_of(name) == ("tensor_active", 0)
    assert figure_of("DRAM Write Bandwidth [Throughput %]") == ("dram_bw", 1)
    assert figure_of("GR Active") is None and figure_of("SM Issue") is None


def test_no_gpu_metrics_one_line_says_so(tmp_path, capsys):
    db = small_training_export(tmp_path / "run.sqlite", steps=3)
    assert read_gpu_metrics(db).empty
    out = tmp_path / "out"
    assert main(["--database", str(db), "--reports", "gpu_metrics", "--output_path",
                 str(out), "--dldb", "false"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert err.count(UNAVAILABLE) == 1
    assert pd.read_csv(out / "dlprof_gpu_metrics.csv").empty


def test_the_cli_writes_the_gpu_metrics_report(tmp_path):
    db = small_training_export(tmp_path / "run.sqlite", steps=5)
    samples = _new_layout(db)
    out = tmp_path / "out"
    assert main(["--database", str(db), "--reports", "gpu_metrics", "--output_path",
                 str(out), "--dldb", "false", "-v", "quiet"]) == 0  # fmt: skip
    df = pd.read_csv(out / "dlprof_gpu_metrics.csv")
    assert list(df.columns) == ["GPU", "Iteration", "Samples", "SM Active (%)",
                                "Tensor Active (%)", "DRAM Bandwidth (%)"]  # fmt: skip
    assert df["Samples"].sum() == len(samples)  # every sample is inside the profile's span


def test_gpu_metrics_capture_command_line(tmp_path):
    from jlprof import nsys

    cmd = nsys.profile_command(["python", "t.py"], tmp_path / "r", gpu_metrics=True)
    assert "--gpu-metrics-device=all" in cmd.argv
    assert cmd.argv.index("--gpu-metrics-device=all") < cmd.argv.index("python")
    plain = nsys.profile_command(["python", "t.py"], tmp_path / "r")
    assert not any(a.startswith("--gpu-metrics") for a in plain.argv)
    mine = nsys.profile_command(["python", "t.py"], tmp_path / "r", gpu_metrics=True,
                                nsys_opts="--gpu-metrics-device=0")  # fmt: skip
    assert [a for a in mine.argv if a.startswith("--gpu-metrics")] == ["--gpu-metrics-device=0"]


def test_the_magic_adds_gpu_metrics_to_the_sidecars_nsys_options():
    from jlprof.magics.options import from_namespace
    from jlprof.options import MAGIC, options_for

    ns = {o.name: o.kwargs(MAGIC)["default"] for o in options_for(MAGIC)}
    ns.update(name="prof", setup=False, command=[], gpu_metrics=True, nsys_opts="-t cuda")
    import argparse

    opts = from_namespace(argparse.Namespace(**ns), cell=True)
    assert opts.nsys_opts == "-t cuda --gpu-metrics-device=all" and opts.nsys_opts_given
    assert opts.gpu_metrics


def test_the_dashboards_gpu_metrics_lane(tmp_path, monkeypatch):
    """The lane under the GPU timeline: the window's samples averaged over GPUs into time
    bins, worked here by hand for 4 bins; hidden for a profile without GPU metrics."""
    from jlprof.profile import load
    from jlprof.widgets import data, static
    from jlprof.widgets.views import Views

    db = small_training_export(tmp_path / "run.sqlite", steps=5)
    samples = _new_layout(db)
    p = load(db)
    monkeypatch.setattr(data, "MAX_METRIC_POINTS", 4)
    views = Views(int(p.iterations.bounds_ns[0]), interactive=False)
    static.fill(views, p)
    b = p.iterations.bounds_ns
    a, z = int(b[p.iter_start]), int(b[p.iter_stop + 1])
    edges = np.linspace(a, z, 5)
    bins: dict[int, list] = {}
    for _gpu, ts, vals in samples:
        if a <= ts <= z:
            k = min(int(np.searchsorted(edges, ts, "right")) - 1, 3)
            sm = next(v for n, v in vals.items() if n.startswith(("SM Active", "SMs Active")))
            bins.setdefault(k, []).append(sm)
    got = views.metrics_src.data
    assert views.metrics_fig.visible
    assert list(got["t_ms"]) == pytest.approx(
        [((edges[k] + edges[k + 1]) / 2 - b[0]) / 1e6 for k in sorted(bins)])  # fmt: skip
    assert list(got["sm_active"]) == pytest.approx([np.mean(bins[k]) for k in sorted(bins)])
    bare = load(small_training_export(tmp_path / "bare.sqlite", steps=3))
    v2 = Views(int(bare.iterations.bounds_ns[0]), interactive=False)
    static.fill(v2, bare)
    assert not v2.metrics_fig.visible and len(v2.metrics_src.data["t_ms"]) == 0


@pytest.mark.skipif(shutil.which("nsys") is None, reason="needs nsys")
def test_a_real_nsys_capture_with_gpu_metrics_asked(tmp_path, capsys):
    """nsys 2022.4 here, no GPU: the capture runs with --gpu-metrics-device=all, records no
    sample, and the run says so in one line."""
    prog = tmp_path / "prog.py"
    prog.write_text("import nvtx\nfor _ in range(3):\n"
                    "    with nvtx.annotate('optimizer_step'):\n        pass\n")  # fmt: skip
    out = tmp_path / "out"
    argv = ["--gpu_metrics", "true", "--reports", "gpu_metrics", "--output_path", str(out),
            "--dldb", "false", "-v", "detailed", "--", sys.executable, str(prog)]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "--gpu-metrics-device=all" in err and err.count(UNAVAILABLE) == 1
    assert pd.read_csv(out / "dlprof_gpu_metrics.csv").empty
