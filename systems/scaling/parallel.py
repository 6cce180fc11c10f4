"""Parallel training on paper: FLOPs, communication time and per-device memory of data parallel, FSDP, tensor
parallel and FSDP × TP (2026 handout §8, 2025 handout §2.4 ``communication_accounting``).

The setting is §8's: N devices, all pairwise linked, each sending W bytes/s and computing C FLOP/s; one
feed-forward layer x (B, D) → W1, W2 (D, F) → W3 (F, D), weights and activations in 2-byte floats, only matmuls
counted ((A, B)(B, C) costs 2ABC FLOPs); communication overlaps computation, so a pass is communication-bound
when its communication takes longer than its arithmetic. One layer's forward is three matmuls, 6BDF FLOPs; its
backward six (two per weight: the input's gradient and the weight's), 12BDF.

    ffn = FFN(batch=4096, d_model=8192, d_ff=28672)
    costs = fsdp(ffn, 64, NETWORKS["H100 node (NVLink)"])
    costs.forward_bound, largest_devices("fsdp", ffn, net)

:func:`largest_devices` gives the closed forms derived in ``notebooks/14_parallelism_at_scale.py``; the tests
check them against a search over the cost functions, which follow the collectives step by step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from systems.hardware import H100, INFINIBAND_NDR_PER_GPU, INFINIBAND_SOURCE, TPU_V5P
from systems.scaling.collectives import ring_all_gather, ring_all_reduce, ring_reduce_scatter


@dataclass(frozen=True)
class Network:
    """§8's hardware parameters: C (FLOP/s per device) and W (bytes/s each device sends), with their source."""

    name: str
    flops: float
    bandwidth: float
    source: str

    @property
    def intensity(self) -> float:
        """C / W, FLOPs per byte sent: a pass is compute-bound when it does more arithmetic per byte than this."""
        return self.flops / self.bandwidth


NETWORKS = {n.name: n for n in (
    Network("H100 node (NVLink)", H100.peak_flops["bf16"], H100.link_bandwidth, H100.source),
    Network("H100 nodes (InfiniBand)", H100.peak_flops["bf16"], INFINIBAND_NDR_PER_GPU,
            f"{H100.source}; {INFINIBAND_SOURCE}"),
    Network("TPU v5p (ICI)", TPU_V5P.peak_flops["bf16"], TPU_V5P.link_bandwidth, TPU_V5P.source),
)}


@dataclass(frozen=True)
class FFN:
    """One feed-forward layer at batch B (tokens), width D and hidden width F; ``value_bytes`` per weight and
    activation (2: fp16 or bf16)."""

    batch: float
    d_model: int
    d_ff: int
    value_bytes: int = 2

    @property
    def weight_bytes(self) -> float:
        """W1, W2 and W3: 3·D·F values."""
        return 3 * self.d_model * self.d_ff * self.value_bytes

    @property
    def forward_flops(self) -> float:
        return 6 * self.batch * self.d_model * self.d_ff

    @property
    def backward_flops(self) -> float:
        return 12 * self.batch * self.d_model * self.d_ff

    def activation_bytes(self, batch: float) -> float:
        """An activation (batch, D)."""
        return batch * self.d_model * self.value_bytes


@dataclass(frozen=True)
class PassCosts:
    """Per device: FLOPs and communication seconds of one layer's forward and backward, on ``network``."""

    strategy: str
    devices: int
    forward_flops: float
    backward_flops: float
    forward_comm_s: float
    backward_comm_s: float
    network: Network

    @property
    def forward_compute_s(self) -> float:
        return self.forward_flops / self.network.flops

    @property
    def backward_compute_s(self) -> float:
        return self.backward_flops / self.network.flops

    @property
    def forward_bound(self) -> str:
        return "communication" if self.forward_comm_s > self.forward_compute_s else "compute"

    @property
    def backward_bound(self) -> str:
        return "communication" if self.backward_comm_s > self.backward_compute_s else "compute"


# ---- the four strategies of §8 -----------------------------------------------------------------------


def data_parallel(ffn: FFN, n: int, net: Network) -> PassCosts:
    """§8.2: the batch split N ways; the forward needs nothing from the others; the backward all-reduces the three
    weight gradients."""
    w = net.bandwidth
    return PassCosts("DP", n, ffn.forward_flops / n, ffn.backward_flops / n, 0.0,
                     ring_all_reduce(ffn.weight_bytes, n, w), net)


def fsdp(ffn: FFN, n: int, net: Network) -> PassCosts:
    """§8.3: weights sharded N ways and gathered before each pass; the backward also reduce-scatters the weight
    gradients to their owners."""
    w, gather = net.bandwidth, ring_all_gather(ffn.weight_bytes, n, net.bandwidth)
    return PassCosts("FSDP", n, ffn.forward_flops / n, ffn.backward_flops / n, gather,
                     gather + ring_reduce_scatter(ffn.weight_bytes, n, w), net)


def tensor_parallel(ffn: FFN, n: int, net: Network) -> PassCosts:
    """§8.4: W1, W2 split by columns and W3 by rows, so each pass ends in one all-reduce of a (B, D) activation: y
    in the forward, dx in the backward."""
    reduce = ring_all_reduce(ffn.activation_bytes(ffn.batch), n, net.bandwidth)
    return PassCosts("TP", n, ffn.forward_flops / n, ffn.backward_flops / n, reduce, reduce, net)


def fsdp_tp(ffn: FFN, n_fsdp: int, n_tp: int, net: Network, overlap: bool = True) -> PassCosts:
    """§8.5: device (i, j) holds a (1/N_TP, 1/N_FSDP) block of each weight and a 1/N_FSDP slice of the batch.
    Forward: all-gather each weight's TP slice over the FSDP axis, the TP layer on the batch slice, all-reduce of
    y (B/N_FSDP, D) over the TP axis. Backward: gather again, all-reduce dx over TP, reduce-scatter the gradients
    over FSDP. With ``overlap`` the two axes' collectives run at once (the slower one counts), else one after
    the other."""
    w = net.bandwidth
    slice_bytes = ffn.weight_bytes / n_tp
    gather, scatter = ring_all_gather(slice_bytes, n_fsdp, w), ring_reduce_scatter(slice_bytes, n_fsdp, w)
    reduce = ring_all_reduce(ffn.activation_bytes(ffn.batch / n_fsdp), n_tp, w)
    combine = max if overlap else (lambda a, b: a + b)
    n = n_fsdp * n_tp
    return PassCosts("FSDP × TP" + ("" if overlap else " (no overlap)"), n, ffn.forward_flops / n,
                     ffn.backward_flops / n, combine(gather, reduce), combine(gather + scatter, reduce), net)


# ---- when communication takes over ----------------------------------------------------------------------


def largest_devices(strategy: str, ffn: FFN, net: Network, pass_: str = "forward") -> float:
    """The largest device count (real-valued) at which ``pass_`` of ``strategy`` is still compute-bound.

    With R = W/C (bytes per FLOP): DP and FSDP need N − 1 ≤ B·R in every pass that communicates (the D·F of the
    weights cancels against the arithmetic); TP needs N − 1 ≤ (3/2)·F·R in the forward and 3·F·R in the backward
    (the batch cancels); FSDP × TP forward, overlapped, is the product of the two axes' limits; without overlap
    N ≤ (3BF·R + 3F + 2B)² / (24·B·F), at N_FSDP = (3BF·R + 3F + 2B)/(6F) and N_TP = (…)/(4B), where both
    are at least 1 (else that axis has one device and the other takes the whole budget: :func:`best_mesh`).
    """
    b, f, r = ffn.batch, ffn.d_ff, 1 / net.intensity
    limits = {
        ("DP", "forward"): math.inf,
        ("DP", "backward"): 1 + b * r,
        ("FSDP", "forward"): 1 + b * r,
        ("FSDP", "backward"): 1 + b * r,
        ("TP", "forward"): 1 + 1.5 * f * r,
        ("TP", "backward"): 1 + 3 * f * r,
        ("FSDP × TP", "forward"): (1 + b * r) * (1 + 1.5 * f * r),
    }
    if (strategy, pass_) == ("FSDP × TP (no overlap)", "forward"):
        n_fsdp, n_tp = best_mesh(ffn, net, overlap=False)
        return n_fsdp * n_tp
    if (strategy, pass_) not in limits:
        raise ValueError(f"no closed form for the {pass_} of {strategy!r}; known: {sorted(limits)}")
    return limits[strategy, pass_]


def best_mesh(ffn: FFN, net: Network, overlap: bool = True) -> tuple[float, float]:
    """(N_FSDP, N_TP), real-valued, that reach :func:`largest_devices` for the FSDP × TP forward."""
    b, f, r = ffn.batch, ffn.d_ff, 1 / net.intensity
    if overlap:
        return 1 + b * r, 1 + 1.5 * f * r
    m = 3 * b * f * r + 3 * f + 2 * b  # the budget 3F·N_FSDP + 2B·N_TP ≤ m, split evenly at the optimum
    n_fsdp, n_tp = m / (6 * f), m / (4 * b)
    if n_fsdp < 1:  # a mesh axis has at least one device: then the other axis takes the rest of the budget
        return 1.0, 1 + 1.5 * f * r
    if n_tp < 1:
        return 1 + b * r, 1.0
    return n_fsdp, n_tp


@dataclass(frozen=True)
class TorusMesh:
    """The TPU book's 2-D mesh of FSDP (X devices) and TP (Y devices) on a torus whose X axis has M_X links per
    device and Y axis M_Y (Austin et al., "How to Scale Your Model", 2025, part 5), each link W bytes/s."""

    x: int
    y: int
    m_x: int
    m_y: int

    def critical_batch(self, net: Network, d_ff: int) -> dict[str, float]:
        """Per matmul, arithmetic 2BDF/(XY·C) against the FSDP gather of D·F/Y values over X, 2DF/(Y·W·M_X), and
        the TP collective of (B/X, D), 2BD/(X·W·M_Y). The first is compute-bound for B ≥ X·(C/W)/M_X tokens in
        all; the second for Y ≤ F·M_Y/(C/W), whatever the batch."""
        alpha = net.intensity
        batch = self.x * alpha / self.m_x
        return {"global_batch": batch, "per_device_batch": batch / (self.x * self.y),
                "largest_tp": d_ff * self.m_y / alpha, "tp_ok": self.y <= d_ff * self.m_y / alpha}


# ---- memory per device ----------------------------------------------------------------------------------

# Mixed-precision training as the 2025 handout's §2.4 sets it up: fp32 master weights, fp32 accumulated
# gradients, AdamW's two fp32 moments.
STATE_BYTES = {"weights": 4, "gradients": 4, "optimizer": 8}
MEMORY_STRATEGIES = ("DP", "ZeRO-1", "FSDP", "FSDP × TP")


def memory_per_device(params: float, strategy: str, devices: int, activation_bytes: float = 0.0,
                      tp: int = 1) -> dict[str, float]:
    """Bytes per device of weights, gradients, optimizer state and saved activations.

    ``activation_bytes`` is what one device's share of the batch saves for the backward without tensor
    parallelism; data parallelism in any form only splits the batch, so it stays. ZeRO-1 shards the optimizer
    state over the ``devices``; FSDP everything; FSDP × TP with ``tp`` of the devices on the TP axis shards
    the state over all of them and, with sequence parallelism (Korthikanti et al., 2022), the activations over
    the TP axis. The all-gathered working weights of the layer in flight (FSDP) are left out.
    """
    if strategy not in MEMORY_STRATEGIES:
        raise ValueError(f"strategy must be one of {MEMORY_STRATEGIES}, got {strategy!r}")
    if devices < 1 or tp < 1 or devices % tp:
        raise ValueError(f"need devices ≥ 1 divisible by tp ≥ 1, got devices={devices}, tp={tp}")
    sharded = {"DP": (), "ZeRO-1": ("optimizer",), "FSDP": tuple(STATE_BYTES),
               "FSDP × TP": tuple(STATE_BYTES)}[strategy]
    out = {k: params * b / (devices if k in sharded else 1) for k, b in STATE_BYTES.items()}
    out["activations"] = activation_bytes / (tp if strategy == "FSDP × TP" else 1)
    out["total"] = sum(out.values())
    return out


def half_sharded_memory(state_bytes: float, activation_bytes: float, devices: float) -> float:
    """§2.4(b): training state and half of the saved activations (every second layer's) sharded over N devices,
    the other half kept: (state + A/2)/N + A/2."""
    return (state_bytes + activation_bytes / 2) / devices + activation_bytes / 2


def devices_to_fit(state_bytes: float, activation_bytes: float, capacity: float) -> int:
    """The fewest devices N with :func:`half_sharded_memory` ≤ ``capacity``; raises when the unsharded half
    alone does not fit."""
    room = capacity - activation_bytes / 2
    if room <= 0:
        raise ValueError(f"the unsharded half of the activations ({activation_bytes / 2 / 1e9:.3g} GB) alone "
                         f"exceeds the {capacity / 1e9:.3g} GB of one device")
    return max(1, math.ceil((state_bytes + activation_bytes / 2) / room))
