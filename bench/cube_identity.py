"""The cube's frames from two source trees, compared exactly (issue 18: windowed cube).

``PYTHONPATH=OLD python bench/cube_identity.py dump FILE.pkl [EXPORT ...]`` pickles, for
each export (default: the generated test fixtures rich_db and small_training_export, every
real trace of tests/data/real, and the exports given), the cube's ``time_iter``,
``op_iter``, ``kernel_iter``, ``group_iter``, ``inst_iter`` and ``gpu_iter`` for its key
node (the fixtures' own; each real trace with none and with its first suggested one).
``PYTHONPATH=NEW python bench/cube_identity.py compare FILE.pkl [EXPORT ...]`` builds the
same with NEW and asserts every frame equal (``pd.testing.assert_frame_equal``, dtypes
and row order included) and every array equal; ``--window-rows N`` first sets NEW's
``aggregate.WINDOW_ROWS`` (e.g. 7: many small windows); ``--values`` compares values and
row order but not dtypes (a change that narrows the cube's columns to int32 on purpose, as
issue 18's of 2026-11-26 did). Run from the repository root (the fixtures are imported from
tests/).
"""

from __future__ import annotations

import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

FRAMES = ("time_iter", "op_iter", "kernel_iter", "group_iter")
ARRAYS = ("inst_iter", "gpu_iter")


def _cases(extra: list[str]) -> list[tuple[str, Path, list[str | None]]]:
    sys.path.insert(0, str(Path.cwd()))
    from tests.fixtures.loops import small_training_export
    from tests.fixtures.scenarios import KEY_NODE, real_traces, rich_db

    tmp = Path(tempfile.mkdtemp(prefix="cube-identity-"))
    cases = [
        ("rich_db", rich_db().write(tmp / "rich.sqlite"), [KEY_NODE, None]),
        ("small_training", small_training_export(tmp / "loop.sqlite"), ["optimizer_step"]),
    ]
    cases += [(p.parent.name, p, [None, "suggested"]) for p in real_traces()]
    cases += [(Path(p).name, Path(p), ["optimizer_step"]) for p in extra]
    return cases


def cubes(extra: list[str]) -> dict[str, dict]:
    from jlprof.engine.analysis import Analysis
    from jlprof.engine.read.read import read_trace

    out: dict[str, dict] = {}
    for name, path, keys in _cases(extra):
        a = Analysis(read_trace(path))
        for key in keys:
            if key == "suggested":
                sug = a.suggest_key_nodes(1)["op_name"].tolist()
                if not sug:
                    continue
                key = sug[0]
            a.set_key_node(key)
            cube = a.cube
            out[f"{name} / {key}"] = {n: getattr(cube, n) for n in FRAMES + ARRAYS}
            print(f"{name} / {key}: {len(cube.gpu_iter)} GPU rows, "
                  f"{cube.iterations.count} iterations", flush=True)  # fmt: skip
    return out


def main(argv: list[str]) -> int:
    dtypes = True
    while argv[0].startswith("--"):
        if argv[0] == "--values":
            dtypes, argv = False, argv[1:]
            continue
        if argv[0] != "--window-rows":
            raise SystemExit(f"unknown option {argv[0]}")
        from jlprof.engine.aggregate import aggregate

        aggregate.WINDOW_ROWS = int(argv[1])
        argv = argv[2:]
    mode, pkl, extra = argv[0], Path(argv[1]), argv[2:]
    got = cubes(extra)
    if mode == "dump":
        pkl.write_bytes(pickle.dumps(got, protocol=5))
        return 0
    want = pickle.loads(pkl.read_bytes())
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for case, frames in want.items():
        for n in FRAMES:
            pd.testing.assert_frame_equal(
                got[case][n], frames[n], check_exact=True, check_dtype=dtypes
            )
        for n in ARRAYS:
            assert (not dtypes or got[case][n].dtype == frames[n].dtype) and np.array_equal(
                got[case][n], frames[n]
            ), (case, n)
        print(f"identical: {case}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
