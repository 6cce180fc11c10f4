"""What a training run checks before it builds anything: every setting in its range, and the machine able to run it.

A value the command line accepts must be one the run can use correctly: a negative ``--grad-clip`` would flip the
gradients' sign, a negative ``--min-lr`` would climb the loss, a NaN learning rate would train on nothing. So
each numeric setting of :class:`systems.train.TrainConfig` has its interval here (:data:`RANGES`, written as
intervals are: ``[0, 1)``), and :func:`check_settings` refuses a value outside it with the name, the interval and
the value. :func:`check_machine` then asks the machine: the device exists, the attention runs on it, the model's
state fits in its memory, the folders can be written. All of this happens before the first step, so a refused run
costs a second, not a model build.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import torch

from systems.attention import unavailable
from systems.model import parameter_count
from systems.parallel import NAMES, SHARDED
from systems.recompute import FFN_KEPT, check_checkpointing, checkpointed_groups
from systems.scaling.parallel import memory_per_device
from systems.triton_interpreter import triton_unavailable

# Data streams are seeded with seed·1_000_003 + step, which the generator takes as an unsigned 64-bit number: the
# seeds and step counts allowed keep it in range (2**40 steps is far past any run).
MAX_STEPS = 2**40
MAX_SEED = (2**64 - 1 - MAX_STEPS) // 1_000_003
FP32_MAX = torch.finfo(torch.float32).max
# field -> the interval it must lie in ("inf": no upper bound)
RANGES = {
    "grad_accum": "[1, inf)", "max_steps": f"[1, {MAX_STEPS}]", "global_batch_size": "[1, inf)",
    "max_bad_steps": "[0, inf)",
    "checkpoint_every": "[0, inf)", "checkpoint_blocks": "[0, inf)", "warmup_steps": "[0, inf)",
    "seed": f"[0, {MAX_SEED}]", "lr": "[0, inf)", "min_lr": "[0, inf)", "beta1": "[0, 1)", "beta2": "[0, 1)",
    "eps": "(0, inf)", "weight_decay": "[0, inf)", "grad_clip": "[0, inf)", "bucket_size_mb": "(0, inf)",
}


def inside(value: float, interval: str) -> bool:
    """Whether a finite ``value`` lies in ``interval``, written ``[a, b)``, ``(a, inf)``..."""
    low, high = (float(x) for x in interval[1:-1].split(","))
    above = value >= low if interval[0] == "[" else value > low
    below = value <= high if interval[-1] == "]" else value < high
    return above and below


def check_settings(cfg: Any) -> None:
    """Raise ValueError naming the first setting of a TrainConfig outside its range, or settings that disagree."""
    if cfg.wrapper not in NAMES:
        raise ValueError(f"wrapper must be one of {NAMES}, got {cfg.wrapper!r}")
    for name, interval in RANGES.items():
        value, option = getattr(cfg, name), f"{name} (--{name.replace('_', '-')})"
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{option} must be a finite number, got {value}")
        if not inside(value, interval):
            raise ValueError(f"{option} must lie in {interval}, got {value}")
    if cfg.min_lr > cfg.lr:
        raise ValueError(f"min_lr ({cfg.min_lr}) must not exceed lr ({cfg.lr}): the schedule decays to it")
    if cfg.lr * cfg.weight_decay >= 1:
        raise ValueError(f"lr × weight_decay ({cfg.lr} × {cfg.weight_decay}) must be below 1: AdamW multiplies the "
                         "weights by 1 − lr·weight_decay every step, which would zero them or flip their sign")
    if not cfg.lr / (1 - cfg.beta1) <= FP32_MAX:
        raise ValueError(f"lr / (1 − beta1) ({cfg.lr} / (1 − {cfg.beta1})) must be a finite fp32 number: AdamW's "
                         "first step moves a weight by up to that much, and the weights are fp32")
    if cfg.checkpoint_every and not cfg.checkpoint_dir:
        raise ValueError("checkpoint_every needs checkpoint_dir")
    if cfg.zero1 and cfg.wrapper in SHARDED:
        raise ValueError(f"--zero1 shards the optimizer state, which --wrapper {cfg.wrapper} shards already")
    check_checkpointing((cfg.checkpoint_blocks,) if cfg.checkpoint_blocks else (), cfg.recompute, cfg.kept_groups,
                        cfg.stored_groups, cfg.model.num_layers, cfg.model.attention if cfg.checkpoint_blocks else None)
    if cfg.recompute in FFN_KEPT and cfg.wrapper == "fsdp":
        raise ValueError(f"--recompute {cfg.recompute} compiles each checkpointed group by itself, and --wrapper fsdp "
                         f"gathers each layer's weight in hooks inside the blocks, which would run the groups "
                         f"eagerly: use --wrapper fsdp2, or --recompute keep_attention with fsdp")
    if cfg.recompute in FFN_KEPT and cfg.wrapper == "fsdp2" and cfg.checkpoint_blocks != 1:
        raise ValueError(f"--recompute {cfg.recompute} with --wrapper fsdp2 runs each block as a group of its own, "
                         f"between FSDP2's gathers: give --checkpoint-blocks 1, got {cfg.checkpoint_blocks}")


def writable_folder(path: Path, what: str) -> None:
    """Create ``path`` if needed; raise before any work if nothing can be written there."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create the {what} folder {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK):
        raise ValueError(f"cannot write to the {what} folder {path}")


def checkpoint_path(folder: Path, step: int) -> Path:
    """Where a run saves its checkpoint after ``step`` steps (:func:`check_checkpoints_kept` reads the same names)."""
    return folder / f"step_{step:06d}.pt"


def check_checkpoints_kept(folder: Path, start: int) -> None:
    """Refuse a run that would write over checkpoints in ``folder`` from steps after ``start``, where it begins: another
    run's, or this run's own past the checkpoint it resumes from. Each is a file the user has, and this run's
    :func:`checkpoint_path` files would replace them."""
    later = sorted((int(m.group(1)), p.name) for p in folder.glob("step_*.pt")
                   if (m := re.fullmatch(r"step_(\d+)\.pt", p.name)) and int(m.group(1)) > start)
    if later:
        names = ", ".join(name for _, name in later[:3]) + (f" and {len(later) - 3} more" if len(later) > 3 else "")
        raise ValueError(f"the checkpoint folder {folder} holds {names}, from after step {start} where this run "
                         f"begins, and the run would write over them: resume from {folder / later[-1][1]}, or "
                         "choose another --checkpoint-dir")


def check_launch(cfg: Any, world: int, group: bool) -> None:
    """Raise ValueError where the strategy cannot run in this launch: a data-parallel one without a process group
    (``group``), one process's strategy over several ranks, a batch that does not split."""
    if cfg.wrapper != "none" and not group:
        raise ValueError(f"--wrapper {cfg.wrapper} needs a process group: start the run with torchrun "
                         f"(torchrun --nproc_per_node N -m systems.train ...), or use --wrapper none")
    if cfg.wrapper == "none" and world > 1:
        raise ValueError(f"{world} ranks need a data-parallel wrapper (--wrapper); 'none' is for one process")
    if cfg.global_batch_size % (world * cfg.grad_accum):
        raise ValueError(f"global batch {cfg.global_batch_size} does not split into {world} ranks × "
                         f"{cfg.grad_accum} micro-batches")


def memory_needed(cfg: Any, world: int) -> tuple[float, float]:
    """Bytes per rank that a step cannot do without: the state (fp32 weights, gradients and AdamW state, sharded as
    the wrapper shards them, and the rotary table the blocks share, context × head_dim fp32) and a floor under one
    micro-batch's activations (its logits in fp32, as the loss upcasts them, unless the loss is fused, and the input
    of every block or checkpointed group, which the backward pass needs, or of the last group alone where the others
    are offloaded to host memory). What the blocks save inside comes on top of both."""
    model = cfg.model
    strategy = "FSDP" if cfg.wrapper in SHARDED else "ZeRO-1" if cfg.zero1 else "DP"
    rotary = model.context_length * model.head_dim * 4
    state = memory_per_device(parameter_count(model), strategy, world)["total"] + rotary
    tokens = cfg.global_batch_size // (world * cfg.grad_accum) * model.context_length
    kept_inputs = (1 if cfg.recompute == "offload" else
                   checkpointed_groups(model.num_layers, cfg.checkpoint_blocks) or model.num_layers)
    logits = 0 if model.fused_loss else model.vocab_size
    return state, tokens * 4 * (logits + kept_inputs * model.d_model)


def capacity(device: torch.device) -> float:
    """Bytes of memory on ``device``: the GPU's, or the machine's for the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_machine(cfg: Any, device: torch.device, world: int) -> None:
    """Raise ValueError where this machine cannot run ``cfg`` on ``device``: the attention, the memory, the paths."""
    compute = torch.bfloat16 if cfg.bf16 else torch.float32
    why = unavailable(cfg.model.attention, device, compute, cfg.model.head_dim)
    if why:
        raise ValueError(f"attention {cfg.model.attention!r} cannot run here: it {why}")
    for wanted, what, dtype in ((cfg.model.fused_loss, "--fused-loss", compute),
                                (cfg.fused_adamw, "--fused-adamw", torch.float32)):
        why = triton_unavailable(device, dtype) if wanted else None
        if why:
            raise ValueError(f"{what} cannot run here: its Triton kernel {why}")
    (state, activations), room = memory_needed(cfg, world), capacity(device)
    if state + activations > room:
        micro = cfg.global_batch_size // (world * cfg.grad_accum)
        raise ValueError(f"the model ({parameter_count(cfg.model) / 1e6:,.1f} M parameters, context "
                         f"{cfg.model.context_length}) needs {state / 2**30:.1f} GiB per rank for fp32 weights, "
                         f"gradients, AdamW state and the rotary table, and at least {activations / 2**30:.1f} GiB for the activations "
                         f"of a micro-batch of {micro} sequences (its fp32 logits and block inputs); {device} has "
                         f"{room / 2**30:.1f} GiB (a smaller --global-batch-size, a larger --grad-accum or "
                         "--checkpoint-blocks need less)")
    if cfg.checkpoint_dir:
        writable_folder(Path(cfg.checkpoint_dir), "checkpoint")
    if cfg.log_file:
        log = Path(cfg.log_file)
        if log.is_dir():
            raise ValueError(f"the log file {log} is a folder; --log-file takes a file to append to")
        writable_folder(log.parent, "log")
        if log.exists() and not os.access(log, os.W_OK):
            raise ValueError(f"cannot write to the log file {log}")
