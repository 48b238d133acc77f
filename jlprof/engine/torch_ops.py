"""emit_nvtx op instances: one op at the level the user called, backward linked to forward.

PyTorch's ``emit_nvtx`` wraps every dispatcher call in a range, so ``aten::conv2d`` holds
``aten::convolution`` holds ``aten::cudnn_convolution``. DLProf reports the op the user
called, so the work (API calls, hence kernels) of a chain of nested emit_nvtx ranges goes to
its outermost one (the *top*); the inner calls stay instances under it (children in the
group-node tree).

A backward top (``autograd::engine::evaluate_function: ConvolutionBackward0``) is linked to
its forward op through the autograd sequence number (``jlprof.engine.emit_nvtx``): the
forward top with that ``seq`` (the last one: ops that create no backward node leave the
counter where it was) gives the op name, and the instance becomes that op's ``bprop`` row
(guide §11.3). Everything here is array work over ranges; the only loops run over nesting
depth.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NONE = -1


def tops(is_torch: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per range: its outermost enclosing emit_nvtx range in an unbroken chain of them
    (itself when its parent is not one); -1 for ranges that are not emit_nvtx ranges."""
    n = len(parent)
    top = np.where(is_torch, np.arange(n), NONE)
    cur = np.flatnonzero(is_torch)
    while len(cur):
        p = parent[top[cur]]
        up = (p >= 0) & is_torch[np.maximum(p, 0)]
        cur = cur[up]
        top[cur] = p[up]
    return top


def backward_links(
    parsed: pd.DataFrame,
    text_code: np.ndarray,
    top: np.ndarray,
    start: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Ranges whose op becomes a ``bprop`` op, and the text (row of ``parsed``) giving its
    name: (rows, text). A linked backward top takes its forward top's text; a forward-typed
    range inside a backward top keeps its own text, now as bprop."""
    if not len(text_code):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    seq_t = parsed["seq"].to_numpy(np.int64)
    node_t = parsed["bwd_node"].to_numpy(bool)
    seq = seq_t[text_code]
    node = node_t[text_code]
    is_top = (top >= 0) & (top == np.arange(len(top)))
    # a wrapper without its own seq takes the seq of the backward node range inside it
    top_seq = np.where(is_top, seq, NONE)
    inner_node = (top >= 0) & ~is_top & node & (seq >= 0)
    fill = inner_node & (top_seq[np.maximum(top, 0)] < 0)
    top_seq[top[fill]] = seq[fill]
    bwd_top = is_top & node
    fwd_top = is_top & ~node & (seq >= 0)
    rows_f = np.flatnonzero(fwd_top)
    last = pd.Series(rows_f[np.argsort(start[rows_f], kind="stable")])
    by_seq = pd.Series(last.to_numpy(), index=seq[last.to_numpy()])
    by_seq = by_seq[~by_seq.index.duplicated(keep="last")]
    rows_b = np.flatnonzero(bwd_top & (top_seq >= 0))
    f = by_seq.reindex(top_seq[rows_b]).to_numpy()
    ok = ~np.isnan(f)
    linked = rows_b[ok]
    linked_text = text_code[f[ok].astype(np.int64)]
    # forward-typed calls inside a backward top (aten::mm under MmBackward0) run for bprop
    in_bwd = (top >= 0) & ~is_top & ~node & bwd_top[np.maximum(top, 0)]
    inner = np.flatnonzero(in_bwd)
    rows = np.concatenate([linked, inner]).astype(np.int64)
    texts = np.concatenate([linked_text, text_code[inner]]).astype(np.int64)
    return rows, texts
