"""PyProf / DLProf-plugin dict markers (``jlprof.engine.correlate.pyprof``), table-driven.

Strings marked *real* are copied from the real export mmagic-pyprof-a100 (pyprof, PyTorch
2.x, A100); the ``funcStack`` and ``strRepr`` forms follow the markers of DLProf's PyTorch
plugin (``nvidia_dlprof_pytorch_nvtx``), for which no licensed trace was found.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import jlprof
from jlprof.engine.correlate import pyprof
from tests.fixtures.torch_traces import CONV_BWD, CONV_FWD, DUR, plugin_db

CONV2D = (  # real
    "{'mod': 'torch.nn.functional', 'op': 'conv2d', 'args': [{'name': '', 'type': 'tensor', "
    "'shape': (1, 128, 16, 16), 'dtype': 'float32'}, {'name': '', 'type': 'tensor', 'shape': "
    "(144, 128, 7, 7), 'dtype': 'float32'}, {'name': '', 'type': 'tensor', 'shape': (144,), "
    "'dtype': 'float32'}, {'name': '', 'type': 'tuple', 'value': (1, 1)}, {'name': '', 'type': "
    "'tuple', 'value': (3, 3)}, {'name': '', 'type': 'tuple', 'value': (1, 1)}, {'name': '', "
    "'type': 'int', 'value': 1}]}"
)
TRACE = (  # real
    "{'traceMarker': ['/workspace/mmagic/editors/d2dunet/multiscale_arch.py:148', "
    "'/opt/conda/lib/python3.10/site-packages/pyprof/nvtx/nvmarker.py:405', "
    "'/opt/conda/lib/python3.10/site-packages/pyprof/nvtx/nvmarker.py:255']}"
)
ADD = (  # real
    "{'mod': 'Tensor', 'op': '__add__', 'args': [{'name': '', 'type': 'tensor', 'shape': "
    "(1, 144, 32, 32), 'dtype': 'float32'}, {'name': '', 'type': 'tensor', 'shape': "
    "(1, 144, 32, 32), 'dtype': 'float32'}]}"
)
RANDN = (  # real
    "{'mod': 'torch', 'op': 'randn', 'args': [{'name': '', 'type': 'int', 'value': 1}, "
    "{'name': '', 'type': 'int', 'value': 7}]}"
)

CASES = [
    # text, kind, name, type, data type, shapes, func stack
    (CONV2D, "op", "torch.nn.functional.conv2d", "conv2d", "float32",
     "[[1,128,16,16],[144,128,7,7],[144]]", ""),
    (TRACE, "trace", "multiscale_arch.py:148", "traceMarker", "", "", ""),
    (ADD, "op", "Tensor.__add__", "add", "float32", "[[1,144,32,32],[1,144,32,32]]", ""),
    (RANDN, "op", "torch.randn", "randn", "", "", ""),
    ("{'traceMarker': ['train.py:41'], 'funcStack': '/Net/forward/conv1/conv2d'}", "trace",
     "/Net/forward/conv1/conv2d", "traceMarker", "", "", "/Net/forward/conv1/conv2d"),
    ("{'mod': 'Conv2d', 'strRepr': '3, 64, kernel_size=(3, 3), stride=(1, 1)'}", "module",
     "Conv2d", "Conv2d", "", "", ""),
    ('{"model_config": {"num_workers": 4, "pin_memory": true}}', "config", "model_config",
     "model_config", "", "", ""),
    # cut short by the NVTX text limit: the pattern still finds mod and op
    ("{'mod': 'torch', 'op': 'cat', 'args': [{'name': '', 'type': 'tensor', 'shape': (1, 6",
     "op", "torch.cat", "cat", "", "", ""),
]  # fmt: skip


@pytest.mark.parametrize(("text", "kind", "name", "op_type", "dtype", "shapes", "stack"), CASES)
def test_markers(text, kind, name, op_type, dtype, shapes, stack) -> None:
    m = pyprof.parse(text)
    assert m is not None
    assert (m.kind, m.name, m.op_type, m.data_type, m.input_shapes, m.func_stack) == (
        kind, name, op_type, dtype, shapes, stack,
    )  # fmt: skip


@pytest.mark.parametrize("text", ["{not a dict", "aten::mul, seq = 1", "Batch 0", "{}"])
def test_not_markers(text: str) -> None:
    assert pyprof.parse(text) is None


def test_plugin_trace_ops_by_module_path(tmp_path: Path) -> None:
    """DLProf's plugin with emit_nvtx inside: the op is the call's module path, forward and
    backward (linked through the emit_nvtx sequence number) on one op."""
    iters = 4
    p = jlprof.load(plugin_db(iters).write(tmp_path / "plugin.sqlite"), mode="pytorch")
    d = p.report("detail").set_index("Op ID")
    fwd = d.loc["/Net/forward/conv1/conv2d:fprop"]
    assert fwd["Total GPU Time (ns)"] == iters * DUR[CONV_FWD]
    assert fwd["Input Shapes"] == "[[8,3,16,16],[4,3,3,3],[4]]"
    assert fwd["Data Type"] == "float32" and fwd["Op Type"] == "conv2d"
    bwd = d.loc["/Net/forward/conv1/conv2d:bprop"]
    assert bwd["Total GPU Time (ns)"] == iters * DUR[CONV_BWD]
    assert not d.index.str.startswith("{").any()
    assert "/Net/forward/conv1" in set(p.report("group_node")["Name"])


def test_real_pyprof_trace() -> None:
    from tests.fixtures.scenarios import REAL_DATA_MISSING, real_data_dir

    base = real_data_dir()
    if base is None or not (base / "mmagic-pyprof-a100").is_dir():
        pytest.skip(REAL_DATA_MISSING)
    p = jlprof.load(next((base / "mmagic-pyprof-a100").glob("*.sqlite")))
    d = p.report("detail").set_index("Op ID")
    assert not d.index.str.startswith("{").any()
    # ops are call sites: the three conv2d lines stay apart, as do their Tensor Core verdicts
    # (line 74's 16x16 convolution runs a SIMT kernel)
    conv = d[d["Op Type"] == "conv2d"]
    assert len(conv) == 3 and conv["No. Calls"].sum() == 18
    simt = d.loc["torch.nn.functional.conv2d (multiscale_arch.py:74):fprop"]
    assert simt["Data Type"] == "float32" and not simt["Using TC"]
    assert d.loc["torch.nn.functional.conv2d (multiscale_arch.py:125):fprop", "Using TC"]
    for name in p.suggest_key_nodes()["op_name"].astype(str):
        assert not name.startswith("{")
    assert p.framework() == "PyTorch (pyprof annotations)"
