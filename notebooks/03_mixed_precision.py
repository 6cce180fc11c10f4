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
# # Mixed precision
#
# What do 16-bit floating-point types do to a sum, which dtypes does `torch.autocast` actually produce
# inside a model, and how much faster is the Transformer with bf16 autocast? (Handout §1.1.5,
# `mixed_precision_accumulation` and `benchmarking_mixed_precision`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd
import seaborn as sns
import torch
from matplotlib import pyplot as plt

from systems import provenance, report
from systems.device import local_device
from systems.bench.e2e import SMOKE_MODEL, BenchConfig, sweep
from systems.model import PRESETS
from systems.precision import accumulation_table, autocast_dtypes

profile = provenance.resolve_profile(profile)
device = local_device()

if profile == "full":
    sizes, context, batch, overrides, warmup, steps = list(PRESETS), 128, 4, {}, 5, 10
else:
    sizes, context, batch, overrides, warmup, steps = ["small"], 16, 2, SMOKE_MODEL, 1, 2

# %% [markdown]
# ## Accumulating in low precision
#
# The handout's four loops add 0.01 a thousand times; the exact answer is 10. They differ in the dtype
# of the running sum and of the number added to it.

# %% tags=["nbval-check-output"]
acc = accumulation_table()
report.save_table(acc, data_dir, "accumulation")
report.table(acc, floatfmt=".6g")

# %% tags=["nbval-check-output"]
err = acc.abs_error
report.glue("mp_fp32_err", f"{err[0]:.2g}")
report.glue("mp_fp16_result", f"{acc.result[1]:.6g}")
report.glue("mp_fp16_err", f"{err[1]:.3g}")
report.glue("mp_mixed_result", f"{acc.result[2]:.6g}")
report.glue("mp_mixed_err", f"{err[2]:.2g}")
report.glue("mp_value_fp16", f"{torch.tensor(0.01, dtype=torch.float16).item():.10g}")
report.md(
    f"The fp16 accumulator ends {err[1] / err[0]:.0f} times further from 10 than the fp32 one; adding fp16 "
    f"values to an fp32 sum gives the same result with or without the explicit cast "
    f"({'identical' if acc.result[2] == acc.result[3] else 'different'} here), because the in-place add "
    "promotes the fp16 operand to the sum's dtype either way."
)

# %% [markdown]
# In fp32 throughout, the result is off by only {glue:text}`mp_fp32_err`: 0.01 has no exact binary
# representation, and each of the thousand additions rounds to fp32's 24-bit mantissa. With an fp16
# accumulator the sum reaches {glue:text}`mp_fp16_result` (error {glue:text}`mp_fp16_err`): fp16 keeps
# 11 significant bits, so the spacing of representable numbers grows with the sum (2⁻⁸ ≈ 0.004 between
# 4 and 8, 2⁻⁷ ≈ 0.008 between 8 and 16) and every addition of 0.01 is rounded to a whole number of
# those steps: up by a quarter of the addend in one range, down by a fifth in the next. The errors
# no longer average out, they accumulate with the sum. Accumulating in fp32 but adding fp16 values gives
# {glue:text}`mp_mixed_result`: the sum itself is accurate, but every addend is fp16's nearest value to
# 0.01, {glue:text}`mp_value_fp16`, and that representation error is added a thousand times. Hence
# the rule mixed precision follows: low-precision operands are tolerable, low-precision accumulators are not.

# %% [markdown]
# ## (a) Which dtypes autocast produces
#
# The handout's `ToyModel` (Linear → ReLU → LayerNorm → Linear, fp32 parameters) runs a forward pass
# under fp16 autocast, then a backward pass from a cross-entropy loss:

# %% tags=["nbval-ignore-output"]
dtypes = autocast_dtypes(torch.float16, device)
report.save_table(dtypes, data_dir, "toy_model_dtypes")
report.table(dtypes)

# %% tags=["nbval-ignore-output"]
d = dtypes.set_index("quantity").dtype
report.glue("mp_ln_dtype", d["LayerNorm output"])
report.glue("mp_device", device.type.upper())
report.md(
    f"On this machine ({device.type.upper()}) autocast runs the LayerNorm in {d['LayerNorm output']}"
    + (": CUDA autocast lists `layer_norm` among the operations it always runs in fp32, whatever the inputs."
       if d["LayerNorm output"] == "float32" else
       ": the CPU autocast lists differ from CUDA's, which put `layer_norm` among the operations that "
       "always run in fp32.")
)

# %% [markdown]
# The parameters stay fp32 inside the autocast region: autocast does not convert the model, it casts
# inputs of each eligible operation on the fly (and caches the fp16 copies of the weights for the
# region). The linear layers (`fc1`, and `fc2`, whose output is the logits) run their matmuls in fp16,
# so their outputs are fp16. The loss is fp32 because `cross_entropy` (its `log_softmax`) is on
# autocast's fp32 list. The gradients are fp32, the dtype of the parameters they belong to: the backward
# pass of each cast flows the gradient back to the fp32 master weights.

# %% [markdown]
# ## (b) Why LayerNorm is treated differently
#
# LayerNorm computes a mean and a variance over the feature dimension, then divides by
# $\sqrt{\mathrm{var} + \epsilon}$. The reductions are the sensitive part: a sum of many squares can
# exceed fp16's largest value (65,504) and overflow to infinity, and summing many small terms into a
# low-precision accumulator loses them, as the loops above show; the small variance and $\epsilon = 10^{-5}$
# sit below fp16's smallest normal number (6.1 × 10⁻⁵), where precision drops further, and dividing by
# a badly rounded small number amplifies the error. That is why autocast keeps normalisation in fp32.
# bf16 has fp32's 8 exponent bits, so the sums do not overflow and small variances do not underflow:
# bf16 needs no loss scaling and is far less fragile. It still has only 8 significant bits, so long
# reductions in bf16 lose accuracy; the mean and variance should still be accumulated in fp32, which
# autocast does for both types (and which this project's RMSNorm does explicitly, upcasting its input).

# %% [markdown]
# ## (c) The Transformer with and without bf16 autocast
#
# Forward and backward pass of every model size at context length {glue:text}`mp_context`, batch 4,
# 5 warm-up and 10 measured steps, in fp32 and with bf16 autocast (parameters stay fp32).

# %% tags=["nbval-ignore-output"]
report.glue("mp_context", context)
base = BenchConfig(context_length=context, batch_size=batch, mode="forward_backward", warmup=warmup,
                   steps=steps, model_overrides=overrides)
runs = sweep(base, size=sizes, dtype=["fp32", "bf16"])
report.save_table(runs.drop(columns=[c for c in runs if c.endswith("times_ms")]), data_dir, "bf16_timings")
ok = runs[runs.status == "ok"]
wide = ok.pivot(index="size", columns="dtype", values=["forward_ms", "backward_ms"]).reindex(sizes)
speed = pd.DataFrame({
    "fp32 forward (ms)": wide["forward_ms"]["fp32"], "bf16 forward (ms)": wide["forward_ms"]["bf16"],
    "forward speed-up": wide["forward_ms"]["fp32"] / wide["forward_ms"]["bf16"],
    "fp32 backward (ms)": wide["backward_ms"]["fp32"], "bf16 backward (ms)": wide["backward_ms"]["bf16"],
    "backward speed-up": wide["backward_ms"]["fp32"] / wide["backward_ms"]["bf16"],
}).reset_index()
report.table(speed)

# %% tags=["nbval-ignore-output"]
long = ok.melt(id_vars=["size", "dtype"], value_vars=["forward_ms", "backward_ms"], var_name="pass", value_name="ms")
long["pass"] = long["pass"].str.removesuffix("_ms")
grid = sns.catplot(data=long, x="size", y="ms", hue="dtype", col="pass", kind="bar", height=3.2, order=sizes)
grid.set(yscale="log", ylabel="time per pass (ms)")
grid.figure.suptitle(f"fp32 vs bf16 autocast, context {context}, batch {batch}", y=1.04)
plt.show()

# %% tags=["nbval-ignore-output"]
s = speed.set_index("size")
first, last = sizes[0], sizes[-1]
report.glue("mp_fwd_speedup_first", report.fmt(s["forward speed-up"][first], 2))
report.glue("mp_fwd_speedup_last", report.fmt(s["forward speed-up"][last], 2))
report.glue("mp_bwd_speedup_last", report.fmt(s["backward speed-up"][last], 2))
report.glue("mp_first", first)
report.glue("mp_last", last)
grows = s["forward speed-up"][last] > s["forward speed-up"][first]
report.md(
    f"bf16 autocast speeds the forward pass up by {s['forward speed-up'][first]:.2g}× for the {first} model and "
    f"{s['forward speed-up'][last]:.2g}× for {last}; the backward pass by {s['backward speed-up'][first]:.2g}× "
    f"and {s['backward speed-up'][last]:.2g}×. "
    + ("The gain grows with the model: " if grows else "The gain does not grow with the model here: ")
    + "only the matmuls run on bf16 tensor cores, so the speed-up is large where matmuls dominate the time "
    "(big models) and small where a pass is bound by kernel launches and by the element-wise and "
    "normalisation kernels, which autocast leaves in fp32 or which are memory bound either way, plus the "
    "casts autocast adds."
)

# %% [markdown]
# The speed-up comes from the matrix multiplies alone: on a GPU, bf16 tensor cores run several times
# faster than fp32 arithmetic, and the bf16 operands halve the bytes each matmul reads. For the
# {glue:text}`mp_last` model the forward pass runs {glue:text}`mp_fwd_speedup_last`× and the backward
# pass {glue:text}`mp_bwd_speedup_last`× faster; for the {glue:text}`mp_first` model only
# {glue:text}`mp_fwd_speedup_first`× in the forward pass. Autocast also adds work, casting each weight
# to bf16 in every step (cached within the autocast region) and keeping softmax, normalisation and the
# loss in fp32, so a model whose time goes to small kernels gains little.
