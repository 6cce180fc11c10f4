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
# # torch.compile on the whole model
#
# What does `torch.compile` buy for the full Transformer, in inference (forward only) and in a full
# training step? (Handout §1.3.1 (b); part (a), compiled attention alone, is in the PyTorch attention
# chapter.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import seaborn as sns
from matplotlib import pyplot as plt

from systems import provenance, report
from systems.bench.e2e import SMOKE_MODEL, BenchConfig, sweep

profile = provenance.resolve_profile(profile)

if profile == "full":
    # Compiling the 48-layer xl and the 2.7B model for both modes takes minutes per point; the three
    # smaller sizes cover the same code at a fraction of the compile time.
    sizes, context, batch, overrides, warmup, steps = ["small", "medium", "large"], 256, 4, {}, 5, 10
    backend = "inductor"
else:
    sizes, context, batch, overrides, warmup, steps = ["small"], 16, 2, SMOKE_MODEL, 2, 2
    backend = "aot_eager"  # tracing without code generation: the smoke run checks the path, not the speed

# %% [markdown]
# Same harness, settings and warm-up as the end-to-end chapter (batch 4, fp32, naive attention), with
# the model wrapped in `torch.compile` or not. Compilation happens during the warm-up steps, so the
# measured steps time the compiled code only; a `train` step is forward, backward and AdamW.

# %% tags=["nbval-ignore-output"]
base = BenchConfig(context_length=context, batch_size=batch, warmup=warmup, steps=steps, model_overrides=overrides,
                   compile_backend=backend)
runs = sweep(base, size=sizes, mode=["forward", "train"], compile=[False, True])
report.save_table(runs.drop(columns=[c for c in runs if c.endswith("times_ms")]), data_dir, "compile_model")
wide = runs.pivot_table(index=["size", "mode"], columns="compile", values="step_ms").rename(
    columns={False: "vanilla_ms", True: "compiled_ms"})
wide["speedup"] = wide.vanilla_ms / wide.compiled_ms
# the first warm-up step of a compiled model includes tracing and code generation
compiled = runs[runs.compile].set_index(["size", "mode"])
wide["first_step_s"] = compiled.warmup_times_ms.map(lambda t: t[0] / 1e3)
wide = wide.reset_index()
report.table(wide, index=False)

# %% tags=["nbval-ignore-output"]
ax = sns.barplot(data=wide, x="size", y="speedup", hue="mode")
ax.axhline(1.0, color="grey", lw=1, ls="--")
ax.set(ylabel="vanilla time / compiled time", title=f"torch.compile speed-up, context {context}, batch {batch}")
plt.show()

# %% tags=["nbval-ignore-output"]
by_mode = wide.groupby("mode").speedup
report.glue("compile_fwd_min", report.fmt(by_mode.min()["forward"], 3))
report.glue("compile_fwd_max", report.fmt(by_mode.max()["forward"], 3))
report.glue("compile_train_min", report.fmt(by_mode.min()["train"], 3))
report.glue("compile_train_max", report.fmt(by_mode.max()["train"], 3))
small = wide[wide["size"] == sizes[0]].set_index("mode").speedup
big = wide[wide["size"] == sizes[-1]].set_index("mode").speedup
report.glue("compile_small_train", report.fmt(small["train"], 3))
report.glue("compile_big_train", report.fmt(big["train"], 3))
report.glue("compile_big_name", sizes[-1])
report.glue("compile_small_name", sizes[0])
trend = "shrinks" if big["train"] < small["train"] else "does not shrink"
report.md(
    f"Across the sizes, compiling speeds the forward pass up by a factor between "
    f"{by_mode.min()['forward']:.3g} and {by_mode.max()['forward']:.3g}, and the full training step by "
    f"{by_mode.min()['train']:.3g} to {by_mode.max()['train']:.3g}. The gain {trend} from the "
    f"{sizes[0]} model ({small['train']:.3g}×) to the {sizes[-1]} model ({big['train']:.3g}×)."
)

# %% [markdown]
# The column `first_step_s` is the first warm-up step of the compiled model: tracing, graph capture and
# Triton code generation happen there, once per model and input shape, which is the price that the
# speed-up must repay.
#
# The compiler fuses the chains of element-wise work that eager PyTorch runs as one kernel each:
# RMSNorm's square, mean, reciprocal square root and scale; the SwiGLU gate; RoPE's rotations; the
# masking and softmax of the naive attention; the loss. Each fused chain reads and writes its
# activations once instead of once per operation. The matrix multiplies still go to cuBLAS, so the
# fraction of time the compiler can remove is the fraction spent in memory-bound element-wise
# kernels; that fraction is what the table above measures. Training gains from
# the same fusions in the backward graph, which AOTAutograd compiles alongside the forward, while the
# optimizer step stays eager here (see the Nsight chapter for how much of a step AdamW takes).
