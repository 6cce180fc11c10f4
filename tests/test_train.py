"""Training (systems.train, systems.data): 2 gloo processes follow the single-process loss curve; resume is exact.

One 2-process launch plays every data-parallel variant (it is the slow part); the single-process runs
that serve as references happen in this process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from dataclasses import replace

import pytest
import torch
from torch._dynamo.utils import counters

from systems import checkpoint
from systems.data import TokenData
from systems.dist import launch
from systems.model import ModelConfig
from systems.train import TrainConfig, lr_at, train, train_many

STEPS = 6
MODEL = ModelConfig(d_model=32, num_layers=2, num_heads=2, d_ff=64, context_length=16, vocab_size=96, attention="sdpa")
RUN = dict(global_batch_size=8, max_steps=STEPS, warmup_steps=2, lr=1e-2, progress=False)
# the same model and run as command-line arguments
ARGV = ["--d-model", "32", "--num-layers", "2", "--num-heads", "2", "--d-ff", "64", "--context-length", "16",
        "--vocab-size", "96", "--global-batch-size", "8", "--warmup-steps", "2", "--lr", "0.01"]
TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness, it was the epoch of belief, it was the epoch of incredulity. ") * 20
VARIANTS = {  # name -> settings of the 2-process run; the reference is the same run in one process
    "bucketed": dict(wrapper="bucketed", bucket_size_mb=0.01),  # ~10 KB buckets: several of them
    "torch": dict(wrapper="torch"),
    "bucketed_zero1": dict(wrapper="bucketed", zero1=True),
    "torch_zero1": dict(wrapper="torch", zero1=True),
    "naive_accum": dict(wrapper="naive", grad_accum=2),  # no_sync on the first of two micro-batches
    "overlap_text": dict(wrapper="overlap", data="TEXT"),
    "fsdp": dict(wrapper="fsdp"),
    "fsdp_accum": dict(wrapper="fsdp", grad_accum=2),  # each micro-batch reduced; the shards' gradients add up
    "fsdp2": dict(wrapper="fsdp2", grad_accum=2),
    # offloading's compiled groups under DDP, no_sync on the first micro-batch
    "torch_offload": dict(wrapper="torch", grad_accum=2, checkpoint_blocks=1, recompute="offload"),
    # and under FSDP2, each block a group between its gathers
    "fsdp2_offload": dict(wrapper="fsdp2", grad_accum=2, checkpoint_blocks=1, recompute="offload"),
    # compiled blocks: their gradients' hooks (ours), their weights gathered between the graphs (FSDP2)
    "bucketed_compiled": dict(wrapper="bucketed", compile=True, checkpoint_blocks=1, recompute="keep_attention"),
    "fsdp2_compiled": dict(wrapper="fsdp2", compile=True),
}
CHECKPOINTED = {"checkpointed": dict(wrapper="bucketed", zero1=True), "checkpointed_fsdp": dict(wrapper="fsdp"),
                "checkpointed_fsdp2": dict(wrapper="fsdp2")}


def cfg(model: ModelConfig = MODEL, **kw) -> TrainConfig:
    return TrainConfig(model=model, **{**RUN, **kw})


def single(settings: dict) -> dict:
    """The same run in one process: no wrapper, same global batch."""
    return {k: v for k, v in settings.items() if k not in ("wrapper", "bucket_size_mb")}


def losses(records):
    return [r["loss"] for r in records]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "tale.txt"
    path.write_text(TEXT)
    return str(path)


@pytest.fixture(scope="module")
def two_ranks(text_file, tmp_path_factory):
    ckpt = {name: tmp_path_factory.mktemp(name) for name in CHECKPOINTED}
    cfgs = [cfg(**{**s, "data": text_file if s.get("data") == "TEXT" else "random"}) for s in VARIANTS.values()]
    cfgs += [cfg(**s, checkpoint_dir=str(ckpt[name]), checkpoint_every=3) for name, s in CHECKPOINTED.items()]
    runs = launch(train_many, 2, cfgs, backend="gloo", timeout_s=240)
    assert losses(runs[0][0]) == losses(runs[1][0])  # every rank logs the same global loss
    return {"runs": dict(zip(list(VARIANTS) + list(CHECKPOINTED), runs[0])), "ckpt": ckpt}


@pytest.mark.distributed
@pytest.mark.parametrize("name", list(VARIANTS))
def test_two_processes_follow_the_single_process_curve(two_ranks, text_file, name):
    settings = {**VARIANTS[name], "data": text_file if VARIANTS[name].get("data") == "TEXT" else "random"}
    want = losses(train(cfg(**single(settings))))
    got = losses(two_ranks["runs"][name])
    assert len(got) == STEPS
    assert got == pytest.approx(want, abs=2e-5, rel=0)
    assert want[-1] < want[0]  # it learns: the comparison is not between two flat lines


@pytest.mark.distributed
def test_sharded_checkpoint_resumes_under_its_own_wrapper(two_ranks):
    """FSDP (ours and PyTorch's) killed after step 3 and started again on 2 ranks with the same wrapper: the run
    goes on from step 3 along the same curve, not from step 0."""
    names = [name for name in CHECKPOINTED if CHECKPOINTED[name]["wrapper"] in ("fsdp", "fsdp2")]
    cfgs = [cfg(**CHECKPOINTED[name], resume=str(two_ranks["ckpt"][name] / "step_000003.pt")) for name in names]
    runs = launch(train_many, 2, cfgs, backend="gloo", timeout_s=240)
    for name, resumed in zip(names, runs[0]):
        assert [r["step"] for r in resumed] == [3, 4, 5], name
        assert losses(resumed) == pytest.approx(losses(two_ranks["runs"][name])[3:], abs=2e-5, rel=0), name


@pytest.mark.distributed
@pytest.mark.parametrize("name", list(CHECKPOINTED))
def test_sharded_checkpoint_resumes_in_one_process(two_ranks, name):
    """A ZeRO-1 or FSDP checkpoint written by 2 ranks at step 3 continues the 2-rank curve in a single process
    (ZeRO-1 there; FSDP's, without any wrapper: the checkpoint holds the unsharded model and optimizer)."""
    full = losses(two_ranks["runs"][name])
    resumed = train(cfg(zero1=CHECKPOINTED[name].get("zero1", False),
                        resume=str(two_ranks["ckpt"][name] / "step_000003.pt")))
    assert [r["step"] for r in resumed] == [3, 4, 5]
    assert losses(resumed) == pytest.approx(full[3:], abs=2e-5, rel=0)
    assert (two_ranks["ckpt"][name] / f"step_{STEPS:06d}.pt").exists()  # the final checkpoint is always written


@pytest.mark.parametrize("zero1", [False, True])
def test_resume_continues_the_same_curve_exactly(tmp_path, zero1):
    full = train(cfg(zero1=zero1, checkpoint_dir=str(tmp_path), checkpoint_every=2, bf16=zero1))
    resumed = train(cfg(zero1=zero1, resume=str(tmp_path / "step_000002.pt"), bf16=zero1))
    assert losses(resumed) == losses(full)[2:]  # bitwise: same state, same data, same learning rates
    ckpt = checkpoint.load(tmp_path / "step_000004.pt")
    assert ckpt["step"] == 4 and ckpt["data"]["next_step"] == 4
    assert set(ckpt["optimizer"]["state"]) == set(range(len(ckpt["model"])))  # full (consolidated) state


def test_recomputing_blocks_storing_the_last_keeping_the_ffn_or_offloading_follows_the_same_curve():
    plain = losses(train(cfg()))
    assert losses(train(cfg(checkpoint_blocks=1, recompute="keep_attention", stored_groups=1))) == plain
    assert losses(train(cfg(checkpoint_blocks=1, stored_groups=2))) == plain  # every group stored: none recomputed
    for recompute in ("keep_attention_and_ffn", "offload"):  # compiled groups, which round otherwise than eager
        curve = losses(train(cfg(checkpoint_blocks=1, recompute=recompute)))
        assert curve == pytest.approx(plain, rel=1e-5, abs=0), recompute


@pytest.mark.parametrize("settings", [dict(), dict(checkpoint_blocks=1), dict(checkpoint_blocks=1,
                                                                                recompute="keep_attention")])
def test_compiled_blocks_follow_the_curve_of_the_eager_ones(settings):
    torch._dynamo.reset()
    counters.clear()
    compiled = losses(train(cfg(compile=True, **settings)))
    assert counters["stats"]["unique_graphs"] == 1  # one graph for every block
    assert compiled == pytest.approx(losses(train(cfg(**settings))), rel=1e-5, abs=0)


@pytest.mark.parametrize("settings, words", [
    (dict(recompute="offload"), "one block count > 0"),
    (dict(recompute="offload", checkpoint_blocks=1, stored_groups=1), "stored_groups"),
    (dict(recompute="offload", checkpoint_blocks=2, wrapper="fsdp2"), "give --checkpoint-blocks 1, got 2"),
    (dict(recompute="keep_attention_and_ffn", checkpoint_blocks=1, wrapper="fsdp"), "use --wrapper fsdp2"),
])
def test_offload_refuses_what_it_does_not_run(settings, words):
    with pytest.raises(ValueError, match=words):
        cfg(**settings)


def test_resume_refuses_another_model(tmp_path):
    train(cfg(max_steps=1, checkpoint_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="d_model"):
        train(cfg(replace(MODEL, d_model=64), resume=str(tmp_path / "step_000001.pt")))


def test_a_run_never_writes_over_checkpoints_it_did_not_start_from(tmp_path):
    train(cfg(max_steps=4, checkpoint_dir=str(tmp_path), checkpoint_every=2))
    before = {p.name: p.read_bytes() for p in tmp_path.glob("step_*.pt")}
    assert sorted(before) == ["step_000002.pt", "step_000004.pt"]
    with pytest.raises(ValueError, match=r"holds step_000002.pt, step_000004.pt, from after step 0 .* resume from "
                                         r".*step_000004.pt"):
        train(cfg(max_steps=4, seed=1, checkpoint_dir=str(tmp_path), checkpoint_every=2))  # another run, same folder
    with pytest.raises(ValueError, match="holds step_000004.pt, from after step 2"):
        train(cfg(max_steps=4, checkpoint_dir=str(tmp_path), resume=str(tmp_path / "step_000002.pt")))
    assert {p.name: p.read_bytes() for p in tmp_path.glob("step_*.pt")} == before
    resumed = train(cfg(max_steps=6, checkpoint_dir=str(tmp_path), resume=str(tmp_path / "step_000004.pt"),
                        resume_anyway=True))  # from the latest: nothing of the folder's is written over
    assert [r["step"] for r in resumed] == [4, 5] and (tmp_path / "step_000006.pt").exists()


def test_byte_level_text_data(text_file):
    data = TokenData.from_text(text_file, vocab_size=300)
    raw = TEXT.encode()
    rows = data.global_batch(step=7, batch_size=4, context_length=10)
    for row in rows:  # each row is a contiguous window of the file's bytes
        window = bytes(row.tolist())
        assert window in raw and len(window) == 11
    folded = TokenData.from_text(text_file, vocab_size=64).global_batch(7, 4, 10)
    assert torch.equal(folded, rows % 64) and int(folded.max()) < 64
    records = train(cfg(data=text_file, max_steps=8))
    assert records[-1]["loss"] < records[0]["loss"] - 0.3  # English bytes are easy to start learning


@pytest.mark.parametrize("source", ["random", "text"])
def test_sampler_is_independent_of_world_size(text_file, source):
    data = TokenData.from_spec(text_file if source == "text" else "random", vocab_size=96, seed=3)
    x1, y1 = data.local_batch(5, 12, 8)
    for world in (2, 3, 4):
        parts = [data.local_batch(5, 12, 8, rank, world) for rank in range(world)]
        assert torch.equal(torch.cat([x for x, _ in parts]), x1)
        assert torch.equal(torch.cat([y for _, y in parts]), y1)
    assert torch.equal(x1[:, 1:], y1[:, :-1])  # targets are the next tokens
    assert not torch.equal(data.local_batch(6, 12, 8)[0], x1)  # another step, another batch
    assert not torch.equal(TokenData.from_spec("random", 96, seed=4).local_batch(5, 12, 8)[0],
                           TokenData.from_spec("random", 96, seed=3).local_batch(5, 12, 8)[0])


def test_learning_rate_schedule():
    c = cfg(max_steps=100, warmup_steps=10, lr=1.0, min_lr=0.1)
    assert lr_at(c, 0) == pytest.approx(0.1) and lr_at(c, 9) == pytest.approx(1.0)
    assert lr_at(c, 55) == pytest.approx(0.55)  # half-way down the cosine
    assert lr_at(c, 100) == pytest.approx(0.1) and lr_at(c, 500) == pytest.approx(0.1)
    assert all(lr_at(c, s) >= lr_at(c, s + 1) for s in range(10, 120))


def test_configuration_errors():
    with pytest.raises(ValueError, match="wrapper"):
        cfg(wrapper="fsdp3")
    with pytest.raises(ValueError, match="zero1 shards the optimizer state"):
        cfg(wrapper="fsdp", zero1=True)
    with pytest.raises(ValueError, match="checkpoint_dir"):
        cfg(checkpoint_every=5)
    with pytest.raises(ValueError, match="micro-batches"):
        train(cfg(grad_accum=3))


def test_cli_help():
    out = subprocess.run([sys.executable, "-m", "systems.train", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for flag in ("--zero1", "--wrapper", "--grad-accum", "--resume", "--bf16", "--no-progress", "--d-model"):
        assert flag in out.stdout


def test_cli_tiny_run(tmp_path):
    log = tmp_path / "log.jsonl"
    argv = [sys.executable, "-m", "systems.train", "--max-steps", "3", "--no-progress", "--log-file", str(log),
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--zero1", *ARGV]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "final loss" in out.stdout
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[0]["event"] == "start" and lines[0]["config"]["zero1"] is True
    assert lines[0]["attention_runs_as"] == lines[0]["config"]["model"]["attention"]  # not flash: itself
    assert [r["step"] for r in lines[1:]] == [0, 1, 2]
    assert all(math.isfinite(r["loss"]) and r["tokens_per_s"] > 0 for r in lines[1:])
    assert (tmp_path / "ckpt" / "step_000003.pt").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="off a GPU, where flash takes the Triton kernel")
def test_a_run_with_attention_flash_logs_the_kernels_it_takes(tmp_path):
    log = tmp_path / "log.jsonl"
    argv = [sys.executable, "-m", "systems.train", "--max-steps", "1", "--no-progress", "--log-file", str(log),
            "--attention", "flash", "--device", "cpu", *ARGV]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    start = json.loads(log.read_text().splitlines()[0])
    assert start["config"]["model"]["attention"] == "flash" and start["attention_runs_as"] == "flash_triton"


@pytest.mark.distributed
def test_cli_under_torchrun(tmp_path):
    """The documented entry point: torchrun sets RANK/WORLD_SIZE and train() joins the group itself."""
    log = tmp_path / "log.jsonl"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "-m", "systems.train", "--max-steps", "3", "--no-progress", "--wrapper", "bucketed", "--zero1",
            "--log-file", str(log), *ARGV]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[0]["world_size"] == 2  # rank 0 alone writes the log
    want = losses(train(cfg(max_steps=3)))  # one process, same global batches and schedule
    assert [r["loss"] for r in lines[1:]] == pytest.approx(want, abs=2e-5, rel=0)
