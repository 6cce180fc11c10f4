# ---
# jupyter:
#   systems:
#     requires: 2 gpus
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

from systems import figures, provenance, report
from systems.bench.allreduce import SIZES_MB, WORLD_SIZES, benchmark
from systems.chapters.allreduce import findings, time_table

profile = provenance.resolve_profile(profile)
if profile == "full":
    # a 1 GiB gloo all-reduce over six processes takes seconds: five samples suffice there
    sizes, worlds, warmup, iters, gloo_iters = list(SIZES_MB), list(WORLD_SIZES), 5, 10, 5
else:
    sizes, worlds, warmup, iters, gloo_iters = [0.01, 0.1], [2], 1, 2, 2
report.glue_all("ar", {"iters": iters, "warmup": warmup})

# %% [markdown]
# ## The benchmark
#
# `systems.bench.allreduce` starts `n` processes on this machine with `systems.dist.launch` (one GPU per process
# for NCCL). Each all-reduces a random float32 tensor {glue:text}`ar_warmup` times untimed (NCCL builds its
# communicators and buffers on the first calls), then times {glue:text}`ar_iters` calls, each between a barrier,
# so that all ranks start together, and a `torch.cuda.synchronize()`, so that the clock sees the transfer and
# not only its queueing. Every rank's times are gathered with `all_gather_object` and the slowest rank's mean is
# reported: a collective is finished only when it is finished everywhere. Sizes are in MiB (2²⁰ bytes).
# Bandwidths follow nccl-tests: the *algorithm bandwidth* is bytes / time; the *bus bandwidth* multiplies it by
# 2(n−1)/n, the fraction of the data every link of a ring all-reduce carries, so that it can be compared across
# process counts with the hardware's link speed. The 2026 edition drops the gloo-on-CPU axis and asks for 2, 4
# and 6 GPUs; this chapter keeps both backends, since the CPU side is how the distributed code is debugged.

# %% tags=["nbval-ignore-output"]
df = pd.concat([benchmark("gloo", worlds, sizes, warmup=warmup, iters=gloo_iters),
                benchmark("nccl", worlds, sizes, warmup=warmup, iters=iters)], ignore_index=True)
report.save_table(df.drop(columns="times_ms"), data_dir, "allreduce")
report.table(time_table(df), floatfmt=".3g")

# %% tags=["remove-input", "nbval-ignore-output"]
ok = df[df.status == "ok"]
figures.lines(ok, "size_mb", "time_ms", "backend", "All-reduce on one node: time", "tensor size (MiB, float32)",
              "ms per all-reduce (slowest rank)", style="world_size", palette=None);
figures.lines(ok, "size_mb", "busbw_GBps", "backend", "All-reduce on one node: bus bandwidth",
              "tensor size (MiB, float32)", "bus bandwidth (GB/s)", style="world_size", palette=None);

# %% tags=["remove-cell", "nbval-ignore-output"]
found = findings(df)
report.glue_all("ar", found)
for backend in ("gloo", "nccl"):
    report.glue(f"ar_{backend}_words", report.pick(
        found.get(f"{backend}_latency_bound", False),
        "the small all-reduces are dominated by fixed per-call latency, so bandwidth only shows at large sizes",
        "time grows about in proportion to the data: bandwidth bound"))

# %% [markdown]
# ## What the numbers say
#
# Measured: gloo with {glue:text}`ar_gloo_ranks` processes, NCCL with {glue:text}`ar_nccl_ranks`; not measured:
# {glue:text}`ar_missing`.
#
# With {glue:text}`ar_nccl_w` processes a {glue:text}`ar_big_mb:g` MiB all-reduce takes
# {glue:text}`ar_gloo_big_ms:.3g` ms with gloo on the CPU and {glue:text}`ar_nccl_big_ms:.3g` ms with NCCL on the
# GPUs, {glue:text}`ar_nccl_speedup:.3g` times faster: NCCL moves the data GPU to GPU over NVLink
# ({glue:text}`ar_nccl_busbw:.3g` GB/s bus bandwidth) while gloo copies through host memory and TCP sockets
# ({glue:text}`ar_gloo_busbw:.3g` GB/s). {glue:text}`ar_size_ratio:,.0f` times more data costs gloo
# {glue:text}`ar_gloo_time_ratio:.3g` times the time ({glue:text}`ar_gloo_words`) and NCCL
# {glue:text}`ar_nccl_time_ratio:.3g` times ({glue:text}`ar_nccl_words`). More processes cost gloo time at every
# size: {glue:text}`ar_big_mb:g` MiB takes {glue:text}`ar_gloo_w1_ms:.3g` ms with {glue:text}`ar_gloo_w1`
# processes, because a ring all-reduce has 2(n−1) steps and all processes share the same CPU cores and memory
# bandwidth; the bus bandwidth, which already accounts for the 2(n−1)/n growth in traffic, goes to
# {glue:text}`ar_gloo_w1_busbw:.3g` GB/s.
#
# Backend, size and process count interact through the two costs of a collective: a fixed latency per call
# (kernel launch and handshakes for NCCL; system calls and socket round trips for gloo) and a per-byte cost set by
# the slowest link. Small tensors see only the latency, so their bus bandwidth is low whatever the backend; large
# tensors approach the link's bandwidth, where NCCL over NVLink leaves the CPU path far behind. Adding processes
# adds ring steps, hence latency, and for gloo also contention for the same cores, which is why gloo's time grows
# with the process count while NVLink-connected GPUs keep a near-constant bus bandwidth. The parallelism chapter
# sets these measurements against the ring all-reduce's cost model.
