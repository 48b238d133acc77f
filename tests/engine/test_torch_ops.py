"""emit_nvtx traces end to end: ops per call site, nested aten calls, backward -> forward."""

from __future__ import annotations

from pathlib import Path

import pytest

import jlprof
from tests.fixtures.torch_traces import (
    CONV_BWD,
    CONV_FWD,
    CONV_SIZES,
    DUR,
    GEMM_BWD,
    GEMM_FWD,
    RELU_BWD,
    RELU_FWD,
    emit_nvtx_db,
)

OWNER = {  # kernel -> (op name, direction) it must be reported under
    CONV_FWD: ("aten::conv2d", "fprop"),
    CONV_BWD: ("aten::conv2d", "bprop"),
    RELU_FWD: ("aten::relu", "fprop"),
    RELU_BWD: ("aten::relu", "bprop"),
    GEMM_FWD: ("aten::linear", "fprop"),
    GEMM_BWD: ("aten::linear", "bprop"),
}


def load(tmp_path: Path, iters: int, **kw) -> jlprof.Profile:
    name = f"e{iters}_{'_'.join(f'{k}{v}' for k, v in kw.items())}.sqlite"
    return jlprof.load(emit_nvtx_db(iters, **kw).write(tmp_path / name), mode="pytorch")


@pytest.mark.parametrize("stashed", [False, True])
def test_ops_are_call_sites_not_calls(tmp_path: Path, stashed: bool) -> None:
    few = load(tmp_path, 10, stashed=stashed).report("detail")
    many = load(tmp_path, 59, stashed=stashed).report("detail")
    assert set(few["Op ID"]) == set(many["Op ID"])
    names = lambda d: set(d["Op ID"])  # noqa: E731
    for col in ("Op Name", "Op ID"):
        for bad in ("seq =", "op_id =", "sizes ="):
            assert not many[col].str.contains(bad, regex=False).any()
    assert names(many) >= {f"{n}:{d}" for n, d in OWNER.values()}


@pytest.mark.parametrize("stashed", [False, True])
def test_backward_kernels_on_forward_ops_bprop_row(tmp_path: Path, stashed: bool) -> None:
    iters = 7
    p = load(tmp_path, iters, stashed=stashed)
    k = p.report("kernel").set_index("Long Kernel Name")
    for kern, (op, direction) in OWNER.items():
        row = k.loc[kern]
        assert (row["Op Name"], row["Direction"]) == (op, direction), kern
        assert row["Total GPU Time (ns)"] == iters * DUR[kern]
    d = p.report("detail").set_index("Op ID")
    assert d.loc["aten::conv2d:bprop", "Total GPU Time (ns)"] == iters * DUR[CONV_BWD]
    assert d.loc["aten::conv2d:fprop", "Total GPU Time (ns)"] == iters * DUR[CONV_FWD]
    assert d.loc["aten::conv2d:fprop", "Input Shapes"] == CONV_SIZES.replace(" ", "")
    assert d.loc["aten::conv2d:bprop", "Op Type"] == "conv2d"
    # the nested calls did no GPU work of their own: it is their caller's
    assert d.loc["aten::cudnn_convolution:fprop", "Total GPU Time (ns)"] == 0


def test_nested_calls_are_children_in_the_group_tree(tmp_path: Path) -> None:
    p = load(tmp_path, 3)
    names = set(p.report("group_node")["Name"])
    assert "/Batch #/aten::conv2d/aten::convolution" in names
    assert "/aten::conv2d/ConvolutionBackward0" in names  # the backward node under its op


@pytest.mark.parametrize(
    "trace", ["nsysai-fastvideo-wan-train-fsdp-2gpu", "nsysai-fastvideo-wan-infer-sp2-2gpu"]
)
def test_real_emit_nvtx_traces(trace: str) -> None:
    from tests.fixtures.scenarios import REAL_DATA_MISSING, real_data_dir

    base = real_data_dir()
    if base is None or not (base / trace).is_dir():
        pytest.skip(REAL_DATA_MISSING)
    p = jlprof.load(next((base / trace).glob("*.sqlite")))
    names = p.report("detail")["Op Name"].astype(str)
    for bad in ("seq =", "op_id =", "sizes ="):
        assert not names.str.contains(bad, regex=False).any()
    assert len(names) < 200  # call sites (was one op per call: 18,511 on the FSDP window)
    for sug in p.suggest_key_nodes()["op_name"].astype(str):
        assert "op_id =" not in sug and "seq =" not in sug


def test_numbered_ranges_are_one_node_with_instances(tmp_path: Path) -> None:
    iters = 12
    p = load(tmp_path, iters)
    d = p.report("detail").set_index("Op ID")
    assert d.loc["Batch #", "No. Calls"] == iters
    assert not d.index.str.match(r"^Batch \d").any()
    assert "Batch #" in set(p.suggest_key_nodes()["op_name"])
    g = p.report("group_node").set_index("Name")
    assert g.loc["/Batch #", "Total GPU Time (ns)"] == iters * (
        DUR[CONV_FWD] + DUR[RELU_FWD] + DUR[GEMM_FWD]
    )
    c = p.correlated
    batch = c.ops.index[c.ops["op_name"] == "Batch #"][0]
    nos = c.inst.loc[c.inst["op"] == batch, "instance_no"].tolist()
    assert nos == list(range(iters))  # the number is kept per instance
    p.set_key_node("Batch #")
    assert p.iterations.instances == iters


def test_mode_from_the_trace(tmp_path: Path) -> None:
    path = emit_nvtx_db(2).write(tmp_path / "mode.sqlite")
    auto = jlprof.load(path)
    assert auto.mode == "pytorch" and "Direction" in auto.report("detail").columns
    assert auto.framework() == "PyTorch (emit_nvtx)"
    forced = jlprof.load(path, mode="simple")  # -m still overrides
    assert forced.mode == "simple" and "Direction" not in forced.report("detail").columns


def test_mode_simple_without_pytorch_markers(tmp_path: Path) -> None:
    from tests.fixtures.scenarios import rich_db

    assert jlprof.load(rich_db().write(tmp_path / "rich.sqlite")).mode == "simple"


def test_cli_mode_from_the_trace(tmp_path: Path) -> None:
    import pandas as pd

    from jlprof.cli import main

    path = emit_nvtx_db(2).write(tmp_path / "cli.sqlite")
    out = tmp_path / "out"
    main(["--database", str(path), "--output_path", str(out), "--reports", "detail", "-f", "true"])
    detail = pd.read_csv(next(out.glob("*_detailed.csv")))
    assert "Direction" in detail.columns


def test_sequence_numbers_are_per_process(tmp_path: Path) -> None:
    """Two ranks both number their autograd nodes from 5: each backward links in its process."""
    from tests.fixtures.nsysdb import NsysDb

    db = NsysDb()
    db.gpu(0, "NVIDIA A100-SXM4-40GB")
    for pid, (op, node, fwd_k, bwd_k), t0 in (
        (10, ("aten::conv2d", "ConvolutionBackward0", CONV_FWD, CONV_BWD), 1_000),
        (20, ("aten::linear", "AddmmBackward0", GEMM_FWD, GEMM_BWD), 5_000),
    ):
        proc = db.process(pid)
        main, bwd = proc.thread(), proc.thread(pid + 1)
        main.push_pop(f"{op}, seq = 5, op_id = 1", t0, t0 + 500)
        main.launch(fwd_k, t0 + 10, t0 + 20, t0 + 30, t0 + 30 + DUR[fwd_k])
        at = t0 + 10_000
        bwd.push_pop(f"autograd::engine::evaluate_function: {node}", at, at + 500)
        bwd.push_pop(f"{node}, seq = 5, op_id = 2", at + 10, at + 490)
        bwd.launch(bwd_k, at + 20, at + 30, at + 40, at + 40 + DUR[bwd_k])
    p = jlprof.load(db.write(tmp_path / "ranks.sqlite"))
    k = p.report("kernel").set_index("Long Kernel Name")
    assert tuple(k.loc[CONV_BWD, ["Op Name", "Direction"]]) == ("aten::conv2d", "bprop")
    assert tuple(k.loc[GEMM_BWD, ["Op Name", "Direction"]]) == ("aten::linear", "bprop")


def test_record_function_ranges_do_not_absorb_the_ops(tmp_path: Path) -> None:
    """``record_function`` ranges (no seq, no namespace) are user ranges around op calls."""
    from tests.fixtures.nsysdb import NsysDb

    db = NsysDb()
    db.gpu(0, "NVIDIA A100-SXM4-40GB")
    t = db.process(10).thread()
    for i in range(3):
        b = i * 10_000
        t.push_pop(f"ProfilerStep#{i}, op_id = {100 * i}", b, b + 9_000)
        t.push_pop(f"aten::relu, seq = {i}, op_id = {100 * i + 1}", b + 10, b + 500)
        t.launch(RELU_FWD, b + 20, b + 30, b + 40, b + 40 + DUR[RELU_FWD])
    p = jlprof.load(db.write(tmp_path / "rf.sqlite"))
    d = p.report("detail").set_index("Op Name")
    assert d.loc["aten::relu", "Total GPU Time (ns)"] == 3 * DUR[RELU_FWD]
    steps = d[d.index.str.startswith("ProfilerStep#")]
    assert len(steps) == 3 and (steps["Total GPU Time (ns)"] == 0).all()


def _backward_by_hand(node, seq, top, start, process):
    """_backward's definition, one range at a time (its docstring, worked as loops)."""
    n = len(top)
    is_top = [top[i] >= 0 and top[i] == i for i in range(n)]
    top_seq = [seq[i] if is_top[i] and node[i] else -1 for i in range(n)]
    first = list(top_seq)  # a wrapper takes the seq of a backward node range inside it
    for j in range(n):
        if top[j] >= 0 and not is_top[j] and node[j] and seq[j] >= 0 and first[top[j]] < 0:
            top_seq[top[j]] = seq[j]  # the last such range in row order
    bwd_top = [is_top[i] and node[i] for i in range(n)]
    last: dict[tuple[int, int], tuple[int, int, int]] = {}  # key -> (start, row, its top)
    for f in range(n):
        if top[f] >= 0 and not node[f] and seq[f] >= 0 and not bwd_top[top[f]]:
            key = (process[f], seq[f])
            if key not in last or (start[f], f) >= last[key][:2]:
                last[key] = (start[f], f, top[f])
    linked, fwd = [], []
    for i in range(n):
        if bwd_top[i] and top_seq[i] >= 0 and (process[i], top_seq[i]) in last:
            linked.append(i)
            fwd.append(last[(process[i], top_seq[i])][2])
    inner = [
        i for i in range(n) if top[i] >= 0 and not is_top[i] and not node[i] and bwd_top[top[i]]
    ]
    return linked, fwd, inner


@pytest.mark.parametrize("seed", range(40))
def test_backward_links_as_defined(seed: int) -> None:
    """Backward tops to forward tops (the last forward top by start per process and seq,
    ties in row order), wrappers taking their node's seq, and forward calls inside backward
    tops: the vectorised pass against the definition worked range by range."""
    import numpy as np
    import pandas as pd

    from jlprof.engine.correlate.torch_ops import _backward

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 120))
    n_tops = max(1, n // 4)
    heads = np.sort(rng.choice(max(n, 1), size=min(n_tops, n), replace=False))
    top = np.full(n, -1, np.int64)
    top[heads] = heads
    rest = np.setdiff1d(np.arange(n), heads)
    top[rest] = (
        np.where(rng.random(len(rest)) < 0.8, rng.choice(heads, len(rest)), -1)
        if len(heads)
        else -1
    )
    parsed = pd.DataFrame({"bwd_node": rng.random(6) < 0.4})
    text_code = rng.integers(0, 6, n)
    seq = rng.integers(-1, 8, n)
    start = rng.integers(0, 30, n)  # ties: row order decides
    process = rng.integers(0, 2, n)
    for dtype in (np.int64, np.int32):  # the range pass holds tops and seqs in 32 bits
        linked, fwd, inner = _backward(
            parsed, text_code, seq.astype(dtype), top.astype(dtype), start, process
        )
        want = _backward_by_hand(parsed["bwd_node"].to_numpy()[text_code], seq, top, start, process)
        assert (linked.tolist(), fwd.tolist(), inner.tolist()) == want
