"""The reader's frames from two source trees, compared exactly (issue 18: a faster read).

``PYTHONPATH=OLD python bench/read_identity.py dump FILE.pkl [EXPORT ...]`` pickles, for
each export (default: the generated test fixtures rich_db in every nsys flavor, cpu_only_db,
small_training_export, TensorFlow, TensorRT, rank, emit_nvtx and plugin exports, every real
trace of tests/data/real, and the exports given), every frame of ``read_trace`` (gpu, api,
nvtx, marks, osrt, gpus) with connectorx and, for the fixtures, with ``sqlite3`` too, plus
``meta`` and ``warnings``.
``PYTHONPATH=NEW python bench/read_identity.py compare FILE.pkl [EXPORT ...]`` reads the
same with NEW and asserts every frame equal (``pd.testing.assert_frame_equal`` with
``check_exact``: dtypes, categories and their order, index and row order included). Run from
the repository root (the fixtures are imported from tests/).
"""

from __future__ import annotations

import pickle
import sys
import tempfile
from pathlib import Path

import pandas as pd

FRAMES = ("gpu", "api", "nvtx", "marks", "osrt", "gpus")


def _cases(extra: list[str]) -> list[tuple[str, Path, tuple[bool, ...]]]:
    sys.path.insert(0, str(Path.cwd()))
    from tests.fixtures.framework_traces import tf_export, trt_export
    from tests.fixtures.loops import small_training_export
    from tests.fixtures.nsys_schema import FLAVORS
    from tests.fixtures.ranks import rank_export
    from tests.fixtures.scenarios import cpu_only_db, real_traces, rich_db
    from tests.fixtures.torch_traces import emit_nvtx_db, plugin_db

    tmp = Path(tempfile.mkdtemp(prefix="read-identity-"))
    both = (True, False)
    cases = [
        (f"rich_{f}", rich_db().write(tmp / f"rich_{f}.sqlite", flavor=f), both) for f in FLAVORS
    ]
    cases.append(("cpu_only", cpu_only_db().write(tmp / "cpu.sqlite"), both))
    cases.append(("small_training", small_training_export(tmp / "loop.sqlite"), both))
    cases.append(("tf_fused", tf_export(tmp / "tf.sqlite", fused=True), both))
    cases.append(("trt", trt_export(tmp / "trt.sqlite"), both))
    cases.append(("rank_1", rank_export(tmp / "rank1.sqlite", 1), both))
    cases.append(("emit_nvtx", emit_nvtx_db(3).write(tmp / "emit.sqlite"), both))
    cases.append(("plugin", plugin_db(3).write(tmp / "plugin.sqlite"), both))
    cases += [(p.parent.name, p, (True,)) for p in real_traces()]
    cases += [(Path(p).name, Path(p), (True,)) for p in extra]
    return cases


def traces(extra: list[str]) -> dict[str, dict]:
    from jlprof.engine.read.read import read_trace

    out: dict[str, dict] = {}
    for name, path, paths in _cases(extra):
        for cx in paths:
            tr = read_trace(path, use_connectorx=cx)
            key = f"{name} / {'connectorx' if cx else 'sqlite3'}"
            out[key] = {n: getattr(tr, n) for n in FRAMES}
            out[key]["meta"] = tr.meta
            out[key]["warnings"] = tr.warnings
            print(f"{key}: {len(tr.gpu)} GPU rows, {len(tr.nvtx)} ranges", flush=True)
    return out


def main(argv: list[str]) -> int:
    cmd, pkl, *extra = argv
    got = traces(extra)
    if cmd == "dump":
        Path(pkl).write_bytes(pickle.dumps(got))
        return 0
    want = pickle.loads(Path(pkl).read_bytes())
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for key, frames in want.items():
        for name in FRAMES:
            pd.testing.assert_frame_equal(
                got[key][name], frames[name], check_exact=True, obj=f"{key}: {name}"
            )
        assert got[key]["meta"] == frames["meta"], key
        assert got[key]["warnings"] == frames["warnings"], key
    print(f"identical: {len(want)} traces x {len(FRAMES)} frames")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
