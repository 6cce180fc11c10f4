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
# What does `torch.compile` buy for the full Transformer, in inference (forward only) and in a full training
# step? (2025 handout §1.3.1 (b), 2026 §4.1, `torch_compile`; part (a), compiled attention alone, is in the
# PyTorch attention chapter.)

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
from systems import figures, provenance, report
from systems.bench.e2e import BenchConfig, sweep
from systems.chapters.end_to_end import compile_table
from systems.model import preset

profile = provenance.resolve_profile(profile)
if profile == "full":
    # Compiling the 48-layer xl and the 2.7B model for both modes takes minutes per point; the three smaller sizes
    # cover the same code at a fraction of the compile time.
    sizes, context, batch, warmup, steps, backend = ["small", "medium", "large"], 256, 4, 5, 10, "inductor"
else:
    sizes, context, batch, warmup, steps, backend = ["tiny"], 16, 2, 2, 2, "aot_eager"  # tracing, no code generation
report.glue_all("compile", {"context": context, "batch": batch})

# %% [markdown]
# The harness, settings and warm-up of the end-to-end chapter (batch {glue:text}`compile_batch`, context
# {glue:text}`compile_context`, fp32, naive attention), with the model wrapped in `torch.compile` or not.
# Compilation happens during the warm-up steps, so the measured steps time the compiled code only; a `train`
# step is forward, backward and AdamW. The table gives, per size and mode, the vanilla and the compiled step, their
# ratio (above one: the compiled model is faster), and the compiled model's first step, which pays for the
# compilation itself.

# %% tags=["nbval-ignore-output"]
base = BenchConfig(preset(sizes[0], context_length=context), batch_size=batch, warmup=warmup, steps=steps,
                   compile_backend=backend)
runs = sweep(base, size=sizes, mode=["forward", "train"], compile=[False, True])
report.save_table(runs.drop(columns=[c for c in runs if c.endswith("times_ms")]), data_dir, "compile_model")
table, found = compile_table(runs)
report.table(table)

# %% tags=["remove-input", "nbval-ignore-output"]
figures.bars(table, "size", "speedup", "mode", None, "vanilla time / compiled time",
                     f"torch.compile speed-up, context {context}, batch {batch}", order=sizes, log=False, reference=1);

# %% tags=["remove-cell", "nbval-ignore-output"]
report.glue_all("compile", found)

# %% [markdown]
# Across the sizes, compiling speeds the forward pass up by a factor between {glue:text}`compile_fwd_min:.3g` and
# {glue:text}`compile_fwd_max:.3g`, and the full training step by {glue:text}`compile_train_min:.3g` to
# {glue:text}`compile_train_max:.3g`. The training step's gain {glue:text}`compile_trend` from the
# {glue:text}`compile_first` model ({glue:text}`compile_first_train:.3g`×) to the {glue:text}`compile_last`
# model ({glue:text}`compile_last_train:.3g`×).
#
# The column `first_step_s` is the first warm-up step of the compiled model: tracing, graph capture and Triton code
# generation happen there, once per model and input shape, which is the price that the speed-up must repay.
#
# The compiler fuses the chains of element-wise work that eager PyTorch runs as one kernel each: RMSNorm's square,
# mean, reciprocal square root and scale; the SwiGLU gate; RoPE's rotations; the masking and softmax of the naive
# attention; the loss. Each fused chain reads and writes its activations once instead of once per operation. The
# matrix multiplies still go to cuBLAS, so the fraction of time the compiler can remove is the fraction spent in
# memory-bound element-wise kernels, which is larger for small models (where those kernels and their launches
# weigh more against the matrix multiplies) than for large ones. Training gains from the same fusions in the
# backward graph, which AOTAutograd compiles alongside the forward, while the optimizer step stays eager here (see
# the Nsight chapter for how much of a step AdamW takes).
