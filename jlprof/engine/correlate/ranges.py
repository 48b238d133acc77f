"""The range pass: what correlation derives from the NVTX ranges alone, computed once for
the whole trace.

The ranges' lanes (thread x domain) and nesting, their parsed texts, the emit_nvtx tops,
each range's label (torch_ops) and the ops those labels name, with the ops' TC eligibility
and annotations, depend on the NVTX table only: :func:`range_pass` computes them into a
:class:`Ranges`. What depends on the API calls and GPU work (the work pass in
:mod:`jlprof.engine.correlate.correlate`: call -> range, GPU row -> call, unassociated instances)
reads them; :func:`calls_in_ranges` finds each call's range for any subset of the calls,
so that the work pass can run window by window of calls (docs/windowed-engine.md).

Everything is sort + searchsorted; the only Python loops run over nesting depth and
NVTX domains, never over events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from jlprof.engine.analyses.flops import conv_params, op_kind
from jlprof.engine.correlate.framework_names import TENSORFLOW
from jlprof.engine.correlate.ops import abs_path, parse_forms
from jlprof.engine.correlate.tensorcore import op_type_tc_eligible
from jlprof.engine.correlate.torch_ops import label_names, range_labels, tops
from jlprof.engine.read.narrow import fits_int32, index_dtype, narrow
from jlprof.engine.read.trace import GLOBAL_PID_MASK

NONE = -1
OP_KEY = ["op_name", "op_type", "direction", "op_id"]  # what makes two ops one
ANNOTATION_COLUMNS = ("data_type", "input_shapes", "stack_trace", "parameters")


def _rows(x: np.ndarray, n: int) -> np.ndarray:
    """``x``, row indices into a table of ``n`` rows, in
    :func:`~jlprof.engine.read.narrow.index_dtype` (no copy when it already is)."""
    return np.asarray(x).astype(index_dtype(n), copy=False)


class _Keys:
    """Composite (lane, time) keys as one sortable int64, so searchsorted works per lane."""

    def __init__(self, nlanes: int, *times: np.ndarray) -> None:
        allt = [t for t in times if len(t)]
        self.t0 = int(min(t.min() for t in allt)) if allt else 0
        t1 = int(max(t.max() for t in allt)) if allt else 0
        self.span = t1 - self.t0 + 2
        if (nlanes + 1) * self.span >= 2**62:  # pragma: no cover - sessions of months
            raise OverflowError("time span too large for composite keys")

    def __call__(self, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
        # in place: two arrays of the keys' size at once, not four (13.4M ranges: 0.2 GB)
        rel = np.subtract(t, self.t0, dtype=np.int64)
        np.clip(rel, -1, self.span - 2, out=rel)
        rel += 1
        key = np.multiply(lane, self.span, dtype=np.int64)
        key += rel
        return key


def _range_order(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Ranges in (lane, start, -end) order: containers before what they contain.

    Equal to ``np.lexsort((-end, start, lane))`` (ties keep row order) but one stable sort
    of a (lane, start) key, fast on ranges that arrive in time order; only rows that share
    a lane and start are then sorted by ``-end``.
    """
    if len(lane) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = _Keys(int(lane.max()) + 2, start)
    key = keys(lane + 1, start)  # lanes may be NONE: shift them to >= 0
    order = np.argsort(key, kind="stable")
    k = key[order]
    tie = np.flatnonzero(k[1:] == k[:-1])
    if len(tie):  # rows sharing (lane, start): longest first, then row order (stable)
        pos = np.union1d(tie, tie + 1)
        rows = order[pos]
        order[pos] = rows[np.lexsort((-end[rows], k[pos]))]
    return order


def _sorted_keys(
    lane: np.ndarray, start: np.ndarray, end: np.ndarray, order: np.ndarray, n_lanes: int = 0
) -> tuple[_Keys, np.ndarray]:
    """The ranges' (lane, start) keys in ``order``, and their key space. The space spans
    the ranges' own times: a query time outside it is clipped to just before or after
    every range, which keeps each comparison with a range's start, so one set of keys
    serves every window of calls (made once, not once per window: 5.5 s at 10M kernels)."""
    keys = _Keys(max(int(lane.max()) + 1 if len(lane) else 1, n_lanes), start, end)
    return keys, keys(lane[order], start[order])


def _nest(
    lane: np.ndarray, start: np.ndarray, end: np.ndarray, order: np.ndarray | None = None
) -> np.ndarray:
    """Parent (innermost containing range in the same lane) of every range; -1 for roots.

    In the order (lane, start, -end) the innermost container of a range is the nearest
    earlier range with ``end >=`` its end (earlier ranges start no later). That is the
    "previous greater-or-equal" pointer, found by pointer jumping: every range skips over
    ranges known to end before it. Unlike a stack walk this stays right when start/end
    ranges cross (A=[0,100], B=[50,150]: B has no parent, C=[110,120] gets B).
    Most ranges need no jump: the range just before contains them (first children), or
    none before in their lane ends as late (roots, found from the running maximum end;
    without that their chains through all earlier roots took 20+ passes at 10M ranges).
    """
    n = len(lane)
    if n == 0:
        return np.full(n, NONE, dtype=np.int64)
    order = _range_order(lane, start, end) if order is None else order
    L, E = lane[order], end[order]
    same_lane = L[1:] == L[:-1]
    # running maximum end within each lane: one cummax of (lane run, end) keys
    keys = _Keys(int(np.count_nonzero(~same_lane)) + 1, E)
    run = np.zeros(n, dtype=np.int64)
    np.cumsum(~same_lane, out=run[1:])
    run_max = keys(run, E)
    del run
    np.maximum.accumulate(run_max, out=run_max)
    after_all = run_max[1:] > run_max[:-1]  # ends after every earlier range: a root
    del run_max
    up = same_lane & (E[:-1] >= E[1:])  # the previous range contains it
    idx = index_dtype(n)
    cand = np.full(n, NONE, dtype=idx)
    cand[1:][up] = np.flatnonzero(up).astype(idx)
    # invariant: every position strictly between cand[p] and p ends before E[p]; the
    # others have a container, so their jumps never reach NONE
    act = np.flatnonzero(same_lane & ~up & ~after_all).astype(idx) + 1
    cand[act] = act - 1
    while len(act):
        act = act[E[cand[act]] < E[act]]
        cand[act] = cand[cand[act]]
    parent = np.full(n, NONE, dtype=np.int64)  # made last: not held through the jumps
    parent[order] = np.where(cand >= 0, order[np.maximum(cand, 0)], NONE)
    return parent


def _innermost(
    lane: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    q_lane: np.ndarray,
    q_start: np.ndarray,
    q_end: np.ndarray,
    order: np.ndarray | None = None,
    sorted_keys: tuple[_Keys, np.ndarray] | None = None,
) -> np.ndarray:
    """Innermost range of lane ``q_lane`` containing each query interval; -1 when none.
    ``sorted_keys``: :func:`_sorted_keys` of these ranges in ``order`` (else made here).

    The candidate is the latest-starting range of the lane (sorted position ``pos``); it is
    checked on the sorted keys and ends, read in the queries' (time) order, and only the
    few that end too early climb their parents.
    """
    if len(lane) == 0 or len(q_lane) == 0:
        return np.full(len(q_lane), NONE, dtype=np.int64)
    if sorted_keys is None:
        order = _range_order(lane, start, end) if order is None else order
        sorted_keys = _sorted_keys(lane, start, end, order)
    keys, skey = sorted_keys
    q_lane = np.asarray(q_lane, np.int64)
    pos = np.searchsorted(skey, keys(np.maximum(q_lane, 0), q_start), side="right")
    pos -= 1
    ok = (q_lane >= 0) & (pos >= 0)
    np.maximum(pos, 0, out=pos)
    ok &= skey[pos] >= q_lane * keys.span  # found a range of its own lane (keys lane-major)
    del skey
    out = np.where(ok, order[pos], NONE)
    ok &= end[out] < q_end  # it ends too early: climb to the first that encloses it
    del pos
    act = np.flatnonzero(ok)
    while len(act):  # parents start no later and end no earlier
        out[act] = parent[out[act]]
        act = act[out[act] >= 0]
        act = act[end[out[act]] < q_end[act]]
    return out


@dataclass
class _RangeLanes:
    """NVTX ranges on their lanes (thread x domain), with their nesting."""

    lane: np.ndarray  # per range; NONE for a start/end range ended on another thread
    lane_tid: np.ndarray
    lane_dom: np.ndarray
    parent: np.ndarray  # enclosing range per range, NONE for a root
    # the ranges that nest (on one lane; None: every range, the usual case: 4 bytes a range
    # less held through the windows), and per nestable row:
    nest_rows: np.ndarray | None
    n_lane: np.ndarray
    n_start: np.ndarray
    n_end: np.ndarray
    n_order: np.ndarray  # shared by nesting and every domain's call lookup
    sorted_keys: tuple[_Keys, np.ndarray] | None = None  # _sorted_keys, on the first lookup


def _range_lanes(
    nv: pd.DataFrame, r_start: np.ndarray, r_end: np.ndarray, r_tid: np.ndarray
) -> _RangeLanes:
    """Lanes and nesting of the NVTX ranges; start/end ranges ended elsewhere are roots."""
    etid = nv["end_global_tid"].to_numpy(np.int64)
    nestable = (etid < 0) | (etid == r_tid)
    dom_code = nv["domain"].cat.codes.to_numpy(np.int64) if len(nv) else np.zeros(0, np.int64)
    n_dom = int(dom_code.max()) + 1 if len(dom_code) else 1
    if len(nv) and r_tid.min() >= 0 and int(r_tid.max()) < 2**62 // n_dom:
        # (thread, domain) pairs as one key: lanes in order of first appearance
        lane_id, lane_keys = pd.factorize(r_tid * n_dom + dom_code)
        lane_tid = lane_keys // n_dom
    else:
        tid_code, tid_uniq = pd.factorize(r_tid)
        lane_id, lane_keys = pd.factorize(tid_code.astype(np.int64, copy=False) * n_dom + dom_code)
        lane_tid = tid_uniq[lane_keys // n_dom] if len(lane_keys) else np.zeros(0, np.int64)
    del dom_code  # each 64-bit per-range temporary goes once read: the pass's peak is nesting's
    lane_dom = lane_keys % n_dom if len(lane_keys) else np.zeros(0, np.int64)
    every = bool(nestable.all())  # the usual case: no start/end range ended elsewhere
    lane = _rows(lane_id if every else np.where(nestable, lane_id, NONE), len(nv))
    del lane_id
    nest_rows = None if every else np.flatnonzero(nestable)
    if every:
        n_lane, n_start, n_end = lane, r_start, r_end
    else:
        n_lane, n_start, n_end = lane[nest_rows], r_start[nest_rows], r_end[nest_rows]
    n_order = _range_order(n_lane, n_start, n_end)  # shared by nesting and every domain's calls
    if every:
        r_parent = _nest(n_lane, n_start, n_end, n_order)
    else:
        r_parent = np.full(len(nv), NONE, dtype=np.int64)
        if len(nest_rows):
            p = _nest(n_lane, n_start, n_end, n_order)
            r_parent[nest_rows] = np.where(p >= 0, nest_rows[np.maximum(p, 0)], NONE)
    n = len(nv)  # row indices kept as long as the ranges: 32 bits where they fit
    return _RangeLanes(
        lane,
        lane_tid,
        lane_dom,
        _rows(r_parent, n),
        None if every else _rows(nest_rows, n),
        n_lane,
        n_start,
        n_end,
        _rows(n_order, n),
    )


def _calls_in_ranges(
    rl: _RangeLanes, r_start: np.ndarray, a_tid: np.ndarray, a_start: np.ndarray, a_end: np.ndarray
) -> np.ndarray:
    """Per API call, the innermost range around it on its thread (latest-starting across
    domains), NONE outside every range."""
    a_inst = np.full(len(a_tid), NONE, dtype=np.int64)
    n_nest = len(rl.lane) if rl.nest_rows is None else len(rl.nest_rows)
    if n_nest and len(a_tid):
        lanes = pd.DataFrame({"tid": rl.lane_tid, "dom": rl.lane_dom})
        n_parent = _local_parent(rl.parent, rl.nest_rows)
        doms = np.unique(lanes["dom"].to_numpy())
        first_dom = doms[0]
        for d in doms:
            sel = lanes.index[lanes["dom"] == d]
            idx = pd.Index(lanes.loc[sel, "tid"].to_numpy())
            hit = idx.get_indexer(a_tid)
            q_lane = np.where(hit >= 0, sel.to_numpy()[np.maximum(hit, 0)], NONE)
            if rl.sorted_keys is None:
                rl.sorted_keys = _sorted_keys(
                    rl.n_lane, rl.n_start, rl.n_end, rl.n_order, len(rl.lane_tid)
                )
            c = _innermost(
                rl.n_lane,
                rl.n_start,
                rl.n_end,
                n_parent,
                q_lane,
                a_start,
                a_end,
                rl.n_order,
                rl.sorted_keys,
            )
            if rl.nest_rows is not None:  # rows of the nestable subset -> range rows
                c = np.where(c >= 0, rl.nest_rows[np.maximum(c, 0)], NONE)
            if d == first_dom:
                a_inst = c
                continue
            hit = np.flatnonzero(c >= 0)  # keep the latest-starting range across domains
            rows, had = c[hit], a_inst[hit]
            better = (had < 0) | (r_start[rows] > r_start[np.maximum(had, 0)])
            a_inst[hit[better]] = rows[better]
    return a_inst


def _local_parent(r_parent: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """Parents re-indexed into the ``rows`` subset (parents are always nestable rows; None:
    every row)."""
    if rows is None or len(rows) == len(r_parent):  # every row: the same indices
        return r_parent
    pos = np.full(len(r_parent), NONE, dtype=np.int64)
    pos[rows] = np.arange(len(rows))
    p = r_parent[rows]
    return np.where(p >= 0, pos[np.maximum(p, 0)], NONE)


@dataclass
class Ranges:
    """What the range pass derives from the NVTX ranges (rows = ``nv``'s rows = instances
    ``0..n-1``): nesting, parsed texts, labels and the ops they name."""

    lanes: _RangeLanes  # lanes (thread x domain) and nesting
    start_ns: np.ndarray  # int64 per range
    end_ns: np.ndarray
    global_tid: np.ndarray
    parsed: pd.DataFrame  # ops.parse_forms: the texts' parsed fields, one row per form
    text_code: np.ndarray  # row of ``parsed`` per range (int32 when it fits, as below)
    instance_no: np.ndarray  # per range: "Batch 17" is op "Batch #", instance 17 (else -1)
    top: np.ndarray  # emit_nvtx top per range (torch_ops.tops), NONE when not an op call
    labels: pd.DataFrame  # torch_ops.range_labels: one row per distinct label
    label: np.ndarray  # label per range
    named: np.ndarray  # op name per label
    label_op: np.ndarray  # row of ``ops`` per label
    ops: pd.DataFrame  # the labels' ops (OP_KEY, tc_eligible, annotations), first-seen order
    op_abs: np.ndarray  # per op of ``ops``: its '/'-scoped absolute path, '' when relative
    markers: frozenset[str]  # PyTorch marker formats among the texts

    @property
    def op(self) -> np.ndarray:
        """Each range's op (row of ``ops``), int64."""
        return np.asarray(self.label_op, np.int64)[self.label]

    def op_narrow(self) -> np.ndarray:
        """:attr:`op` in the smallest index type that holds ``ops``' rows (kept per range
        for the whole windowed run: 30 MB instead of 60 at 7.5M ranges)."""
        return _rows(self.label_op, len(self.ops))[self.label]


def _per_range(per_text: np.ndarray, cat_code: np.ndarray) -> np.ndarray:
    """``narrow(per_text[cat_code])`` without a 64-bit value per range first."""
    if len(cat_code) and fits_int32(per_text):
        return per_text.astype(np.int32)[cat_code]
    return narrow(per_text[cat_code])


def _processes(rl: _RangeLanes, r_tid: np.ndarray) -> np.ndarray:
    """A code per range, equal where their processes are: per lane where every range has one
    (no hash of every range's thread)."""
    if rl.nest_rows is None:
        lane_pid = pd.factorize(np.asarray(rl.lane_tid, np.int64) & GLOBAL_PID_MASK)[0]
        return _rows(lane_pid, len(lane_pid))[rl.lane]
    return pd.factorize(r_tid & GLOBAL_PID_MASK)[0]


def in_domains(nv: pd.DataFrame, domains: list[str] | None) -> pd.DataFrame:
    """The NVTX ranges of ``domains`` (``--domains``; None or empty: all of them)."""
    if not domains:
        return nv
    keep = nv["domain"].astype(str).isin(domains).to_numpy()
    return nv.loc[keep].reset_index(drop=True)


def range_pass(nv: pd.DataFrame, mode: str | None) -> Ranges:
    """Everything correlation derives from the NVTX ranges ``nv`` alone (never the calls or
    GPU work), once for the whole trace. ``mode`` picks how texts name ops (``ops``)."""
    r_start = nv["start_ns"].to_numpy(np.int64)
    r_end = nv["end_ns"].to_numpy(np.int64)
    r_tid = nv["global_tid"].to_numpy(np.int64)
    rl = _range_lanes(nv, r_start, r_end, r_tid)

    # range texts, parsed once each; emit_nvtx chains work for their outermost range
    text_cats = nv["text"].cat.categories if len(nv) else pd.Index([], dtype=object)
    # one row per form, not per text (a PyTorch run has a text per call, differing in seq and
    # op_id only): each range keeps its own seq and instance number
    forms = parse_forms(text_cats, mode)
    parsed = forms.frame
    # per range in 32 bits where the values fit, narrowed per text before they are spread
    # (the range pass's peak: 0.3 GB less at 13.4M ranges)
    cat_code = np.asarray(nv["text"].cat.codes) if len(nv) else np.zeros(0, np.int64)
    seq = _per_range(forms.seq, cat_code)
    instance_no = _per_range(forms.instance_no, cat_code)
    text_code = _rows(forms.code, len(parsed))[cat_code]
    del forms, cat_code
    is_call = parsed["torch_call"].to_numpy(bool) | (parsed["pyprof"] == "op").to_numpy(bool)
    r_top = tops(is_call[text_code], rl.parent)

    # op identity: each range's label (parsed texts) and the op it names
    r_pid = _processes(rl, r_tid)
    labels, r_label = range_labels(parsed, text_code, seq, rl.parent, r_top, r_start, r_pid)
    del seq
    ops, named, label_op = _range_ops(parsed, labels)
    ops["conv_params"] = _conv_params(ops, label_op, r_label, nv["text"])
    op_abs = np.full(len(ops), "", dtype=object)
    scoped = mode in TENSORFLOW  # TF op names are scopes: model/dense/MatMul
    op_abs[label_op] = [abs_path(str(name), scoped) for name in named]
    # kept per range as long as the ranges are: row indices in 32 bits where they fit
    # (the windowed run holds them through every window: 90 MB less at 7.5M ranges)
    return Ranges(
        lanes=rl,
        start_ns=r_start,
        end_ns=r_end,
        global_tid=r_tid,
        parsed=parsed,
        text_code=_rows(text_code, len(parsed)),
        instance_no=instance_no,
        top=_rows(r_top, len(r_top)),
        labels=labels,
        label=_rows(r_label, len(labels)),
        named=named,
        label_op=label_op,
        ops=ops,
        op_abs=op_abs,
        markers=_markers(parsed),
    )


def calls_in_ranges(
    ranges: Ranges, a_tid: np.ndarray, a_start: np.ndarray, a_end: np.ndarray
) -> np.ndarray:
    """Per API call, the innermost range around it on its thread (latest-starting across
    domains; in nested emit_nvtx ranges their outermost, which gets their work), NONE outside
    every range. Each call's answer depends on that call alone: any subset of the calls (a
    window) gets the rows of the whole-array result."""
    a_inst = _calls_in_ranges(ranges.lanes, ranges.start_ns, a_tid, a_start, a_end)
    r_top = ranges.top
    if len(a_inst) and len(r_top):  # a call in nested emit_nvtx ranges: the outermost's
        in_top = (a_inst >= 0) & (r_top[np.maximum(a_inst, 0)] >= 0)
        a_inst[in_top] = r_top[a_inst[in_top]]
    return a_inst


def _range_ops(
    parsed: pd.DataFrame, labels: pd.DataFrame
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The labels' ops (OP_KEY, TC eligibility, annotations) in first-seen order, each
    label's name and each label's op row. The work pass appends the unassociated ops after
    these (:func:`append_ops`), so these rows and codes are final."""
    by_type = parsed.iloc[labels["type_text"].to_numpy()].reset_index(drop=True)
    named = label_names(parsed, labels)
    direction = np.where(labels["bprop"], "bprop", by_type["direction"].to_numpy(object))
    lab_ops = pd.DataFrame(
        {
            "op_name": named,
            "op_type": by_type["op_type"].to_numpy(object),
            "direction": direction,
            "op_id": np.where(direction != "", named + ":" + direction, named),
        }
    )
    label_op, uniq = pd.factorize(pd.MultiIndex.from_frame(lab_ops[OP_KEY]))
    ops = _op_frame(list(uniq))
    _annotation_columns(ops, by_type, label_op)
    return ops, named, label_op


def append_ops(ops: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """``ops`` with the rows of ``new`` (OP_KEY columns) it lacks appended in their first-seen
    order (without annotations: only range texts carry them), and the op row of each row of
    ``new``: the codes one ``pd.factorize`` over ``ops`` then ``new`` gives."""
    if not len(new):
        return ops, np.zeros(0, dtype=np.int64)
    code, uniq = pd.factorize(pd.MultiIndex.from_frame(new[OP_KEY]))
    if len(ops):
        at = pd.MultiIndex.from_frame(ops[OP_KEY]).get_indexer(uniq)
    else:
        at = np.full(len(uniq), NONE, dtype=np.int64)
    fresh = np.flatnonzero(at < 0)
    at[fresh] = len(ops) + np.arange(len(fresh))
    if len(fresh):
        more = _op_frame(list(uniq[fresh]))
        for col in (*ANNOTATION_COLUMNS, "conv_params"):
            more[col] = ""
        ops = pd.concat([ops, more], ignore_index=True) if len(ops) else more
    return ops, np.asarray(at, np.int64)[code]


def _op_frame(keys: list[tuple]) -> pd.DataFrame:
    """Ops from their OP_KEY tuples, with their TC eligibility (no annotations yet)."""
    ops = pd.DataFrame(keys, columns=OP_KEY)
    if not len(ops):
        ops = pd.DataFrame(columns=OP_KEY, dtype=object)
    ops["tc_eligible"] = op_type_tc_eligible(ops["op_type"])
    return ops


def _annotation_columns(ops: pd.DataFrame, parsed: pd.DataFrame, text_op: np.ndarray) -> None:
    """Data type, input shapes, stack trace per op: from its first text that has shapes.

    One op (name, type, direction) may run with several shapes (a smaller last batch); the
    detail report shows one row per op, so it shows the first annotated texts' values.
    """
    for col in ANNOTATION_COLUMNS:
        ops[col] = ""
    if not len(parsed):
        return
    f = parsed[list(ANNOTATION_COLUMNS)].copy()
    f["op"] = np.asarray(text_op, np.int64)
    f = f.iloc[np.argsort((f["input_shapes"] == "").to_numpy(), kind="stable")]
    first = f.drop_duplicates("op")
    for col in ANNOTATION_COLUMNS:
        vals = ops[col].to_numpy(object)
        vals[first["op"].to_numpy()] = first[col].to_numpy(object)
        ops[col] = vals


def _conv_params(
    ops: pd.DataFrame, label_op: np.ndarray, r_label: np.ndarray, text: pd.Series
) -> np.ndarray:
    """Per op: :func:`~jlprof.engine.analyses.flops.conv_params` of its first range's text
    (stride, padding... of a PyProf or DLProf-plugin conv call), for the conv ops only, ''
    for the others: what the roofline reads of the texts, decoded here while they are at
    hand (a handful of texts, one per conv op; the windowed run lets the texts go after this
    pass). Without conv ops nothing per range is made (this pass holds the run's peak)."""
    out = np.full(len(ops), "", dtype=object)
    conv = np.array([op_kind(t) == "conv" for t in ops["op_type"].astype(str)], dtype=bool)
    if not conv.any() or not len(r_label):
        return out
    rows = np.flatnonzero(conv[label_op][r_label])  # the ranges of conv ops
    op_u, first = np.unique(label_op[r_label[rows]], return_index=True)
    cats, codes = text.cat.categories, text.cat.codes
    for op, row in zip(op_u.tolist(), rows[first].tolist(), strict=True):
        out[op] = conv_params(str(cats[codes.iat[row]]))
    return out


def _markers(parsed: pd.DataFrame) -> frozenset[str]:
    """The PyTorch marker formats among the range texts (the analysis mode follows them)."""
    found = set()
    if parsed["torch_op"].any():
        found.add("emit_nvtx")
    if (parsed["pyprof"] != "").any():
        found.add("pyprof")
    if ((parsed["direction"] != "") & ~parsed["torch_op"] & (parsed["pyprof"] == "")).any():
        found.add("jlprof")
    return frozenset(found)


__all__ = ["NONE", "OP_KEY", "Ranges", "append_ops", "calls_in_ranges", "range_pass"]
