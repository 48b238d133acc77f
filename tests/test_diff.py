"""The A/B diff (docs/diff.md) against runs whose differences are known by construction
(tests/fixtures/diffs.py), and against the raw kernel rows of two real exports."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jlprof
from jlprof.engine.analyses.diff import NOISE_NS, NOISE_PCT, classify
from jlprof.options import OPTIONS
from jlprof.reports.diff import (
    DIFF_TABLES,
    EXIT_NOT_COMPARABLE,
    EXIT_REGRESSION,
    KERNEL_COLUMNS,
    OP_COLUMNS,
    OP_TYPE_COLUMNS,
)
from tests.fixtures.diffs import OPS, diff_run
from tests.fixtures.scenarios import real_data_dir

NAME = "cmp"  # --profile_name given explicitly (the default is changing; see the brief)
DEFAULT_NAME = next(o.default for o in OPTIONS if o.name == "profile_name")


def _cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jlprof", "diff", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("diffruns")
    return {
        "base": diff_run(d / "base.sqlite"),
        "twin": diff_run(d / "twin.sqlite"),  # built like base, another file
        "slow": diff_run(d / "slow.sqlite", scale=1.5),
        "long": diff_run(d / "long.sqlite", steps=9, scale=1.5),
        "changed": diff_run(
            d / "changed.sqlite",
            extra={"/model/drop1/dropout": ("void fused_dropout_kernel<float>(int)", 8_000)},
            drop=("/model/relu1/relu",),
        ),
        "nokey": diff_run(d / "nokey.sqlite", key=None),
        "slightly": diff_run(
            d / "slightly.sqlite", slow={"/model/conv1/conv2d": 1.01, "/model/fc1/linear": 1.03}
        ),
    }


def _load(run):
    return jlprof.load(run.path)


def _range(run) -> dict:
    # the steps are iterations 0..steps-1; the interval after the last key node is empty
    return {"iter_stop": run.steps - 1}


def _truth_totals(run) -> dict[str, int]:
    return {op: run.steps * ns for op, ns in run.kernel_ns.items()}


def test_slowed_kernels_every_op_delta_is_the_added_time(runs) -> None:
    base, slow = runs["base"], runs["slow"]
    r = _load(base).compare(_load(slow), **_range(base), other_iter_stop=slow.steps - 1)
    assert list(r.ops.columns) == OP_COLUMNS
    assert not r.normalised
    ops = r.ops.set_index("Op Name")
    tb, tn = _truth_totals(base), _truth_totals(slow)
    for op in OPS:
        row = ops.loc[op]
        assert row["Base GPU Time (ns)"] == tb[op]
        assert row["New GPU Time (ns)"] == tn[op]
        assert row["Delta GPU Time (ns)"] == tn[op] - tb[op] == base.steps * OPS[op][1] // 2
        assert row["Base Calls"] == row["New Calls"] == base.steps
        assert row["Status"] == "slower"
    # ops without GPU work are judged on CPU time: the synchronisation waits longer
    sync = ops.loc["unassociated_cudaDeviceSynchronize"]
    assert sync["Status"] == "slower" and sync["Delta GPU Time (ns)"] == 0
    assert ops.loc["optimizer_step", "Status"] == "unchanged"
    # kernels (by demangled name) and op types carry the same truth
    k = r.kernels.set_index("Long Kernel Name")
    assert list(r.kernels.columns) == KERNEL_COLUMNS
    for op, (kernel, _) in OPS.items():
        assert k.loc[kernel, "Delta GPU Time (ns)"] == tn[op] - tb[op]
        assert k.loc[kernel, "Base Calls"] == base.steps
    t = r.op_types.set_index("Op Type")
    assert list(r.op_types.columns) == OP_TYPE_COLUMNS
    for op in OPS:
        assert t.loc[op.rsplit("/", 1)[1], "Delta GPU Time (ns)"] == tn[op] - tb[op]
    # the iteration times are the construction's, and each step is slower by the added time
    its = r.iterations
    assert its[its["Side"] == "Base"]["Iteration Time (ns)"].tolist() == base.iteration_ns
    assert its[its["Side"] == "New"]["Iteration Time (ns)"].tolist() == slow.iteration_ns
    added = sum(tn.values()) // slow.steps - sum(tb.values()) // base.steps
    assert np.median(slow.iteration_ns) - np.median(base.iteration_ns) == added
    for side, run in (("Base", base), ("New", slow)):
        d = np.asarray(run.iteration_ns, float)
        st = r.distributions.loc[side]
        assert st["Median Iteration Time (ns)"] == np.median(d)
        assert st["P10 Iteration Time (ns)"] == pytest.approx(np.quantile(d, 0.1))
        assert st["P90 Iteration Time (ns)"] == pytest.approx(np.quantile(d, 0.9))
        assert st["MAD Iteration Time (ns)"] == np.median(np.abs(d - np.median(d)))
        assert st["Mean Iteration Time (ns)"] == pytest.approx(d.mean())
    pct = 100 * (np.median(slow.iteration_ns) / np.median(base.iteration_ns) - 1)
    assert r.delta_pct == pytest.approx(pct)
    assert r.verdict == "regression likely"
    assert r.exit_status(5.0) == EXIT_REGRESSION and r.exit_status(None) == 0
    assert any(f"{pct:+.2f}%" in e for e in r.evidence)
    assert "/model/conv1/conv2d" in r.evidence[-1]  # the biggest op change is named


def test_the_reverse_diff_is_an_improvement(runs) -> None:
    slow, base = runs["slow"], runs["base"]
    r = _load(slow).compare(_load(base), **_range(slow), other_iter_stop=base.steps - 1)
    assert r.verdict == "improvement likely"
    assert set(r.ops.set_index("Op Name").loc[list(OPS), "Status"]) == {"faster"}
    assert r.exit_status(5.0) == 0


def test_added_and_removed_ops(runs) -> None:
    base, changed = runs["base"], runs["changed"]
    r = _load(base).compare(_load(changed), **_range(base), other_iter_stop=changed.steps - 1)
    ops = r.ops.set_index("Op Name")
    new = ops.loc["/model/drop1/dropout"]
    assert new["Status"] == "added"
    assert (new["Base GPU Time (ns)"], new["Base Calls"]) == (0, 0)
    assert new["New GPU Time (ns)"] == new["Delta GPU Time (ns)"] == changed.steps * 8_000
    gone = ops.loc["/model/relu1/relu"]
    assert gone["Status"] == "removed"
    assert (gone["New GPU Time (ns)"], gone["New Calls"]) == (0, 0)
    assert gone["Delta GPU Time (ns)"] == -base.steps * OPS["/model/relu1/relu"][1]
    assert set(ops.loc[["/model/conv1/conv2d", "/model/fc1/linear"], "Status"]) == {"unchanged"}
    assert r.counts()["added"] == 1 and r.counts()["removed"] == 1
    k = r.kernels.set_index("Long Kernel Name")
    assert k.loc["void fused_dropout_kernel<float>(int)", "Status"] == "added"
    assert k.loc[OPS["/model/relu1/relu"][0], "Status"] == "removed"


def test_different_iteration_counts_are_normalised_per_iteration(runs) -> None:
    base, long = runs["base"], runs["long"]  # 6 steps vs 9 steps slowed 1.5x
    r = _load(base).compare(_load(long), **_range(base), other_iter_stop=long.steps - 1)
    assert r.normalised
    ops = r.ops.set_index("Op Name")
    for op, (_, ns) in OPS.items():
        assert ops.loc[op, "Base GPU Time (ns)"] == pytest.approx(ns, rel=1e-12)
        assert ops.loc[op, "New GPU Time (ns)"] == pytest.approx(1.5 * ns, rel=1e-12)
        assert ops.loc[op, "Delta GPU Time (ns)"] == pytest.approx(0.5 * ns, rel=1e-12)
        assert ops.loc[op, "Base Calls"] == ops.loc[op, "New Calls"] == 1.0
    assert "per iteration" in r.normalisation() and "base 6, new 9" in r.normalisation()
    assert r.summary()["Normalised Per Iteration"] is True
    assert "per iteration" in r.to_markdown()
    assert r.verdict == "regression likely"
    same = _load(base).compare(_load(long), iter_stop=5, other_iter_stop=5)
    assert not same.normalised  # equal counts: totals


def test_identical_runs_are_unchanged_and_exit_0(runs, tmp_path) -> None:
    base, twin = runs["base"], runs["twin"]
    r = _load(base).compare(_load(twin))
    assert r.verdict == "unchanged"
    assert set(r.ops["Status"]) == {"unchanged"}
    assert (r.ops["Delta GPU Time (ns)"] == 0).all()
    assert r.delta_pct == 0.0
    out = _cli(base.path, twin.path, "--fail-on-regression", "5", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["Verdict"] == "unchanged"


def test_same_capture_is_unchanged_and_says_so(runs) -> None:
    p = _load(runs["slow"])
    r = p.compare(p)
    assert r.verdict == "unchanged"
    assert any("same capture" in w for w in r.warnings)


@pytest.mark.parametrize(
    ("pair", "args", "status", "verdict"),
    [
        (("base", "slow"), ["--fail-on-regression", "5"], EXIT_REGRESSION, "regression likely"),
        (("slow", "base"), ["--fail-on-regression", "5"], 0, "improvement likely"),
        (("base", "slow"), ["--fail-on-regression", "60"], 0, "unchanged"),  # +46% < 60%
        (("base", "slow"), [], 0, "regression likely"),  # no gate: always 0
        (("base", "nokey"), ["--fail-on-regression", "5"], EXIT_NOT_COMPARABLE, "not comparable"),
    ],
)
def test_fail_on_regression_exit_status(runs, pair, args, status, verdict) -> None:
    b, n = runs[pair[0]], runs[pair[1]]
    out = _cli(b.path, n.path, "--iter_stop", "5", "--format", "json", *args)
    if pair[1] == "nokey":  # one interval: no --iter_stop 5 there
        out = _cli(b.path, n.path, "--new_iter_stop", "0", "--format", "json", *args)
    assert out.returncode == status, out.stderr
    assert json.loads(out.stdout)["Verdict"] == verdict


def test_iterations_on_one_side_only_are_not_comparable(runs) -> None:
    r = _load(runs["base"]).compare(_load(runs["nokey"]), iter_stop=5)
    assert r.verdict == "not comparable" and r.confidence == 0.0
    assert "iterations on both sides 0.00" in r.evidence[0]
    assert any("iterations were found only in the base profile" in w for w in r.warnings)
    # the op deltas are still there (totals: 6 iterations vs the whole profile)
    assert r.normalised
    assert r.exit_status(5.0) == EXIT_NOT_COMPARABLE


def test_noise_band_of_an_op(runs) -> None:
    base, sl = runs["base"], runs["slightly"]
    r = _load(base).compare(_load(sl), **_range(base), other_iter_stop=sl.steps - 1)
    ops = r.ops.set_index("Op Name")
    # conv2d +1 %: inside max(2 % of its time, 1 µs per iteration); linear +3 %: beyond
    assert ops.loc["/model/conv1/conv2d", "Delta GPU Time (ns)"] == base.steps * 600
    assert ops.loc["/model/conv1/conv2d", "Status"] == "unchanged"
    assert ops.loc["/model/fc1/linear", "Status"] == "slower"
    assert r.verdict == "unchanged"  # the step moved by < 2 %
    # a threshold tighter than the noise floor never concludes inside it, and says so
    r1 = _load(base).compare(_load(sl), iter_stop=5, other_iter_stop=5, threshold_pct=1.0)
    assert 1.0 < r1.delta_pct < 2.0 and r1.verdict == "unchanged"
    assert any("inside the ±2.00% noise band" in w for w in r1.warnings)


def test_noise_band_widens_with_the_iterations_spread(tmp_path) -> None:
    jitter = (0, 40_000)
    base = diff_run(tmp_path / "b.sqlite", steps=10, jitter_ns=jitter)
    new = diff_run(tmp_path / "n.sqlite", steps=10, jitter_ns=jitter, scale=1.08)
    r = jlprof.load(base.path).compare(jlprof.load(new.path), iter_stop=9, other_iter_stop=9)

    def se(d: list[int]) -> float:  # docs/diff.md: 1.2533 · 1.4826 · MAD / √n
        a = np.asarray(d, float)
        return 1.2533 * 1.4826 * np.median(np.abs(a - np.median(a))) / np.sqrt(len(a))

    band = 100 * 2 * np.hypot(se(base.iteration_ns), se(new.iteration_ns))
    band /= np.median(base.iteration_ns)
    assert r.noise_pct == pytest.approx(band) and band > 10
    assert 5 < r.delta_pct < band  # past the threshold, inside the spread
    assert r.verdict == "unchanged"
    steady = diff_run(tmp_path / "s.sqlite", steps=10, scale=1.08)
    flat = diff_run(tmp_path / "f.sqlite", steps=10)
    r2 = jlprof.load(flat.path).compare(jlprof.load(steady.path), iter_stop=9, other_iter_stop=9)
    assert r2.noise_pct == 2.0 and r2.delta_pct > 5 and r2.verdict == "regression likely"


def test_classify_band_edges() -> None:
    base = np.array([100_000.0, 100_000.0, 100_000.0, 0.0, 10.0, 5.0])
    new = np.array([102_000.0, 102_001.0, 97_999.0, 0.0, 900.0, 5.0])
    in_b = np.array([True, True, True, True, True, False])
    in_n = np.array([True, True, True, False, True, True])
    got = classify(base, new, in_b, in_n, NOISE_PCT, NOISE_NS)
    assert got.tolist() == ["unchanged", "slower", "faster", "removed", "unchanged", "added"]


def _md_tables(text: str) -> list[list[list[str]]]:
    """The tables of a markdown text, parsed by markdown-it (GFM tables): rows of cells."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    tables, row, rows, cell = [], None, None, None
    for t in tokens:
        if t.type == "table_open":
            rows = []
        elif t.type == "tr_open":
            row = []
        elif t.type in ("th_open", "td_open"):
            cell = ""
        elif t.type == "inline" and cell is not None:
            cell = t.content
        elif t.type in ("th_close", "td_close"):
            row.append(cell)
            cell = None
        elif t.type == "tr_close":
            rows.append(row)
        elif t.type == "table_close":
            tables.append(rows)
    return tables


def test_markdown_parses_as_tables(runs, tmp_path) -> None:
    pytest.importorskip("markdown_it")
    base = runs["base"]
    odd = diff_run(
        tmp_path / "odd.sqlite",
        scale=1.5,
        extra={"/model/a|b/matmul": ("void gemm_kernel<a|b>(int)", 10_000)},
    )
    md_file = tmp_path / "comment.md"
    out = _cli(base.path, odd.path, "--iter_stop", "5", "--format", "markdown",
               "--output_file", md_file)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""  # to the file, not stdout
    text = md_file.read_text()
    assert text.startswith("## jlprof diff: ") and "regression likely" in text.splitlines()[0]
    tables = _md_tables(text)
    assert len(tables) == 2
    its, ops = tables
    assert its[0] == ["Iteration time", "Base", "New", "Delta"]
    assert [r[0] for r in its[1:]] == ["Iterations", "Median", "Mean", "P10", "P90", "MAD", "Std."]
    assert its[1][1:] == ["6", "6", "0"]
    assert ops[0][0] == "Op Name" and all(len(r) == len(ops[0]) for r in ops)
    names = [r[0] for r in ops[1:]]
    assert "/model/a|b/matmul" in names  # the escaped pipe stays inside its cell
    added = ops[1 + names.index("/model/a|b/matmul")]
    assert added[-1] == "added"
    # stdout by default
    out = _cli(base.path, odd.path, "--iter_stop", "5", "--format", "markdown")
    assert out.stdout == text


def test_files_and_columns(runs, tmp_path) -> None:
    base, slow = runs["base"], runs["slow"]
    out_dir = tmp_path / "out"
    args = [base.path, slow.path, "--iter_stop", "5", "--output_path", out_dir,
            "--formats", "csv,json", "--profile_name", NAME]  # fmt: skip
    out = _cli(*args)
    assert out.returncode == 0, out.stderr
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == sorted(f"{NAME}_{t}.{f}" for t in DIFF_TABLES for f in ("csv", "json"))
    csv = pd.read_csv(out_dir / f"{NAME}_diff.csv")
    assert list(csv.columns) == OP_COLUMNS
    js = pd.DataFrame(json.loads((out_dir / f"{NAME}_diff.json").read_text()))
    assert list(js.columns) == OP_COLUMNS
    pd.testing.assert_frame_equal(csv, js, check_dtype=False)
    truth = _truth_totals(slow)
    conv = csv.set_index("Op Name").loc["/model/conv1/conv2d"]
    assert conv["New GPU Time (ns)"] == truth["/model/conv1/conv2d"]
    summary = json.loads((out_dir / f"{NAME}_diff_summary.json").read_text())
    assert summary["Verdict"] == "regression likely"
    assert summary["Base"]["Iteration Times"]["Iterations"] == 6
    assert summary["Normalised Per Iteration"] is False
    its = pd.read_csv(out_dir / f"{NAME}_diff_iterations.csv")
    assert its[its["Side"] == "New"]["Iteration Time (ns)"].tolist() == slow.iteration_ns
    # existing files are kept without -f, replaced with it
    (out_dir / f"{NAME}_diff.csv").write_text("kept")
    assert _cli(*args).returncode == 0
    assert (out_dir / f"{NAME}_diff.csv").read_text() == "kept"
    assert _cli(*args, "-f", "true").returncode == 0
    assert list(pd.read_csv(out_dir / f"{NAME}_diff.csv").columns) == OP_COLUMNS


def test_default_profile_name_and_print_only(runs, tmp_path) -> None:
    base, slow = runs["base"], runs["slow"]
    out = _cli(base.path, slow.path, cwd=tmp_path)
    assert out.returncode == 0 and list(tmp_path.iterdir()) == []  # no file unless asked
    assert "regression likely" in out.stdout.splitlines()[0]
    out = _cli(base.path, slow.path, "--formats", "csv", cwd=tmp_path)
    assert (tmp_path / f"{DEFAULT_NAME}_diff.csv").is_file()


def test_run_folders_are_accepted(runs, tmp_path) -> None:
    from jlprof.runs import manifest, write_manifest

    folder = tmp_path / "jlprof_runs" / "20260101-000000-abc123"
    folder.mkdir(parents=True)
    (folder / "nsys_profile.sqlite").write_bytes(runs["slow"].path.read_bytes())
    write_manifest(folder, manifest(profile_name="jlprof", database="nsys_profile.sqlite",
                                    nsys_report=None, status="ok"))  # fmt: skip
    out = _cli(runs["base"].path, folder, "--iter_stop", "5", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["Verdict"] == "regression likely"
    empty = tmp_path / "empty_run"
    empty.mkdir()
    write_manifest(empty, manifest(profile_name="jlprof", database=None, nsys_report=None,
                                   status="capture_empty"))  # fmt: skip
    out = _cli(runs["base"].path, empty)
    assert out.returncode == 2 and "has no database" in out.stderr


def test_bad_input_is_one_line(runs, tmp_path) -> None:
    out = _cli(runs["base"].path, tmp_path / "missing.sqlite")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "missing.sqlite" in out.stderr
    out = _cli(runs["base"].path, runs["slow"].path, "--fail-on-regression", "0")
    assert out.returncode == 2 and "percentage > 0" in out.stderr
    out = _cli(runs["base"].path, runs["slow"].path, "--formats", "xml")
    assert out.returncode == 2 and "unknown format" in out.stderr
    with pytest.raises(jlprof.errors.InputError):
        _load(runs["base"]).compare("other.sqlite")


def test_magic_diff_binds_the_comparison(runs) -> None:
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()  # the one shell of the test process (tests/magics use it)
    ip.run_line_magic("load_ext", "jlprof")
    b, s = runs["base"].path, runs["slow"].path
    ip.run_line_magic("dlprof", f"--diff {b} {s} -o cmp --iter_stop 5 -v quiet")
    r = ip.user_ns["cmp"]
    assert r.verdict == "regression likely"
    assert r.ops.set_index("Op Name").loc["/model/relu1/relu", "Delta GPU Time (ns)"] == (
        runs["base"].steps * OPS["/model/relu1/relu"][1] // 2
    )
    ip.run_line_magic("dlprof", f"--diff {b} {s} -o cmp2 --base_iter_stop 2 --new_iter_stop 4")
    assert ip.user_ns["cmp2"].normalised  # 3 iterations vs 5
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="expected 2 arguments"):
        ip.run_line_magic("dlprof", f"--diff {b}")
    with pytest.raises(UsageError, match="without --database"):
        ip.run_line_magic("dlprof", f"--diff {b} {s} --database {b}")


def test_diff_view_data_and_figures(runs) -> None:
    pytest.importorskip("bokeh")
    from jlprof.widgets.diff import figures, header_html, timeline_data, waterfall_data

    base, slow = runs["base"], runs["slow"]
    r = _load(base).compare(_load(slow), iter_stop=5, other_iter_stop=5)
    wf = waterfall_data(r, limit=2)
    assert wf["label"][0] == "base total" and wf["label"][-1] == "new total"
    assert wf["label"][1:3] == ["/model/conv1/conv2d", "/model/fc1/linear"]  # biggest first
    assert wf["label"][3] == "other ops"
    steps = np.asarray(wf["delta"][1:-1])
    assert wf["top"][0] + steps.sum() == wf["top"][-1]  # the bars add up
    assert wf["top"][-1] == sum(_truth_totals(slow).values())
    tl = timeline_data(r)
    assert tl["New"]["ms"] == [x / 1e6 for x in slow.iteration_ns]
    fig_w, fig_t = figures(r)
    assert len(fig_w.renderers) == 1 and len(fig_t.renderers) == 6
    assert "regression likely" in header_html(r)
    pytest.importorskip("jupyter_bokeh")
    from jlprof.widgets.diff import diff_view

    view = diff_view(r)
    assert len(view.children) == 3 and "jlprof-diff" in view._dom_classes


REAL_PAIRS = [
    ("nvfuser-matmul-h100", "nvfuser-crossentropy-h200"),
    ("nsysai-fastvideo-wan-infer-sp2-2gpu", "nsysai-fastvideo-wan-train-fsdp-2gpu"),
]


def _kernel_sums(path: Path) -> pd.DataFrame:
    """Independent of jlprof: total ns and count per demangled kernel name, straight in SQL."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return pd.read_sql_query(
            "SELECT s.value AS name, SUM(k.end - k.start) AS ns, COUNT(*) AS n "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
            "GROUP BY s.value",
            con,
        ).set_index("name")


@pytest.mark.parametrize(("base", "new"), REAL_PAIRS)
def test_real_pair_kernel_totals_match_sql(base, new) -> None:
    root = real_data_dir()
    pb, pn = (next((root / n).glob("*.sqlite")) for n in (base, new))
    r = jlprof.load(pb).compare(jlprof.load(pn))
    assert not r.normalised or r.distributions["Iterations"].nunique() == 2
    k = r.kernels.set_index("Long Kernel Name")
    for side, path in (("Base", pb), ("New", pn)):
        sql = _kernel_sums(path)
        n_it = int(r.distributions.loc[side, "Iterations"])
        got = k.loc[sql.index]
        scale = n_it if r.normalised else 1
        np.testing.assert_allclose(got[f"{side} GPU Time (ns)"] * scale, sql["ns"], rtol=1e-12)
        np.testing.assert_allclose(got[f"{side} Calls"] * scale, sql["n"], rtol=1e-12)
        # a kernel only on the other side shows 0 here, and nothing else is a kernel of this side
        absent = k.index.difference(sql.index)
        memory = k.loc[absent, "Kernel Name"].astype(str).str.startswith("[CUDA")
        assert (k.loc[absent[~memory.to_numpy()], f"{side} GPU Time (ns)"] == 0).all()
    delta = k["New GPU Time (ns)"] - k["Base GPU Time (ns)"]
    np.testing.assert_allclose(k["Delta GPU Time (ns)"], delta)
    status = k["Status"]
    assert (status[k["Base Calls"] == 0] == "added").all()
    assert (status[k["New Calls"] == 0] == "removed").all()
    # different programs: the op view barely overlaps, so the CI gate declines to judge
    assert r.verdict == "not comparable", r.warnings
    assert r.evidence[0].startswith(f"comparability {r.confidence:.2f} = ")
    assert r.confidence < 0.5


def test_real_trace_against_itself_over_two_ranges() -> None:
    path = next((real_data_dir() / "nsysai-fastvideo-wan-train-fsdp-2gpu").glob("*.sqlite"))
    p = jlprof.load(path)
    r = p.compare(p)
    assert r.verdict == "unchanged" and (r.ops["Delta GPU Time (ns)"] == 0).all()
    assert (r.kernels["Status"] == "unchanged").all()


def test_forward_and_backward_stay_apart_by_op_id(tmp_path) -> None:
    from tests.fixtures.torch_traces import (
        CONV_BWD,
        CONV_FWD,
        DUR,
        GEMM_BWD,
        GEMM_FWD,
        emit_nvtx_db,
    )

    base = emit_nvtx_db(4).write(tmp_path / "b.sqlite")
    new = emit_nvtx_db(6).write(tmp_path / "n.sqlite")
    pb, pn = jlprof.load(base), jlprof.load(new)
    r = pb.compare(pn)
    assert r.ops.index.is_unique and len(r.ops) == len(pn.report("detail"))
    ops = r.ops
    cases = {
        "aten::conv2d:fprop": CONV_FWD,
        "aten::conv2d:bprop": CONV_BWD,
        "aten::linear:fprop": GEMM_FWD,
        "aten::linear:bprop": GEMM_BWD,
    }
    for key, kernel in cases.items():
        assert ops.loc[key, "Op Name"] == key.rsplit(":", 1)[0]
        assert ops.loc[key, "Base GPU Time (ns)"] == 4 * DUR[kernel]
        assert ops.loc[key, "New GPU Time (ns)"] == 6 * DUR[kernel]
        assert ops.loc[key, "Delta GPU Time (ns)"] == 2 * DUR[kernel]


def test_match_keys_use_ids_only_where_both_sides_have_them() -> None:
    from jlprof.engine.analyses.diff import match_keys

    bk, nk = match_keys(
        np.array(["a:fprop", "a:bprop", "", "c:x"], object),
        np.array(["a", "a", "b", "c"], object),
        np.array(["a:fprop", "a:bprop", "b:1", "c:y"], object),
        np.array(["a", "a", "b", "c"], object),
    )
    assert bk.tolist() == ["id:a:fprop", "id:a:bprop", "name:b", "name:c"]
    assert nk.tolist() == ["id:a:fprop", "id:a:bprop", "name:b", "name:c"]


def test_display_outside_a_kernel_is_markdown(runs) -> None:
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()  # a shell without a kernel: no widgets, the markdown
    r = _load(runs["base"]).compare(_load(runs["slow"]), iter_stop=5, other_iter_stop=5)
    with capture_output() as out:
        from IPython.display import display

        display(r)
    (bundle,) = [o.data for o in out.outputs]
    assert bundle["text/markdown"] == r.to_markdown()
    assert bundle["text/plain"] == repr(r)
