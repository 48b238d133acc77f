"""PyTorch emit_nvtx range texts: the grammar (``jlprof.engine.correlate.emit_nvtx``), real strings.

Strings marked *real* are copied from the real exports nsysai-fastvideo-wan-train-fsdp-2gpu
and nsysai-fastvideo-wan-infer-sp2-2gpu (emit_nvtx, PyTorch 2.x); the others follow the
``getNvtxStr`` format of PyTorch's profiler (``sizes =`` with record_shapes, the pre-1.9
``stashed seq``), for which no licensed trace was found.
"""

from __future__ import annotations

import pytest

from jlprof.engine.correlate import emit_nvtx
from jlprof.engine.correlate.ops import parse_texts

CASES = [
    # text, name, seq, node, sizes, op type
    ("aten::mul, seq = 45328, op_id = 990726", "aten::mul", 45328, "", "", "mul"),  # real
    ("aten::empty_strided, op_id = 999730", "aten::empty_strided", -1, "", "", "empty_strided"),
    ("FlashAttnFunc, seq = 45368, op_id = 990812", "FlashAttnFunc", 45368, "", "", "FlashAttnFunc"),
    ("flash_attn::_flash_attn_forward, op_id = 990813", "flash_attn::_flash_attn_forward", -1,
     "", "", "_flash_attn_forward"),  # real
    ("FSDP::post_forward (blocks.2._checkpoint_wrapped_module), op_id = 990874",
     "FSDP::post_forward (blocks.2._checkpoint_wrapped_module)", -1, "", "",
     "post_forward (blocks.2._checkpoint_wrapped_module)"),  # real
    ("nccl:all_to_all, op_id = 12", "nccl:all_to_all", -1, "", "", "nccl:all_to_all"),  # real form
    ("aten::addmm, seq = 12, op_id = 40, sizes = [[64], [8, 128], [128, 64], [], []]",
     "aten::addmm", 12, "", "[[64],[8,128],[128,64],[],[]]", "addmm"),
    ("aten::cat, seq = 3, sizes = [[[2, 3], [2, 3]], []], input_op_ids = [(10,0), (11,0)]",
     "aten::cat", 3, "", "[[[2,3],[2,3]],[]]", "cat"),
    ("ConvolutionBackward0, seq = 7, op_id = 99", "ConvolutionBackward0", 7,
     "ConvolutionBackward0", "", "convolution"),
    ("CudnnConvolutionBackward, stashed seq = 7", "CudnnConvolutionBackward", 7,
     "CudnnConvolutionBackward", "", "cudnn_convolution"),
    ("autograd::engine::evaluate_function: AddmmBackward0",
     "autograd::engine::evaluate_function: AddmmBackward0", -1, "AddmmBackward0", "", "addmm"),
    ("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad, seq = 5",
     "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 5,
     "torch::autograd::AccumulateGrad", "", "torch::autograd::_accumulate_grad"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "name", "seq", "node", "sizes", "op_type"), CASES)
def test_grammar(text: str, name: str, seq: int, node: str, sizes: str, op_type: str) -> None:
    e = emit_nvtx.parse(text)
    assert e is not None
    assert (e.name, e.seq, e.node, e.sizes) == (name, seq, node, sizes)
    if not op_type.startswith("torch::"):
        assert e.op_type == op_type


@pytest.mark.parametrize(
    "text",
    [
        "ncclSend",  # real: NCCL's own ranges in the same trace
        "Batch 3",
        "/Net/conv1/convolution [aten::convolution|fprop|float32|[[8,3,16,16]]]",
        "{'mod': 'torch', 'op': 'cat', 'args': []}",
        "train, epoch = 2",
    ],
)
def test_not_emit_nvtx(text: str) -> None:
    assert emit_nvtx.parse(text) is None


def test_op_identity_drops_call_numbers() -> None:
    texts = [c[0] for c in CASES]
    df = parse_texts(texts)
    for col in ("op_name", "op_id"):
        for bad in ("seq =", "op_id =", "sizes ="):
            assert not df[col].str.contains(bad, regex=False).any(), (col, bad)
    assert df.loc[0, "op_id"] == "aten::mul:fprop"
    assert df.loc[8, "direction"] == "bprop" and df.loc[8, "op_name"] == "ConvolutionBackward0"
    assert df.loc[6, "input_shapes"] == "[[64],[8,128],[128,64],[],[]]"
    assert df["torch_op"].all()
