"""emit_nvtx op instances: one op at the level the user called, backward linked to forward.

PyTorch's ``emit_nvtx`` wraps every dispatcher call in a range, so ``aten::conv2d`` holds
``aten::convolution`` holds ``aten::cudnn_convolution``. DLProf reports the op the user
called, so the work (API calls, hence kernels) of a chain of nested emit_nvtx ranges goes to
its outermost one (the *top*); the inner calls stay instances under it (children in the
group-node tree).

A pyprof / DLProf-plugin op call (``jlprof.engine.correlate.pyprof``) is such a range too, so the
emit_nvtx calls inside it are its children; it is named by the ``funcStack`` of its call
site when there is one.

A backward top (``autograd::engine::evaluate_function: ConvolutionBackward0``) is linked to
its forward op through the autograd sequence number (``jlprof.engine.correlate.emit_nvtx``): the
forward top with that ``seq`` (the last one: ops that create no backward node leave the
counter where it was) gives the op name, and the instance becomes that op's ``bprop`` row
(guide §11.3). Everything here is array work over ranges; the only loops run over nesting
depth.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jlprof.engine.read.narrow import index_dtype

NONE = -1


def tops(is_torch: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per range: its outermost enclosing op-call range in an unbroken chain of them (itself
    when its parent is not one); -1 for ranges that are not op calls (``is_torch``)."""
    n = len(parent)
    idx = index_dtype(n)  # 32 bits where they fit: 54 MB less at 13.4M ranges
    top = np.where(is_torch, np.arange(n, dtype=idx), idx(NONE))
    cur = np.flatnonzero(is_torch)
    while len(cur):
        p = parent[top[cur]]
        up = (p >= 0) & is_torch[np.maximum(p, 0)]
        cur = cur[up]
        top[cur] = p[up]
    return top


def range_labels(
    parsed: pd.DataFrame,
    text_code: np.ndarray,
    seq: np.ndarray,
    parent: np.ndarray,
    top: np.ndarray,
    start: np.ndarray,
    process: np.ndarray,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Each range's op, as a label of parsed texts: (labels, label per range).

    ``labels`` has one row per distinct label: ``name_text`` (the text naming the op),
    ``type_text`` (the text giving type, shapes and direction) and ``bprop``. Usually both
    texts are the range's own; a pyprof op call under a call-site marker is named by that
    marker (:func:`label_names`); a linked backward top is its forward op (the forward top's
    label) as bprop, and a forward-typed call inside a backward top runs for bprop too.
    ``text_code``: each range's row of ``parsed``; ``seq``: its emit_nvtx sequence number
    (-1: none).
    """
    n = len(text_code)
    name_src = text_code.copy()
    type_src = text_code.copy()
    bprop = np.zeros(n, dtype=bool)
    if n:
        kind = parsed["pyprof"].to_numpy(object)
        # compared per text, then spread: not an object array of every range (13.4M: 0.1 GB)
        rows = np.flatnonzero((kind == "op")[text_code])
        p = parent[rows]
        mod = (p >= 0) & (kind[text_code[np.maximum(p, 0)]] == "module")
        p = np.where(mod, parent[np.maximum(p, 0)], p)
        site = (p >= 0) & (kind[text_code[np.maximum(p, 0)]] == "trace")
        name_src[rows[site]] = text_code[p[site]]
        linked, fwd, inner = _backward(parsed, text_code, seq, top, start, process)
        name_src[linked], type_src[linked] = name_src[fwd], type_src[fwd]
        bprop[linked] = True
        bprop[inner] = True
    n_t = max(len(parsed), 1)
    # (name, type, bprop) as one key, built in place in 32 bits where it fits
    key = name_src.astype(index_dtype(2 * n_t * n_t))
    del name_src
    key *= n_t
    key += type_src
    del type_src
    key *= 2
    key += bprop
    del bprop
    code, uniq = pd.factorize(key)
    uniq = np.asarray(uniq, dtype=np.int64)
    labels = pd.DataFrame(
        {"name_text": uniq // 2 // n_t, "type_text": uniq // 2 % n_t, "bprop": uniq % 2 == 1}
    )
    return labels, code


def label_names(parsed: pd.DataFrame, labels: pd.DataFrame) -> np.ndarray:
    """Op name per label: the type text's name, or for a pyprof op call under a call-site
    marker the marker's ``funcStack`` module path (DLProf's plugin), else the op and its call
    site, ``torch.nn.functional.conv2d (model.py:23)`` (plain pyprof): ops are call sites."""
    names = parsed["op_name"].to_numpy(object)
    stack = parsed["func_stack"].to_numpy(object)
    nt = labels["name_text"].to_numpy(np.int64)
    tt = labels["type_text"].to_numpy(np.int64)
    out = names[tt].copy()
    for i in np.flatnonzero(nt != tt):  # distinct (call site, op) labels only
        out[i] = stack[nt[i]] or f"{names[tt[i]]} ({names[nt[i]]})"
    return out


def _backward(
    parsed: pd.DataFrame,
    text_code: np.ndarray,
    seq: np.ndarray,
    top: np.ndarray,
    start: np.ndarray,
    process: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(linked backward tops, their forward tops, forward-typed calls inside backward tops).

    A wrapper without a seq of its own (``evaluate_function``) takes the seq of the backward
    node range inside it. A forward seq is that of any emit_nvtx call under a forward top
    (a pyprof op call holds the emit_nvtx calls that carry it); the last top by start wins.
    Sequence numbers are per process (``process``: a code per range), never matched across.
    """
    span = int(seq.max()) + 2 if len(seq) else 1
    node = parsed["bwd_node"].to_numpy(bool)[text_code]
    has_top = top >= 0
    is_top = has_top & (top == np.arange(len(top), dtype=top.dtype))
    top_seq = np.where(is_top & node, seq, NONE)
    # the masks below are taken on candidate rows only: no range-long temporaries of tops
    # (their parts of the range pass's peak: ~0.4 GB at 13.4M ranges)
    cand = np.flatnonzero(has_top & ~is_top & node & (seq >= 0))  # inner backward nodes
    fill = cand[top_seq[top[cand]] < 0]
    top_seq[top[fill]] = seq[fill]
    bwd_top = is_top & node
    cand = np.flatnonzero(has_top & ~node & (seq >= 0))
    fwd = cand[~bwd_top[top[cand]]]
    fwd = fwd[np.argsort(start[fwd], kind="stable")]
    # the last forward top (by start) per (process, seq): keys sorted, ties in start order
    keys = process[fwd].astype(np.int64) * span + seq[fwd]
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    last = np.append(keys[1:] != keys[:-1], True)[: len(keys)]
    uniq_keys, uniq_top = keys[last], top[fwd[order[last]]]
    del keys, order, last
    rows_b = np.flatnonzero(bwd_top & (top_seq >= 0))
    want = process[rows_b].astype(np.int64) * span + top_seq[rows_b]
    pos = np.minimum(np.searchsorted(uniq_keys, want), max(len(uniq_keys) - 1, 0))
    ok = (uniq_keys[pos] == want) if len(uniq_keys) else np.zeros(len(want), bool)
    cand = np.flatnonzero(has_top & ~is_top & ~node)
    inner = cand[bwd_top[top[cand]]]
    return rows_b[ok], uniq_top[pos[ok]].astype(np.int64), inner
