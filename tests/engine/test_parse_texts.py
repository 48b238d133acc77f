"""``parse_texts`` splits emit_nvtx texts all at once (RE2) and parses one skeleton per group;
every other text one at a time. The per-text path is the reference: for every text of every
real export, a generated PyTorch run and the odd cases below, in every mode, both give the
same frame (values, dtypes, order)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.gen_export import generate
from jlprof.engine.correlate.ops import _parse_each, parse_texts
from jlprof.engine.read.read import read_trace
from tests.fixtures.scenarios import real_traces

MODES = [None, "simple", "pytorch", "tensorflow2", "tensorrt"]
ODD = [
    "aten::mul, seq = 45328, op_id = 990726",
    "aten::mul, seq = 1, op_id = 2",  # the same skeleton, another seq
    "aten::mul,seq=3,op_id=4",
    "ConvolutionBackward0, seq = 7, op_id = 99",
    "CudnnConvolutionBackward, stashed seq = 7",
    "autograd::engine::evaluate_function: AddmmBackward0",
    "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad, seq = 5",
    "aten::addmm, seq = 12, op_id = 40, sizes = [[64], [8, 128], [128, 64], [], []]",
    "aten::cat, seq = 3, sizes = [[[2, 3], [2, 3]], []], input_op_ids = [(10,0), (11,0)]",
    "foo, op_id = 1, op_id = 2",  # the name holds what looks like a suffix
    "a\nb, seq = 3",  # a newline: the per-text path
    "aten::mul, seq = 5\n",
    "{'mod': 'torch', 'op': 'mul', 'args': []}, seq = 3",  # a dict marker comes first
    "Batch 17",
    "Batch #, seq = 4",
    "/model/layer1/conv, op_id = 3",
    "/model/layer1/conv",
    "MatMul: model/dense/MatMul, op_id = 1",
    "",
    " , seq = 1",
    "x, seq = -4",
    "ProfilerStep#3",
    # suffix numbers zeroed before the grammar runs: only where each is the grammar's own
    "x, seq = 3, seq = 4",  # the first is the name's
    "foo, seq = 12 bar, op_id = 3",
    "foo, seq = 12 bar,seq=5",  # the grammar's seq is the other spacing's
    "foo, seq = 12 bar,seq=0",
    "step x = 12, seq = 3",  # a number zeroed in the name
    "step x = 13, seq = 3",
    "lr = 0.001, op_id = 5",
    "aten::mul, seq = 12,op_id=3",  # getNvtxStr's spacing and another
    "aten::mul, seq = 007, op_id = 0012",
    "aten::mul, seq = -0, op_id = 1",
    "aten::mul, seq = 5, op_id = 6",  # one skeleton with the line above but for the sign
    "x, sizes = [[1, 2]], seq = 3",  # suffixes out of order
    "a, op_id = 1, sizes = [[1], op_id = 2]",
    "aten::add, seq = 3, op_id = 4, sizes = [[2], [2]], input_op_ids = [(1,0), (2,0)]",
    "aten::add, seq = 9, op_id = 10, sizes = [[2], [2]], input_op_ids = [(1,0), (2,0)]",
]


def _same(texts: list[str]) -> None:
    for mode in MODES:
        got = parse_texts(texts, mode)
        want = _parse_each(texts, mode)
        form = got.pop("form").to_numpy()
        assert (want.pop("form").to_numpy() == np.arange(len(texts))).all()
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        # a text's form has its row, but for the per-call numbers
        same = got.drop(columns=["seq", "instance_no"])
        pd.testing.assert_frame_equal(
            same.iloc[form].reset_index(drop=True), same, check_exact=True
        )
        assert (form[form] == form).all() and (form <= np.arange(len(texts))).all()


def test_odd_texts_parse_as_one_at_a_time() -> None:
    _same(ODD)
    _same([])
    _same(["plain"])
    _same(["a, seq = 1", None, 3])  # not str: read as str() gives them, as one at a time


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.parent.name)
def test_every_real_text_parses_as_one_at_a_time(path: Path) -> None:
    nv = read_trace(path).nvtx
    texts = list(nv["text"].cat.categories) if len(nv) else []
    _same(texts + ODD)


def test_a_pytorch_runs_texts_parse_as_one_at_a_time(tmp_path: Path) -> None:
    generate(tmp_path / "t.sqlite", 3_000, seed=1, shape="pytorch")
    nv = read_trace(tmp_path / "t.sqlite").nvtx
    texts = list(nv["text"].cat.categories)
    assert sum(", op_id = " in t for t in texts) > 1_000
    _same(texts)
    form = parse_texts(texts)["form"].to_numpy()
    calls = np.array([", op_id = " in t for t in texts])
    assert len(np.unique(form[calls])) < 50  # a few dozen ops, not a form per call


@pytest.mark.parametrize("chunk", [1, 7, 97])
def test_texts_split_in_chunks_parse_as_one_at_a_time(tmp_path, monkeypatch, chunk) -> None:
    """The texts are split by RE2 a chunk at a time (bounded temporaries at 7.45M texts):
    skeletons first met in a later chunk, or met again there, number as in one pass."""
    from jlprof.engine.correlate import emit_nvtx

    monkeypatch.setattr(emit_nvtx, "CHUNK_TEXTS", chunk)
    _same(ODD + ODD[::-1])
    _same(["a, seq = 1", None, 3])
    generate(tmp_path / "t.sqlite", 1_000, seed=2, shape="pytorch")
    _same(list(read_trace(tmp_path / "t.sqlite").nvtx["text"].cat.categories))


@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_arrow_texts_parse_as_python_strings(tmp_path, monkeypatch, chunk) -> None:
    """The windowed read's range texts are Arrow strings (``string[pyarrow]`` categories):
    ``parse_forms`` splits them without a Python string per text, to the forms, codes, seqs
    and instance numbers the same texts give as Python strings (odd texts, numbered names
    and texts the vectorised split leaves to the per-text path included)."""
    import pyarrow as pa

    from jlprof.engine.correlate import emit_nvtx
    from jlprof.engine.correlate.ops import parse_forms

    monkeypatch.setattr(emit_nvtx, "CHUNK_TEXTS", chunk)
    generate(tmp_path / "t.sqlite", 1_000, seed=2, shape="pytorch")
    run = list(read_trace(tmp_path / "t.sqlite").nvtx["text"].cat.categories)
    texts = list(dict.fromkeys(ODD + run + ["Batch 3", "Batch 4", "Batch #7"]))
    arrow = pd.Index(pd.arrays.ArrowExtensionArray(pa.array(texts, pa.string())))
    for mode in MODES:
        want, got = parse_forms(pd.Index(texts, dtype=object), mode), parse_forms(arrow, mode)
        pd.testing.assert_frame_equal(got.frame, want.frame, check_exact=True)
        for field in ("code", "first", "seq", "instance_no"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
