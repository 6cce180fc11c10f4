"""Tables that plan training at scale from the cost model (``parallel``) and the step simulation (``simulate``):
the largest device count per strategy as the batch grows, per-device memory of named models, and simulated
step times over device counts. The chapter ``notebooks/14_parallelism_at_scale.py`` shows them."""

from __future__ import annotations

import math
from typing import Iterable

import pandas as pd

from systems.scaling.collectives import fit_latency_bandwidth
from systems.scaling.parallel import FFN, MEMORY_STRATEGIES, Network, largest_devices, memory_per_device
from systems.scaling.simulate import STRATEGIES, Cluster, Layer, simulate_step

# (strategy, pass) pairs of the device-limit figure, with the label each line gets (DP's backward and both of
# FSDP's passes have the same limit: one line)
LIMITS = [("DP", "backward", "DP, FSDP"),
          ("TP", "forward", "TP (forward)"), ("TP", "backward", "TP (backward)"),
          ("FSDP × TP", "forward", "FSDP × TP, axes overlapped (forward)"),
          ("FSDP × TP (no overlap)", "forward", "FSDP × TP, shared network (forward)")]


def device_limits(d_model: int, d_ff: int, networks: Iterable[Network], batches: Iterable[float]) -> pd.DataFrame:
    """The largest device count before each strategy's pass becomes communication-bound, per network and batch
    (tokens), for a feed-forward layer of width ``d_model`` and hidden width ``d_ff``."""
    rows = []
    for net in networks:
        for batch in batches:
            ffn = FFN(batch, d_model, d_ff)
            for strategy, pass_, label in LIMITS:
                rows.append({"network": net.name, "batch": batch, "strategy": label,
                             "largest N": largest_devices(strategy, ffn, net, pass_)})
    return pd.DataFrame(rows)


def memory_plan(models: dict[str, tuple[float, float]], tokens_per_device: float, devices: Iterable[int],
                tp: int) -> pd.DataFrame:
    """GB per device of each model (name → (parameters, activation bytes per token)) under every strategy of
    :data:`MEMORY_STRATEGIES` at each device count, each device holding ``tokens_per_device`` tokens of the
    batch; FSDP × TP puts ``tp`` devices on the TP axis."""
    rows = []
    for name, (params, per_token) in models.items():
        for n in devices:
            for strategy in MEMORY_STRATEGIES:
                m = memory_per_device(params, strategy, n, tokens_per_device * per_token,
                                      tp=tp if strategy == "FSDP × TP" else 1)
                rows.append({"model": name, "devices": n, "strategy": strategy,
                             **{k: v / 1e9 for k, v in m.items()}})
    return pd.DataFrame(rows)


def simulated_steps(layers: list[Layer], devices: Iterable[int], clusters: dict[str, Cluster], bucket_mb: float,
                    grad_bytes: int = 4, gather_bytes: int = 4) -> pd.DataFrame:
    """Every strategy of :data:`STRATEGIES` at each device count on each named cluster: the step, its compute, the
    communication it leaves exposed (ms), and the fraction of the step the GPU computes."""
    rows = []
    for label, cluster in clusters.items():
        for n in devices:
            for strategy in STRATEGIES:
                r = simulate_step(layers, n, cluster, strategy, grad_bytes=grad_bytes,
                                  bucket_bytes=bucket_mb * 2**20, gather_bytes=gather_bytes)
                rows.append({"latency": label, "devices": n, "strategy": strategy, "step_ms": 1e3 * r["step"],
                             "exposed_ms": 1e3 * r["exposed"], "communication_ms": 1e3 * r["communication"],
                             "compute_share": r["compute"] / r["step"]})
    return pd.DataFrame(rows)


def best_buckets(layers: list[Layer], devices: Iterable[int], clusters: dict[str, Cluster],
                 bucket_mbs: Iterable[float], grad_bytes: int = 4) -> pd.DataFrame:
    """Per cluster and device count, the bucket size (of ``bucket_mbs``) with the fastest bucketed step."""
    rows = [{"latency": label, "devices": n, "bucket_mb": mb,
             "step_ms": 1e3 * simulate_step(layers, n, cluster, "bucketed", grad_bytes=grad_bytes,
                                            bucket_bytes=mb * 2**20)["step"]}
            for label, cluster in clusters.items() for n in devices for mb in bucket_mbs]
    sweep = pd.DataFrame(rows)
    return sweep.loc[sweep.groupby(["latency", "devices"], sort=False).step_ms.idxmin()].reset_index(drop=True)


def first_exposed(steps: pd.DataFrame, strategy: str, fraction: float = 0.05) -> float:
    """The smallest simulated device count at which ``strategy`` exposes more than ``fraction`` of its compute as
    communication (inf if it never does)."""
    s = steps[steps.strategy == strategy]
    over = s[s.exposed_ms > fraction * s.step_ms * s.compute_share]
    return float(over.devices.min()) if len(over) else math.inf


def two_device_link(allreduce: pd.DataFrame) -> tuple[float, float]:
    """(o, w): the per-call overhead (s) and the bandwidth (bytes/s) of t = o + S/w fitted to NCCL's all-reduce on
    two GPUs as chapter 08 measured it (its table: backend, world_size, status, size_mb, median_ms)."""
    ar = allreduce.query("backend == 'nccl' and world_size == 2 and status == 'ok'")
    if len(ar) < 2:
        raise ValueError("the all-reduce table holds fewer than two NCCL sizes measured on two GPUs")
    return fit_latency_bandwidth(ar.size_mb * 2**20, ar.median_ms / 1e3)
