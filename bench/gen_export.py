"""Write a synthetic but realistic training-loop nsys export, for reader and engine benchmarks.

    python bench/gen_export.py OUT.sqlite --kernels 1000000 --seed 0 [--flavor 2022.4]

The loop is modelled in ``bench/training_loop.py`` (two threads, ~0.75 NVTX ranges per kernel,
nested 3-4 deep, ``optimizer_step`` once per iteration, one GPU busy and one visible but idle).
Rows are numpy columns written through ``NsysDb.bulk`` (one executemany per table), so the file
has the layout of the test fixtures in any flavor. Same seed and file name -> same bytes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.training_loop import (
    API_NAMES,
    AUTOGRAD_TID,
    COPY_IN,
    COPY_OUT,
    INPUT_BYTES,
    KERNEL_NAMES,
    KERNELS,
    LAUNCH,
    MAIN_TID,
    MEMSET_OP,
    PUSH,
    SHAPES,
    Run,
    simulate,
)
from tests.fixtures import nsys_enums as E
from tests.fixtures.nsys_schema import (
    FLAVORS,
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    OSRT,
    RUNTIME,
    FlavorName,
)
from tests.fixtures.nsysdb import NsysDb, mangled_kernel_name, short_kernel_name

GPU = "NVIDIA A100-SXM4-40GB"
# Calls before the first iteration (context and module setup, allocations), driver ones included.
SETUP_APIS = [("cudaGetDeviceCount_v3020", 2), ("cuModuleLoadData", 40), ("cudaMalloc_v3020", 120)]


def build(run: Run) -> NsysDb:
    """The run as an NsysDb whose big tables are numpy column chunks."""
    db = NsysDb(command=("python", "train.py", "--amp", "--arch", "resnet50"))
    p = db.process(MAIN_TID, "python")
    p.thread()
    p.thread(AUTOGRAD_TID, "pt_autograd_0")
    for cuda_id in (0, 1):  # GPU 1 is visible and idle
        p.cuda_device(cuda_id, db.gpu(cuda_id, GPU))
    cid = _runtime(db, run)
    _gpu_work(db, run, cid)
    _nvtx(db, run)
    gtid = p.threads[MAIN_TID].global_tid
    db.bulk(
        OSRT,
        {  # reading the next batch; waiting for the autograd thread
            "start": np.concatenate([run.iter_start + 2_000, run.backward[:, 0] + 1_000]),
            "end": np.concatenate([run.iter_start + 2_000 + run.reads, run.backward[:, 1] - 2_000]),
            "eventClass": E.OS_RUNTIME,
            "globalTid": gtid,
            "nameId": np.repeat(
                [db.string("read"), db.string("pthread_cond_wait")], run.iterations
            ),
            "returnValue": 0,
            "nestingLevel": 0,
            "callchainId": 0,
        },
    )
    return db


def _gtid(db: NsysDb, tid: int) -> int:
    return db.processes[MAIN_TID].threads[tid].global_tid


def _runtime(db: NsysDb, run: Run) -> np.ndarray:
    """CUDA calls, written in start order; returns correlation ids per iteration-major API column
    (setup calls first), handed out in call order as CUPTI does."""
    setup = [name for name, count in SETUP_APIS for _ in range(count)]
    setup_start = 50_000_000 + 400_000 * np.arange(len(setup))
    n_it = run.iterations
    tids = [_gtid(db, run.segments[k].tid) for k in run.api_segment]
    names = [db.string(API_NAMES[k]) for k in run.ops]
    start = np.concatenate([setup_start, run.api_start.ravel()])
    end = np.concatenate([setup_start + 150_000, run.api_end.ravel()])
    name = np.concatenate([[db.string(n) for n in setup], np.tile(names, n_it)])
    tid = np.concatenate([np.full(len(setup), _gtid(db, MAIN_TID)), np.tile(tids, n_it)])
    driver = [E.CUDA_RUNTIME if n.startswith("cuda") else E.CUDA_DRIVER for n in setup]
    event_class = np.concatenate([driver, np.zeros(run.api_start.size, dtype=np.int64)])
    order = np.argsort(start, kind="stable")
    cid = np.empty(len(start), dtype=np.int64)
    cid[order] = np.arange(1, len(start) + 1)
    db.bulk(
        RUNTIME,
        {
            "start": start[order],
            "end": end[order],
            "eventClass": event_class[order],
            "globalTid": tid[order],
            "correlationId": cid[order],
            "nameId": name[order],
            "returnValue": 0,
        },
    )
    return cid[len(setup) :].reshape(n_it, -1)


def _gpu_work(db: NsysDb, run: Run, api_cid: np.ndarray) -> None:
    """Kernels, memcpys and memsets in stream order, each with its call's correlation id."""
    gstart, gend = run.gpu_start, run.gpu_start + run.gpu_dur
    cid = api_cid[:, run.gpu_pos]
    kinds = run.ops[run.gpu_pos]
    common = {
        "deviceId": 0,
        "contextId": 1,
        "greenContextId": 0,
        "streamId": 7,
        "globalPid": db.processes[MAIN_TID].global_pid,
    }

    def cols(kind: int) -> dict[str, np.ndarray | int]:
        col = np.flatnonzero(kinds == kind)
        return {
            **common,
            "start": gstart[:, col].ravel(),
            "end": gend[:, col].ravel(),
            "correlationId": cid[:, col].ravel(),
        }

    knames = [KERNEL_NAMES[r] for r in run.refs[run.gpu_pos][kinds == LAUNCH]]
    grid = np.array([KERNELS[k][1] for k in knames])
    block = np.array([KERNELS[k][2] for k in knames])

    def tile(values: list[int] | np.ndarray) -> np.ndarray:
        return np.tile(np.asarray(values), run.iterations)

    db.bulk(
        KERNEL,
        {
            **cols(LAUNCH),
            "demangledName": tile([db.string(k) for k in knames]),
            "shortName": tile([db.string(short_kernel_name(k)) for k in knames]),
            "mangledName": tile([db.string(mangled_kernel_name(k)) for k in knames]),
            "launchType": 1,
            "cacheConfig": 0,
            "registersPerThread": 64,
            "gridX": tile(grid[:, 0]),
            "gridY": tile(grid[:, 1]),
            "gridZ": tile(grid[:, 2]),
            "blockX": tile(block[:, 0]),
            "blockY": tile(block[:, 1]),
            "blockZ": tile(block[:, 2]),
            "staticSharedMemory": 0,
            "dynamicSharedMemory": 49152,
            "localMemoryPerThread": 0,
            "localMemoryTotal": 62914560,
            "gridId": np.arange(1, len(knames) * run.iterations + 1),
            "sharedMemoryExecuted": 65536,
            "sharedMemoryLimitConfig": 0,
        },
    )
    copies = [
        (COPY_IN, 1, INPUT_BYTES, E.MEM_PINNED, E.MEM_DEVICE),
        (COPY_OUT, 2, 4, E.MEM_DEVICE, E.MEM_PINNED),
    ]
    for kind, copy_kind, nbytes, src, dst in copies:
        db.bulk(
            MEMCPY,
            {
                **cols(kind),
                "bytes": nbytes,
                "copyKind": copy_kind,
                "srcKind": src,
                "dstKind": dst,
                "srcDeviceId": 0,
                "srcContextId": 1,
                "dstDeviceId": 0,
                "dstContextId": 1,
            },
        )
    db.bulk(MEMSET, {**cols(MEMSET_OP), "value": 0, "bytes": 4096, "memKind": E.MEM_DEVICE})


def _nvtx(db: NsysDb, run: Run) -> None:
    """Push/pop ranges of both threads in start order, the main thread's wait in ``backward``,
    and one ``iteration`` mark (int64 payload = index) per iteration."""
    n_it = run.iterations
    starts, ends, texts, tids = [], [], [], []
    for s in run.segments:
        push, pop = np.flatnonzero(s.kind == PUSH), s.pops
        starts.append(s.at[:, push].ravel())
        ends.append((s.at[:, pop] + s.dur[:, pop]).ravel())
        texts.append(_texts(np.array(s.script.ranges, dtype=object)[s.ref[push]], n_it))
        tids.append(np.full(push.size * n_it, _gtid(db, s.tid)))
    starts.append(run.backward[:, 0])
    ends.append(run.backward[:, 1])
    texts.append(np.full(n_it, "backward", dtype=object))
    tids.append(np.full(n_it, _gtid(db, MAIN_TID)))
    start = np.concatenate(starts)
    order = np.argsort(start, kind="stable")
    db.bulk(
        NVTX,
        {
            "start": start[order],
            "end": np.concatenate(ends)[order],
            "eventType": E.NVTX_PUSH_POP,
            "text": np.concatenate(texts)[order],
            "globalTid": np.concatenate(tids)[order],
            "domainId": 0,
        },
    )
    db.bulk(
        NVTX,
        {
            "start": run.iter_start,
            "eventType": E.NVTX_MARK,
            "text": "iteration",
            "globalTid": _gtid(db, MAIN_TID),
            "domainId": 0,
            "int64Value": np.arange(n_it),
        },
    )


SEQ_PER_ITERATION = 1_000  # > the ops with a seq in one iteration of either shape


def _texts(names: np.ndarray, iterations: int) -> np.ndarray:
    """One thread's range texts for every iteration. emit_nvtx templates (``, seq = #k``, see
    ``training_scripts``) get the iteration's sequence number and a running ``op_id``, so each
    such text is unique, as in a real PyTorch run (StringIds grows with the trace)."""
    out = np.tile(names, iterations)
    templ = np.flatnonzero([", seq = #" in n or n.startswith("aten::") for n in names])
    if templ.size == 0:
        return out
    head, local = [], []
    for n in names[templ]:
        base, _, k = n.partition(", seq = #")
        head.append(base)
        local.append(int(k) if k else -1)
    it = np.repeat(np.arange(iterations), templ.size)
    k = np.tile(np.array(local), iterations)
    seq = np.where(k >= 0, it * SEQ_PER_ITERATION + k, -1)
    where = (np.arange(iterations)[:, None] * len(names) + templ).ravel()
    heads = np.tile(np.array(head, dtype=object), iterations)
    out[where] = [
        f"{h}, seq = {q}, op_id = {o}" if q >= 0 else f"{h}, op_id = {o}"
        for h, q, o in zip(heads, seq.tolist(), range(where.size), strict=True)
    ]
    return out


def generate(
    out: Path, kernels: int, seed: int, flavor: FlavorName = "2022.4", shape: str = "dlprof"
) -> dict[str, int]:
    """Simulate, write ``out``; returns the row count of each event table."""
    db = build(simulate(kernels, seed, shape=shape))
    db.write(out, flavor=flavor)
    return {t: db.count(t) for t in (KERNEL, RUNTIME, NVTX, MEMCPY, MEMSET, OSRT)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("out", type=Path, help="SQLite file to write (replaced if it exists)")
    ap.add_argument("--kernels", type=int, default=1_000_000, help="about this many kernels")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flavor", choices=FLAVORS, default="2022.4", help="nsys export version")
    ap.add_argument(
        "--shape",
        choices=SHAPES,
        default="dlprof",
        help="dlprof: module ranges (~0.75 a kernel); pytorch: plus emit_nvtx's aten:: and "
        "autograd ranges with seq/op_id texts (~1.4 a kernel, each text unique)",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    counts = generate(args.out, args.kernels, args.seed, args.flavor, args.shape)
    took = time.perf_counter() - t0
    print(", ".join(f"{t}: {n}" for t, n in counts.items()))
    size = args.out.stat().st_size / 1e6
    print(f"wrote {args.out} ({size:.1f} MB, flavor {args.flavor}) in {took:.1f} s")


if __name__ == "__main__":
    main()
