import numpy as np

from jlprof.engine.aggregate.iterations import find_iterations, suggest_key_nodes
from jlprof.engine.correlate.correlate import correlate

from .frames import call, kernel, make_trace, rng
from .synthetic import training_loop


def test_n_instances_give_n_plus_one_intervals():
    loop = training_loop(iters=5)
    c = correlate(loop.trace)
    it = find_iterations(c, "optimizer_step")
    ends = sorted(r["end_ns"] for r in loop.ranges if r["text"] == "optimizer_step")
    assert it.count == 6
    assert it.bounds_ns.tolist() == [c.t_first_ns, *ends, c.t_last_ns]


def test_missing_key_node_gives_one_interval():
    c = correlate(training_loop().trace)
    it = find_iterations(c, "global_step")
    assert it.key_node is None and it.count == 1


def test_key_node_by_path():
    c = correlate(training_loop(iters=3).trace)
    assert find_iterations(c, "/step/optimizer_step").count == 4


def test_data_parallel_boundary_is_latest_kth_end():
    # two processes, same count: boundary k = max of the k-th ends
    t = make_trace(
        nvtx=[
            rng("global_step", 0, 10, pid=1),
            rng("global_step", 20, 30, pid=1),
            rng("global_step", 0, 12, pid=2),
            rng("global_step", 20, 28, pid=2),
        ]
    )
    it = find_iterations(correlate(t), "global_step")
    assert it.bounds_ns.tolist() == [0, 12, 30, 30]


def test_unequal_counts_fall_back_to_every_instance():
    t = make_trace(
        nvtx=[
            rng("global_step", 0, 10, pid=1),
            rng("global_step", 20, 30, pid=1),
            rng("global_step", 0, 12, pid=2),
            rng("other", 40, 50, pid=2),
        ]
    )
    it = find_iterations(correlate(t), "global_step")
    assert it.bounds_ns.tolist() == [0, 10, 12, 30, 50]


def test_kernel_running_past_boundary_stays_in_launch_iteration():
    from jlprof.engine.aggregate.aggregate import build_cube, instance_metrics

    t = make_trace(
        gpu=[kernel(50, 500, 1)],  # runs long after the boundary at 100
        api=[call(10, 20, 1)],
        nvtx=[rng("fwd", 5, 30), rng("global_step", 90, 100), rng("fwd", 200, 210)],
    )
    c = correlate(t)
    it = find_iterations(c, "global_step")
    cube = build_cube(c, instance_metrics(c), it)
    assert it.bounds_ns.tolist() == [5, 100, 500]
    assert cube.gpu_iter.tolist() == [0]
    # but time-based figures clip: iteration 1 is GPU-busy from 100 to 500
    busy = cube.time_iter["gpu_busy"].to_numpy()
    assert busy.tolist() == [50, 400]


def test_suggest_ranks_the_periodic_marker_first():
    c = correlate(training_loop(iters=8).trace)
    s = suggest_key_nodes(c)
    assert s["calls"].iat[0] == 8
    assert s["op_name"].iat[0] in {"step", "conv", "optimizer_step"}
    assert np.all(np.diff(s["score"].to_numpy()) <= 0)


def test_cube_iteration_arrays_are_int32_and_slice_by_slice(monkeypatch):
    """inst_iter and gpu_iter are held as int32, computed a slice at a time: the same as
    searching every start (launch start for GPU rows) in the bounds at once."""
    from jlprof.engine.aggregate import aggregate
    from jlprof.engine.aggregate.aggregate import build_cube, instance_metrics

    t = make_trace(
        gpu=[kernel(50, 500, 1), kernel(120, 130, 2), kernel(260, 270, 3)],
        api=[call(10, 20, 1), call(110, 115, 2), call(250, 255, 3)],
        nvtx=[rng("step", 0, 30), rng("step", 100, 140), rng("step", 240, 280)],
    )
    c = correlate(t)
    it = find_iterations(c, "step")
    monkeypatch.setattr(aggregate, "WINDOW_ROWS", 2)  # slices of 2 rows
    cube = build_cube(c, instance_metrics(c), it)
    inner = it.bounds_ns[1:-1]
    want_inst = np.searchsorted(inner, c.inst["start_ns"].to_numpy(), side="right")
    want_gpu = np.searchsorted(inner, np.array([10, 110, 250]), side="right")  # launches
    assert cube.inst_iter.dtype == np.int32 and cube.gpu_iter.dtype == np.int32
    assert cube.inst_iter.tolist() == want_inst.tolist()
    assert cube.gpu_iter.tolist() == want_gpu.tolist() == [0, 1, 2]
