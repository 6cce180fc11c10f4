"""Train the Transformer LM: one process, or data-parallel under torchrun, with ZeRO-1 and checkpoints.

    python -m systems.train --size small --context-length 256 --global-batch-size 16 --max-steps 100
    torchrun --nproc_per_node 2 -m systems.train --wrapper bucketed --zero1 --bf16 \\
        --data corpus.txt --checkpoint-dir ckpt --checkpoint-every 50 --log-file train.jsonl
    python -m systems.train ... --resume ckpt/step_000050.pt            # continues the same curve exactly

Every option is a field of :class:`TrainConfig`; notebooks and tests call :func:`train` with one and
get the per-step records back. The global batch of each step is the same whatever the world size
(:mod:`systems.data`), each rank takes its slice and splits it into ``grad_accum`` micro-batches (all
but the last under ``no_sync()``), and the wrapper averages gradients over the ranks, so a 2-process
run follows the single-process loss curve. The data-parallel wrappers are :mod:`systems.ddp`; the
sharded optimizer is :mod:`systems.zero`. A checkpoint holds the model, the optimizer (consolidated
when sharded, so it resumes at any world size), the step (which is the data position) and the RNG.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm.auto import tqdm

from systems import dist as sdist
from systems.attention import available as attention_names
from systems.cli import HelpFormatter, add_arguments, dump_json, option, parse
from systems.data import TokenData
from systems.device import local_device, timed
from systems.model import PRESETS, ModelConfig, TransformerLM, parameter_count, preset
from systems.zero import ShardedOptimizer

WRAPPERS = ("none", "torch", "naive", "flat", "overlap", "bucketed")
MODEL_FIELDS = ("d_model", "num_layers", "num_heads", "d_ff")


@dataclass
class TrainConfig:
    # model
    size: str = option("model preset (systems.model.PRESETS)", default="small", choices=PRESETS)
    d_model: int | None = option("override the preset's d_model", default=None)
    num_layers: int | None = option("override the preset's number of layers", default=None)
    num_heads: int | None = option("override the preset's number of heads", default=None)
    d_ff: int | None = option("override the preset's feed-forward width", default=None)
    context_length: int = option("tokens per sequence", default=128)
    vocab_size: int = option("vocabulary size (byte-level text uses ids 0..255)", default=10_000)
    attention: str = option("attention implementation (systems.attention)", default="sdpa",
                            choices=attention_names())
    # parallelism and precision
    wrapper: str = option("data-parallel wrapper", default="none", choices=WRAPPERS)
    bucket_size_mb: float = option("bucket size of the bucketed and torch wrappers (MiB)", default=25.0)
    zero1: bool = option("shard the optimizer state over the ranks (ZeRO stage 1)", default=False)
    bf16: bool = option("bf16 autocast for forward and loss (weights and optimizer stay fp32)", default=False)
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
    # data, checkpoints, logs
    data: str = option('"random" (seeded tokens) or a path to a text file, read as bytes', default="random")
    seed: int = option("seed of the initial weights and of the data", default=0)
    checkpoint_dir: str | None = option("write checkpoints here", default=None)
    checkpoint_every: int = option("checkpoint every N steps (0: only at the end); needs --checkpoint-dir",
                                 default=0)
    resume: str | None = option("continue from this checkpoint file", default=None)
    log_file: str | None = option("append one JSON line per step here (rank 0)", default=None)
    progress: bool = option("show a progress bar on rank 0", default=True)
    device: str | None = option("force a device, e.g. cpu (None: this rank's GPU, else the CPU)", default=None)

    def __post_init__(self) -> None:
        if self.wrapper not in WRAPPERS:
            raise ValueError(f"wrapper must be one of {WRAPPERS}, got {self.wrapper!r}")
        if self.grad_accum < 1 or self.max_steps < 1 or self.global_batch_size < 1:
            raise ValueError("grad_accum, max_steps and global_batch_size must be positive")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ValueError("checkpoint_every needs checkpoint_dir")

    def model_config(self) -> ModelConfig:
        overrides = {k: getattr(self, k) for k in MODEL_FIELDS if getattr(self, k) is not None}
        return preset(self.size, context_length=self.context_length, vocab_size=self.vocab_size,
                      attention=self.attention, **overrides)


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``max_steps``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))


def train(cfg: TrainConfig) -> list[dict[str, Any]]:
    """Run ``cfg``; return one record per step taken (the same list on every rank).

    Joins a process group when ``WORLD_SIZE`` is set (torchrun) and none exists, and leaves it at the end;
    inside an existing group (``systems.dist.launch``) it uses that one; otherwise it runs alone.
    """
    joined = "WORLD_SIZE" in os.environ and not dist.is_initialized()
    if joined:
        sdist.setup()
    try:
        return _Run(cfg).run()
    finally:
        if joined:
            sdist.teardown()


def train_many(rank: int, world_size: int, cfgs: list[TrainConfig]) -> list[list[dict[str, Any]]]:
    """Several runs in one process group, for ``systems.dist.launch`` (one start-up for a whole sweep)."""
    return [train(cfg) for cfg in cfgs]


class _Run:
    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.rank, self.world = sdist.rank(), sdist.world_size()
        if cfg.wrapper == "none" and self.world > 1:
            raise ValueError(f"{self.world} ranks need a data-parallel wrapper (--wrapper); 'none' is for one process")
        if cfg.global_batch_size % (self.world * cfg.grad_accum):
            raise ValueError(f"global batch {cfg.global_batch_size} does not split into {self.world} ranks × "
                             f"{cfg.grad_accum} micro-batches")
        self.device = _device(cfg)
        model_cfg = cfg.model_config()
        self.n_params = parameter_count(model_cfg)
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank (the wrappers broadcast them anyway)
        with torch.device(self.device):
            self.model = TransformerLM(model_cfg)
        ckpt = _load(cfg.resume, model_cfg) if cfg.resume else None
        if ckpt:
            self.model.load_state_dict(ckpt["model"])
        if cfg.wrapper == "none":
            self.net, self.ddp = self.model, None
        else:
            from systems.ddp import wrap

            self.net = self.ddp = wrap(cfg.wrapper, self.model, bucket_size_mb=cfg.bucket_size_mb)
        adamw = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay)
        self.optimizer = (ShardedOptimizer(self.model.parameters(), torch.optim.AdamW, **adamw) if cfg.zero1
                          else torch.optim.AdamW(self.model.parameters(), **adamw))
        self.start = 0
        if ckpt:
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.start = ckpt["step"]
            torch.set_rng_state(ckpt["rng"]["cpu"])
        self.data = TokenData.from_spec(cfg.data, cfg.vocab_size, cfg.seed)
        self.autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if cfg.bf16
                         else contextlib.nullcontext())

    def run(self) -> list[dict[str, Any]]:
        cfg, records = self.cfg, []
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self._log({"event": "start", "world_size": self.world, "start_step": self.start, "params": self.n_params,
                   "config": asdict(cfg)})
        steps = range(self.start, cfg.max_steps)
        bar = tqdm(steps, desc=f"train {cfg.wrapper}{' zero1' if cfg.zero1 else ''}",
                   disable=not (cfg.progress and self.rank == 0))
        for step in bar:
            record = self.step(step)
            records.append(record)
            self._log(record)
            bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{record['tokens_per_s']:.3g}")
            done = step + 1
            if cfg.checkpoint_dir and (done == cfg.max_steps or (cfg.checkpoint_every and done % cfg.checkpoint_every == 0)):
                self.save(done)
        return records

    def step(self, step: int) -> dict[str, Any]:
        cfg = self.cfg
        lr = lr_at(cfg, step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with timed(self.device) as elapsed:
            loss, grad_norm = self._update(step)
        tokens = cfg.global_batch_size * cfg.context_length
        return {
            "step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
            "tokens": tokens * (step + 1), "step_ms": elapsed.ms, "tokens_per_s": tokens / (elapsed.ms / 1e3),
            "peak_memory_mb": (torch.cuda.max_memory_allocated(self.device) / 2**20
                               if self.device.type == "cuda" else math.nan),
        }

    def _update(self, step: int) -> tuple[float, float]:
        """Forward and backward over this rank's micro-batches, gradient sync, clip, optimizer step: the
        global batch's loss and the gradient norm before clipping."""
        cfg = self.cfg
        x, y = self.data.local_batch(step, cfg.global_batch_size, cfg.context_length, self.rank, self.world)
        x, y = x.to(self.device), y.to(self.device)
        micro = x.shape[0] // cfg.grad_accum
        loss_sum = torch.zeros((), device=self.device)
        for i in range(cfg.grad_accum):
            last = i == cfg.grad_accum - 1
            # all but the last micro-batch accumulate locally; the last backward's synchronisation reduces all
            skip_sync = self.ddp.no_sync() if (self.ddp is not None and not last) else contextlib.nullcontext()
            with skip_sync:
                with self.autocast:
                    logits = self.net(x[i * micro:(i + 1) * micro])  # (b, T, V)
                loss = F.cross_entropy(logits.float().flatten(0, 1), y[i * micro:(i + 1) * micro].flatten())
                (loss / cfg.grad_accum).backward()
            loss_sum += loss.detach() / cfg.grad_accum
        if self.ddp is not None:
            self.ddp.finish_gradient_synchronization()
        grad_norm = (torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip) if cfg.grad_clip
                     else torch.tensor(math.nan))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.world > 1:  # the logged loss is the global batch's, as in a single process
            dist.all_reduce(loss_sum)
            loss_sum /= self.world
        return loss_sum.item(), float(grad_norm)

    def save(self, done: int) -> Path:
        """Write ``step_{done}.pt`` (rank 0); every rank takes part, since a sharded state is gathered first."""
        optimizer_state = self.optimizer.state_dict()  # collective when sharded
        path = Path(self.cfg.checkpoint_dir) / f"step_{done:06d}.pt"
        if self.rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            ckpt = {
                "model": self.model.state_dict(), "optimizer": optimizer_state, "step": done,
                "model_config": asdict(self.model.cfg), "config": asdict(self.cfg), "world_size": self.world,
                # the batch of a step is a function of (data, seed, step): the step is the data position
                "data": {"source": self.cfg.data, "seed": self.cfg.seed, "next_step": done},
                "rng": {"cpu": torch.get_rng_state()},
            }
            tmp = path.with_suffix(".tmp")
            torch.save(ckpt, tmp)
            os.replace(tmp, path)  # a crash mid-write never leaves a truncated checkpoint under the real name
        if self.world > 1:
            dist.barrier()  # nobody resumes from, or overwrites, a checkpoint that is still being written
        return path

    def _log(self, record: dict[str, Any]) -> None:
        if self.cfg.log_file and self.rank == 0:
            with open(self.cfg.log_file, "a") as f:
                f.write(dump_json(record) + "\n")


def _device(cfg: TrainConfig) -> torch.device:
    return torch.device(cfg.device) if cfg.device else local_device()


def _load(path: str, model_cfg: ModelConfig) -> dict[str, Any]:
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    saved = ckpt["model_config"]
    differ = {k: (saved[k], v) for k, v in asdict(model_cfg).items() if k != "attention" and saved.get(k) != v}
    if differ:
        raise ValueError(f"checkpoint {path} is of another model; differing fields (saved, requested): {differ}")
    return ckpt


def summarize(records: list[dict[str, Any]], skip: int = 2) -> dict[str, float]:
    """Throughput and step time over the steps after the first ``skip`` (which pay one-time costs)."""
    timed = records[skip:] or records
    return {
        "steps": len(records),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "step_ms": statistics.median(r["step_ms"] for r in timed),
        "peak_memory_mb": records[-1]["peak_memory_mb"],
        "final_loss": records[-1]["loss"],
    }


# ---- command line -----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m systems.train", description=__doc__, formatter_class=HelpFormatter)
    add_arguments(p, TrainConfig)
    return p


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    cfg, _ = parse(_parser(), TrainConfig, argv)
    records = train(cfg)
    if records and int(os.environ.get("RANK", 0)) == 0:
        s = summarize(records)
        print(f"steps {records[0]['step']}..{records[-1]['step']}: final loss {s['final_loss']:.4f}, "
              f"{s['tokens_per_s']:.4g} tokens/s, {s['step_ms']:.4g} ms/step", flush=True)
    return records


if __name__ == "__main__":
    main(sys.argv[1:])
