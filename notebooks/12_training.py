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
# # Training with every attention kernel and every data-parallel wrapper
#
# Putting the pieces of the book together: short training runs of one model with each attention
# implementation and each data-parallel wrapper. How many tokens per second does each combination
# train, how much memory does it take, and do they all learn the same thing?

# %% tags=["parameters", "remove-cell"]
profile = "auto"
data_dir = None

# %% tags=["remove-cell"]
import pandas as pd
import seaborn as sns
import torch
from matplotlib import pyplot as plt

from systems import provenance, report
from systems.attention import get_attention
from systems.bench.e2e import SMOKE_MODEL
from systems.dist import launch
from systems.train import WRAPPERS, TrainConfig, summarize, train_many

profile = provenance.resolve_profile(profile)

world = 2
if profile == "full":
    base = TrainConfig(size="small", context_length=256, global_batch_size=16, max_steps=20, warmup_steps=5,
                       lr=3e-4, progress=False)
    attentions, backend, timeout_s, skip = ["naive", "sdpa", "flash_triton"], "nccl", 300, 5
else:
    small = {k: v for k, v in SMOKE_MODEL.items() if k != "vocab_size"}
    base = TrainConfig(size="small", **small, vocab_size=SMOKE_MODEL["vocab_size"], context_length=32,
                       global_batch_size=4, max_steps=4, warmup_steps=1, lr=1e-3, progress=False)
    attentions, backend, timeout_s, skip = ["naive", "sdpa"], "gloo", 120, 1

# %% [markdown]
# ## The runs
#
# `python -m systems.train` (or `systems.train.train(cfg)` from Python) trains the Transformer LM of
# §1.1.2 with AdamW (linear warm-up, cosine decay, gradient clipping) on seeded random tokens. The
# sampler draws the same global batch at every step whatever the number of processes, each rank takes
# its slice, and the wrapper averages the gradients, so every run below sees identical data and should
# follow the same loss curve. Here: the {glue:text}`train_size` model, context {glue:text}`train_context`,
# global batch {glue:text}`train_batch` sequences, {glue:text}`train_steps` steps, fp32. `none` trains on
# one GPU; the wrappers train on {glue:text}`train_world` GPUs (NCCL), each rank taking half the batch:
#
# - `naive`: one blocking all-reduce per parameter after the backward pass (§2.2);
# - `flat`: one all-reduce of all gradients flattened into a single buffer (§2.3.1);
# - `overlap`: an asynchronous all-reduce per parameter as soon as its gradient is ready (§2.3.2);
# - `bucketed`: gradients gathered into 25 MiB buckets, each all-reduced when complete (§2.3.3);
# - `torch`: PyTorch's `DistributedDataParallel`, the anchor.
#
# Throughput is the median over the steps after the first {glue:text}`train_skip` (which pay for
# kernel compilation, autotuning and the allocator's growth); peak memory is the first rank's
# `torch.cuda.max_memory_allocated` over the whole run.

# %% tags=["nbval-ignore-output"]
report.glue("train_size", base.size)
report.glue("train_context", base.context_length)
report.glue("train_batch", base.global_batch_size)
report.glue("train_steps", base.max_steps)
report.glue("train_world", world)
report.glue("train_skip", skip)


def usable(name: str) -> str | None:
    """Why an attention implementation cannot run here, or None."""
    if name == "flash_triton" and not torch.cuda.is_available():
        return "needs a GPU"
    try:
        get_attention(name)
    except ImportError as exc:
        return f"not importable: {exc}"
    return None


skipped = {a: why for a in attentions if (why := usable(a))}
records, summary = [], []
for attention in [a for a in attentions if a not in skipped]:
    for n_ranks, wrappers in [(1, ["none"]), (world, [w for w in WRAPPERS if w != "none"])]:
        cfgs = [TrainConfig(**{**vars(base), "attention": attention, "wrapper": w}) for w in wrappers]
        try:
            runs = launch(train_many, n_ranks, cfgs, backend=backend, timeout_s=timeout_s)[0]
        except (RuntimeError, TimeoutError) as exc:  # one broken kernel must not hide the other results
            skipped[f"{attention} ({n_ranks} GPU)"] = str(exc).strip().splitlines()[-1]
            continue
        for cfg, run in zip(cfgs, runs):
            summary.append({"attention": attention, "wrapper": cfg.wrapper, "gpus": n_ranks, **summarize(run, skip)})
            records += [{"attention": attention, "wrapper": cfg.wrapper, **r} for r in run]
summary, records = pd.DataFrame(summary), pd.DataFrame(records)
report.save_table(summary, data_dir, "summary")
report.save_table(records, data_dir, "steps")
report.table(summary.drop(columns=["steps"]), floatfmt=".4g")

# %% tags=["nbval-ignore-output"]
report.md("Every combination ran." if not skipped else
          "Not run: " + "; ".join(f"`{k}`: {v}" for k, v in skipped.items()) + ".")

# %% tags=["nbval-ignore-output"]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
sns.barplot(data=summary, x="wrapper", y="tokens_per_s", hue="attention", order=list(WRAPPERS), ax=axes[0])
axes[0].set(ylabel="tokens / s (median step)", title="Throughput")
if summary.peak_memory_mb.notna().any():
    sns.barplot(data=summary, x="wrapper", y="peak_memory_mb", hue="attention", order=list(WRAPPERS), ax=axes[1])
    axes[1].set(ylabel="peak memory (MiB, rank 0)", title="Memory")
else:
    axes[1].set_axis_off()  # a CPU run has no allocator statistics
fig.tight_layout()
plt.show()

# %% tags=["nbval-ignore-output"]
grid = sns.relplot(data=records, x="step", y="loss", hue="wrapper", style="wrapper", col="attention", kind="line",
                   height=3, aspect=1.2, hue_order=list(WRAPPERS))
grid.figure.suptitle("Training loss of every run (one curve per wrapper)", y=1.04)
plt.show()

# %% tags=["nbval-ignore-output"]
s = summary.set_index(["attention", "wrapper"])
fastest = s.tokens_per_s.idxmax()
ddp = summary[summary.wrapper != "none"]
best_ddp = ddp.loc[ddp.groupby("attention").tokens_per_s.idxmax()].set_index("attention")
single = summary[summary.wrapper == "none"].set_index("attention")
speedup = (best_ddp.tokens_per_s / single.tokens_per_s).dropna()
final = records[records.step == records.step.max()]
spread = final.groupby("attention").loss.agg(lambda x: x.max() - x.min())
report.glue("train_fastest", f"{fastest[0]} + {fastest[1]}")
report.glue("train_fastest_tok_s", report.fmt(s.tokens_per_s.max()))
report.glue("train_loss_spread", report.fmt(spread.max(), 2))
lines = [
    f"The fastest combination is `{fastest[0]}` attention with the `{fastest[1]}` wrapper, "
    f"{s.tokens_per_s.max():.4g} tokens/s."
]
for attention, x in speedup.items():
    lines.append(
        f"With `{attention}` attention, the best wrapper (`{best_ddp.wrapper[attention]}`) trains {x:.3g}× as many "
        f"tokens per second on {world} GPUs as one GPU does"
        + (" — data parallelism pays off at this size." if x > 1.3 else
           " — the model is too small for two GPUs to pay for the gradient all-reduce." if x < 1 else ".")
    )
by_attention = summary.groupby("attention").tokens_per_s.median().sort_values(ascending=False)
lines.append("Across wrappers, the median throughput ranks the attention implementations "
             + " > ".join(f"`{a}` ({v:.4g})" for a, v in by_attention.items()) + ".")
lines.append(
    f"All runs see the same global batches: their final losses differ by at most {spread.max():.2g} "
    + ("(float rounding of differently ordered reductions), so every wrapper trains the same model."
       if spread.max() < 1e-2 else "— more than rounding explains; see the loss curves.")
)
report.md("\n\n".join(lines))

# %% [markdown]
# What to take from the table. The wrappers differ only in how and when gradients cross between the
# GPUs, so their losses agree and their throughput measures the communication strategy: per-parameter
# blocking all-reduces (`naive`) pay a latency per tensor; one flat buffer (`flat`) pays one latency but
# waits for the whole backward pass; the overlapping variants hide communication behind the backward
# pass. The attention implementations change only the attention itself: the naive one materialises
# the (context × context) score matrix of every head and saves it for backward, the fused ones do not,
# which shows first in the memory column and grows with the context length. Reproduce one run from
# the command line:
#
# ```
# torchrun --nproc_per_node 2 -m systems.train --size small --context-length 256 --global-batch-size 16 \
#     --max-steps 20 --warmup-steps 5 --attention sdpa --wrapper bucketed --log-file run.jsonl
# ```
