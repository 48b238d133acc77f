"""The annotation text format: what jlprof.torch writes, the engine reads back exactly."""

from __future__ import annotations

import json

import pytest

from jlprof.engine.correlate.annotations import MARK_PREFIX as ENGINE_PREFIX
from jlprof.engine.correlate.annotations import _decode
from jlprof.engine.correlate.ops import parse_annotation, parse_texts
from jlprof.torch import format as fmt

CASES = [
    ("/Net/conv1/convolution", "aten::convolution", "fprop", "float32", [(8, 3, 16, 16), (4,)]),
    ("/Net/block(2)/conv/convolution", "aten::convolution", "bprop", "bfloat16", [(1,)]),
    ("/loss/nll_loss_forward(3)", "aten::nll_loss_forward", "fprop", "int64", [()]),
    ("/optimizer_step/_foreach_add_", "aten::_foreach_add_", "fprop", "", []),
    ("/Net/fc/weight.grad", "AccumulateGrad", "bprop", "float16", [(10, 256)]),
]


@pytest.mark.parametrize(("name", "op", "direction", "dtype", "shapes"), CASES)
@pytest.mark.parametrize("bwd", ["", "aten::convolution_backward"])
@pytest.mark.parametrize("stack", ["", "train.py:42 step;train.py:80 <module>"])
def test_round_trip(name, op, direction, dtype, shapes, bwd, stack):
    shp = fmt.shapes_text(shapes)
    text = fmt.op_text(name, op, direction, dtype, shp, bwd=bwd, stack=stack)
    got = parse_annotation(text)
    assert got == {
        "op_name": name,
        "op_type": op,
        "direction": direction,
        "data_type": dtype,
        "input_shapes": shp,
        "stack_trace": stack,
        "bwd_op": bwd,
    }
    row = parse_texts([text]).iloc[0]
    assert row["op_name"] == name
    assert row["op_type"] == op.removeprefix("aten::")
    assert row["op_id"] == f"{name}:{direction}"
    assert row["abs_path"] == name
    assert (row["data_type"], row["input_shapes"], row["stack_trace"]) == (dtype, shp, stack)


def test_shapes_text_is_compact_and_bounded():
    assert fmt.shapes_text([(8, 3, 16, 16), (), (4,)]) == "[[8,3,16,16],[],[4]]"
    many = fmt.shapes_text([(i,) for i in range(fmt.MAX_SHAPES + 5)])
    assert many.endswith(",...]") and many.count("[") == fmt.MAX_SHAPES + 1


def test_separators_in_values_cannot_break_parsing():
    stack = "we|ird]file[.py:1 f"
    text = fmt.op_text("/a/b", "aten::x|y", "fprop", "float32", "[[1]]", stack=stack)
    got = parse_annotation(text)
    assert got["op_type"] == "aten::x/y" and got["input_shapes"] == "[[1]]"
    assert got["stack_trace"] == fmt.clean(stack) and "|" not in got["stack_trace"]


@pytest.mark.parametrize(
    "text",
    ["optimizer_step", "/model/conv1/conv2d", "foo [bar]", "x [aten::mm|sideways|f|[]]", "a [b|"],
)
def test_other_texts_are_not_annotations(text):
    assert parse_annotation(text) is None
    row = parse_texts([text]).iloc[0]
    assert row["direction"] == "" and row["data_type"] == ""


def test_mark_round_trip():
    payload = {"event": "state", "amp": True, "batch_size": 64, "amp_dtype": "float16"}
    text = fmt.mark_text(payload)
    assert fmt.MARK_PREFIX == ENGINE_PREFIX and text.startswith(ENGINE_PREFIX)
    assert json.loads(text[len(ENGINE_PREFIX) :]) == payload
    assert _decode(text) == payload
    assert _decode("jlprof:{not json") is None and _decode("amp=on") is None
