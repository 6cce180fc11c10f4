"""Hostile input and faults in training: checkpoints that are unsafe, corrupt or of another run; training that
diverges; paths that cannot work; a rank killed half-way, then resumed to the same final loss."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
import torch

from systems import checkpoint, files
from systems.files import exclusive_folder
from systems.interrupts import StopRequests
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
        train(cfg(lr=1e30, weight_decay=0.0, grad_clip=0, max_steps=8))
    out = cli("--max-steps", "8", "--lr", "1e30", "--weight-decay", "0", "--grad-clip", "0",
              "--log-file", str(tmp_path / "log.jsonl"))
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


# ---- checkpoints: their contents are checked before use -------------------------------------------------------

def _edited(tmp_path, edit) -> Path:
    """A checkpoint of a short run, edited by ``edit(state)`` and saved again with the project's own ``save`` (so its
    checksum is valid: only the schema check can refuse it)."""
    folder = tmp_path / "made"
    if not (folder / "step_000002.pt").exists():
        train(cfg(checkpoint_dir=str(folder), checkpoint_every=2))
    state = checkpoint.load(folder / "step_000002.pt")
    edit(state)
    return checkpoint.save(tmp_path / "edited.pt", state)


EDITS = {
    "negative step": (lambda s: s.update(step=-5), "its step is -5"),
    "step as text": (lambda s: s.update(step="5"), "'step' is a str"),
    "no optimizer": (lambda s: s.pop("optimizer"), "no 'optimizer'"),
    "nan weight": (lambda s: s["model"]["lm_head.weight"].fill_(float("nan")), "lm_head.weight"),
    "wrong shape": (lambda s: s["model"].update({"lm_head.weight": torch.zeros(3, 3)}), "lm_head.weight"),
    "negative second moment": (lambda s: s["optimizer"]["state"][0]["exp_avg_sq"].fill_(-1.0), "exp_avg_sq"),
    "moment shape": (lambda s: s["optimizer"]["state"][1].update(exp_avg=torch.zeros(2)), "exp_avg"),
    "optimizer step": (lambda s: s["optimizer"]["state"][0].update(step=torch.tensor(-3.0)), "step"),
    "rng": (lambda s: s["rng"].update(cpu=torch.zeros(3)), "rng.cpu"),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_a_checkpoint_with_a_value_no_run_can_use_is_refused(tmp_path, name):
    edit, words = EDITS[name]
    path = _edited(tmp_path, edit)
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(words)):
        train(cfg(resume=str(path), max_steps=4))


def test_a_negative_step_from_the_command_line_is_refused(tmp_path):
    path = _edited(tmp_path, EDITS["negative step"][0])
    out = cli("--max-steps", "4", "--resume", str(path))
    assert out.returncode == 2 and "its step is -5" in out.stderr and "Traceback" not in out.stderr


def test_the_data_is_known_by_its_contents_not_its_path(tmp_path):
    text = tmp_path / "a.txt"
    text.write_bytes(bytes(range(256)) * 8)
    train(cfg(data=str(text), checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=2))
    saved = str(tmp_path / "ck" / "step_000002.pt")
    moved = tmp_path / "b.txt"
    moved.write_bytes(text.read_bytes())
    assert [r["step"] for r in train(cfg(data=str(moved), resume=saved))] == [2, 3]  # same text, other path
    text.write_bytes(text.read_bytes()[::-1])  # other contents under the same name
    with pytest.raises(ValueError, match="another run.*'data'.*sha256"):
        train(cfg(data=str(text), resume=saved))


# ---- checkpoint writes: unique temporary files, one run per folder, a full disk named -------------------------

def test_a_link_planted_beside_a_checkpoint_redirects_nothing(tmp_path):
    folder, outside = tmp_path / "ck", tmp_path / "outside.txt"
    folder.mkdir()
    outside.write_text("keep me")
    for name in (".step_000002.pt.tmp", "step_000002.pt.tmp", ".tmp"):  # the names a fixed scheme would use
        (folder / name).symlink_to(outside)
    train(cfg(checkpoint_dir=str(folder), max_steps=2))
    assert outside.read_text() == "keep me"
    assert checkpoint.load(folder / "step_000002.pt")["step"] == 2
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()], "a temporary file left"


def test_a_folder_in_use_by_another_run_is_refused(tmp_path):
    folder = tmp_path / "ck"
    folder.mkdir()
    with exclusive_folder(folder, "checkpoint"):  # as a running training job holds it
        out = cli("--max-steps", "2", "--checkpoint-dir", str(folder))
        assert out.returncode == 2 and "in use by another run" in out.stderr and str(os.getpid()) in out.stderr
    assert not list(folder.glob("step_*.pt"))
    assert cli("--max-steps", "2", "--checkpoint-dir", str(folder)).returncode == 0  # released: usable again


def test_a_full_disk_is_named_and_the_earlier_checkpoint_kept(tmp_path, monkeypatch):
    path = tmp_path / "ck.pt"
    checkpoint.save(path, {"step": 1, "w": torch.ones(300)})
    real = tempfile.mkstemp

    def onto_a_full_device(*args, **kwargs):  # the temporary file's writes reach /dev/full: a real ENOSPC
        fd, name = real(*args, **kwargs)
        os.dup2(os.open("/dev/full", os.O_WRONLY), fd)
        return fd, name

    monkeypatch.setattr(files.tempfile, "mkstemp", onto_a_full_device)
    with pytest.raises(files.DiskFull, match=f"no space left on the device holding {re.escape(str(tmp_path))}"):
        checkpoint.save(path, {"step": 2, "w": torch.zeros(300)})
    assert checkpoint.load(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]  # the temporary file removed


def test_a_full_disk_under_the_log_is_one_line(tmp_path):
    out = cli("--max-steps", "2", "--log-file", "/dev/full")
    assert out.returncode == 1 and "no space left" in out.stderr and "Traceback" not in out.stderr


_WRITER = """
import sys, torch
from systems import checkpoint, files
from systems.files import exclusive_folder
from systems.interrupts import StopRequests
step = 0
while True:
    step += 1
    checkpoint.save(sys.argv[1], {"step": step, "w": torch.full((2_000_000,), float(step))})
    print(step, flush=True)
"""


def test_a_checkpoint_killed_mid_write_leaves_the_previous_one(tmp_path):
    path = tmp_path / "ck.pt"
    for delay in (0.05, 0.13, 0.21, 0.34, 0.55):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True)
        writer.stdout.readline()  # one complete checkpoint exists
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        state = checkpoint.load(path)  # intact: verified against its checksum
        assert torch.equal(state["w"], torch.full((2_000_000,), float(state["step"])))
        assert {p.name for p in tmp_path.glob("*.pt")} == {"ck.pt"}


# ---- Ctrl-C and SIGTERM end at a step boundary with a checkpoint ----------------------------------------------

def _started(log: Path, steps: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and sum('"step"' in line and '"loss"' in line for line in log.read_text().splitlines()) >= steps:
            return
        time.sleep(0.05)
    raise AssertionError("the run did not start")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_ends_the_run_at_a_step_boundary_with_a_checkpoint(tmp_path, sig):
    steps, ckpt, log = 400, tmp_path / "ck", tmp_path / "log.jsonl"
    job = subprocess.Popen([sys.executable, "-m", "systems.train", *ARGV, "--max-steps", str(steps),
                            "--checkpoint-dir", str(ckpt), "--log-file", str(log)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _started(log, 5)
    job.send_signal(sig)
    _, err = job.communicate(timeout=60)
    assert job.returncode == 128 + sig, err
    assert "Traceback" not in err and f"stopped by {sig.name}" in err
    saved = _latest(ckpt)
    assert saved is not None and f"--resume {saved}" in err
    done = checkpoint.load(saved)["step"]
    assert 5 <= done < steps
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[-1] == {"event": "stopped", "signal": sig.name, "step": done}
    # the rest of the 400 steps: seconds on two idle cores, over 120 s once on busy ones
    out = cli("--max-steps", str(steps), "--resume", str(saved), "--log-file", str(log), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    resumed = [json.loads(line) for line in log.read_text().splitlines()]
    final = [r for r in resumed if r.get("step") == steps - 1][-1]["loss"]
    assert final == pytest.approx(train(cfg(max_steps=steps))[-1]["loss"], abs=2e-5, rel=0)


def test_ctrl_c_without_a_checkpoint_folder_says_nothing_was_saved(tmp_path):
    log = tmp_path / "log.jsonl"
    job = subprocess.Popen([sys.executable, "-m", "systems.train", *ARGV, "--max-steps", "100000", "--log-file",
                            str(log)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _started(log, 3)
    job.send_signal(signal.SIGINT)
    _, err = job.communicate(timeout=60)
    assert job.returncode == 130 and "nothing saved" in err and "Traceback" not in err


def test_a_second_ctrl_c_stops_at_once_and_the_handlers_are_restored():
    before = signal.getsignal(signal.SIGINT)
    with StopRequests() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signal == signal.SIGTERM  # noted, nothing raised: the loop stops at its next boundary
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before
