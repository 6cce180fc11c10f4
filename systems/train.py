"""Train the Transformer LM: one process, or data-parallel under torchrun, with ZeRO-1 and checkpoints.

    python -m systems.train --size small --context-length 256 --global-batch-size 16 --max-steps 100
    torchrun --nproc_per_node 2 -m systems.train --wrapper bucketed --zero1 --bf16 \\
        --data corpus.txt --checkpoint-dir ckpt --checkpoint-every 50 --log-file train.jsonl
    python -m systems.train ... --resume ckpt/step_000050.pt            # continues the same curve exactly

Every option is a field of :class:`TrainConfig`; notebooks and tests call :func:`train` with one and
get the per-step records back. The global batch of each step is the same whatever the world size
(:mod:`systems.data`), each rank takes its slice and splits it into ``grad_accum`` micro-batches (all
but the last under ``no_sync()``), and the strategy averages gradients over the ranks, so a 2-process
run follows the single-process loss curve. ``--wrapper`` names the strategy (:mod:`systems.parallel`: one process,
our data-parallel wrappers or PyTorch's DDP, with ``--zero1`` sharding the optimizer state, our FSDP or PyTorch's
FSDP2); the step is :class:`systems.parallel.TrainStep`, the one every benchmark runs too. ``--compile`` compiles
each block, after the wrapper (a sharded block gathers its weights between the graphs).

A checkpoint (:mod:`systems.checkpoint`: atomic, checksummed, tensors and plain data only) holds the model,
the optimizer (consolidated when sharded, so it resumes at any world size and under any wrapper), the step (which
is the data position), the RNG, the run's settings and the data's identity (its contents' hash). Resuming checks the file as a
schema first (:mod:`systems.train_state`), then refuses a checkpoint whose settings differ from the
run's in anything that changes the loss curve (the model, data, seed, batch, schedule, optimizer, precision)
and names the fields, unless ``--resume-anyway``. A run never writes over checkpoints in its folder from after
the step it begins at (another run's, or its own past the one it resumes from): it refuses to start and names them.
A loss or gradient norm that is not finite stops the run with the step named and a non-zero exit
(``--max-bad-steps`` skips that many such steps first).

Nothing the user has is lost to a failure. Every setting is checked before the model is built (ranges, the device,
the attention on that device, the data's length, the launch environment, a model that cannot fit), and a
refused one is a usage error (exit 2) naming the value and the rule. A checkpoint folder is held by one run at a
time. Ctrl-C or SIGTERM ends the run at the next step boundary, with a checkpoint where a folder was given (exit
130 or 143); a second Ctrl-C stops at once. A full disk names the disk (exit 1), and so does running out of
device memory.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from tqdm.auto import tqdm

from systems import checkpoint, train_state
from systems import dist as sdist
from systems.attention import runs_as
from systems.cli import HelpFormatter, add_arguments, build, dump_json, option
from systems.data import TokenData
from systems.device import is_oom, local_device, requested_device, timed
from systems.files import append_line, exclusive_folder
from systems.flops import mfu, model_flops
from systems.interrupts import Interrupted, StopRequests
from systems.model import (ModelConfig, TransformerLM, add_model_arguments, check_tokens, models_from_args,
                           parameter_count, preset)
from systems.parallel import NAMES, TrainStep, wrap
from systems.recompute import MODEL_RECOMPUTE
from systems.train_checks import (check_checkpoints_kept, check_launch, check_machine, check_settings,
                                   checkpoint_path)

WRAPPERS = NAMES


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm stopped being finite."""


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=lambda: preset("small", attention="sdpa"))
    # parallelism and precision
    wrapper: str = option("data-parallel wrapper", default="none", choices=WRAPPERS)
    bucket_size_mb: float = option("bucket size of the bucketed and torch wrappers (MiB)", default=25.0)
    zero1: bool = option("shard the optimizer state over the ranks (ZeRO stage 1)", default=False)
    bf16: bool = option("bf16 autocast for forward and loss (weights and optimizer stay fp32); with fsdp and "
                        "fsdp2, weights are also gathered in bf16", default=False)
    checkpoint_blocks: int = option("recompute activations in groups of this many blocks (0: off)", default=0)
    recompute: str = option("what the recomputation recomputes: every operation ('all'), all but attention "
                            "('keep_attention', whose outputs are kept), or only the projections to q, k, v and "
                            "attention's output, attention's outputs and the feed-forward's products kept, each group "
                            "compiled: on the GPU ('keep_attention_and_ffn') or in host memory ('offload', faster "
                            "only where a group's forward outlasts its copies, as at long contexts); neither with "
                            "fsdp, and with fsdp2 in groups of one block", default="all", choices=MODEL_RECOMPUTE)
    kept_groups: int | None = option("with keep_attention, keep attention's outputs in this many checkpointed "
                                     "groups (the first) and recompute the others whole (None: in every group)",
                                     default=None)
    stored_groups: int = option("run the last this many checkpointed groups without checkpointing, every activation "
                                "stored for the backward (for memory left over)", default=0)
    # optimisation
    global_batch_size: int = option("sequences per optimizer step, over all ranks and micro-batches", default=8)
    grad_accum: int = option("micro-batches per step on each rank", default=1)
    max_steps: int = option("optimizer steps in total (a resumed run continues to this)", default=100)
    lr: float = option("peak learning rate", default=3e-4)
    min_lr: float = option("learning rate at the end of the cosine decay", default=3e-5)
    warmup_steps: int = option("linear warm-up steps", default=10)
    beta1: float = option("AdamW beta1", default=0.9)
    beta2: float = option("AdamW beta2", default=0.95)
    eps: float = option("AdamW epsilon", default=1e-8)
    weight_decay: float = option("AdamW decoupled weight decay", default=0.1)
    grad_clip: float = option("clip the global gradient norm to this (0: off)", default=1.0)
    compile: bool = option("compile each block with torch.compile (the first steps pay for it; with "
                           "keep_attention_and_ffn and offload each checkpointed group is compiled anyway)",
                           default=False)
    fused_adamw: bool = option("update with one Triton kernel per dtype group (systems.fused.FusedAdamW) instead of "
                               "torch.optim.AdamW", default=False)
    max_bad_steps: int = option("skip up to this many steps whose loss or gradient norm is not finite", default=0)
    # data, checkpoints, logs
    data: str = option('"random" (seeded tokens), a .npy file of token ids, or a text file (read as bytes)',
                       default="random")
    seed: int = option("seed of the initial weights and of the data", default=0)
    checkpoint_dir: str | None = option("write checkpoints here", default=None)
    checkpoint_every: int = option("checkpoint every N steps (0: only at the end); needs --checkpoint-dir",
                                   default=0)
    resume: str | None = option("continue from this checkpoint file", default=None)
    resume_anyway: bool = option("resume even where the run's settings differ from the checkpoint's", default=False)
    log_file: str | None = option("append one JSON line per step here (rank 0)", default=None)
    progress: bool = option("show a progress bar on rank 0", default=True)
    device: str | None = option("force a device, e.g. cpu (None: this rank's GPU, else the CPU)", default=None)

    def __post_init__(self) -> None:
        check_settings(self)


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``max_steps``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))


def train(cfg: TrainConfig) -> list[dict[str, Any]]:
    """Run ``cfg``; return one record per step taken (the same list on every rank).

    Joins a process group when torchrun's environment describes one and none exists, and leaves it at the end;
    inside an existing group (``systems.dist.launch``) it uses that one; otherwise it runs alone. Raises
    :class:`Interrupted` after a Ctrl-C or SIGTERM, having finished the step (and saved, with a checkpoint folder).
    """
    with sdist.group_from_environment(), _Run(cfg) as run:
        return run.run()


def train_many(rank: int, world_size: int, cfgs: list[TrainConfig]) -> list[list[dict[str, Any]]]:
    """Several runs in one process group, for ``systems.dist.launch`` (one start-up for a whole sweep)."""
    return [train(cfg) for cfg in cfgs]


class _Run:
    """One run's settings checked, resources held (the checkpoint folder) and model built; use as a context."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self._held = contextlib.ExitStack()
        try:
            self._prepare()
        except BaseException:
            self._held.close()
            raise

    def __enter__(self) -> "_Run":
        return self

    def __exit__(self, *exc) -> None:
        self._held.close()

    def _prepare(self) -> None:
        cfg = self.cfg
        self.rank, self.world = sdist.rank(), sdist.world_size()
        self.stop = StopRequests(enabled=False)  # run() listens for signals while it trains
        # everything that can fail on a setting, a path, a device or a size fails now, before the model is built
        check_launch(cfg, self.world, dist.is_initialized())
        self.device = requested_device(cfg.device) if cfg.device else local_device()
        check_machine(cfg, self.device, self.world)
        if cfg.checkpoint_dir and self.rank == 0:
            self._held.enter_context(exclusive_folder(cfg.checkpoint_dir, "checkpoint"))
        self.data = TokenData.from_spec(cfg.data, cfg.model.vocab_size, cfg.seed)
        self.data.check_context(cfg.model.context_length)
        ckpt = checkpoint.load(cfg.resume) if cfg.resume else None
        if cfg.checkpoint_dir:
            check_checkpoints_kept(Path(cfg.checkpoint_dir), train_state.resume_step(ckpt, cfg.resume) if ckpt else 0)
        self.n_params = parameter_count(cfg.model)
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank (the wrappers broadcast them anyway)
        with torch.device(self.device):
            self.model = TransformerLM(cfg.model, checkpoint_blocks=cfg.checkpoint_blocks, recompute=cfg.recompute,
                                       kept_groups=cfg.kept_groups, stored_groups=cfg.stored_groups)
        if ckpt:
            train_state.check_resumable(ckpt, cfg.resume, asdict(cfg), self.model, self.data.identity)
        bf16 = torch.bfloat16 if cfg.bf16 else None
        self.strategy = wrap(cfg.wrapper, self.model, zero1=cfg.zero1, compute_dtype=bf16,
                             bucket_size_mb=cfg.bucket_size_mb)
        if cfg.compile:  # block by block, after sharding: a sharded block's gathers stay between the graphs
            for block in self.model.layers:
                block.compile()
        adamw = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay)
        self.optimizer = self.strategy.optimizer(_adamw_class(cfg.fused_adamw), **adamw)
        # the norm is measured even without clipping (0: an infinite bound): it guards the update
        self.train_step = TrainStep(self.strategy, self.optimizer, grad_accum=cfg.grad_accum, autocast=bf16,
                                    clip=cfg.grad_clip)
        self.start, self.bad_steps = 0, 0
        if ckpt:
            self.strategy.load_full_state_dict(ckpt["model"])
            self.strategy.load_full_optimizer_state_dict(self.optimizer, ckpt["optimizer"])
            for group in self.optimizer.param_groups:  # the run's settings, not the file's, drive the updates
                group.update(adamw)
            self.start = ckpt["step"]
            torch.set_rng_state(ckpt["rng"]["cpu"])
        self.flops_per_step = model_flops(cfg.model, cfg.global_batch_size, "train")
        gpu = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None
        self.mfu = (lambda seconds: mfu(self.flops_per_step / self.world, seconds, gpu, "bf16" if cfg.bf16 else "fp32")
                    ) if gpu else (lambda seconds: None)

    def run(self) -> list[dict[str, Any]]:
        cfg, records = self.cfg, []
        if self.start >= cfg.max_steps:
            sdist.print0(f"nothing to do: the checkpoint {cfg.resume} is at step {self.start} and max_steps is "
                         f"{cfg.max_steps}")
            return records
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self._log({"event": "start", "world_size": self.world, "start_step": self.start, "params": self.n_params,
                   "attention_runs_as": runs_as(cfg.model.attention, self.device), "config": asdict(cfg)})
        bar = tqdm(range(self.start, cfg.max_steps), desc=f"train {cfg.wrapper}{' zero1' if cfg.zero1 else ''}",
                   disable=not (cfg.progress and self.rank == 0))
        saved = None
        with StopRequests() as self.stop:
            for step in bar:
                record = self.step(step)
                stopping = record.pop("stop")
                records.append(record)
                self._log(record)
                bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{record['tokens_per_s']:.3g}")
                done = step + 1
                if cfg.checkpoint_dir and (stopping or done == cfg.max_steps
                                           or (cfg.checkpoint_every and done % cfg.checkpoint_every == 0)):
                    saved = self.save(done)
                if stopping:
                    bar.close()
                    self._log({"event": "stopped", "signal": self.stop.signal.name if self.stop.signal else "peer",
                               "step": done})
                    raise Interrupted(self.stop.signal or signal.SIGTERM, done, saved)
        return records

    def step(self, step: int) -> dict[str, Any]:
        cfg = self.cfg
        lr = lr_at(cfg, step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with timed(self.device) as elapsed:
            loss, grad_norm, skipped, stop = self._update(step)
        tokens = cfg.global_batch_size * cfg.model.context_length
        return {
            "step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm, "skipped": skipped,
            "tokens": tokens * (step + 1), "step_ms": elapsed.ms, "tokens_per_s": tokens / (elapsed.ms / 1e3),
            "mfu": self.mfu(elapsed.ms / 1e3),
            "peak_memory_mb": (torch.cuda.max_memory_allocated(self.device) / 2**20
                               if self.device.type == "cuda" else math.nan),
            "stop": stop,
        }

    def _update(self, step: int) -> tuple[float, float, bool, bool]:
        """Forward and backward over this rank's micro-batches, gradient sync, clip, optimizer step: the
        global batch's loss, the gradient norm before clipping, whether the step was skipped, and whether any rank
        was asked to stop after it."""
        cfg = self.cfg
        x, y = self.data.local_batch(step, cfg.global_batch_size, cfg.model.context_length, self.rank, self.world)
        check_tokens(x, cfg.model)  # on the host, before the batch reaches the GPU
        loss = self.train_step.forward_backward(x.to(self.device), y.to(self.device))
        self.train_step.synchronize()
        grad_norm = self.train_step.clip()
        # the logged loss is the global batch's, as in a single process; a stop request reaches every rank with it,
        # so all ranks end after the same step
        shared = torch.stack([loss, torch.tensor(float(self.stop.signal is not None), device=self.device)])
        if self.world > 1:
            dist.all_reduce(shared)
            shared[0] /= self.world
        loss, stop = shared.tolist()
        # every rank sees the same global loss and (synchronised gradients') norm, so all decide alike
        skipped = not (math.isfinite(loss) and math.isfinite(grad_norm))
        if skipped:
            self.bad_steps += 1
            if self.bad_steps > cfg.max_bad_steps:
                raise TrainingDiverged(f"step {step}: the loss is {loss} and the gradient norm {grad_norm}; stopping "
                                       f"(--max-bad-steps {cfg.max_bad_steps} allows skipping that many such steps)")
            self.train_step.zero_grad()
        else:
            self.train_step.update()
        return loss, grad_norm, skipped, stop > 0

    def save(self, done: int) -> Path:
        """Write ``step_{done}.pt`` (rank 0); every rank takes part, since a sharded state is gathered first."""
        # collectives where the state is sharded: every rank gathers; the file holds what one process would save
        optimizer_state = self.strategy.full_optimizer_state_dict(self.optimizer)
        model_state = self.strategy.full_state_dict()
        path = checkpoint_path(Path(self.cfg.checkpoint_dir), done)
        if self.rank == 0:
            checkpoint.save(path, {
                "model": model_state, "optimizer": optimizer_state, "step": done,
                "config": asdict(self.cfg), "world_size": self.world,
                # the batch of a step is a function of (data, seed, step): the step is the data position
                "data": {"source": self.cfg.data, "identity": self.data.identity, "seed": self.cfg.seed,
                         "next_step": done},
                "rng": {"cpu": torch.get_rng_state()},
            })
        if self.world > 1:
            dist.barrier()  # nobody resumes from, or overwrites, a checkpoint that is still being written
        return path

    def _log(self, record: dict[str, Any]) -> None:
        if self.cfg.log_file and self.rank == 0:
            append_line(self.cfg.log_file, dump_json(record), "log")


def _adamw_class(fused: bool) -> type[torch.optim.Optimizer]:
    if not fused:
        return torch.optim.AdamW
    from systems.fused import FusedAdamW  # Triton, imported where it is used

    return FusedAdamW


def summarize(records: list[dict[str, Any]], skip: int = 2) -> dict[str, float]:
    """Throughput and step time over the steps after the first ``skip`` (which pay one-time costs)."""
    timed_steps = records[skip:] or records
    return {
        "steps": len(records),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed_steps),
        "step_ms": statistics.median(r["step_ms"] for r in timed_steps),
        "peak_memory_mb": records[-1]["peak_memory_mb"],
        "final_loss": records[-1]["loss"],
    }


# ---- command line -----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m systems.train", description=__doc__, formatter_class=HelpFormatter)
    add_model_arguments(p, attention="sdpa")
    add_arguments(p, TrainConfig)
    return p


@record  # under torchrun, a failing rank's traceback reaches torchrun's summary
def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """The command line; every failure a user can meet ends in one line naming it, not a traceback: exit 2 for a
    setting, path, checkpoint or launch environment that cannot work, 3 for a diverged run, 1 for a full disk or
    exhausted memory, 128 + the signal's number after a Ctrl-C or SIGTERM."""
    p = _parser()
    args = p.parse_args(argv)
    cfg = build(p, TrainConfig, args, model=models_from_args(p, args)[0])
    try:
        records, failure = _command(cfg)
    except KeyboardInterrupt:  # a second Ctrl-C, wherever it lands (while the first one's stop is reported, too)
        records, failure = [], (130, "interrupted: the step in progress is lost; earlier checkpoints are intact")
    if failure:
        p.exit(failure[0], f"{p.prog}: {failure[1]}\n")
    if records and int(os.environ.get("RANK", 0)) == 0:  # the group is gone: ask torchrun's environment
        s = summarize(records)
        print(f"steps {records[0]['step']}..{records[-1]['step']}: final loss {s['final_loss']:.4f}, "
              f"{s['tokens_per_s']:.4g} tokens/s, {s['step_ms']:.4g} ms/step", flush=True)
    return records


def _command(cfg: TrainConfig) -> tuple[list[dict[str, Any]], tuple[int, str] | None]:
    """The run's records, or what ended it as (exit code, message)."""
    try:
        with sdist.group_from_environment():
            try:
                run = _Run(cfg)
            except (ValueError, OSError) as exc:  # a setting, a path or a checkpoint that cannot work
                return [], (2, f"error: {exc}")
            with run:
                return run.run(), None
    except sdist.LaunchError as exc:
        return [], (2, f"error: {exc}")
    except TrainingDiverged as exc:
        return [], (3, f"training diverged: {exc}")
    except Interrupted as exc:
        return [], (128 + exc.signal, str(exc))
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_oom(exc):
            raise
        return [], (1, f"out of memory on {cfg.device or 'this device'}: {str(exc).splitlines()[0][:200]} (try a "
                       "smaller --global-batch-size, a larger --grad-accum, --checkpoint-blocks or --bf16)")
    except OSError as exc:  # a full disk (systems.files.DiskFull names it), a log file that cannot be written
        return [], (1, f"error: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
