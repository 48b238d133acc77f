"""The GPU and NVTX timelines of an iteration range, bounded in rows whatever the trace size.

Above :data:`MAX_KERNEL_GLYPHS` activities each (device, stream) lane's window is cut into equal
time bins and the work starting in a bin becomes one row (count, busy time, longest kernel's
name); NVTX ranges are capped at :data:`MAX_NVTX_GLYPHS`, the longest kept. Sorting is done once
per profile (``Analysis.once``), so a range change is binary searches and gathers. The
dashboard's views draw these frames (``widgets/data.py`` re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jlprof.engine.aggregate import intervals
from jlprof.engine.aggregate.aggregate import gpu_lanes

if TYPE_CHECKING:
    from jlprof.engine.analysis import Analysis

MAX_KERNEL_GLYPHS = 4000  # above this the GPU timeline shows merged bins, not single kernels
BINS_PER_LANE = 1500  # merged bins per stream: about 1.5 per pixel of a 1000-pixel-wide plot
MAX_NVTX_GLYPHS = 2000  # NVTX ranges drawn at most (the longest ones win)


# ---- GPU timeline ---------------------------------------------------------------------------
@dataclass
class _GpuOrder:
    """GPU work sorted by (lane, start) once per profile; lanes are (device, stream)."""

    order: np.ndarray
    lane: np.ndarray  # lane per sorted row
    labels: list[str]
    start: np.ndarray  # per sorted row, so a range change gathers nothing of 1M rows
    end: np.ndarray
    codes: np.ndarray  # kernel-name codes
    busy: np.ndarray  # running sum of durations (one leading 0): a bar's busy time by difference
    lane_start: np.ndarray  # lane * width + (start - t_min), ascending: bins by binary search
    width: int
    t_min: int
    enc: np.ndarray  # duration, then reversed row index, in one int64: max = longest, earliest
    enc_mask: int


def _gpu_order(p: Analysis) -> _GpuOrder:
    """GPU work sorted by (lane, start), once per profile."""
    return p.once("widgets.gpu_order", lambda: _build_gpu_order(p))


def _build_gpu_order(p: Analysis) -> _GpuOrder:
    g = p.correlated.gpu
    dev_lane, dev_labels = gpu_lanes(p.correlated)
    stream = g["stream_id"].to_numpy(np.int64)
    pair = dev_lane * (int(stream.max()) + 1 if len(stream) else 1) + stream
    uniq, inv = np.unique(pair, return_inverse=True)
    n_str = int(stream.max()) + 1 if len(stream) else 1
    labels = [f"{dev_labels[u // n_str].split(':')[0]} stream {u % n_str}" for u in uniq]
    start = g["start_ns"].to_numpy(np.int64)
    order = np.lexsort((start, inv))
    lane = inv[order].astype(np.int64)
    s_sorted = start[order]
    e_sorted = g["end_ns"].to_numpy(np.int64)[order]
    dur = e_sorted - s_sorted
    t_min = int(s_sorted.min()) if len(s_sorted) else 0
    width = int(max(e_sorted.max(), s_sorted.max()) - t_min) * 2 + 2 if len(s_sorted) else 2
    bits = max(len(order).bit_length(), 1)
    if len(dur) and (dur.min() < 0 or int(dur.max()) >= 1 << (62 - bits)):
        enc = None  # absurd durations: the row-by-row path names the bars
    else:
        enc = (dur << bits) | ((1 << bits) - 1 - np.arange(len(order), dtype=np.int64))
    return _GpuOrder(
        order=order,
        lane=lane,
        labels=labels,
        start=s_sorted,
        end=e_sorted,
        codes=g["name"].cat.codes.to_numpy()[order],
        busy=np.concatenate([[0], np.cumsum(dur)]),
        lane_start=lane * width + (s_sorted - t_min),
        width=width,
        t_min=t_min,
        enc=enc if enc is not None else np.zeros(0, np.int64),
        enc_mask=(1 << bits) - 1 if enc is not None else -1,
    )


def gpu_timeline(
    p: Analysis, lo: int, hi: int, max_glyphs: int = MAX_KERNEL_GLYPHS
) -> tuple[pd.DataFrame, bool]:
    """GPU work launched in iterations lo..hi, per (device, stream) lane.

    Returns (frame, merged). With at most ``max_glyphs`` activities each is one row (name,
    start/end, duration). Above that, each lane's window is cut into equal time bins and the
    work starting in a bin becomes one row spanning it (count, busy time, longest kernel's
    name), so the browser draws a bounded number of glyphs whatever the kernel count.
    """
    g = p.correlated.gpu
    cols = ["lane", "start_ns", "end_ns", "dur_ns", "busy_ns", "count", "name", "op"]
    if len(g) == 0:
        return pd.DataFrame(columns=cols), False
    go = _gpu_order(p)
    # per key node, in the (lane, start) order
    lit = p.once(
        f"widgets.gpu_iter:{p.key_node}", lambda: _LaneIters.of(go, p.cube.gpu_iter[go.order])
    )
    if lit.runs is not None and go.enc_mask >= 0 and _FAST_BINS and lit.count(lo, hi) > max_glyphs:
        return _binned(go, lit, lo, hi, max_glyphs, g["name"].cat.categories), True
    it = lit.it
    keep = (it >= lo) & (it <= hi)
    whole = bool(keep.all())
    rows = go.order if whole else go.order[keep]
    lane = go.lane if whole else go.lane[keep]
    start = go.start if whole else go.start[keep]
    end = go.end if whole else go.end[keep]
    names = g["name"].cat.categories.to_numpy(object)
    codes = go.codes if whole else go.codes[keep]
    labels = np.asarray(go.labels, dtype=object)
    if len(rows) <= max_glyphs:
        frame = pd.DataFrame(
            {
                "lane": labels[lane] if len(lane) else np.array([], object),
                "start_ns": start,
                "end_ns": end,
                "dur_ns": end - start,
                "busy_ns": end - start,
                "count": np.ones(len(rows), np.int64),
                "name": names[codes] if len(codes) else np.array([], object),
                "op": _op_ids(p, g["inst"].to_numpy(np.int64)[rows]),
            }
        )
        return frame, False
    t0, t1 = int(start.min()), int(end.max())
    n_lanes = 1 + int(np.count_nonzero(lane[1:] != lane[:-1]))  # rows are sorted by lane
    bins = max(1, min(BINS_PER_LANE, max_glyphs // n_lanes))
    b = np.minimum((start - t0) * bins // max(t1 - t0, 1), bins - 1)
    key = lane * bins + b  # non-decreasing: rows are sorted by (lane, start)
    cut = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    dur = end - start
    busy = np.add.reduceat(dur, cut)
    # the longest activity of each bin names it: first row equal to its bin's maximum
    counts = np.diff(np.append(cut, len(key)))
    longest = np.maximum.reduceat(dur, cut)
    hit = np.flatnonzero(dur == np.repeat(longest, counts))
    seg = np.repeat(np.arange(len(cut)), counts)[hit]
    first_of_seg = hit[np.flatnonzero(np.concatenate([[True], seg[1:] != seg[:-1]]))]
    frame = pd.DataFrame(
        {
            "lane": labels[lane[cut]],
            "start_ns": start[cut],
            "end_ns": np.maximum.reduceat(end, cut),
            "busy_ns": busy,
            "count": counts,
            "name": names[codes[first_of_seg]],
        }
    )
    frame["dur_ns"] = frame["end_ns"] - frame["start_ns"]
    frame["op"] = ""  # a bin mixes ops
    return frame[cols], True


_FAST_BINS = True  # tests switch it off to compare with the row-by-row binning above


@dataclass
class _LaneIters:
    """Launch iteration of each (lane, start)-sorted row, and where ranges begin per lane.

    On one stream work runs in launch order, so within a lane the iterations never go
    down: a range of iterations is then one run of rows per lane, found by binary search.
    ``runs`` is None where that does not hold (the row-by-row path is used then).
    """

    it: np.ndarray
    runs: np.ndarray | None  # lane * width + (iteration + 1), non-decreasing
    width: int
    n_lanes: int

    @staticmethod
    def of(go: _GpuOrder, it: np.ndarray) -> _LaneIters:
        width = int(it.max()) + 3 if len(it) else 3
        n_lanes = int(go.lane.max()) + 1 if len(go.lane) else 0
        runs = go.lane * width + (it + 1)
        ok = len(runs) < 2 or bool(np.all(runs[1:] >= runs[:-1]))
        return _LaneIters(it, runs if ok else None, width, n_lanes)

    def bounds(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        assert self.runs is not None
        return intervals.run_bounds(self.runs, self.n_lanes, self.width, lo + 1, hi + 1)

    def count(self, lo: int, hi: int) -> int:
        a, b = self.bounds(lo, hi)
        return int((b - a).sum())


def _binned(
    go: _GpuOrder, lit: _LaneIters, lo: int, hi: int, max_glyphs: int, names: pd.Index
) -> pd.DataFrame:
    """The binned timeline by binary searches per (lane, bin): no pass over the 1M rows.

    Same bars as the row-by-row path (each lane's window cut into equal time bins; a bar is
    the work starting in a bin, named after its longest activity, the first one on ties).
    """
    a, b = lit.bounds(lo, hi)
    lanes = np.flatnonzero(b > a)
    a, b = a[lanes], b[lanes]
    t0 = int(go.start[a].min())
    ends = np.maximum.reduceat(go.end, intervals.runs_index(a, b, len(go.end)))[0::2]
    span = max(int(ends.max()) - t0, 1)
    bins = max(1, min(BINS_PER_LANE, max_glyphs // len(lanes)))
    k = np.arange(1, bins, dtype=np.int64)
    edges = t0 + (k * span + bins - 1) // bins  # a row is in bin k from here on
    q = (lanes[:, None] * go.width + (edges[None, :] - go.t_min)).ravel()
    inner = np.searchsorted(go.lane_start, q, side="left").reshape(len(lanes), bins - 1)
    inner = np.clip(inner, a[:, None], b[:, None])
    cuts = np.concatenate([a[:, None], inner, b[:, None]], axis=1)
    first, stop = cuts[:, :-1].ravel(), cuts[:, 1:].ravel()
    lane_of = np.repeat(lanes, bins)
    full = stop > first
    first, stop, lane_of = first[full], stop[full], lane_of[full]
    idx = intervals.runs_index(first, stop, len(go.end))
    end = np.maximum.reduceat(go.end, idx)[0::2]
    longest = np.maximum.reduceat(go.enc, idx)[0::2]  # longest, then earliest, per bar
    row = go.enc_mask - (longest & go.enc_mask)
    frame = pd.DataFrame(
        {
            "lane": np.asarray(go.labels, dtype=object)[lane_of],
            "start_ns": go.start[first],
            "end_ns": end,
            "dur_ns": end - go.start[first],
            "busy_ns": go.busy[stop] - go.busy[first],
            "count": stop - first,
            "name": names.to_numpy(object)[go.codes[row]],
            "op": "",  # a bin mixes ops
        }
    )
    return frame


def _op_ids(p: Analysis, inst: np.ndarray) -> np.ndarray:
    """Op ID of each op instance row ('' for none)."""
    c = p.correlated
    op = np.where(inst >= 0, c.inst["op"].to_numpy(np.int64)[np.maximum(inst, 0)], -1)
    ids = c.ops["op_id"].to_numpy(object)
    return np.where(op >= 0, ids[np.maximum(op, 0)] if len(ids) else "", "")


def _first_hits(it: np.ndarray, lo: int, hi: int, n: int) -> np.ndarray:
    """Positions of the first ``n`` values of ``it`` within lo..hi, scanning growing chunks:
    a wide range finds them in the first few thousand rows, not in a pass over all 750k."""
    found: list[np.ndarray] = []
    start, step, count = 0, max(4 * n, 8192), 0
    while start < len(it) and count < n:
        chunk = it[start : start + step]
        h = np.flatnonzero((chunk >= lo) & (chunk <= hi)) + start
        found.append(h)
        count += len(h)
        start += step
        step *= 2
    return np.concatenate(found)[:n] if found else np.zeros(0, np.int64)


def _thread_labels(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """'pid P tid T' per row, formatted once per distinct thread (a handful per range)."""
    uniq, first, inv = np.unique(tid, return_index=True, return_inverse=True)
    text = [f"pid {pid[i]} tid {t & 0xFFFFFF}" for i, t in zip(first, uniq, strict=True)]
    return np.asarray(text, dtype=object)[inv] if len(tid) else np.zeros(0, object)


def nvtx_timeline(p: Analysis, lo: int, hi: int, max_glyphs: int = MAX_NVTX_GLYPHS) -> pd.DataFrame:
    """NVTX ranges that start in iterations lo..hi, one lane per thread (longest kept)."""
    c = p.correlated
    nv = c.nvtx
    cols = ["lane", "start_ns", "end_ns", "dur_ns", "name", "depth"]
    if nv is None or len(nv) == 0:
        return pd.DataFrame(columns=cols)
    # ranges longest first (once per profile) and their iterations in that order (once per
    # key node): a range change then keeps the first max_glyphs in range, no 750k-row pass
    by_dur = p.once(
        "widgets.nvtx_by_dur",
        lambda: np.argsort(-(nv["end_ns"] - nv["start_ns"]).to_numpy(np.int64), kind="stable"),
    )
    it = p.once(f"widgets.nvtx_it:{p.key_node}", lambda: p.cube.inst_iter[: len(nv)][by_dur])
    hit = _first_hits(it, lo, hi, max_glyphs)
    sel = np.sort(by_dur[hit])  # the longest ones, back in row order
    start = nv["start_ns"].to_numpy(np.int64)[sel]
    end = nv["end_ns"].to_numpy(np.int64)[sel]
    dur = end - start
    tid = nv["global_tid"].to_numpy(np.int64)[sel]
    pid = (tid >> 24) & 0xFFFFFF
    depth = c.paths["depth"].to_numpy(np.int64)[c.inst["path"].to_numpy(np.int64)[sel]]
    text = nv["text"]
    if isinstance(text.dtype, pd.CategoricalDtype):
        cats = text.cat.categories.astype(str).to_numpy(object)
        codes = text.cat.codes.to_numpy()[sel]
        names = np.where(codes >= 0, cats[np.maximum(codes, 0)] if len(cats) else "", "")
    else:
        names = text.astype(str).to_numpy(object)[sel]
    return pd.DataFrame(
        {
            "lane": _thread_labels(pid, tid),
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
            "name": names,
            "depth": depth,
        }
    )
