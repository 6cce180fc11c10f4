"""Hostile input and faults in training: checkpoints that are unsafe, corrupt or of another run; training that
diverges; paths that cannot work; a rank killed half-way, then resumed to the same final loss."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
import torch

from systems import checkpoint
from systems.model import ModelConfig
from systems.train import TrainConfig, TrainingDiverged, train

MODEL = ModelConfig(d_model=32, num_layers=2, num_heads=2, d_ff=64, context_length=16, vocab_size=96, attention="sdpa")
ARGV = ["--d-model", "32", "--num-layers", "2", "--num-heads", "2", "--d-ff", "64", "--context-length", "16",
        "--vocab-size", "96", "--global-batch-size", "8", "--warmup-steps", "2", "--lr", "0.01", "--no-progress"]


def cfg(**kw) -> TrainConfig:
    return TrainConfig(model=MODEL, **{"global_batch_size": 8, "max_steps": 4, "warmup_steps": 2, "lr": 1e-2,
                                       "progress": False, **kw})


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "systems.train", *ARGV, *args], capture_output=True, text=True,
                          timeout=timeout)


class RunsCode:
    """Unpickling this calls ``os.system``: what a hostile checkpoint would carry."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_checkpoint_carrying_code_is_refused_not_run(tmp_path):
    marker, path = tmp_path / "pwned", tmp_path / "evil.pt"
    torch.save({"format": checkpoint.FORMAT, "state": {"model": RunsCode(marker)}}, path)
    with pytest.raises(checkpoint.CheckpointError, match="objects other than tensors"):
        checkpoint.load(path)
    out = cli("--max-steps", "2", "--resume", str(path))
    assert out.returncode == 2 and "evil.pt" in out.stderr and "Traceback" not in out.stderr
    assert not marker.exists(), "loading the checkpoint ran its code"
    with open(path, "wb") as f:  # a plain pickle, not even torch's format
        pickle.dump(RunsCode(marker), f)
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.load(path)
    assert not marker.exists()


def test_a_corrupt_checkpoint_is_named_and_refused(tmp_path):
    train(cfg(checkpoint_dir=str(tmp_path)))
    path = tmp_path / "step_000004.pt"
    weights = checkpoint.load(path)["model"]["lm_head.weight"]
    raw = bytearray(path.read_bytes())
    # flip one bit inside the stored values of the LM head (found by its bytes), not in the file's structure
    needle = weights.flatten()[8:16].numpy().tobytes()
    at = raw.find(needle)
    assert at > 0
    raw[at + 3] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(checkpoint.CheckpointError, match="corrupt"):
        checkpoint.load(path)
    out = cli("--max-steps", "6", "--resume", str(path))
    assert out.returncode == 2 and "step_000004.pt is corrupt" in out.stderr
    path.write_bytes(bytes(raw[: len(raw) // 2]))  # truncated
    with pytest.raises(checkpoint.CheckpointError, match="unreadable"):
        checkpoint.load(path)


def test_a_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ck.pt"
    checkpoint.save(path, {"step": 1, "w": torch.ones(3)})

    def crash(*args, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(path, {"step": 2, "w": torch.zeros(3)})
    assert checkpoint.load(path)["step"] == 1  # the earlier checkpoint is intact under its name


def test_resume_refuses_another_run_and_names_the_fields(tmp_path):
    train(cfg(checkpoint_dir=str(tmp_path), max_steps=2))
    path = str(tmp_path / "step_000002.pt")
    with pytest.raises(ValueError, match="another run.*'seed'") as exc:
        train(cfg(resume=path, seed=1))
    assert "--resume-anyway" in str(exc.value)
    with pytest.raises(ValueError, match="global_batch_size"):
        train(cfg(resume=path, global_batch_size=16))
    assert [r["step"] for r in train(cfg(resume=path, seed=1, resume_anyway=True))] == [2, 3]


def test_a_resume_with_nothing_left_to_do_says_so(tmp_path):
    train(cfg(checkpoint_dir=str(tmp_path)))
    out = cli("--max-steps", "4", "--resume", str(tmp_path / "step_000004.pt"))
    assert out.returncode == 0 and "nothing to do" in out.stdout and "step 4" in out.stdout


def test_divergence_stops_the_run_with_the_step_named(tmp_path):
    with pytest.raises(TrainingDiverged, match=r"step \d+"):
        train(cfg(lr=1e30, grad_clip=0, max_steps=8))
    out = cli("--max-steps", "8", "--lr", "1e30", "--grad-clip", "0", "--log-file", str(tmp_path / "log.jsonl"))
    assert out.returncode == 3 and "diverged" in out.stderr and "step" in out.stderr
    for line in (tmp_path / "log.jsonl").read_text().splitlines():
        json.loads(line)  # strict JSON: a NaN is written as null


def test_bad_steps_are_skipped_up_to_the_limit(monkeypatch):
    real = torch.nn.utils.clip_grad_norm_
    calls = []

    def once_nan(params, max_norm):
        calls.append(1)
        norm = real(params, max_norm)
        return torch.tensor(float("nan")) if len(calls) == 2 else norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", once_nan)
    records = train(cfg(max_bad_steps=1))
    assert [r["skipped"] for r in records] == [False, True, False, False]
    calls.clear()
    with pytest.raises(TrainingDiverged, match="step 1"):
        train(cfg(max_bad_steps=0))


def test_paths_that_cannot_work_fail_before_the_first_step(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    log = tmp_path / "log.jsonl"
    for args in (["--checkpoint-dir", str(blocker / "ckpt")], ["--data", str(tmp_path / "missing.txt")],
                 ["--resume", str(tmp_path / "missing.pt")]):
        out = cli("--max-steps", "2", "--log-file", str(log), *args)
        assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr, args
        assert not log.exists(), f"{args}: training started before the path was checked"


def test_configuration_errors_are_usage_errors():
    for args in (["--max-steps", "0"], ["--size", "huge"], ["--num-heads", "3"], ["--checkpoint-every", "5"],
                 ["--wrapper", "fsdp3"]):
        out = cli(*args)
        assert out.returncode == 2 and "usage:" in out.stderr and "Traceback" not in out.stderr, args


def _latest(folder: Path) -> Path | None:
    done = sorted(folder.glob("step_*.pt"))
    return done[-1] if done else None


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "-m", "systems.train", *ARGV, "--wrapper", "bucketed", "--zero1", *args]


@pytest.mark.distributed
def test_a_killed_rank_loses_nothing_that_was_saved(tmp_path):
    """Kill one of two ranks half-way; resuming from the last checkpoint ends at the uninterrupted loss."""
    steps, ckpt, log = 120, tmp_path / "ckpt", tmp_path / "log.jsonl"
    job = subprocess.Popen(_torchrun("--max-steps", str(steps), "--checkpoint-dir", str(ckpt), "--checkpoint-every",
                                     "1", "--log-file", str(log)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while (_latest(ckpt) is None or _latest(ckpt).name < "step_000010.pt") and time.monotonic() < deadline:
        time.sleep(0.01)
    workers = [p for p in psutil.Process(job.pid).children(recursive=True) if "systems.train" in " ".join(p.cmdline())]
    assert len(workers) == 2, "the job finished or never started before the kill"
    workers[1].send_signal(signal.SIGKILL)
    job.communicate(timeout=60)
    assert job.returncode != 0
    last = _latest(ckpt)
    assert last is not None and last.name < f"step_{steps:06d}.pt", "the run finished before the kill"
    out = subprocess.run(_torchrun("--max-steps", str(steps), "--resume", str(last), "--log-file", str(log)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    resumed = [json.loads(line) for line in log.read_text().splitlines()]
    final = [r for r in resumed if r.get("step") == steps - 1][-1]["loss"]
    want = train(cfg(max_steps=steps))[-1]["loss"]  # one process, never interrupted
    assert final == pytest.approx(want, abs=2e-5, rel=0)
