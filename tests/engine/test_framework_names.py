"""``-m tensorrt`` and ``-m tensorflow1|2``: op name and type from the frameworks' documented
NVTX texts (fixtures) and from a real TensorRT export (centerformer, TITAN RTX)."""

from __future__ import annotations

import sqlite3

import pytest

import jlprof
from jlprof.engine.correlate.framework_names import parse_tensorflow, parse_tensorrt
from jlprof.engine.correlate.ops import parse_texts
from tests.fixtures.framework_traces import (
    KERNEL_NS,
    TRT_LAYERS,
    tf_detailed,
    tf_export,
    trt_export,
)
from tests.fixtures.scenarios import real_data_dir

TRT_CASES = [
    # (layer name as TensorRT writes it, op type)
    ("/up/up.0/ConvTranspose + /up/up.1/BatchNormalization + /up/up.2/Relu",
     "ConvTranspose + BatchNormalization + Relu"),
    ("PWN(PWN(/blocks.2/blocks.2.7/sigmoid/Sigmoid), /blocks.2/blocks.2.7/Mul)",
     "PWN(Sigmoid + Mul)"),
    ("/hm_heads.5/hm_heads.5.3/Conv + PWN(/Sigmoid_5)", "Conv + PWN(Sigmoid)"),
    ("/h.1/Conv + /h.1/Relu || /h.0/Conv + /h.0/Relu", "Conv + Relu"),
    ("/a/Conv || /b/MatMul", "Conv || MatMul"),
    ("Reformatting CopyNode for Input Tensor 0 to /blocks.0/Pad + /blocks.0/Conv", "Reformat"),
    ("Reformatting CopyNode for Output Tensor 4 to {ForeignNode[/A.../B]}", "Reformat"),
    ("{ForeignNode[/ConstantOfShape_3_output_0.../ScatterND_23]}", "ForeignNode"),
    ("/blocks.2/blocks.2.7/ReduceMean_output_0 copy", "Copy"),
    ("/Reshape_25", "Reshape"),
    ("(Unnamed Layer* 3) [Convolution] + (Unnamed Layer* 4) [Activation]",
     "Convolution + Activation"),
    ("conv1 [Convolution]", "Convolution"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "op_type"), TRT_CASES)
def test_tensorrt_layer_names(text: str, op_type: str) -> None:
    got = parse_tensorrt(text)
    assert (got.name, got.op_type) == (text, op_type)


TF_CASES = [
    # (range text, op name, op type, group path)
    ("MatMul: model/dense/MatMul", "model/dense/MatMul", "MatMul", "/model/dense/MatMul"),
    ("_FusedConv2D: model/conv2d/Conv2D", "model/conv2d/Conv2D", "_FusedConv2D",
     "/model/conv2d/Conv2D"),
    ("cluster_3_1/xla_run/fusion.12", "cluster_3_1/xla_run/fusion.12", "XLA fusion",
     "/cluster_3_1/xla_run/fusion.12"),
    ("cluster_0_1/xla_run/convolution.3", "cluster_0_1/xla_run/convolution.3",
     "XLA convolution", "/cluster_0_1/xla_run/convolution.3"),
    ("model/dense/MatMul_1", "model/dense/MatMul_1", "MatMul", "/model/dense/MatMul_1"),
    ("AssignAddVariableOp: global_step", "global_step", "AssignAddVariableOp", ""),
]  # fmt: skip


@pytest.mark.parametrize(("text", "name", "op_type", "path"), TF_CASES)
def test_tensorflow_node_texts(text: str, name: str, op_type: str, path: str) -> None:
    got = parse_tensorflow(text)
    assert got is not None and (got.name, got.op_type, got.abs_path) == (name, op_type, path)


def test_tensorflow_detailed_json_gives_shapes_and_dtype() -> None:
    got = parse_tensorflow(tf_detailed("Conv2D", "m/c/Conv2D", [[8, 32, 32, 3], [3, 3, 3, 16]]))
    assert got is not None
    assert (got.name, got.op_type, got.data_type) == ("m/c/Conv2D", "Conv2D", "half")
    assert got.input_shapes == "[[8,32,32,3],[3,3,3,16]]"


def test_modes_change_the_parse_and_no_mode_keeps_the_generic_one() -> None:
    pwn = "PWN(PWN(/a/Sigmoid), /a/Mul)"
    assert parse_texts([pwn])["op_type"][0] == "Mul)"  # the generic rule, the bug
    assert parse_texts([pwn], "tensorrt")["op_type"][0] == "PWN(Sigmoid + Mul)"
    text = "MatMul: model/dense/MatMul"
    assert parse_texts([text], "tensorflow1")["op_name"][0] == "model/dense/MatMul"
    assert parse_texts([text], "pytorch")["op_name"][0] == text


def test_tensorrt_fixture_reports(tmp_path) -> None:
    prof = jlprof.load(trt_export(tmp_path / "trt.sqlite", runs=3), mode="tensorrt",
                       key_node="ExecutionContext::execute")  # fmt: skip
    det = prof.report("detail").set_index("Op Name")
    for text, _kernel in TRT_LAYERS:
        assert det.loc[text, "No. Calls"] == 3
        assert det.loc[text, "Total GPU Time (ns)"] == 3 * KERNEL_NS
    assert det.loc[TRT_LAYERS[0][0], "Op Type"] == "Reformat"
    assert not det.loc[TRT_LAYERS[0][0], "TC Eligibility"]  # named after a conv, but a copy
    assert det.loc["/conv1/Conv + /relu1/Relu", "Using TC"]
    assert det.loc["/head/fc/MatMul_2", "Op Type"] == "MatMul"
    types = prof.report("op_type").set_index("Op Name")
    assert types.loc["Conv + Relu", "No. Calls"] == 3


@pytest.fixture(scope="module")
def poolformer() -> tuple:
    db = real_data_dir() / "centerformer-trt-nvtx-titanrtx" / "poolformer.sqlite"
    return db, jlprof.load(db, mode="tensorrt")


def test_real_tensorrt_export(poolformer) -> None:
    """Every TensorRT layer of the real export gets a type; counted against plain SQL."""
    db, prof = poolformer
    det = prof.report("detail")
    with sqlite3.connect(db) as con:
        texts = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT coalesce(e.text, s.value) FROM NVTX_EVENTS e "
                "LEFT JOIN StringIds s ON e.textId = s.id WHERE e.eventType = 59"
            )
        ]
    reformats = {t for t in texts if t.startswith("Reformatting CopyNode for ")}
    pwn = {t for t in texts if t.startswith("PWN(")}
    fused = {t for t in texts if " + " in t and t not in reformats}
    types = det.set_index("Op Name")["Op Type"]
    assert reformats and pwn and fused
    assert (types[sorted(reformats)] == "Reformat").all()
    assert all(types[t].startswith("PWN(") and types[t].endswith(")") for t in pwn)
    assert (types[sorted(pwn)].str.count(r"\(") == types[sorted(pwn)].str.count(r"\)")).all()
    for t in fused:  # one type per fused part, no scope left in a type
        assert 1 <= types[t].count(" + ") <= t.count(" + "), (t, types[t])
        assert "/" not in types[t], (t, types[t])
    assert (types[sorted(fused)].str.contains("Conv")).sum() >= 20
    # a fused convolution is Tensor Core eligible, a reformat named after it is not
    elig = det.set_index("Op Name")["TC Eligibility"]
    assert elig["/blocks.1/blocks.1.16/Conv + /blocks.1/blocks.1.18/Relu"]
    assert not elig[sorted(reformats)].any()


def test_tensorflow_fixture_reports(tmp_path) -> None:
    prof = jlprof.load(tf_export(tmp_path / "tf.sqlite", fused=False, steps=4), mode="tensorflow1")
    # 4 key node instances: 5 intervals (guide ch. 7)
    assert prof.key_node == "global_step" and prof.iterations.instances == 4
    det = prof.report("detail").set_index("Op Name")
    assert det.loc["model/dense/MatMul", "Op Type"] == "MatMul"
    assert det.loc["model/conv2d/Conv2D", "Input Shapes"] == "[[8,224,224,3],[7,7,3,64]]"
    assert det.loc["model/conv2d/Conv2D", "Data Type"] == "half"
    groups = set(prof.report("group_node")["Name"])
    assert {"/model", "/model/dense"} <= groups
