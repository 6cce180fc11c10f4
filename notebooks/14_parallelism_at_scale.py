# ---
# jupyter:
#   systems:
#     requires: cpu
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Parallelism at scale
#
# What does a model need that no machine at hand can show: how much memory per device, how much communication
# per pass, and past how many devices does each way of splitting the work spend more time talking than computing?
# This chapter answers the pen-and-paper problems of both handouts, the 2025 handout's §2.4
# `communication_accounting` and the 2026 edition's §8 (`alternate_ring_all_reduce`, `data_parallel_calcs`,
# `fsdp_calcs`, `tp_calcs`, `fsdp_tp_calcs`) and `fsdp_accounting` (a), each with its derivation and the numbers
# the cost model in `systems.scaling` computes. Then it sets the model against what our GPUs measured and
# simulates a data-parallel training step from 2 to 1024 GPUs.
#
# This chapter needs no GPU: it is arithmetic over named hardware figures, plus measurements that earlier
# chapters took on GPUs and saved with the book, read from there with the machine that took them.

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import math

import pandas as pd

from systems import figures, pipeline, report
from systems.hardware import H100, H200
from systems.memory.saved import model_residuals_per_token
from systems.model import parameter_count, preset
from systems.scaling import plans
from systems.scaling.collectives import (alternate_ring_all_reduce, best_bucket, ddp_overhead, fit_error,
                                         ring_all_reduce)
from systems.scaling.parallel import (FFN, NETWORKS, TorusMesh, best_mesh, devices_to_fit, half_sharded_memory,
                                      largest_devices, memory_per_device)
from systems.scaling.simulate import Cluster, model_layers

GB = 1e9
nvlink, infiniband, tpu = (NETWORKS[k] for k in ("H100 node (NVLink)", "H100 nodes (InfiniBand)", "TPU v5p (ICI)"))
report.glue_all("ps", {"c_tflops": nvlink.flops / 1e12, "w_nvlink": nvlink.bandwidth / GB,
                       "w_ib": infiniband.bandwidth / GB, "r_nvlink": nvlink.intensity,
                       "r_ib": infiniband.intensity})

# %% [markdown]
# ## The setting and the collectives (§8.1)
#
# The 2026 handout's §8 fixes the rules: N devices, all pairwise linked, each sending W bytes/s and computing
# C FLOP/s; one feed-forward layer x (B, D) → W1, W2 (D, F) and W3 (F, D), weights and activations in 2-byte
# floats; only matrix products count, an (A, B)(B, C) product costing 2ABC FLOPs. Communication overlaps
# computation, so a pass is *communication-bound* when its communication takes longer than its arithmetic. The
# layer's forward is three products, 6BDF FLOPs; its backward six (for each weight, the input's gradient and the
# weight's), 12BDF. We evaluate the answers on two networks of H100s, a node whose GPUs talk over NVLink
# (C = {glue:text}`ps_c_tflops:.4g` TFLOP/s bf16, W = {glue:text}`ps_w_nvlink:.3g` GB/s each way) and nodes joined by
# one 400 Gb/s InfiniBand adapter per GPU (W = {glue:text}`ps_w_ib:.3g` GB/s); `systems.hardware` cites the sources.
# What matters is their ratio C/W, the FLOPs a device must do per byte it sends to keep the link from being the
# bottleneck: {glue:text}`ps_r_nvlink:.4g` on NVLink, {glue:text}`ps_r_ib:.5g` over InfiniBand.
#
# A ring all-gather of S bytes takes N − 1 steps of S/N bytes, (N − 1)/N · S/W; a reduce-scatter the same; an
# all-reduce is both, 2(N − 1)/N · S/W.
#
# **`alternate_ring_all_reduce`.** In the alternate algorithm each device forwards, at every one of the N − 1
# steps, a whole original tensor of S bytes to its neighbour and adds the one it receives, so it takes
# **(N − 1) · S/W**: every device sends (N − 1)·S bytes instead of the ring's 2(N − 1)/N · S, N/2 times as long.

# %% tags=["remove-cell"]
one_gb = 1e9
report.glue_all("ps_alt", {"ratio8": alternate_ring_all_reduce(one_gb, 8, nvlink.bandwidth)
                           / ring_all_reduce(one_gb, 8, nvlink.bandwidth),
                           "ms8": 1e3 * alternate_ring_all_reduce(one_gb, 8, nvlink.bandwidth),
                           "ring_ms8": 1e3 * ring_all_reduce(one_gb, 8, nvlink.bandwidth)})

# %% [markdown]
# On one node of 8 H100s, an all-reduce of 1 GB takes {glue:text}`ps_alt_ms8:.3g` ms this way against
# {glue:text}`ps_alt_ring_ms8:.3g` ms for the ring, {glue:text}`ps_alt_ratio8:.2g` times as long.
#
# ## Data parallel (§8.2, `data_parallel_calcs`)
#
# With the batch split into N_DP slices of B/N_DP rows, every device runs the whole layer on its slice.
#
# (a) **Backward FLOPs: 12·B·D·F / N_DP** per device: the six products of the backward, each on B/N_DP rows.
#
# (b) **Backward communication: 2(N_DP − 1)/N_DP · 6DF / W**: the three weight gradients, 3DF values of
# 2 bytes, are all-reduced once (about 12DF/W for large N_DP, independent of the batch).
#
# (c) Compute-bound while 12BDF/(N_DP·C) ≥ 12DF(N_DP − 1)/(N_DP·W), that is **N_DP ≤ 1 + B·W/C**. The layer's
# size cancels: a device must process at least C/W tokens for every other device it shares gradients with.
#
# ## FSDP (§8.3, `fsdp_calcs`)
#
# Weights are sharded N_FSDP ways and all-gathered before each pass; the backward also reduce-scatters the
# gradients to their owners. The arithmetic is data parallelism's.
#
# (a) **FLOPs: forward 6BDF/N_FSDP, backward 12BDF/N_FSDP** per device.
#
# (b) **Communication: forward (N_FSDP − 1)/N_FSDP · 6DF/W** (the all-gather of the three weights);
# **backward 2(N_FSDP − 1)/N_FSDP · 6DF/W** (the all-gather again and the reduce-scatter of the gradients: the
# same bytes as data parallelism's all-reduce).
#
# (c) The forward is compute-bound while 6BDF/(N·C) ≥ 6DF(N − 1)/(N·W), the backward while
# 12BDF/(N·C) ≥ 12DF(N − 1)/(N·W): **both give N_FSDP ≤ 1 + B·W/C**, data parallelism's limit. FSDP moves 1.5 times
# the bytes of DP (weights in the forward too) but never more per FLOP in either pass.
#
# ## Tensor parallel (§8.4, `tp_calcs`)
#
# W1 and W2 are split by columns, W3 by rows, so device i holds W1⁽ⁱ⁾, W2⁽ⁱ⁾ (D, F/N_TP) and W3⁽ⁱ⁾ (F/N_TP, D), every
# device sees the whole batch, and y = Σᵢ z⁽ⁱ⁾W3⁽ⁱ⁾ is one all-reduce.
#
# (a) **The backward.** dy (B, D) arrives whole on every device (y was all-reduced). Device i computes, with its
# saved x, x1⁽ⁱ⁾, x2⁽ⁱ⁾ and z⁽ⁱ⁾:
#
# $$
# \begin{aligned}
# dz^{(i)} &= dy\,W_3^{(i)\top} &&(B, F/N_{TP}) \\
# dW_3^{(i)} &= z^{(i)\top} dy &&(F/N_{TP}, D) \\
# dx_2^{(i)} &= dz^{(i)} \ast f(x_1^{(i)}), \quad dx_1^{(i)} = dz^{(i)} \ast f'(x_1^{(i)}) \ast x_2^{(i)} \\
# dW_1^{(i)} &= x^\top dx_1^{(i)}, \quad dW_2^{(i)} = x^\top dx_2^{(i)} &&(D, F/N_{TP}) \\
# dx &= \textstyle\sum_i \big(dx_1^{(i)} W_1^{(i)\top} + dx_2^{(i)} W_2^{(i)\top}\big) &&\text{one all-reduce of } (B, D)
# \end{aligned}
# $$
#
# The weight gradients need no communication: each device owns its slices.
#
# (b) **FLOPs: forward 6BDF/N_TP, backward 12BDF/N_TP** per device (every product has F/N_TP for one dimension).
#
# (c) **Communication: forward 2(N_TP − 1)/N_TP · 2BD/W** (the all-reduce of y), **backward the same** (the
# all-reduce of dx).
#
# (d) Forward: 6BDF/(N·C) ≥ 4BD(N − 1)/(N·W) gives **N_TP ≤ 1 + (3/2)·F·W/C**; backward:
# 12BDF/(N·C) ≥ 4BD(N − 1)/(N·W) gives **N_TP ≤ 1 + 3·F·W/C**. The batch cancels: tensor parallelism's reach is
# set by the hidden width and the link, which is why it stays inside a node.
#
# ## FSDP × TP (§8.5, `fsdp_tp_calcs`)
#
# Device (i, j) holds W1⁽ⁱʲ⁾, W2⁽ⁱʲ⁾ (D/N_FSDP, F/N_TP), W3⁽ⁱʲ⁾ (F/N_TP, D/N_FSDP) and the batch slice x⁽ʲ⁾
# (B/N_FSDP, D); N = N_FSDP · N_TP. The forward all-gathers each weight's TP slice over the FSDP axis j, runs the
# TP layer on its batch slice and all-reduces y⁽ʲ⁾ over the TP axis i. The backward mirrors it: gather the
# weights again, the TP backward above on the batch slice (all-reducing dx⁽ʲ⁾ over i), then reduce-scatter the
# weight gradients over j.
#
# (a) **Forward FLOPs: 6BDF/N**, each product on B/N_FSDP rows with F/N_TP for one dimension.
#
# (b) **Forward communication: max[(N_FSDP − 1)/N_FSDP · 6DF/(N_TP·W), 2(N_TP − 1)/N_TP · 2BD/(N_FSDP·W)]**, the
# gather of 3·D·F/N_TP values over the FSDP axis and the all-reduce of the (B/N_FSDP, D) output over the TP axis,
# overlapped.
#
# (c) The two conditions separate. The gather against 6BDF/(N·C) gives N_FSDP − 1 ≤ B·W/C, the all-reduce gives
# N_TP − 1 ≤ (3/2)·F·W/C, so the best mesh takes each axis to its limit and
# **N ≤ (1 + B·W/C)·(1 + (3/2)·F·W/C)**, the product of FSDP's and TP's limits.
#
# (d) When the axes share the network, the times add. Multiplying the condition by N/(2D) leaves
# 3F(N_FSDP − 1) + 2B(N_TP − 1) ≤ 3BF·W/C: a budget of M = 3BF·W/C + 3F + 2B shared between 3F·N_FSDP and
# 2B·N_TP. Their product is largest when both get half, N_FSDP = M/(6F) and N_TP = M/(4B), so
# **N ≤ (3BF·W/C + 3F + 2B)² / (24·B·F)**, about (3/8)·B·F·(W/C)² against (c)'s (3/2)·B·F·(W/C)²: a quarter as
# many devices, since each axis now has half the time.
#
# The tests (`tests/test_scaling.py`) check every closed form against a search over the step-by-step costs. What
# the limits mean in devices, for the XXL model's layer (D = 16384, F = 53248) as the batch grows:

# %% tags=["nbval-check-output"]
xxl = dict(d_model=16384, d_ff=53248, blocks=126)
batches = [2.0**k for k in range(10, 25)]
limits = plans.device_limits(xxl["d_model"], xxl["d_ff"], [nvlink, infiniband], batches)
report.save_table(limits, data_dir, "device_limits")
report.table(limits[limits.batch.isin([2.0**12, 2.0**16, 2.0**20, 2.0**24])]
             .pivot_table(index=["network", "batch"], columns="strategy", values="largest N", sort=False)
             .reset_index(), floatfmt=",.0f")

# %% tags=["nbval-ignore-output"]
figures.lines(limits, "batch", "largest N", "strategy", "Largest device count before a pass is communication-bound",
              "batch (tokens)", "devices", col="network", palette="tab10", legend_below=True);

# %% tags=["remove-cell"]
million = FFN(2**20, xxl["d_model"], xxl["d_ff"])
mesh_nv = best_mesh(million, nvlink)
report.glue_all("ps_lim", {key: math.floor(n) for key, n in {  # whole devices, at most the limit
    "dp_nv": largest_devices("DP", million, nvlink, "backward"),
    "dp_ib": largest_devices("DP", million, infiniband, "backward"),
    "tp_fwd_nv": largest_devices("TP", million, nvlink), "tp_bwd_nv": largest_devices("TP", million, nvlink, "backward"),
    "tp_fwd_ib": largest_devices("TP", million, infiniband),
    "both_nv": math.floor(mesh_nv[0]) * math.floor(mesh_nv[1]),
    "both_ib": largest_devices("FSDP × TP", million, infiniband),
    "shared_ib": largest_devices("FSDP × TP (no overlap)", million, infiniband),
    "mesh_fsdp": mesh_nv[0], "mesh_tp": mesh_nv[1]}.items()})

# %% [markdown]
# At a batch of 2²⁰ tokens (about a million), data parallelism and FSDP stay compute-bound up to
# {glue:text}`ps_lim_dp_nv` devices if every link were NVLink, and {glue:text}`ps_lim_dp_ib` over InfiniBand; the
# lines are straight in the batch, with slope W/C. Tensor parallelism does not care about the batch: its forward
# reaches {glue:text}`ps_lim_tp_fwd_nv` devices on NVLink (its backward {glue:text}`ps_lim_tp_bwd_nv`) but only
# {glue:text}`ps_lim_tp_fwd_ib` over InfiniBand, where even a mesh of a few devices is communication-bound.
# Combined, an NVLink mesh of {glue:text}`ps_lim_mesh_fsdp` × {glue:text}`ps_lim_mesh_tp` would keep
# {glue:text}`ps_lim_both_nv:,` devices busy; over InfiniBand, {glue:text}`ps_lim_both_ib:,` with overlapped axes
# and {glue:text}`ps_lim_shared_ib` when the two axes share the network (at small batches the shared-network mesh
# degenerates to pure TP, its best choice there). Real clusters mix the two: TP inside a node on NVLink, FSDP and DP
# across nodes.
#
# ## `communication_accounting` (2025 handout §2.4): the XXL model
#
# The XXL model is 126 blocks of two linear layers, D = 16384 → F = 53248 → D, without attention, embeddings or
# output layer, trained without activation checkpointing: bf16 activations and gradient communication, fp32
# master weights, accumulated gradients and AdamW state.

# %% tags=["remove-cell"]
xxl_params = xxl["blocks"] * 2 * xxl["d_model"] * xxl["d_ff"]
xxl_act_per_token = xxl["blocks"] * 2 * (xxl["d_model"] + xxl["d_ff"])  # each linear's bf16 input, per token
state = memory_per_device(xxl_params, "DP", 1)
state_bytes = state["weights"] + state["gradients"] + state["optimizer"]
crit = TorusMesh(x=16, y=4, m_x=2, m_y=1).critical_batch(tpu, xxl["d_ff"])
act_dev = crit["per_device_batch"] * xxl_act_per_token  # one device's share of the compute-bound batch
act_all = crit["global_batch"] * xxl_act_per_token
h100_gb = H100.memory_bytes / GB
fit_n = devices_to_fit(state_bytes, act_dev, 95 * GB)
report.glue_all("ps_xxl", {
    "params_b": xxl_params / 1e9, "weights_gb": state["weights"] / GB, "optimizer_gb": state["optimizer"] / GB,
    "state_tb": state_bytes / 1e12, "state_h100": state_bytes / H100.memory_bytes,
    "act_mb_token": xxl_act_per_token / 1e6, "act_all_gb": act_all / GB,
    "all_h100": (state_bytes + act_all) / H100.memory_bytes, "h100_gb": h100_gb,
    "alpha": tpu.intensity, "batch": crit["global_batch"], "batch_dev": crit["per_device_batch"],
    "largest_tp": crit["largest_tp"], "act_dev_gb": act_dev / GB, "fit_n": fit_n,
    "fit_gb": half_sharded_memory(state_bytes, act_dev, fit_n) / GB,
    "fit_n_minus": half_sharded_memory(state_bytes, act_dev, fit_n - 1) / GB,
    "state_only_n": state_bytes / (95 * GB)})

# %% [markdown]
# **(a)** The model has 126 · 2 · D · F = {glue:text}`ps_xxl_params_b:.5g` billion parameters. In fp32, master
# weights take {glue:text}`ps_xxl_weights_gb:.5g` GB, accumulated gradients as much, and AdamW's two moments
# {glue:text}`ps_xxl_optimizer_gb:.5g` GB: 16 bytes per parameter, **{glue:text}`ps_xxl_state_tb:.4g` TB**, the memory of
# {glue:text}`ps_xxl_state_h100:.4g` H100s of {glue:text}`ps_xxl_h100_gb:.0f` GB. For the backward, each linear layer
# keeps its bf16 input: 126 · 2 · (D + F) bytes, **{glue:text}`ps_xxl_act_mb_token:.4g` MB per token** of the batch.
# At the smallest batch that keeps the mesh of (c) compute-bound ({glue:text}`ps_xxl_batch:,.0f` tokens) that is
# {glue:text}`ps_xxl_act_all_gb:,.0f` GB more; altogether **{glue:text}`ps_xxl_all_h100:.3g` H100s' worth** of memory,
# before a single temporary buffer.
#
# **(b)** With master weights, gradients, optimizer state and half of the saved activations (every second
# layer's) sharded over N_FSDP devices and the other half kept on each, a device holds
#
# $$ M(N_{FSDP}) = \frac{16P + A/2}{N_{FSDP}} + \frac{A}{2}, $$
#
# where A is what the device's own share of the batch saves. With the per-device batch of (c)
# ({glue:text}`ps_xxl_batch_dev:.4g` tokens, A = {glue:text}`ps_xxl_act_dev_gb:.3g` GB), M falls under one TPU v5p's
# 95 GB at **N_FSDP = {glue:text}`ps_xxl_fit_n`** devices ({glue:text}`ps_xxl_fit_gb:.4g` GB each; at one device fewer,
# {glue:text}`ps_xxl_fit_n_minus:.4g` GB). The training state alone would need {glue:text}`ps_xxl_state_only_n:.4g`
# devices' worth, so it is the state, not the activations, that sets the count.
#
# **(c)** In the TPU book's notation (Austin et al., *How to Scale Your Model*, 2025, part 5), a device computes
# C = 4.6·10¹⁴ FLOP/s and each link of an axis of the 3-D torus moves W_ici = 2 · 9·10¹⁰ bytes/s, M_X = 2 links per
# device on the FSDP axis (X = 16) and M_Y = 1 on the TP axis (Y = 4). Per matrix product, a device's arithmetic
# 2BDF/(XY·C) must outlast the FSDP gather of its TP slice, 2DF/(Y·W_ici·M_X), which gives
# B ≥ X·(C/W_ici)/M_X, and the TP collective of its (B/X, D) activations, 2BD/(X·W_ici·M_Y), which gives
# Y ≤ F·M_Y/(C/W_ici) whatever the batch. With C/W_ici = {glue:text}`ps_xxl_alpha:.5g` FLOPs per byte, the TP
# condition allows up to {glue:text}`ps_xxl_largest_tp:.3g` devices on that axis, so Y = 4 is fine, and the FSDP
# condition asks for **{glue:text}`ps_xxl_batch_dev:.4g` tokens per device, an overall batch of
# {glue:text}`ps_xxl_batch:,.0f` tokens** over the 64 devices.
#
# **(d)** The per-device batch that keeps a data-parallel axis compute-bound is C/(W·M), the FLOPs per byte of the
# link, so a smaller batch needs more effective bandwidth per FLOP or fewer bytes per token:
#
# * *Tensor (model) parallelism inside the fast axis*: its limit N_TP ≤ 1 + (3/2)·F·W/C does not involve the batch,
#   so every factor of TP divides the number of data-parallel replicas, and with it the global batch, at equal
#   device count (FSDP × TP above; Shoeybi et al., 2019, Megatron-LM).
# * *Pipeline parallelism*: stages exchange only (B, D) activations, never weights, so its communication per FLOP
#   does not depend on the batch at all; the price is the pipeline bubble, (p − 1)/(m + p − 1) of the step for p
#   stages and m micro-batches (Huang et al., 2019, GPipe; Narayanan et al., 2021, 1F1B and interleaving).
# * *Fewer bytes per weight on the wire*: all-gathering bf16 or fp8 copies instead of fp32 weights, and quantised
#   gradient reduce-scatters, divide the bytes, and with them the critical batch, by the compression factor
#   (ZeRO++, Wang et al., 2023: 4× less communication).
# * *Communicating less often*: gradient accumulation does not shrink the batch, but local-SGD methods such as
#   DiLoCo (Douillard et al., 2023) synchronise every H steps, cutting the bandwidth needed by H.
# * *More bandwidth per device*: using all the torus's links (M_X = 2 on a wrapped axis) or hierarchical collectives
#   that keep most traffic on NVLink raise W.
#
# ## Memory per device: the 2025 xl, the 2026 xl and XXL
#
# What each strategy leaves on a device, for 2048 tokens per device (4 sequences of 512) and 8 GPUs of a node on the
# TP axis. The language models' activations are what our model saves per token, measured here (fp32, eager, with
# PyTorch's fused attention, which keeps nothing of size context²); XXL's are the bf16 inputs of (a):

# %% tags=["nbval-check-output"]
xl25, xl26 = preset("xl", attention="sdpa"), preset("xl", edition=2026, attention="sdpa")
models = {"xl (2025)": (parameter_count(xl25), model_residuals_per_token(xl25, context=32)),
          "xl (2026, our 2.7B)": (parameter_count(xl26), model_residuals_per_token(xl26, context=32)),
          "XXL": (xxl_params, xxl_act_per_token)}
memory = plans.memory_plan(models, tokens_per_device=2048, devices=[8, 64, 512], tp=8)
report.save_table(memory, data_dir, "memory_per_device")
report.table(memory.pivot_table(index=["model", "devices"], columns="strategy", values="total", sort=False)
             .reset_index(), floatfmt=".4g")

# %% tags=["remove-cell"]
at = lambda model, n, strategy: memory.query("model == @model and devices == @n and strategy == @strategy").iloc[0]  # noqa: E731
p26 = parameter_count(xl26)
two = {s: memory_per_device(p26, s, 2) for s in ("DP", "ZeRO-1", "FSDP")}
report.glue_all("ps_mem", {
    "act_xl25_mb": models["xl (2025)"][1] / 1e6, "act_xl26_mb": models["xl (2026, our 2.7B)"][1] / 1e6,
    "xxl_fsdp_512": at("XXL", 512, "FSDP").total, "xxl_tp_512": at("XXL", 512, "FSDP × TP").total,
    "xxl_act": at("XXL", 512, "FSDP").activations, "xxl_fsdp_64": at("XXL", 64, "FSDP").total,
    "xxl_dp_8": at("XXL", 8, "DP").total, "xl26_dp": at("xl (2026, our 2.7B)", 8, "DP").total,
    "xl26_fsdp64": at("xl (2026, our 2.7B)", 64, "FSDP").total,
    "xl26_act": at("xl (2026, our 2.7B)", 8, "DP").activations,
    "p26_b": p26 / 1e9, "dp2": two["DP"]["total"] / GB, "zero2": two["ZeRO-1"]["total"] / GB,
    "fsdp2": two["FSDP"]["total"] / GB, "fsdp_vs_zero": (two["ZeRO-1"]["total"] - two["FSDP"]["total"]) / GB,
    "fsdp_vs_dp": (two["DP"]["total"] - two["FSDP"]["total"]) / GB})

# %% [markdown]
# The language models save {glue:text}`ps_mem_act_xl25_mb:.3g` MB (2025 xl) and {glue:text}`ps_mem_act_xl26_mb:.3g`
# MB (2026 xl) per token in fp32, so 2048 tokens' activations, {glue:text}`ps_mem_xl26_act:.3g` GB for the 2026 xl,
# rival its training state. Data parallelism, in any form, only splits the batch, so activations never shrink with
# more devices; only tensor (with sequence) parallelism divides them. XXL fits only at scale: a DP replica would
# need {glue:text}`ps_mem_xxl_dp_8:,.0f` GB; FSDP over 64 devices {glue:text}`ps_mem_xxl_fsdp_64:.3g` GB and over 512
# {glue:text}`ps_mem_xxl_fsdp_512:.3g` GB, of which {glue:text}`ps_mem_xxl_act:.3g` GB are the 2048 tokens'
# activations that no number of FSDP devices reduces; adding 8-way TP, {glue:text}`ps_mem_xxl_tp_512:.3g` GB.
#
# **`fsdp_accounting` (a).** On two GPUs, a replica of the 2026 xl ({glue:text}`ps_mem_p26_b:.3g` B parameters)
# holds 16 bytes per parameter under DDP, {glue:text}`ps_mem_dp2:.4g` GB; ZeRO-1 (§6) shards the 8 bytes of AdamW
# state, leaving 4 + 4 + 8/2 = 12 bytes, {glue:text}`ps_mem_zero2:.4g` GB; FSDP shards weights and gradients too, 16/2
# = 8 bytes, {glue:text}`ps_mem_fsdp2:.4g` GB. Ignoring the all-gather buffers, FSDP's peak should be
# {glue:text}`ps_mem_fsdp_vs_zero:.3g` GB below ZeRO-1's and {glue:text}`ps_mem_fsdp_vs_dp:.3g` GB below DDP's: the
# training state halves, the activations (the same under all three) do not. With a bf16 compute dtype the gathered
# layers add two bytes per parameter of the (at most two or three) layers in flight.
#
# ## Measured meets modelled: the all-reduce

# %% tags=["remove-cell"]
measured = pd.read_csv(pipeline.BOOK_DATA / "08_allreduce" / "allreduce.csv")
ar = measured.query("backend == 'nccl' and world_size == 2 and status == 'ok'").copy()
ar_stamp = pipeline.run_info("08_allreduce")["stamp"]
ar["bytes"] = ar.size_mb * 2**20
o, w = plans.two_device_link(measured)
peak = H200.link_bandwidth
ar["measured_ms"] = ar.median_ms
ar["§8 ring (ms)"] = [1e3 * ring_all_reduce(b, 2, peak) for b in ar.bytes]
ar["o + S/w (ms)"] = 1e3 * (o + ar.bytes / w)
ar["measured / §8"] = ar.measured_ms / ar["§8 ring (ms)"]
e2e = pd.read_csv(pipeline.BOOK_DATA / "01_end_to_end" / "train_step.csv")
e2e_stamp = pipeline.run_info("01_end_to_end")["stamp"]
xl_run = e2e.query("size == 'xl' and context_length == 512 and status == 'ok'").iloc[0]
grad_bytes = 4 * parameter_count(preset("xl"))
best = best_bucket(grad_bytes, o, w)
report.glue_all("ps_ar", {"gpu": ar_stamp["gpu"], "date": ar_stamp["date"][:10], "o_us": o * 1e6, "w_gbs": w / GB,
                          "peak_gbs": peak / GB, "w_share": ar.busbw_GBps.iloc[-1] * GB / peak, "fit_err": 100 * fit_error(ar.bytes, ar.median_ms
                                                                                              / 1e3, o, w),
                          "small_ratio": ar["measured / §8"].iloc[0], "big_ratio": ar["measured / §8"].iloc[-1],
                          "busbw_big": ar.busbw_GBps.iloc[-1], "best_mb": best["bucket_bytes"] / 2**20,
                          "best_n": best["n_buckets"], "best_ms": best["overhead_s"] * 1e3,
                          "one_bucket_ms": float(ddp_overhead(1, grad_bytes, o, w)) * 1e3})

# %% [markdown]
# Chapter 08 measured NCCL's all-reduce on two {glue:text}`ps_ar_gpu` GPUs ({glue:text}`ps_ar_date`). The cost model
# predicts S/W for two devices, at the NVLink figure of {glue:text}`ps_ar_peak_gbs:.3g` GB/s each way; the latency-
# bandwidth line of chapter 10, t = o + S/w, fitted to the same four sizes, finds a per-call overhead
# o = {glue:text}`ps_ar_o_us:.3g` µs and w = {glue:text}`ps_ar_w_gbs:.3g` GB/s (largest error at a measured point
# {glue:text}`ps_ar_fit_err:.2g` %):

# %% tags=["nbval-check-output"]
report.table(ar[["size_mb", "measured_ms", "§8 ring (ms)", "o + S/w (ms)", "measured / §8", "busbw_GBps"]],
             floatfmt=".4g")

# %% [markdown]
# The model and the machine disagree in two ways. At 1 MB the measurement is {glue:text}`ps_ar_small_ratio:.3g` times
# the model: §8's formula has no latency term, while every call pays launch, synchronisation and protocol costs that
# the fit puts at o. At 1 GB it is still {glue:text}`ps_ar_big_ratio:.3g` times the model: NCCL reaches
# {glue:text}`ps_ar_busbw_big:.3g` GB/s of bus bandwidth, {glue:text}`ps_ar_w_share:.0%` of the datasheet's figure, as
# large transfers do on NVLink. On two devices algorithm bandwidth (bytes reduced per second) and bus bandwidth
# (bytes each link carries, algbw · 2(N − 1)/N) coincide; on 8 the bus bandwidth is 1.75 times the algorithm
# bandwidth, and it is the bus bandwidth that should approach W. The simulation below therefore uses the fitted
# o and w for NVLink, not the datasheet. With them chapter 10's bucket model puts the best bucket for the xl model's
# fp32 gradients at {glue:text}`ps_ar_best_mb:.3g` MiB ({glue:text}`ps_ar_best_n:.3g` buckets), adding
# {glue:text}`ps_ar_best_ms:.3g` ms to a step against {glue:text}`ps_ar_one_bucket_ms:.3g` ms for one bucket sent after
# the backward.
#
# ## A data-parallel step at scale, simulated

# %% tags=["remove-cell"]
clusters = {latency: Cluster.from_two_device_fit(o, w, infiniband.bandwidth, latency) for latency in ("call", "step")}
layers = model_layers(preset("xl", context_length=512), xl_run.forward_ms / 1e3, xl_run.backward_ms / 1e3)
devices = [2, 8, 64, 512, 1024]
report.glue_all("ps_sim", {"gpu": e2e_stamp["gpu"], "fwd_ms": xl_run.forward_ms, "bwd_ms": xl_run.backward_ms,
                           "ib_gbs": infiniband.bandwidth / GB, "grad_gb": grad_bytes / GB,
                           "tensors": sum(len(x.params) for x in layers), "bucket_calls": grad_bytes / (25 * 2**20)})

# %% [markdown]
# How much of a data-parallel step's communication can hide behind the backward pass as the device count grows?
# `systems.scaling.simulate` replays one step of the 2025 xl model (batch 4 × 512 tokens per GPU, fp32) from the
# forward ({glue:text}`ps_sim_fwd_ms:.4g` ms) and backward ({glue:text}`ps_sim_bwd_ms:.4g` ms) that chapter 01 measured
# on an {glue:text}`ps_sim_gpu`, split over the layers by their FLOPs, with every collective queued on one
# communication stream that runs beside the computation. Inside a node of 8, collectives are rings at the NVLink
# bandwidth w fitted above; across nodes, hierarchical rings whose inter-node part crosses one InfiniBand adapter per
# GPU ({glue:text}`ps_sim_ib_gbs:.3g` GB/s, the datasheet figure: no multi-node measurement exists here). The
# overhead o measured on two GPUs admits two readings, and the simulation runs both: paid once per call whatever
# the device count (`call`, optimistic), or paid by each ring step, o/2 per step, so that it grows with the ring
# (`step`, pessimistic: NCCL's per-hop latency is smaller than a whole call's overhead). Compute is assumed unslowed
# by communication. The strategies: `naive` (one blocking all-reduce per parameter after the backward), `flat` (one
# all-reduce of all {glue:text}`ps_sim_grad_gb:.3g` GB of gradients), `overlap` (one all-reduce per parameter, each
# of the {glue:text}`ps_sim_tensors` tensors as soon as its layer's backward ends), `bucketed` (25 MiB buckets,
# PyTorch DDP's default) and `fsdp` (fp32 weights gathered up to two layers ahead, gradients reduce-scattered per
# layer).

# %% tags=["nbval-check-output"]
steps = plans.simulated_steps(layers, devices, clusters, bucket_mb=25)
report.save_table(steps, data_dir, "simulated_steps")
report.table(steps.pivot_table(index=["latency", "devices"], columns="strategy", values="step_ms", sort=False)
             .reset_index(), floatfmt=".4g")

# %% tags=["nbval-ignore-output"]
figures.lines(steps, "devices", "exposed_ms", "strategy", "Communication the step cannot hide (simulated)",
              "GPUs", "exposed communication per step (ms)", col="latency", palette="tab10", legend_below=True);

# %% tags=["remove-cell"]
best_by_n = plans.best_buckets(layers, devices, clusters, [1, 5, 25, 100, 400, 1600])
step_of = lambda lat, n, s, col="exposed_ms": steps.query(  # noqa: E731
    "latency == @lat and devices == @n and strategy == @s")[col].iloc[0]
bucket_of = lambda lat, n: best_by_n.query("latency == @lat and devices == @n").bucket_mb.iloc[0]  # noqa: E731
report.glue_all("ps_sim", {
    "compute_ms": step_of("call", 2, "flat", "step_ms") - step_of("call", 2, "flat"),
    "flat_2": step_of("call", 2, "flat"), "flat_1024": step_of("call", 1024, "flat"),
    "flat_step_1024": step_of("step", 1024, "flat"),
    "naive_call_1024": step_of("call", 1024, "naive"), "naive_step_1024": step_of("step", 1024, "naive"),
    "overlap_call_1024": step_of("call", 1024, "overlap"), "overlap_step_1024": step_of("step", 1024, "overlap"),
    "overlap_step_until": plans.first_exposed(steps[steps.latency == "step"], "overlap"),
    "bucketed_call_1024": step_of("call", 1024, "bucketed"), "bucketed_step_1024": step_of("step", 1024, "bucketed"),
    "bucketed_step_until": plans.first_exposed(steps[steps.latency == "step"], "bucketed"),
    "fsdp_call_1024": step_of("call", 1024, "fsdp"), "fsdp_step_1024": step_of("step", 1024, "fsdp"),
    "best_call_2": bucket_of("call", 2), "best_call_1024": bucket_of("call", 1024),
    "best_step_2": bucket_of("step", 2), "best_step_1024": bucket_of("step", 1024)})

# %% [markdown]
# The step's compute is {glue:text}`ps_sim_compute_ms:.4g` ms at every scale (weak scaling); what changes is the
# communication left exposed. One flat all-reduce after the backward exposes {glue:text}`ps_sim_flat_2:.3g` ms on two
# GPUs and {glue:text}`ps_sim_flat_1024:.3g` ms on 1024 (latency per call): its bandwidth term saturates at 2S/W, but
# crossing InfiniBand makes W smaller. Per-parameter all-reduces are where the two readings of the latency part
# ways. Paid once per call, blocking calls (`naive`) expose {glue:text}`ps_sim_naive_call_1024:,.0f` ms at 1024 GPUs
# and overlapped ones {glue:text}`ps_sim_overlap_call_1024:,.0f` ms; paid per ring step,
# {glue:text}`ps_sim_naive_step_1024:,.0f` and {glue:text}`ps_sim_overlap_step_1024:,.0f` ms, and overlap stops hiding
# the communication (exposing more than 5 % of the compute) from {glue:text}`ps_sim_overlap_step_until:.0f` GPUs on.
# Buckets of 25 MiB cut the {glue:text}`ps_sim_tensors` calls to about {glue:text}`ps_sim_bucket_calls:.0f`: {glue:text}`ps_sim_bucketed_call_1024:.3g` ms exposed at 1024 GPUs
# with latency per call, {glue:text}`ps_sim_bucketed_step_1024:,.0f` ms with latency per step (more than 5 % from
# {glue:text}`ps_sim_bucketed_step_until:.0f` GPUs on), where the one flat all-reduce after the backward, exposing
# {glue:text}`ps_sim_flat_step_1024:.3g` ms, beats every overlapped scheme: with latency growing with the ring, fewer
# calls matter more than overlap. The best bucket among those tried (1 to 1600 MiB) is
# {glue:text}`ps_sim_best_call_2:g` MiB on two GPUs and {glue:text}`ps_sim_best_call_1024:g` MiB on 1024 with latency
# per call, {glue:text}`ps_sim_best_step_2:g` and {glue:text}`ps_sim_best_step_1024:g` MiB with latency per step: it
# grows with the latency a call pays, as chapter 10's b* = √(s·w·o) says. FSDP sends 1.5 times DDP's bytes but
# spreads them over the whole step, forward included: {glue:text}`ps_sim_fsdp_call_1024:.3g` ms exposed at 1024 GPUs
# with latency per call, {glue:text}`ps_sim_fsdp_step_1024:,.0f` ms with latency per step, where its two collectives
# per layer and pass pay the growing ring.
#
# The check on this simulation at N = 2 is in the chapter on FSDP on two GPUs, which measures the same step with
# bucketed DDP and with our FSDP and sets the times beside both readings; a measurement of the all-reduce on 8 GPUs
# would settle which reading of the latency holds.
