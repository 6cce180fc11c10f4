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
# What do 16-bit floating-point types do to a sum, which dtypes does `torch.autocast` actually produce inside a
# model, and how much faster is the Transformer with bf16 autocast? (2025 handout §1.1.5 and 2026 §2.1.5,
# `mixed_precision_accumulation` and `benchmarking_mixed_precision`.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import torch

from systems import figures, provenance, report
from systems.bench.e2e import BenchConfig, sweep
from systems.chapters.precision import accumulation_facts, speedup_facts, speedup_table
from systems.device import local_device
from systems.model import preset, preset_rows
from systems.precision import accumulation_table, autocast_dtypes

profile = provenance.resolve_profile(profile)
device = local_device()
if profile == "full":
    sizes, context, batch, warmup, steps = [r["size"] for r in preset_rows()], 128, 4, 5, 10
else:
    sizes, context, batch, warmup, steps = ["tiny"], 16, 2, 1, 2
report.glue_all("mp", {"context": context, "batch": batch, "warmup": warmup, "steps": steps,
                       "device": device.type.upper()})

# %% [markdown]
# ## Accumulating in low precision
#
# The handout's four loops add 0.01 a thousand times; the exact answer is 10. They differ in the dtype of the
# running sum and of the number added to it.

# %% tags=["nbval-check-output"]
accumulation = accumulation_table()
report.save_table(accumulation, data_dir, "accumulation")
report.table(accumulation, floatfmt=".6g")

# %% tags=["remove-cell", "nbval-check-output"]
found = accumulation_facts(accumulation)
report.glue_all("mp", found)
report.glue("mp_cast_words", report.pick(found["cast_same"], "identical", "different"))

# %% [markdown]
# In fp32 throughout, the result is off by only {glue:text}`mp_fp32_err:.2g`: 0.01 has no exact binary
# representation, and each of the thousand additions rounds to fp32's 24-bit mantissa. With an fp16
# accumulator the sum reaches {glue:text}`mp_fp16_result:.6g` (error {glue:text}`mp_fp16_err:.3g`,
# {glue:text}`mp_fp16_over_fp32:.0f` times fp32's): fp16 keeps 11 significant bits, so the spacing of
# representable numbers grows with the sum (2⁻⁸ ≈ 0.004 between 4 and 8, 2⁻⁷ ≈ 0.008 between 8 and 16) and
# every addition of 0.01 is rounded to a whole number of those steps: up by a quarter of the addend in one
# range, down by a fifth in the next. The errors no longer average out, they accumulate with the sum.
#
# Accumulating in fp32 but adding fp16 values gives {glue:text}`mp_mixed_result:.6g`: the sum itself is
# accurate, but every addend is fp16's nearest value to 0.01, {glue:text}`mp_value_fp16:.10g`, and that
# representation error is added a thousand times. With or without the explicit cast the results are
# {glue:text}`mp_cast_words`, because the in-place add promotes the fp16 operand to the sum's dtype either
# way. Hence the rule mixed precision follows: low-precision operands are tolerable, low-precision accumulators
# are not.
#
# ## (a) Which dtypes autocast produces
#
# The handout's `ToyModel` (Linear → ReLU → LayerNorm → Linear, fp32 parameters) runs a forward pass under fp16
# autocast on this machine's {glue:text}`mp_device`, then a backward pass from a cross-entropy loss:

# %% tags=["nbval-ignore-output"]
dtypes = autocast_dtypes(torch.float16, device)
report.save_table(dtypes, data_dir, "toy_model_dtypes")
report.table(dtypes)

# %% tags=["remove-cell", "nbval-ignore-output"]
layer_norm = dtypes.set_index("quantity").dtype["LayerNorm output"]
report.glue("mp_ln_dtype", layer_norm)
report.glue("mp_ln_words", report.pick(
    layer_norm == "float32", "CUDA autocast lists `layer_norm` among the operations it always runs in fp32, "
    "whatever the inputs", "the CPU's autocast lists differ from CUDA's, which put `layer_norm` among the "
    "operations that always run in fp32"))

# %% [markdown]
# Autocast runs the LayerNorm in {glue:text}`mp_ln_dtype` here: {glue:text}`mp_ln_words`. The parameters stay
# fp32 inside the autocast region: autocast does not convert the model, it casts the inputs of each eligible
# operation on the fly (and caches the fp16 copies of the weights for the region). The linear layers (`fc1`,
# and `fc2`, whose output is the logits) run their matrix multiplies in fp16, so their outputs are fp16. The
# loss is fp32 because `cross_entropy` (its `log_softmax`) is on autocast's fp32 list. The gradients are fp32,
# the dtype of the parameters they belong to: the backward pass of each cast flows the gradient back to the
# fp32 master weights.
#
# ## (b) Why LayerNorm is treated differently
#
# LayerNorm computes a mean and a variance over the feature dimension, then divides by
# $\sqrt{\mathrm{var} + \epsilon}$. The reductions are the sensitive part: a sum of many squares can exceed
# fp16's largest value (65,504) and overflow to infinity, and summing many small terms into a low-precision
# accumulator loses them, as the loops above show; the small variance and $\epsilon = 10^{-5}$ sit below
# fp16's smallest normal number (6.1 × 10⁻⁵), where precision drops further, and dividing by a badly rounded
# small number amplifies the error. That is why autocast keeps normalisation in fp32.
#
# bf16 has fp32's 8 exponent bits, so the sums do not overflow and small variances do not underflow: bf16 needs
# no loss scaling and is far less fragile. It still has only 8 significant bits, so long reductions in bf16
# lose accuracy; the mean and variance should still be accumulated in fp32, which autocast does for both types
# (and which this project's RMSNorm does explicitly, upcasting its input).
#
# ## (c) The Transformer with and without bf16 autocast
#
# Forward and backward pass of every model size at context length {glue:text}`mp_context`, batch
# {glue:text}`mp_batch`, {glue:text}`mp_warmup` warm-up and {glue:text}`mp_steps` measured steps, in fp32 and
# with bf16 autocast (parameters stay fp32).

# %% tags=["nbval-ignore-output"]
base = BenchConfig(preset(sizes[0], context_length=context), batch_size=batch, warmup=warmup, steps=steps)
runs = sweep(base, size=sizes, dtype=["fp32", "bf16"])
report.save_table(runs.drop(columns=[c for c in runs if c.endswith("times_ms")]), data_dir, "bf16_timings")
speed = speedup_table(runs, sizes)
report.table(speed)

# %% tags=["remove-input", "nbval-ignore-output"]
long = runs[runs.status == "ok"].melt(id_vars=["size", "dtype"], value_vars=["forward_ms", "backward_ms"],
                                      var_name="pass", value_name="ms")
figures.bars(long, "size", "ms", "dtype", "pass", "time per pass (ms)",
                     f"fp32 against bf16 autocast, context {context}, batch {batch}", order=sizes);

# %% tags=["remove-cell", "nbval-ignore-output"]
found = speedup_facts(speed, runs)
report.glue_all("mp", found)
report.glue("mp_grows_words", report.pick(found["grows"], "grows with the model", "does not grow with the model here"))

# %% [markdown]
# bf16 autocast speeds the forward pass up by {glue:text}`mp_fwd_first:.2g`× for the {glue:text}`mp_first`
# model and {glue:text}`mp_fwd_last:.2g`× for {glue:text}`mp_last`; the backward pass by
# {glue:text}`mp_bwd_first:.2g`× and {glue:text}`mp_bwd_last:.2g`×. The gain {glue:text}`mp_grows_words`. Sizes
# that ran out of memory: {glue:text}`mp_oom`.
#
# The speed-up comes from the matrix multiplies alone: on a GPU, bf16 tensor cores run many times faster than
# fp32 arithmetic on the CUDA cores (989 against 67 TFLOP/s on an H100), and the bf16 operands halve the
# bytes each matrix multiply reads. So the speed-up is large where matrix multiplies dominate the time (big
# models) and small where a pass is bound by kernel launches and by the element-wise and normalisation
# kernels, which autocast leaves in fp32 or which are memory bound either way. Autocast also adds work:
# it casts each weight to bf16 in every step (cached within the autocast region), and keeps softmax,
# normalisation and the loss in fp32, so a model whose time goes to small kernels gains little. Mixed precision
# does not shrink the model's memory for weights, gradients or optimizer state, which all stay fp32: a model
# that does not fit in fp32 (the 10B) does not fit with autocast either.
