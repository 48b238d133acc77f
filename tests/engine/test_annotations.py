"""``jlprof:`` metadata marks read back from an export (jlprof.engine.correlate.annotations)."""

from __future__ import annotations

from jlprof.engine.correlate.annotations import annotation_events, annotation_facts
from jlprof.engine.read.read import read_trace
from jlprof.torch import format as fmt
from tests.fixtures.nsysdb import NsysDb


def _trace(tmp_path, marks):
    db = NsysDb()
    db.gpu(cu_device=0)
    t = db.process(pid=77).thread()
    t.push_pop("optimizer_step", 0, 10)
    for ts, text, registered in marks:
        t.mark(text, ts, registered=registered)
    return read_trace(db.write(tmp_path / "m.sqlite"))


def test_events_keep_only_jlprof_marks_in_time_order(tmp_path):
    tr = _trace(tmp_path, [
        (50, fmt.mark_text({"event": "step", "step": 2, "peak_mem_bytes": 7}), True),
        (20, fmt.mark_text({"event": "state", "amp": True, "batch_size": 4}), False),
        (30, "amp=on", False),  # someone else's mark
        (40, "jlprof:{broken", False),
        (45, 'jlprof:{"no_event": 1}', False),
    ])  # fmt: skip
    ev = annotation_events(tr)
    assert list(ev["event"]) == ["state", "step"]
    assert list(ev["ts_ns"]) == sorted(ev["ts_ns"])
    assert ev["data"][0] == {"event": "state", "amp": True, "batch_size": 4}


def test_facts_summarise_the_run(tmp_path):
    tr = _trace(tmp_path, [
        (1, fmt.mark_text({"event": "init", "amp": False}), True),
        (2, fmt.mark_text({"event": "state", "amp": False, "batch_size": 8}), True),
        (3, fmt.mark_text({"event": "slow_api", "api": "gradcheck"}), True),
        (4, fmt.mark_text({"event": "step", "step": 1, "peak_mem_bytes": 5, "total_mem_bytes": 9,
                           "compiled_graphs": 1}), True),
        (5, fmt.mark_text({"event": "state", "amp": True, "batch_size": 8}), True),
        (6, fmt.mark_text({"event": "slow_api", "api": "gradcheck"}), True),
        (7, fmt.mark_text({"event": "step", "step": 4, "peak_mem_bytes": 6, "total_mem_bytes": 9,
                           "compiled_graphs": 2}), True),
        (8, fmt.mark_text({"event": "user", "batch_size": 64}), True),
    ])  # fmt: skip
    f = annotation_facts(tr)
    assert f["annotated"] and f["state"]["amp"] is True and len(f["states"]) == 2
    assert (f["peak_mem_bytes"], f["total_mem_bytes"]) == (6, 9)
    assert f["slow_apis"] == ["gradcheck"] and f["steps"] == 4
    assert f["compiled_graphs"] == [[1, 1], [4, 2]]
    assert f["user"] == {"batch_size": 64}


def test_no_marks_no_facts(tmp_path):
    f = annotation_facts(_trace(tmp_path, []))
    assert not f["annotated"] and f["state"] == {} and f["peak_mem_bytes"] is None
