"""Peak FLOP/s and memory bandwidth by GPU model and data type: the roofline's ceilings.

Dense peaks (no 2:4 structured sparsity: NVIDIA's datasheets quote "with sparsity" figures
that are twice these), boost clock, TFLOP/s and GB/s, for the SXM / mezzanine part unless the
name says PCIe. ``fp32`` is the CUDA-core (non-Tensor-Core) FP32 rate; ``tf32``, ``fp16``,
``bf16`` and ``fp8`` are Tensor Core rates (FP16 with FP32 accumulate where the datasheet tells
them apart). A type a GPU does not support has no entry (no ceiling is drawn).

Sources (NVIDIA datasheets and architecture whitepapers, public PDFs):

- V100: "NVIDIA Tesla V100 GPU Architecture" whitepaper (2017) and the V100 datasheet
  (SXM2: 15.7 FP32, 125 Tensor; PCIe: 14 / 112; HBM2 900 GB/s).
- T4: "NVIDIA T4 Tensor Core GPU" datasheet (8.1 FP32, 65 FP16 Tensor, 320 GB/s).
- A10: "NVIDIA A10 Tensor Core GPU" datasheet (31.2 FP32, TF32 62.5, BF16/FP16 125; 600 GB/s).
- A100: "NVIDIA A100 Tensor Core GPU" datasheet (19.5 FP32, TF32 156, BF16/FP16 312;
  40GB 1,555 GB/s, 80GB SXM 2,039 GB/s, 80GB PCIe 1,935 GB/s).
- L4: "NVIDIA L4 Tensor Core GPU" datasheet (30.3 FP32, TF32 60, BF16/FP16 121, FP8 242.5
  (half of the sparse 120/242/485); 300 GB/s).
- L40S: "NVIDIA L40S GPU" datasheet (91.6 FP32, TF32 183, BF16/FP16 362.05, FP8 733
  (half of the sparse 366/733/1,466); 864 GB/s).
- H100: "NVIDIA H100 Tensor Core GPU" datasheet (SXM: 67 FP32, TF32 494.7, BF16/FP16 989.4,
  FP8 1,978.9, 3,350 GB/s; PCIe: 51, 378, 756, 1,513, 2,000 GB/s) — half of the sparse rates.
- H200: "NVIDIA H200 Tensor Core GPU" datasheet (SXM: compute as H100 SXM; 4,800 GB/s).
- B200: "NVIDIA HGX B200" / DGX B200 datasheets (TF32 1,100, BF16/FP16 2,250, FP8 4,500 per
  GPU: half of the sparse 2.2/4.5/9 PFLOPS; HBM3e 8,000 GB/s); FP32 80 from the GB200 NVL72
  datasheet's 5,760 TFLOPS FP32 over 72 GPUs.

The figures were transcribed from those documents; check a new GPU's datasheet before adding a
row, and keep the dense (not sparse) number.
"""

from __future__ import annotations

import re

# (pattern on the CUDA device name, model, {dtype: peak TFLOP/s}, bandwidth GB/s); first match
# wins, so the more specific patterns (L40S before L4, A100 80GB before A100) come first.
PEAKS: tuple[tuple[str, str, dict[str, float], float], ...] = (
    (r"V100.*PCIE", "V100 PCIe", {"fp32": 14.0, "fp16": 112.0}, 900.0),
    (r"V100", "V100 SXM2", {"fp32": 15.7, "fp16": 125.0}, 900.0),
    (r"\bT4\b", "T4", {"fp32": 8.1, "fp16": 65.0}, 320.0),
    (r"A100.*80\s*GB.*PCIE|A100.*PCIE.*80\s*GB", "A100 80GB PCIe", {}, 1935.0),
    (r"A100.*80\s*GB", "A100 80GB SXM", {}, 2039.0),
    (r"A100", "A100 40GB", {}, 1555.0),
    (r"\bA10\b", "A10", {"fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0}, 600.0),
    (
        r"L40S",
        "L40S",
        {"fp32": 91.6, "tf32": 183.0, "fp16": 362.05, "bf16": 362.05, "fp8": 733.0},
        864.0,
    ),
    (
        r"\bL4\b",
        "L4",
        {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0, "fp8": 242.5},
        300.0,
    ),
    (
        r"H100.*PCIE",
        "H100 PCIe",
        {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0, "fp8": 1513.0},
        2000.0,
    ),
    (r"H100", "H100 SXM", {}, 3350.0),
    (r"H200", "H200 SXM", {}, 4800.0),
    (
        r"B200",
        "B200",
        {"fp32": 80.0, "tf32": 1100.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0},
        8000.0,
    ),
)
_A100 = {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}
_H100_SXM = {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9}
_SHARED = {
    "A100 80GB PCIe": _A100,
    "A100 80GB SXM": _A100,
    "A100 40GB": _A100,
    "H100 SXM": _H100_SXM,
    "H200 SXM": _H100_SXM,
}
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")


def gpu_peaks(name: str) -> tuple[str, dict[str, float], float] | None:
    """(model, {dtype: peak FLOP/s}, bandwidth B/s) for a CUDA device name; None if unknown."""
    for pattern, model, flops, bw in PEAKS:
        if re.search(pattern, name or "", re.I):
            tf = flops or _SHARED[model]
            return model, {k: v * 1e12 for k, v in tf.items()}, bw * 1e9
    return None


def peak_table() -> list[dict[str, object]]:
    """The table as rows (model, dtype peaks in TFLOP/s, bandwidth in GB/s), for the docs."""
    rows = []
    for _pattern, model, flops, bw in PEAKS:
        tf = flops or _SHARED[model]
        rows.append({"GPU": model, **{f"{d} (TFLOP/s)": tf.get(d) for d in DTYPES}, "GB/s": bw})
    return rows


__all__ = ["DTYPES", "PEAKS", "gpu_peaks", "peak_table"]
