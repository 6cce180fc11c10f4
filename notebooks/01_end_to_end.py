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
# # End-to-end benchmarking
#
# How long does one forward and one backward pass of each model size of the handout take, and how
# much do the first, un-warmed steps distort that number? (Handout §1.1.3, `benchmarking_script`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd
import seaborn as sns
from matplotlib import pyplot as plt

from systems import provenance, report
from systems.bench.e2e import SMOKE_MODEL, BenchConfig, cold_run, sweep
from systems.model import PRESETS, parameter_count

profile = provenance.resolve_profile(profile)

if profile == "full":
    sizes, contexts, batch, overrides = list(PRESETS), [128, 256, 512], 4, {}
    warm_size, warm_steps = "small", 10
else:
    sizes, contexts, batch, overrides = ["small"], [16, 32], 2, SMOKE_MODEL
    warm_size, warm_steps = "small", 3

# %% [markdown]
# ## (a) The benchmarking script
#
# The harness is `systems.bench.e2e`. It builds the model from a preset of §1.1.2, draws random token
# batches, runs `warmup` untimed steps and then `steps` timed ones. Every phase of a step (forward,
# backward, optimizer) is timed with `timeit.default_timer()` between two `torch.cuda.synchronize()`
# calls, because CUDA calls return as soon as the work is queued. The same function answers the later
# chapters (mixed precision, memory, `torch.compile`), and the command line drives it for sweeps:
#
# ```
# python -m systems.bench.e2e --size small medium large xl 2.7B --context-length 128 256 512 \
#     --mode forward_backward --warmup 5 --steps 10 --json results.json
# ```
#
# An out-of-memory point becomes a row with status `OOM` instead of ending the sweep.
#
# The five sizes, with their parameter counts from the architecture (vocabulary 10,000):

# %% tags=["nbval-check-output"]
models = pd.DataFrame(
    [{"size": name, "d_model": c.d_model, "d_ff": c.d_ff, "num_layers": c.num_layers,
      "num_heads": c.num_heads, "parameters (M)": parameter_count(c) / 1e6} for name, c in PRESETS.items()]
)
report.table(models, floatfmt=".1f", index=False)

# %% [markdown]
# ## (b) Forward and backward time of every size
#
# Batch size 4, 5 warm-up steps, 10 measured steps; the forward and the backward pass of each step are
# timed separately. Full precision (fp32), naive attention as in the handout's reference model.

# %% tags=["nbval-ignore-output"]
base = BenchConfig(batch_size=batch, mode="forward_backward", warmup=5 if profile == "full" else 1,
                   steps=10 if profile == "full" else 2, model_overrides=overrides)
e2e = sweep(base, size=sizes, context_length=contexts)
report.save_table(e2e.drop(columns=[c for c in e2e if c.endswith("times_ms")]), data_dir, "forward_backward")
ok = e2e[e2e.status == "ok"]
shown = e2e[["size", "context_length", "status", "forward_ms", "forward_std_ms", "backward_ms", "backward_std_ms"]]
report.table(shown, index=False)

# %% tags=["nbval-ignore-output"]
long = ok.melt(id_vars=["size", "context_length"], value_vars=["forward_ms", "backward_ms"],
               var_name="pass", value_name="ms")
long["pass"] = long["pass"].str.removesuffix("_ms")
grid = sns.catplot(data=long, x="size", y="ms", hue="pass", col="context_length", kind="bar", height=3.2)
grid.set(yscale="log", ylabel="time per pass (ms)")
grid.figure.suptitle("Forward and backward pass time, fp32, batch 4", y=1.04)
plt.show()

# %% tags=["nbval-ignore-output"]
ratio = ok.backward_ms / ok.forward_ms
cv = (ok[["forward_std_ms", "backward_std_ms"]].to_numpy() / ok[["forward_ms", "backward_ms"]].to_numpy()).max()
ctx_mid = contexts[len(contexts) // 2]
at_mid = ok[ok.context_length == ctx_mid].set_index("size")
first, last = at_mid.index[0], at_mid.index[-1]
time_growth = at_mid.forward_ms[last] / at_mid.forward_ms[first]
param_growth = at_mid.params[last] / at_mid.params[first]
# how the forward time of the smallest model responds to 4x more tokens: flat means overhead-bound
small = ok[ok["size"] == first].set_index("context_length").forward_ms
ctx_growth = small[contexts[-1]] / small[contexts[0]]
report.glue("e2e_bwd_fwd_min", report.fmt(ratio.min(), 2))
report.glue("e2e_bwd_fwd_max", report.fmt(ratio.max(), 2))
report.glue("e2e_max_cv_pct", report.fmt(100 * cv, 2))
report.glue("e2e_oom_count", int((e2e.status == "OOM").sum()))
report.md(
    f"At context length {ctx_mid}, a forward pass takes {at_mid.forward_ms[first]:.3g} ms for the {first} "
    f"model and {at_mid.forward_ms[last]:.3g} ms for {last}: {time_growth:.2g} times longer for "
    f"{param_growth:.2g} times the parameters. "
    + (
        f"Time grows more slowly than the work: the {first} model does not keep the GPU busy. Its forward "
        f"time changes by a factor of only {ctx_growth:.2g} from {contexts[0]} to {contexts[-1]} tokens per "
        f"sequence, so it is bound by launching hundreds of small kernels from Python rather than by "
        f"arithmetic; the large models, whose matmuls are big enough, scale with parameters × tokens."
        if time_growth < 0.6 * param_growth else
        "Time grows about as fast as the matrix-multiply work, parameters × tokens."
    )
)

# %% [markdown]
# The backward pass costs {glue:text}`e2e_bwd_fwd_min` to {glue:text}`e2e_bwd_fwd_max` times the
# forward pass. Counting FLOPs predicts 2×: every weight matmul of the forward pass needs two in the
# backward pass, one for the gradient of its input and one for the gradient of its weight; the ratio
# falls below 2 where a pass is dominated by fixed per-kernel overheads rather than by arithmetic.
# The largest standard deviation is {glue:text}`e2e_max_cv_pct` % of its mean; the short,
# overhead-bound passes of the small models vary most, the long ones of the large models by well
# under a percent. Points that ran out of memory: {glue:text}`e2e_oom_count`.

# %% [markdown]
# ## (c) What warm-up does
#
# Each setting below runs in a fresh Python process, so that its first steps pay for everything a new
# job pays for once: creating the CUDA context, loading kernels, cuBLAS workspaces and the caching
# allocator's first `cudaMalloc` calls. We time the {glue:text}`e2e_warm_size` model with 0, 1, 2 and
# 5 warm-up steps and keep every measured step.

# %% tags=["nbval-ignore-output"]
report.glue("e2e_warm_size", warm_size)
cold = []
for w in [0, 1, 2, 5]:
    cfg = BenchConfig(size=warm_size, context_length=contexts[0], batch_size=batch, mode="forward_backward",
                      warmup=w, steps=warm_steps, model_overrides=overrides)
    row = cold_run(cfg)
    cold += [{"warmup": w, "step": i, "ms": t} for i, t in enumerate(row["step_times_ms"])]
cold = pd.DataFrame(cold)
report.save_table(cold, data_dir, "warmup")
summary = cold.groupby("warmup").ms.agg(mean="mean", std="std", first="first", median="median").reset_index()
report.table(summary, index=False)

# %% tags=["nbval-ignore-output"]
ax = sns.lineplot(data=cold, x="step", y="ms", hue="warmup", marker="o", palette="viridis")
ax.set(yscale="log", xlabel="measured step", ylabel="forward + backward (ms)",
       title=f"{warm_size} model, fresh process per warm-up setting")
plt.show()

# %% tags=["nbval-ignore-output"]
s = summary.set_index("warmup")
report.glue("e2e_w0_first", report.fmt(s["first"][0]))
report.glue("e2e_w0_median", report.fmt(s["median"][0]))
report.glue("e2e_w0_mean", report.fmt(s["mean"][0]))
report.glue("e2e_w5_mean", report.fmt(s["mean"][5]))
report.glue("e2e_w0_std", report.fmt(s["std"][0]))
report.glue("e2e_w5_std", report.fmt(s["std"][5]))
report.glue("e2e_w1_mean", report.fmt(s["mean"][1]))
report.glue("e2e_w2_mean", report.fmt(s["mean"][2]))
report.glue("e2e_first_over_median", report.fmt(s["first"][0] / s["median"][0], 3))

# %% [markdown]
# Without warm-up the first measured step takes {glue:text}`e2e_w0_first` ms, about
# {glue:text}`e2e_first_over_median` times the median step ({glue:text}`e2e_w0_median` ms), so the
# mean over the measured steps is {glue:text}`e2e_w0_mean` ± {glue:text}`e2e_w0_std` ms against
# {glue:text}`e2e_w5_mean` ± {glue:text}`e2e_w5_std` ms after five warm-up steps; one or two warm-up
# steps give {glue:text}`e2e_w1_mean` and {glue:text}`e2e_w2_mean` ms. The first step pays one-time
# costs that a training run amortises over thousands of steps: the CUDA context and the kernels'
# modules are loaded lazily, cuBLAS picks algorithms and allocates its workspace, and the caching
# allocator has to `cudaMalloc` every activation buffer before it can recycle them. A step or two is
# usually enough to pay them, but later steps can still differ (allocator growth at a new peak, clock
# ramp-up), which is why the benchmarks in this book warm up before they time anything.
