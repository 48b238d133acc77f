"""The fixture builder writes exports like nsys' own: checked with SQL and with nsys stats."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import Stats
from tests.fixtures.nsys_schema import FLAVORS, FlavorName
from tests.fixtures.nsysdb import KernelSpec, NsysDb, global_tid

GEMM = "volta_h884gemm_64x64_ldg8_nn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4>(int)"
RELU = "void at::native::relu_kernel<float>(float*, int)"
ADAM = "multi_tensor_apply_kernel"


def names(text: str) -> list[str]:
    return text.split(",")


# Column orders of real third-party exports (instantngp 2022.4.2, mmagic 2024.2.1,
# nvfuser-crossentropy 2025.1.1), kept here so the tests need nothing outside the repo.
KERNEL_2022 = names(
    "start,end,deviceId,contextId,streamId,correlationId,globalPid,demangledName,shortName,"
    "mangledName,launchType,cacheConfig,registersPerThread,gridX,gridY,gridZ,blockX,blockY,blockZ,"
    "staticSharedMemory,dynamicSharedMemory,localMemoryPerThread,localMemoryTotal,gridId,"
    "sharedMemoryExecuted,graphNodeId,sharedMemoryLimitConfig"
)
KERNEL_2024 = [*KERNEL_2022[:4], "greenContextId", *KERNEL_2022[4:]]
MEMCPY_2024 = names(
    "start,end,deviceId,contextId,greenContextId,streamId,correlationId,globalPid,bytes,copyKind,"
    "deprecatedSrcId,srcKind,dstKind,srcDeviceId,srcContextId,dstDeviceId,dstContextId,"
    "migrationCause,graphNodeId,virtualAddress"
)
MEMSET_2024 = names(
    "start,end,deviceId,contextId,greenContextId,streamId,correlationId,globalPid,value,bytes,"
    "graphNodeId,memKind"
)
NVTX_2022 = names(
    "start,end,eventType,rangeId,category,color,text,globalTid,endGlobalTid,textId,domainId,"
    "uint64Value,int64Value,doubleValue,uint32Value,int32Value,floatValue,jsonTextId,jsonText"
)
RUNTIME_ALL = names("start,end,eventClass,globalTid,correlationId,nameId,returnValue,callchainId")
OSRT_2022 = names("start,end,eventClass,globalTid,nameId,returnValue,nestingLevel,callchainId")


def training_db() -> NsysDb:
    """Three iterations of a tiny training loop; the expected report values are in the tests."""
    db = NsysDb()
    db.gpu(0, "NVIDIA A100-SXM4-40GB")
    db.gpu(1, "NVIDIA A100-SXM4-40GB")  # visible, idle
    p = db.process(4242, "python")
    t = p.thread()
    loader = p.thread(4250, "pt_data_worker")
    fwd = t.domain("Forward")
    t.start_end("epoch", 0, 30_000, end_thread=loader)  # ended elsewhere: nvtxkernsum skips it
    t.start_end("warmup", 0, 9_999)
    t.mark("amp=on", 1, int64_value=1)
    for i in range(3):
        b = i * 10_000
        t.push_pop("forward", b, b + 4_000, domain=fwd)
        t.push_pop("layer1/conv", b + 100, b + 2_000, domain=fwd, registered=True)
        t.launch(GEMM, b + 200, b + 300, b + 1_000, b + 1_400 + 10 * i, grid=(64, 2, 1))
        t.launch(ELEMENTWISE, b + 400, b + 500, b + 1_500, b + 1_550)
        t.push_pop("relu", b + 2_100, b + 3_000)
        t.launch(RELU, b + 2_200, b + 2_300, b + 3_000, b + 3_080)
        t.push_pop("optimizer_step", b + 5_000, b + 9_000)
        graph = [KernelSpec(ADAM, b + 5_300, b + 5_330), KernelSpec(ADAM, b + 5_330, b + 5_370)]
        t.graph_launch(graph, b + 5_100, b + 5_200)
        t.api_only("cudaStreamSynchronize_v3020", b + 9_100, b + 9_500)
        t.memcpy("HtoD", 4096, b + 9_600, b + 9_700, b + 9_700, b + 9_800, pinned=True)
        t.memset(512, b + 9_710, b + 9_720, b + 9_800, b + 9_810)
        loader.osrt("fread", b + 100, b + 600)
    return db


def two_process_db() -> NsysDb:
    """Two ranks whose correlation ids collide (both start at 1), as in real multi-rank traces."""
    db = NsysDb()
    for rank, (pid, kernel, dur) in enumerate([(1000, "kernel_a", 100), (2000, "kernel_b", 300)]):
        db.gpu(rank)
        t = db.process(pid).thread()
        t.push_pop("step", 0, 1_000)
        t.launch(kernel, 10 + rank, 20 + rank, 100, 100 + dur, device=rank)
    return db


def columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"pragma table_info({table})")]


def tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("select name from sqlite_master where type='table'")}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[FlavorName, Path]:
    db = training_db()
    out = tmp_path_factory.mktemp("flavors")
    return {f: db.write(out / f"train_{f}.sqlite", flavor=f) for f in FLAVORS}


# Schema per flavor ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flavor", "kernel", "nvtx_tail", "meta", "launch_enum"),
    [
        ("2021", KERNEL_2022, "jsonText", "EXPORT_META_DATA", None),
        ("2022.4", KERNEL_2022, "jsonText", "EXPORT_META_DATA", "ENUM_CUDA_KRENEL_LAUNCH_TYPE"),
        ("2024.2", KERNEL_2024, "jsonText", "META_DATA_EXPORT", "ENUM_CUDA_KERNEL_LAUNCH_TYPE"),
        ("2025.1", KERNEL_2024, "binaryData", "META_DATA_EXPORT", "ENUM_CUDA_KERNEL_LAUNCH_TYPE"),
    ],
)
def test_columns_and_tables_match_the_real_exporter(
    written: dict[FlavorName, Path],
    flavor: FlavorName,
    kernel: list[str],
    nvtx_tail: str,
    meta: str,
    launch_enum: str | None,
) -> None:
    con = sqlite3.connect(written[flavor])
    assert columns(con, "CUPTI_ACTIVITY_KIND_KERNEL") == kernel
    assert columns(con, "CUPTI_ACTIVITY_KIND_RUNTIME") == RUNTIME_ALL
    assert columns(con, "OSRT_API") == OSRT_2022
    assert columns(con, "NVTX_EVENTS")[:19] == NVTX_2022
    assert columns(con, "NVTX_EVENTS")[-1] == nvtx_tail
    new = flavor in ("2024.2", "2025.1")
    assert (columns(con, "CUPTI_ACTIVITY_KIND_MEMCPY") == MEMCPY_2024) is new
    assert (columns(con, "CUPTI_ACTIVITY_KIND_MEMSET") == MEMSET_2024) is new
    have = tables(con)
    assert meta in have
    assert ("EXPORT_META_DATA" in have) is (not new)
    assert ("META_DATA_CAPTURE" in have) is new
    assert ("TARGET_INFO_CUDA_DEVICE" in have) is (flavor == "2025.1")
    assert ("TARGET_INFO_SESSION_START_TIME" in have) is (flavor != "2021")
    assert {t for t in have if "LAUNCH_TYPE" in t} == ({launch_enum} if launch_enum else set())
    assert not any(t.startswith("ENUM_") for t in have) or flavor != "2021"
    ddl = con.execute("select sql from sqlite_master where name='NVTX_EVENTS'").fetchone()[0]
    assert ("-- Serialized GlobalId." in ddl) is (flavor != "2021")


def test_position_based_reads_break_across_flavors(written: dict[FlavorName, Path]) -> None:
    """Column 5 of KERNEL is streamId up to 2022.4 and greenContextId from 2024.2."""
    old = sqlite3.connect(written["2022.4"]).execute("select * from CUPTI_ACTIVITY_KIND_KERNEL")
    new = sqlite3.connect(written["2024.2"]).execute("select * from CUPTI_ACTIVITY_KIND_KERNEL")
    assert next(old)[4] == 7
    assert next(new)[4] == 0


def test_version_metadata(written: dict[FlavorName, Path]) -> None:
    expect = {
        "2021": ("2021.5.2.53", "2.9.1"),
        "2022.4": ("2022.4.2.1", "3.0.0"),
        "2024.2": ("2024.2.1.106", "3.11.1"),
        "2025.1": ("2025.1.1.110", "3.17.1"),
    }
    for flavor, (product, schema) in expect.items():
        con = sqlite3.connect(written[flavor])
        table = "EXPORT_META_DATA" if flavor in ("2021", "2022.4") else "META_DATA_EXPORT"
        meta = dict(con.execute(f"select name, value from {table}").fetchall())
        assert (meta["EXPORT_PRODUCT_VERSION"], meta["EXPORT_SCHEMA_VERSION"]) == (product, schema)
    capture = sqlite3.connect(written["2024.2"]).execute(
        "select value from META_DATA_CAPTURE where name='PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE'"
    )
    assert capture.fetchall() == [("Node",)]  # per-node graph kernels need --cuda-graph-trace=node


def test_tables_are_lazy_unless_asked(tmp_path: Path) -> None:
    db = NsysDb()
    db.process(7).thread().push_pop("only_nvtx", 0, 10)
    con = sqlite3.connect(db.write(tmp_path / "lazy.sqlite"))
    assert "NVTX_EVENTS" in tables(con)
    cuda = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API"}
    assert not cuda & tables(con)
    con = sqlite3.connect(db.write(tmp_path / "eager.sqlite", empty_tables=True))
    assert con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone() == (0,)


# Row contents --------------------------------------------------------------------------------


def test_names_are_string_ids(written: dict[FlavorName, Path]) -> None:
    con = sqlite3.connect(written["2022.4"])
    rows = con.execute(
        "select typeof(k.shortName), s.value, d.value, m.value from CUPTI_ACTIVITY_KIND_KERNEL k "
        "join StringIds s on s.id = k.shortName join StringIds d on d.id = k.demangledName "
        "left join StringIds m on m.id = k.mangledName where d.value = ?",
        (RELU,),
    ).fetchall()
    assert rows == [("integer", "relu_kernel", RELU, "_ZN2at6native11relu_kernelEv")] * 3
    api = con.execute(
        "select s.value, count(*) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s "
        "on s.id = r.nameId group by 1 order by 1"
    ).fetchall()
    assert api == [
        ("cudaGraphLaunch_v10000", 3),
        ("cudaLaunchKernel_v7000", 9),
        ("cudaMemcpyAsync_v3020", 3),
        ("cudaMemsetAsync_v3020", 3),
        ("cudaStreamSynchronize_v3020", 3),
    ]
    # The 2021 flavor models old captures, which carry no mangled names.
    old = sqlite3.connect(written["2021"])
    mangled = old.execute("select count(mangledName) from CUPTI_ACTIVITY_KIND_KERNEL")
    assert mangled.fetchone() == (0,)


def test_nvtx_rows(written: dict[FlavorName, Path]) -> None:
    con = sqlite3.connect(written["2022.4"])
    main, loader = global_tid(4242, 4242), global_tid(4242, 4250)
    assert main == (1 << 48) | (4242 << 24) | 4242
    q = "select eventType, text, textId, domainId, end, endGlobalTid, rangeId from NVTX_EVENTS"
    rows = con.execute(q + " where globalTid = ? order by rowid limit 5", (main,)).fetchall()
    assert rows[0] == (75, "Forward", None, 1, None, None, None)
    assert rows[1] == (60, "epoch", None, 0, 30_000, loader, 1)
    assert rows[2] == (60, "warmup", None, 0, 9_999, None, 2)
    assert rows[3][:5] == (34, "amp=on", None, 0, None)
    assert rows[4] == (59, "forward", None, 1, 4_000, None, None)
    registered = con.execute(
        "select e.text, s.value, e.domainId from NVTX_EVENTS e join StringIds s on s.id = e.textId"
    ).fetchall()
    assert registered == [(None, "layer1/conv", 1)] * 3
    assert con.execute("select int64Value from NVTX_EVENTS where eventType = 34").fetchone() == (1,)


def test_gpu_work_joins_its_api_call_in_the_same_process(written: dict[FlavorName, Path]) -> None:
    con = sqlite3.connect(written["2022.4"])
    joined = con.execute(
        "select count(*), count(distinct k.correlationId) from CUPTI_ACTIVITY_KIND_KERNEL k "
        "join CUPTI_ACTIVITY_KIND_RUNTIME r on k.correlationId = r.correlationId "
        "and k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000)"
    ).fetchone()
    assert joined == (15, 12)  # 9 launches + 3 graph launches of 2 kernels
    graph = con.execute(
        "select count(*), count(distinct graphNodeId), count(distinct correlationId) "
        "from CUPTI_ACTIVITY_KIND_KERNEL where graphNodeId is not null"
    ).fetchone()
    assert graph == (6, 6, 3)
    mem = con.execute(
        "select copyKind, srcKind, dstKind, bytes from CUPTI_ACTIVITY_KIND_MEMCPY"
    ).fetchall()
    assert mem == [(1, 1, 2, 4096)] * 3  # HtoD from pinned host memory


def test_correlation_ids_are_per_process(tmp_path: Path) -> None:
    con = sqlite3.connect(two_process_db().write(tmp_path / "ranks.sqlite"))
    rows = con.execute(
        "select (globalPid >> 24) & 0xFFFFFF, correlationId, deviceId "
        "from CUPTI_ACTIVITY_KIND_KERNEL order by 1"
    ).fetchall()
    assert rows == [(1000, 1, 0), (2000, 1, 1)]
    db = NsysDb()
    t = db.process(5).thread()
    assert t.launch("k", 0, 1, 2, 3, correlation_id=40) == 40
    assert t.api_only("cudaFree_v3020", 4, 5) == 41  # the counter moves past explicit ids


def test_descriptive_tables(written: dict[FlavorName, Path]) -> None:
    con = sqlite3.connect(written["2025.1"])
    gpus = con.execute("select id, cuDevice, name, smCount from TARGET_INFO_GPU").fetchall()
    assert gpus == [(0, 0, "NVIDIA A100-SXM4-40GB", 108), (1, 1, "NVIDIA A100-SXM4-40GB", 108)]
    assert con.execute("select * from TARGET_INFO_CUDA_DEVICE").fetchall() == [(0, 0, 4242)]
    threads = con.execute(
        "select s.value, t.globalTid & 0xFFFFFF from ThreadNames t "
        "join StringIds s on s.id = t.nameId"
    ).fetchall()
    assert threads == [("python", 4242), ("pt_data_worker", 4250)]
    assert con.execute("select pid, name from PROCESSES").fetchall() == [(4242, "python")]
    osrt = con.execute("select eventClass, end - start from OSRT_API").fetchall()
    assert osrt == [(27, 500)] * 3
    assert con.execute("select startTime, stopTime from ANALYSIS_DETAILS").fetchone() == (0, 30_000)


def test_builder_rejects_bad_input() -> None:
    db = NsysDb()
    t = db.process(1).thread()
    with pytest.raises(ValueError, match="before start"):
        t.launch("k", 10, 20, 50, 40)
    with pytest.raises(KeyError, match="no columns"):
        db.bulk("CUPTI_ACTIVITY_KIND_KERNEL", {"start": [1], "strat": [2]})


# NVIDIA's own reports -------------------------------------------------------------------------


def by(df: pd.DataFrame, *keys: str) -> dict[tuple, tuple]:
    """Rows keyed by ``keys`` -> (count-like, total) columns, for order-free comparisons."""
    count = "Instances" if "Instances" in df else "Count" if "Count" in df else "Num Calls"
    if "Kern Inst" in df:
        return {
            tuple(r[k] for k in keys): (r["NVTX Inst"], r["Kern Inst"], r["Total Time (ns)"])
            for _, r in df.iterrows()
        }
    return {tuple(r[k] for k in keys): (r[count], r["Total Time (ns)"]) for _, r in df.iterrows()}


@pytest.mark.nsys
def test_nsys_gpukernsum_counts_and_totals(written: dict[FlavorName, Path], stats: Stats) -> None:
    df = stats(written["2022.4"], "gpukernsum")
    assert by(df, "Name") == {
        (GEMM,): (3, 400 + 410 + 420),
        (ELEMENTWISE,): (3, 150),
        (RELU,): (3, 240),
        (ADAM,): (6, 210),
    }
    assert df.loc[df["Name"] == GEMM, "GridXYZ"].str.split().tolist() == [["64", "2", "1"]]
    base = stats(written["2022.4"], "gpukernsum:base")
    assert set(base["Name"]) == {GEMM, "vectorized_elementwise_kernel", "relu_kernel", ADAM}


@pytest.mark.nsys
def test_nsys_nvtxkernsum_ranges_domains_registered_strings(
    written: dict[FlavorName, Path], stats: Stats
) -> None:
    df = stats(written["2022.4"], "nvtxkernsum")
    assert by(df, "NVTX Range", "Style", "PID", "TID", "Kernel Name") == {
        ("Forward:forward", "PushPop", 4242, 4242, GEMM): (3, 3, 1230),
        ("Forward:forward", "PushPop", 4242, 4242, ELEMENTWISE): (3, 3, 150),
        ("Forward:forward", "PushPop", 4242, 4242, RELU): (3, 3, 240),
        ("Forward:layer1/conv", "PushPop", 4242, 4242, GEMM): (3, 3, 1230),
        ("Forward:layer1/conv", "PushPop", 4242, 4242, ELEMENTWISE): (3, 3, 150),
        ("relu", "PushPop", 4242, 4242, RELU): (3, 3, 240),
        ("optimizer_step", "PushPop", 4242, 4242, ADAM): (3, 6, 210),  # graph kernels
        # start/end range on the launching thread; "epoch" ended on another thread: skipped.
        ("warmup", "StartEnd", 4242, 4242, GEMM): (1, 1, 400),
        ("warmup", "StartEnd", 4242, 4242, ELEMENTWISE): (1, 1, 50),
        ("warmup", "StartEnd", 4242, 4242, RELU): (1, 1, 80),
        ("warmup", "StartEnd", 4242, 4242, ADAM): (1, 2, 70),
    }


@pytest.mark.nsys
def test_nsys_api_memory_and_osrt_summaries(written: dict[FlavorName, Path], stats: Stats) -> None:
    path = written["2022.4"]
    assert by(stats(path, "cudaapisum"), "Name") == {
        ("cudaLaunchKernel",): (9, 900),
        # nsys 2022.4 strips only 4-digit suffixes (substr(name, -6, 2) = '_v'): not _v10000.
        ("cudaGraphLaunch_v10000",): (3, 300),
        ("cudaStreamSynchronize",): (3, 1200),
        ("cudaMemcpyAsync",): (3, 300),
        ("cudaMemsetAsync",): (3, 30),
    }
    assert by(stats(path, "gpumemtimesum"), "Operation") == {
        ("[CUDA memcpy HtoD]",): (3, 300),
        ("[CUDA memset]",): (3, 30),
    }
    assert by(stats(path, "osrtsum"), "Name") == {("fread",): (3, 1500)}


@pytest.mark.nsys
def test_nsys_keeps_processes_apart_when_correlation_ids_repeat(
    tmp_path: Path, stats: Stats
) -> None:
    df = stats(two_process_db().write(tmp_path / "ranks.sqlite"), "nvtxkernsum")
    assert by(df, "NVTX Range", "PID", "Kernel Name") == {
        ("step", 1000, "kernel_a"): (1, 1, 100),
        ("step", 2000, "kernel_b"): (1, 1, 300),
    }


@pytest.mark.nsys
@pytest.mark.parametrize("flavor", [f for f in FLAVORS if f != "2022.4"])
def test_nsys_reads_every_flavor_alike(
    written: dict[FlavorName, Path], stats: Stats, flavor: FlavorName
) -> None:
    for report in ("gpukernsum", "nvtxkernsum", "cudaapisum"):
        expected = stats(written["2022.4"], report)
        pd.testing.assert_frame_equal(stats(written[flavor], report), expected)
