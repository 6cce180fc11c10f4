# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Benchmarking all-reduce
#
# How long does one all-reduce take on a single node, and how do the backend (gloo on CPU, NCCL on
# GPUs), the tensor size and the number of processes change it? (Handout §2.1.3,
# `distributed_communication_single_node`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd
import seaborn as sns
import torch
from matplotlib import pyplot as plt

from systems import provenance, report
from systems.bench.allreduce import SIZES_MB, WORLD_SIZES, benchmark

profile = provenance.resolve_profile(profile)

if profile == "full":
    sizes, worlds, warmup, iters = list(SIZES_MB), list(WORLD_SIZES), 5, 10
    gloo_iters = 5  # a 1 GiB gloo all-reduce over six processes takes seconds; five samples suffice
else:
    sizes, worlds, warmup, iters, gloo_iters = [0.01, 0.1], [2], 1, 2, 2

# %% [markdown]
# ## The benchmark
#
# `systems.bench.allreduce` starts `n` processes on this machine with `systems.dist.launch` (one GPU
# per process for NCCL). Each all-reduces a random float32 tensor 5 times untimed (NCCL builds its
# communicators and buffers on the first calls), then times {glue:text}`ar_iters` calls, each between
# a barrier, so that all ranks start together, and a `torch.cuda.synchronize()`, so that the clock sees
# the transfer and not only its queueing. Every rank's times are gathered with `all_gather_object` and
# the slowest rank's mean is reported: a collective is finished only when it is finished everywhere.
# Sizes are in MiB (2²⁰ bytes). Bandwidths follow nccl-tests: the *algorithm bandwidth* is
# bytes / time; the *bus bandwidth* multiplies it by 2(n−1)/n, the fraction of the data every link of
# a ring all-reduce carries, so that it can be compared across process counts with the hardware's
# link speed.

# %% tags=["nbval-ignore-output"]
report.glue("ar_iters", iters)
gloo = benchmark("gloo", worlds, sizes, warmup=warmup, iters=gloo_iters)
nccl = benchmark("nccl", worlds, sizes, warmup=warmup, iters=iters)
df = pd.concat([gloo, nccl], ignore_index=True)
report.save_table(df.drop(columns="times_ms"), data_dir, "allreduce")
shown = df.pivot_table(index=["backend", "world_size"], columns="size_mb", values="time_ms").reset_index()
shown.columns = [c if isinstance(c, str) else f"{c:g} MiB (ms)" for c in shown.columns]
report.table(shown, floatfmt=".3g")

# %% tags=["nbval-ignore-output"]
ok = df[df.status == "ok"]
missing = df[df.status != "ok"].groupby(["backend", "world_size"]).status.first().reset_index()
measured = {b: sorted(ok[ok.backend == b].world_size.unique().tolist()) for b in ("gloo", "nccl")}
report.md(
    f"Measured: gloo with {', '.join(map(str, measured['gloo'])) or 'no'} processes; NCCL with "
    f"{', '.join(map(str, measured['nccl'])) or 'no'} processes"
    + (f" (this machine has {torch.cuda.device_count()} GPU(s); "
       + "; ".join(f"{r.backend} × {r.world_size}: {r.status}" for r in missing.itertuples()) + ")."
       if len(missing) else ".")
)

# %% tags=["nbval-ignore-output"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
for ax, y, label in [(axes[0], "time_ms", "time per all-reduce (ms), slowest rank"),
                     (axes[1], "busbw_GBps", "bus bandwidth (GB/s)")]:
    sns.lineplot(data=ok, x="size_mb", y=y, hue="backend", style="world_size", markers=True, ax=ax)
    ax.set(xscale="log", yscale="log", xlabel="tensor size (MiB, float32)", ylabel=label)
fig.suptitle("All-reduce on one node")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What the numbers say

# %% tags=["nbval-ignore-output"]
big = max(sizes)
t = ok.set_index(["backend", "world_size", "size_mb"]).time_ms
bw = ok.set_index(["backend", "world_size", "size_mb"]).busbw_GBps
lines = []
w0 = min(measured["gloo"])
if measured["nccl"]:
    w = min(measured["nccl"])
    ratio = t["gloo", w, big] / t["nccl", w, big]
    lines.append(
        f"With {w} processes a {big:g} MiB all-reduce takes {t['gloo', w, big]:.3g} ms with gloo on the CPU and "
        f"{t['nccl', w, big]:.3g} ms with NCCL on the GPUs, {ratio:.3g} times faster: NCCL moves the data GPU to "
        f"GPU over NVLink ({bw['nccl', w, big]:.3g} GB/s bus bandwidth) while gloo copies through host memory and "
        f"TCP sockets ({bw['gloo', w, big]:.3g} GB/s)."
    )
small, mid = min(sizes), sorted(sizes)[len(sizes) // 2]
for b in measured:
    if not measured[b]:
        continue
    w = min(measured[b])
    size_ratio, time_ratio = big / small, t[b, w, big] / t[b, w, small]
    lines.append(
        f"{b}: {size_ratio:,.0f} times more data costs {time_ratio:.3g} times the time "
        + ("(the small all-reduces are dominated by fixed per-call latency, so bandwidth only shows at large sizes)."
           if time_ratio < 0.5 * size_ratio else "(time grows about in proportion to the data: bandwidth bound).")
    )
if len(measured["gloo"]) > 1:
    w1 = max(measured["gloo"])
    lines.append(
        f"More processes cost gloo time at every size: {big:g} MiB takes {t['gloo', w1, big]:.3g} ms with {w1} "
        f"processes against {t['gloo', w0, big]:.3g} ms with {w0}, because a ring all-reduce has 2(n−1) steps and "
        f"all processes share the same CPU cores and memory bandwidth; the bus bandwidth, which already accounts "
        f"for the 2(n−1)/n growth in traffic, goes from {bw['gloo', w0, big]:.3g} to {bw['gloo', w1, big]:.3g} GB/s."
    )
report.md(" ".join(lines))

# %% [markdown]
# Backend, size and process count interact through the two costs of a collective: a fixed latency per
# call (kernel launch and handshakes for NCCL; system calls and socket round trips for gloo) and a
# per-byte cost set by the slowest link. Small tensors see only the latency, so their bus bandwidth is
# low whatever the backend; large tensors approach the link's bandwidth, where NCCL over NVLink leaves
# the CPU path far behind. Adding processes adds ring steps, hence latency, and for gloo also
# contention for the same cores, which is why gloo's time grows with the process count while a fixed
# number of NVLink-connected GPUs would keep a near-constant bus bandwidth.
