"""Named hardware: peak arithmetic, memory and link bandwidths of the accelerators the book measures or plans for.

Figures are the vendors' published peaks (dense, no sparsity), each with its source; they are what a
model-FLOPs utilisation (MFU) divides by and what the cost models of :mod:`systems.scaling` assume.
Bandwidths are per device and per direction (what one device can send while it receives as much).

    from systems.hardware import accelerator
    gpu = accelerator("NVIDIA H100 80GB HBM3")     # the name torch.cuda.get_device_name() reports
    gpu.peak_flops["bf16"]                          # 989.4e12
"""

from __future__ import annotations

from dataclasses import dataclass, field

TERA, GIGA = 1e12, 1e9


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: dict[str, float]  # dtype -> FLOP/s, dense
    memory_bytes: float
    memory_bandwidth: float  # bytes/s
    link_bandwidth: float  # bytes/s per direction to the other devices of its node (NVLink, ICI)
    source: str
    reports_as: tuple[str, ...] = field(default=(), repr=False)  # substrings of torch.cuda.get_device_name()


# Hopper SXM: the same tensor cores in both; the H200 has more and faster memory.
# fp32 is the CUDA cores' rate, which PyTorch uses unless TF32 is allowed (torch.backends.cuda.matmul.allow_tf32).
_HOPPER_FLOPS = {"bf16": 989.4 * TERA, "fp16": 989.4 * TERA, "tf32": 494.7 * TERA, "fp32": 66.9 * TERA}

H100 = Accelerator(
    "H100 SXM5 80GB", _HOPPER_FLOPS, 80 * GIGA, 3.35 * TERA, 450 * GIGA,
    "NVIDIA H100 Tensor Core GPU datasheet (2023): 989.4 TFLOP/s BF16 dense, 3.35 TB/s HBM3, "
    "NVLink 4 at 900 GB/s bidirectional", reports_as=("H100 80GB HBM3", "H100 SXM"))
H200 = Accelerator(
    "H200 SXM 141GB", _HOPPER_FLOPS, 141 * GIGA, 4.8 * TERA, 450 * GIGA,
    "NVIDIA H200 Tensor Core GPU datasheet (2024): 989 TFLOP/s BF16 dense, 4.8 TB/s HBM3e, "
    "NVLink 900 GB/s bidirectional", reports_as=("H200",))
# The 2025 handout's §2.4 figures for a TPU v5p (from "How to Scale Your Model", Austin et al., 2025):
# C = 4.6e14 FLOP/s bf16, W_ici = 2 · 9e10 bytes/s (two links along an axis of the 3-D torus).
TPU_V5P = Accelerator(
    "TPU v5p", {"bf16": 4.6e14}, 95 * GIGA, 2.765 * TERA, 2 * 9e10,
    "CS336 2025 handout §2.4 and Austin et al., How to Scale Your Model (2025), part 2: "
    "4.59e14 bf16 FLOP/s, 95 GB HBM, 2.8e12 B/s HBM, ICI 9e10 B/s per link one way, two links per axis")

ACCELERATORS = (H100, H200, TPU_V5P)

# Between nodes: one 400 Gb/s InfiniBand NDR adapter per GPU (the DGX H100 layout), 50 GB/s per direction.
INFINIBAND_NDR_PER_GPU = 50 * GIGA
INFINIBAND_SOURCE = "NVIDIA DGX H100 user guide: eight ConnectX-7 400 Gb/s (NDR) adapters, one per GPU"


def accelerator(device_name: str) -> Accelerator | None:
    """The accelerator behind a device name as torch reports it, or None if none of ours matches."""
    return next((a for a in ACCELERATORS if any(s in device_name for s in a.reports_as)), None)
