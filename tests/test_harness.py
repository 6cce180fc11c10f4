"""The benchmarking harness: timing discipline, result fields, OOM as a result, the CLI."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

from systems.attention import get_attention
from systems.bench import attention_steps, e2e
from systems.bench.e2e import BenchConfig, benchmark, sweep
from systems.bench import timing
from systems.bench.timing import handout_ms, make_timer, time_steps
from systems.device import EXPANDABLE_SEGMENTS, OOM, run_or_oom, use_expandable_segments
from systems.flops import model_flops
from systems.model import preset


def tiny(**kw) -> BenchConfig:
    return BenchConfig(preset("tiny", context_length=8), **{"batch_size": 2, "warmup": 1, "steps": 3, **kw})


def test_time_steps_runs_warmup_untimed():
    calls = []
    t = time_steps(lambda: calls.append(1), warmup=2, steps=3)
    assert len(calls) == 5
    assert t.steps == 3 and len(t.times_ms) == 3 and t.warmup == 2
    assert t.min_ms <= t.median_ms <= max(t.times_ms)


def test_time_steps_rejects_no_steps():
    with pytest.raises(ValueError, match="steps"):
        time_steps(lambda: None, warmup=0, steps=0)


def test_a_call_longer_than_a_tenth_of_the_repetition_time_is_timed_again_over_ten_calls(monkeypatch):
    import triton.testing

    call_ms = {"short": 0.5, "long": 30.0, "just_over": 2.5}
    reps = []

    def fake_do_bench(fn, warmup, rep, grad_to_none, return_mode):
        assert return_mode == "median" and grad_to_none == ["q"]
        reps.append((fn(), rep))
        return call_ms[fn()]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    timer = make_timer(rep_ms=20, warmup_ms=5)
    assert [timer(lambda name=name: name, ["q"]) for name in call_ms] == list(call_ms.values())
    assert reps == [("short", 20), ("long", 20), ("long", 300.0), ("just_over", 20), ("just_over", 25.0)]


def test_a_step_longer_than_a_third_of_the_repetition_time_is_timed_three_times_more(monkeypatch):
    import triton.testing

    step_ms = {"short": 500.0, "long": 5500.0, "a_third": 1000.0, "just_over": 1000.5}
    benched, timed = [], []

    def fake_do_bench(fn, rep, warmup):
        benched.append((fn(), rep, warmup))
        return step_ms[fn()]

    def fake_time_steps(fn, *, warmup, steps):
        timed.append((fn(), warmup, steps))
        return timing.summarize([step_ms[fn()] + 1.0 + i for i in range(steps)], warmup)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    monkeypatch.setattr(timing, "time_steps", fake_time_steps)
    times = [handout_ms(lambda name=name: name, rep=3000, warmup=1000) for name in step_ms]
    # do_bench's mean where it repeats a step three times or more; else the mean of three more timed steps
    assert times == [500.0, 5502.0, 1000.0, 1002.5]
    assert benched == [(name, 3000, 1000) for name in step_ms]
    assert timed == [("long", 0, 3), ("just_over", 0, 3)]


@pytest.mark.parametrize("mode,phases", [("forward", ["forward"]),
                                         ("forward_backward", ["forward", "backward"]),
                                         ("train", ["forward", "backward", "optimizer"])])
def test_benchmark_reports_every_phase(mode, phases):
    row = benchmark(tiny(mode=mode))
    assert row["status"] == "ok"
    assert row["params"] > 0 and row["mode"] == mode and row["size"] == "tiny"
    assert row["model_flops"] == model_flops(preset("tiny", context_length=8), 2, mode)
    assert len(row["step_times_ms"]) == 3
    for phase in phases:
        assert len(row[f"{phase}_times_ms"]) == 3
        assert row[f"{phase}_ms"] > 0 and row[f"{phase}_std_ms"] >= 0
    for phase in {"forward", "backward", "optimizer"} - set(phases):
        assert f"{phase}_ms" not in row
    # the phases are part of the step, so they cannot add up to more than it
    assert sum(row[f"{p}_ms"] for p in phases) <= row["step_ms"] * 1.001


def test_train_mode_updates_the_weights(monkeypatch):
    seen = {}
    original = e2e.Step.__init__

    def spy(self, cfg, device):
        original(self, cfg, device)
        seen["step"] = self
        seen["before"] = [p.detach().clone() for p in self.model.parameters()]

    monkeypatch.setattr(e2e.Step, "__init__", spy)
    benchmark(tiny(mode="train"))
    after = list(seen["step"].model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(seen["before"], after))


def test_bf16_autocast_mode_runs():
    assert benchmark(tiny(dtype="bf16"))["status"] == "ok"


def test_out_of_memory_is_a_row_and_the_sweep_goes_on(monkeypatch):
    original = e2e.Step.__call__

    def call(self):
        if self.cfg.model.context_length == 16:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return original(self)

    monkeypatch.setattr(e2e.Step, "__call__", call)
    df = sweep(tiny(), progress=False, context_length=[8, 16, 4])
    assert list(df.status) == ["ok", OOM, "ok"]
    assert pd.isna(df.loc[1, "forward_ms"]) and df.loc[2, "forward_ms"] > 0


@pytest.fixture
def allocator_settings(monkeypatch):
    """The allocator's settings empty, and as they were after the test."""
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.setenv(name, "")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return monkeypatch


def test_expandable_segments_are_asked_for_before_cuda_starts(allocator_settings):
    assert use_expandable_segments() == EXPANDABLE_SEGMENTS == "expandable_segments:True"
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == EXPANDABLE_SEGMENTS and os.environ["PYTORCH_ALLOC_CONF"] == ""


@pytest.mark.parametrize("name", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
def test_the_users_allocator_settings_are_kept(allocator_settings, name):
    allocator_settings.setenv(name, "max_split_size_mb:128")
    assert use_expandable_segments() == "max_split_size_mb:128"
    assert {os.environ[n] for n in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")} == {"", "max_split_size_mb:128"}


def test_expandable_segments_asked_for_after_cuda_started_warn_and_change_nothing(allocator_settings):
    allocator_settings.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.warns(UserWarning, match="came after this process started CUDA.*PYTORCH_CUDA_ALLOC_CONF=expandable"):
        assert use_expandable_segments() is None
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == ""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (its allocator)")
def test_expandable_segments_reach_the_allocator_of_a_fresh_process():
    probe = ("from systems.device import use_expandable_segments; use_expandable_segments(); import torch; "
             "torch.empty(1 << 20, device='cuda'); "
             "print(all(s['is_expandable'] for s in torch.cuda.memory._snapshot()['segments']))")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0 and run.stdout.split() == ["True"], run.stderr


def test_interleaved_alternates_the_attentions_on_one_model(monkeypatch):
    switched, models = [], set()
    original = e2e.TransformerLM.set_attention

    def spy(self, name):
        switched.append(name)
        models.add(id(self))
        original(self, name)

    monkeypatch.setattr(e2e.TransformerLM, "set_attention", spy)
    rows = attention_steps.interleaved(tiny(mode="train", warmup=1, steps=4), ("sdpa", "naive"))
    # warm-up of each, then A B, B A, A B, B A: each attention first in half the rounds
    assert switched == ["sdpa", "naive"] + ["sdpa", "naive", "naive", "sdpa"] * 2 and len(models) == 1
    assert list(rows.attention) == ["sdpa", "naive"] and (rows.status == "ok").all()
    assert all(len(t) == 4 and ms == pd.Series(t).median() for t, ms in zip(rows.step_times_ms, rows.step_ms))


def test_interleaved_steps_sync_once_each_as_a_training_loop_does(monkeypatch):
    # the host may run ahead of the device from one phase into the next: a sync per step, none per phase
    synced, original = [], e2e.timed

    def spy(*args, **kwargs):
        synced.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(e2e, "timed", spy)
    rows = attention_steps.interleaved(tiny(mode="train", warmup=1, steps=2), ("sdpa", "naive"))
    assert (rows.status == "ok").all() and len(synced) == 2 * 1 + 2 * 2  # warm-up and timed steps, one each

def test_interleaved_compiled_model_runs_each_attention_it_is_switched_to(monkeypatch):
    # under torch.compile the switch must reach the compiled graph (a recompile), not keep the first attention
    called, original = [], e2e.TransformerLM.set_attention

    def spy(self, name):
        original(self, name)
        attend = self.layers[0].attn.attend  # the function the switch installed, whatever the name asked for
        for block in self.layers:
            block.attn.attend = lambda q, k, v, c, _f=attend: (called.append(_f.__name__), _f(q, k, v, c))[1]

    monkeypatch.setattr(e2e.TransformerLM, "set_attention", spy)
    rows = attention_steps.interleaved(tiny(mode="train", warmup=1, steps=2, compile=True, compile_backend="aot_eager"),
                           ("sdpa", "naive"))
    assert (rows.status == "ok").all()
    assert {get_attention("sdpa").__name__, get_attention("naive").__name__} <= set(called)


def test_interleaved_out_of_memory_is_a_row_per_attention(monkeypatch):
    def call(self):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(e2e.Step, "__call__", call)
    rows = attention_steps.interleaved(tiny(mode="train"), ("sdpa", "naive"))
    assert list(rows.status) == [OOM, OOM] and rows.step_ms.isna().all()


def test_other_errors_are_not_swallowed():
    def boom():
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_or_oom(boom)


def test_sweep_rejects_unknown_settings():
    with pytest.raises(ValueError, match="unknown benchmark settings"):
        sweep(tiny(), colour=["red"])


def test_bad_mode_is_named():
    with pytest.raises(ValueError, match="mode"):
        BenchConfig(mode="inference")


def test_cli_writes_json_with_provenance(tmp_path):
    out = tmp_path / "r.json"
    e2e.main(["--size", "tiny", "--context-length", "8", "--batch-size", "2", "--warmup", "0", "--steps", "2",
              "--mode", "forward", "train", "--json", str(out)])
    data = json.loads(out.read_text())
    assert {"gpu", "torch", "commit", "date"} <= set(data["provenance"])
    assert [r["mode"] for r in data["results"]] == ["forward", "train"]
    assert all(r["status"] == "ok" for r in data["results"])


def test_cli_refuses_an_unwritable_output_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(e2e, "benchmark", lambda cfg: pytest.fail("the sweep ran before the output was checked"))
    for bad in (tmp_path / "missing" / "r.json", tmp_path):
        with pytest.raises(SystemExit) as exit_:
            e2e.main(["--size", "tiny", "--json", str(bad)])
        assert exit_.value.code == 2 and "cannot write results" in capsys.readouterr().err


def test_cli_keeps_the_rows_finished_before_a_failure(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    original = e2e.benchmark

    def fail_second(cfg):
        if cfg.mode == "train":
            raise RuntimeError("device lost")
        return original(cfg)

    monkeypatch.setattr(e2e, "benchmark", fail_second)
    with pytest.raises(RuntimeError, match="device lost"):
        e2e.main(["--size", "tiny", "--context-length", "8", "--warmup", "0", "--steps", "1",
                  "--mode", "forward", "train", "--json", str(out)])
    assert [r["mode"] for r in json.loads(out.read_text())["results"]] == ["forward"]


def test_cli_config_errors_are_usage_errors(capsys):
    for argv in (["--size", "huge"], ["--steps", "0"], ["--size", "tiny", "--num-heads", "3"]):
        with pytest.raises(SystemExit) as exit_:
            e2e.main(argv)
        assert exit_.value.code == 2, argv
    assert "usage:" in capsys.readouterr().err


def test_a_cold_run_is_the_same_configuration_in_a_fresh_process():
    cfg = tiny(mode="train", dtype="bf16", warmup=0, steps=2)
    row = e2e.cold_run(cfg)
    assert row["status"] == "ok" and (row["size"], row["mode"], row["dtype"], row["context_length"]) == (
        "tiny", "train", "bf16", 8) and len(row["step_times_ms"]) == 2


def measure_with_a_setup_out_of_memory(rank: int, world: int, cfg, setup: str) -> list[dict]:
    """The sharding measurement with ``setup`` running out of memory on every rank, as a real OOM does (each rank
    holds the same model and batch), before its first collective."""
    from systems.bench import sharding

    real = sharding._measure_one

    def measure_one(name, *args):
        if name == setup:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(name, *args)

    sharding._measure_one = measure_one
    return sharding.measure(rank, world, cfg)


@pytest.mark.distributed
def test_a_sharding_setup_out_of_memory_is_a_row_and_the_next_setup_runs():
    from systems.bench.sharding import ShardingConfig
    from systems.dist import launch

    cfg = ShardingConfig(preset("tiny", context_length=8), batch_size=2, setups=("DDP", "FSDP (ours)", "FSDP2"),
                         warmup=1, steps=1)
    ranks = launch(measure_with_a_setup_out_of_memory, 2, cfg, "FSDP (ours)", backend="gloo", timeout_s=120)
    for rows in ranks:  # every rank returns the same rows
        assert [(r["optimizer"], r["status"]) for r in rows] == [("DDP", "ok"), ("FSDP (ours)", OOM), ("FSDP2", "ok")]
        assert "step_ms" not in rows[1] and all(r["step_ms"] > 0 and r["memory"] for r in (rows[0], rows[2]))
