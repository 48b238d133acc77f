"""Bad Tensor Shape and No Fusion detectors (guide §10.10) on fixtures whose shapes, data types
and op sequences are known; Bad Tensor Shape for PyTorch too, from recorded shapes."""

from __future__ import annotations

import json

import pytest

import jlprof
from jlprof.reports.expert_shapes import misaligned
from tests.fixtures.framework_traces import KERNEL_NS, PLAIN_CONV, TC_GEMM, _op, tf_export
from tests.fixtures.nsysdb import NsysDb


def _findings(prof, detector: str) -> list[dict]:
    es = prof.report("expert_systems")
    return [json.loads(e) for e in es.loc[es["Detector"] == detector, "Evidence"]]


@pytest.mark.parametrize(
    ("op_type", "shapes", "align", "channels_last", "want"),
    [
        ("aten::conv2d", [[8, 3, 16, 16], [4, 3, 3, 3], [4]], 8, False, {"C": 3, "K": 4}),
        ("aten::conv2d", [[8, 16, 16, 16], [32, 16, 3, 3], [32]], 8, False, {}),
        ("Conv2D", [[8, 224, 224, 3], [7, 7, 3, 64]], 8, True, {"C": 3}),
        ("aten::addmm", [[64], [8, 130], [130, 64]], 8, False, {"K": 130}),
        ("aten::linear", [[8, 128], [60, 128]], 8, False, {"N": 60}),
        ("MatMul", [[8, 120], [120, 64]], 16, False, {"K": 120}),
        ("Relu", [[8, 3]], 8, False, {}),  # not a GEMM or a convolution
    ],
)
def test_misaligned_dimensions(op_type, shapes, align, channels_last, want) -> None:
    assert misaligned(op_type, shapes, align, channels_last) == want


def test_tensorflow_unfused_and_misaligned(tmp_path) -> None:
    prof = jlprof.load(tf_export(tmp_path / "tf.sqlite", fused=False), mode="tensorflow1")
    (shape,) = _findings(prof, "Bad Tensor Shape Detector")
    (op,) = shape["ops"]
    assert op["op_id"] == "model/conv2d/Conv2D" and op["misaligned"] == {"C": 3}
    assert op["gpu_time_ns"] == 4 * KERNEL_NS  # four steps, one 10 us kernel each
    (fusion,) = _findings(prof, "No Fusion Detector")
    assert fusion["op_types"] == ["BiasAdd", "Relu"]
    assert fusion["gpu_time_ns"] == 2 * 4 * KERNEL_NS


def test_tensorflow_fused_has_no_fusion_finding(tmp_path) -> None:
    prof = jlprof.load(tf_export(tmp_path / "tf.sqlite", fused=True), mode="tensorflow2")
    assert _findings(prof, "No Fusion Detector") == []
    # the same trace read without a TensorFlow mode: the detector does not apply
    plain = jlprof.load(tf_export(tmp_path / "tf2.sqlite", fused=False), mode="simple")
    assert _findings(plain, "No Fusion Detector") == []


def _torch_export(path, shapes: str, kernel: str, dtype: str = "float16"):
    db = NsysDb()
    db.gpu(cu_device=0, name="NVIDIA A100-SXM4-40GB")
    t = db.process(pid=79, name="python").thread()
    now = 1_000_000
    for _ in range(3):
        now = _op(t, f"/Net/conv1/convolution [aten::convolution|fprop|{dtype}|{shapes}]",
                  kernel, now)  # fmt: skip
        now = _op(t, "optimizer_step", TC_GEMM, now)
    return db.write(path)


def test_pytorch_bad_tensor_shape_from_recorded_shapes(tmp_path) -> None:
    bad = jlprof.load(_torch_export(tmp_path / "bad.sqlite", "[[8,3,16,16],[4,3,3,3],[4]]",
                                    PLAIN_CONV), mode="pytorch")  # fmt: skip
    (ev,) = _findings(bad, "Bad Tensor Shape Detector")
    assert ev["ops"][0]["op_id"] == "/Net/conv1/convolution:fprop"
    assert ev["ops"][0]["misaligned"] == {"C": 3, "K": 4}
    assert ev["gpu_time_ns"] == 3 * KERNEL_NS
    good = jlprof.load(_torch_export(tmp_path / "good.sqlite", "[[8,16,16,16],[32,16,3,3],[32]]",
                                     PLAIN_CONV), mode="pytorch")  # fmt: skip
    assert _findings(good, "Bad Tensor Shape Detector") == []  # aligned: something else
    fp64 = jlprof.load(_torch_export(tmp_path / "fp64.sqlite", "[[8,16,16,16],[32,16,3,3]]",
                                     PLAIN_CONV, "float64"), mode="pytorch")  # fmt: skip
    (ev,) = _findings(fp64, "Bad Tensor Shape Detector")
    assert ev["ops"][0]["why"] == "data type float64"
    used = jlprof.load(_torch_export(tmp_path / "tc.sqlite", "[[8,3,16,16],[4,3,3,3]]",
                                     TC_GEMM), mode="pytorch")  # fmt: skip
    assert _findings(used, "Bad Tensor Shape Detector") == []  # it ran Tensor Cores anyway
