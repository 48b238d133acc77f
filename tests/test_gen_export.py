"""The benchmark export generator: a coherent training loop, read by nsys stats like a real one."""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
from pathlib import Path

import pytest

from bench.gen_export import generate
from bench.training_loop import ADAM, LAUNCH, LAYERS, training_scripts
from tests.conftest import Stats

KERNELS = 3_000
PER_ITERATION = sum(s.kind.count(LAUNCH) for s in training_scripts(LAYERS))


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "train.sqlite"
    generate(out, KERNELS, seed=3)
    return out


def one(con: sqlite3.Connection, sql: str) -> tuple:
    return con.execute(sql).fetchone()


def test_counts_and_one_launch_per_kernel(export: Path) -> None:
    con = sqlite3.connect(export)
    (kernels,) = one(con, "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL")
    (iterations,) = one(con, "select count(*) from NVTX_EVENTS where text = 'optimizer_step'")
    assert kernels == PER_ITERATION * iterations
    assert abs(kernels - KERNELS) <= PER_ITERATION
    joined = one(
        con,
        """
        select count(*), count(distinct k.rowid), count(distinct r.rowid),
               min(s.value), max(s.value)
        from CUPTI_ACTIVITY_KIND_KERNEL k join CUPTI_ACTIVITY_KIND_RUNTIME r
          on k.correlationId = r.correlationId and k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000)
        join StringIds s on s.id = r.nameId""",
    )
    assert joined == (kernels, kernels, kernels, "cudaLaunchKernel_v7000", "cudaLaunchKernel_v7000")
    launches = one(
        con,
        "select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s "
        "on s.id = r.nameId where s.value = 'cudaLaunchKernel_v7000'",
    )
    assert launches == (kernels,)
    # Correlation ids are handed out in call order and never repeat within the process.
    ids = [r[0] for r in con.execute("select correlationId from CUPTI_ACTIVITY_KIND_RUNTIME")]
    assert ids == list(range(1, len(ids) + 1))
    ranges = one(con, "select count(*) from NVTX_EVENTS where eventType = 59")[0]
    assert 0.65 < ranges / kernels < 0.8
    assert one(con, "select count(*) from TARGET_INFO_GPU") == (2,)  # one busy, one idle
    assert one(con, "select count(distinct deviceId) from CUPTI_ACTIVITY_KIND_KERNEL") == (1,)


def test_ranges_nest_and_contain_every_launch(export: Path) -> None:
    con = sqlite3.connect(export)
    depth_by_thread: dict[int, int] = {}
    rows = con.execute(
        "select globalTid, start, end from NVTX_EVENTS where eventType = 59 "
        "order by globalTid, start, end desc"
    )
    stack: list[tuple[int, int]] = []
    for tid, start, end in rows:
        stack = [(t, e) for t, e in stack if t == tid and e > start]
        assert not stack or end <= stack[-1][1], "ranges of one thread overlap without nesting"
        stack.append((tid, end))
        depth_by_thread[tid] = max(depth_by_thread.get(tid, 0), len(stack))
    assert sorted(depth_by_thread.values()) == [3, 4]  # autograd thread, main thread
    outside = one(
        con,
        """
        select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id = r.nameId
        where s.value = 'cudaLaunchKernel_v7000' and not exists (
          select 1 from NVTX_EVENTS e where e.eventType = 59 and e.globalTid = r.globalTid
          and e.start <= r.start and r.end <= e.end)""",
    )
    assert outside == (0,)


def test_gpu_queue_is_causal_and_serial(export: Path) -> None:
    con = sqlite3.connect(export)
    early = one(
        con,
        """
        select count(*) from CUPTI_ACTIVITY_KIND_KERNEL k join CUPTI_ACTIVITY_KIND_RUNTIME r
        on k.correlationId = r.correlationId where k.start < r.start""",
    )
    assert early == (0,)
    work = con.execute(
        "select start, end from CUPTI_ACTIVITY_KIND_KERNEL union all "
        "select start, end from CUPTI_ACTIVITY_KIND_MEMCPY union all "
        "select start, end from CUPTI_ACTIVITY_KIND_MEMSET order by start"
    ).fetchall()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(work))


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    def digest(folder: str, seed: int) -> str:
        (tmp_path / folder).mkdir(exist_ok=True)
        out = tmp_path / folder / "x.sqlite"
        generate(out, 1_000, seed=seed, flavor="2025.1")
        return hashlib.sha256(out.read_bytes()).hexdigest()

    assert digest("a", 0) == digest("b", 0)
    assert digest("c", 1) != digest("a", 0)


@pytest.mark.nsys
def test_nsys_nvtxkernsum_reads_it(export: Path, stats: Stats) -> None:
    con = sqlite3.connect(export)
    iterations = one(con, "select count(*) from NVTX_EVENTS where text = 'optimizer_step'")[0]
    adam_total = con.execute(
        "select sum(k.end - k.start) from CUPTI_ACTIVITY_KIND_KERNEL k "
        "join StringIds s on s.id = k.demangledName where s.value = ?",
        (ADAM,),
    ).fetchone()[0]
    df = stats(export, "nvtxkernsum")
    step = df[df["NVTX Range"] == "optimizer_step"]
    assert step["Kernel Name"].tolist() == [ADAM]
    assert step[["NVTX Inst", "Kern Inst", "Total Time (ns)"]].values.tolist() == [
        [iterations, 24 * iterations, adam_total]
    ]
    # Backward kernels are launched on the autograd thread, so they sit in its ranges only.
    tids = df.groupby("NVTX Range")["TID"].first()
    assert tids["/model/layer0/conv_backward"] != tids["forward"]
    assert "backward" not in set(df["NVTX Range"])


@pytest.fixture(scope="module")
def pytorch_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "torch.sqlite"
    generate(out, KERNELS, seed=3, shape="pytorch")
    return out


def test_pytorch_shape_has_emit_nvtx_ranges_as_many_as_kernels(pytorch_export: Path) -> None:
    """The NVTX-heavy shape (issue 45): the same kernels, ~1.4 ranges each, emit_nvtx texts
    that parse, one seq shared by a forward op and its backward node, every op text unique."""
    from jlprof.engine.correlate.emit_nvtx import parse

    con = sqlite3.connect(pytorch_export)
    (kernels,) = one(con, "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL")
    assert abs(kernels - KERNELS) <= PER_ITERATION  # the kernels do not change with the shape
    (ranges,) = one(con, "select count(*) from NVTX_EVENTS where eventType = 59")
    assert 1.2 < ranges / kernels < 1.5
    texts = [t for (t,) in con.execute("select text from NVTX_EVENTS where eventType = 59")]
    ops = [t for t in texts if ", op_id = " in t]
    assert len(ops) > ranges / 2 and len(set(ops)) == len(ops)
    parsed = [parse(t) for t in ops]
    assert all(e is not None for e in parsed)
    by_seq: dict[int, set[str]] = {}
    for e in parsed:
        if e is not None and e.seq >= 0:
            by_seq.setdefault(e.seq, set()).add(e.name)
    forward = {s for s, names in by_seq.items() if any(n.startswith("aten::") for n in names)}
    backward = {s for s, names in by_seq.items() if any(n.endswith("Backward0") for n in names)}
    assert backward and backward <= forward  # every autograd node names its forward op's seq
    conv = {s for s, names in by_seq.items() if "aten::conv2d" in names}
    assert conv and conv == {s for s, n in by_seq.items() if "ConvolutionBackward0" in n}
