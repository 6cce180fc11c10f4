"""The FlashAttention benchmarks: ratios against the anchors, the slower-shape regimes, the per-call floor and
the kernel breakdown (their code paths, on a CPU through Triton's interpreter)."""

import json
import re
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from systems.attention.peers import sdpa_choice
from systems import report
from systems.bench import attention_steps, call_overhead, flash_sweep, leaderboard
from systems.chapters import flash, flash_training, hopper
from systems.resumable import measured_sweep, recorded_result
from systems.model import TransformerLM


def sweep_rows(times: dict[str, dict[int, float]], d: int = 64, mode: str = "fwd_bwd") -> list[dict]:
    return [{"dtype": "bf16", "d": d, "n_q": n, "n_k": n, "causal": True, "impl": impl, "mode": mode, "ms": ms}
            for impl, by_n in times.items() for n, ms in by_n.items()]


def test_slower_shapes_separates_fixed_cost_from_kernel_time():
    ours = {128: 1.0, 1024: 1.2, 4096: 1.4, 16384: 4.0, 65536: 9.0}
    anchor = {128: 0.2, 1024: 0.3, 4096: 2.0, 16384: 2.0, 65536: 10.0}
    runs = pd.DataFrame(sweep_rows({"flash_triton": ours, "sdpa_flash": anchor})
                        + sweep_rows({"flash_triton": {128: 1.0, 2048: 3.0}, "sdpa_flash": {128: 0.1, 2048: 0.2}}, d=128))
    slow = flash_sweep.slower_shapes(flash_sweep.ratios(runs))
    got = {(r.d, r.n_q): r.regime for r in slow.itertuples()}
    # 4096 and 65536 (d=64) are faster than the anchor; 128 is below min_n
    assert got == {(64, 1024): "fixed cost", (64, 16384): "kernel", (128, 2048): "kernel"}


def test_slower_shapes_without_the_anchor_is_empty():
    runs = pd.DataFrame(sweep_rows({"flash_triton": {128: 1.0, 2048: 5.0}, "naive": {128: 2.0, 2048: 1.0}}))
    assert flash_sweep.slower_shapes(flash_sweep.ratios(runs)).empty


def test_call_overhead_times_every_layer_of_the_call_path():
    # On a CPU our kernels run in Triton's interpreter (conftest sets TRITON_INTERPRET=1): the numbers mean
    # nothing there, but every layer must run, and issuing calls can never take longer than finishing them.
    table = call_overhead.call_overhead(shape=(1, 1, 16, 16), dtype="fp32", n_calls=1, peers=("sdpa_flash",))
    ours = table[table.impl == "flash_triton"]
    assert list(ours.what) == ["input checks (Python)", "forward kernel launch through Triton's JIT, fixed tiles",
                               "forward kernel launch through Triton's JIT, tiles of the shape",
                               "forward, allocation + remembered launch", "the same through the custom op",
                               "forward (autograd.Function)", "backward, allocations + remembered launches",
                               *(["forward, C++ operator (allocation + remembered launch)",
                                  "backward, C++ operator (allocations + remembered launches)"]
                                 if torch.cuda.is_available() else []),
                               "forward, the public function (from C++ on a GPU)",
                               "forward + backward", call_overhead.ON_CALLING_THREAD]
    whole = ["forward + backward", call_overhead.ON_CALLING_THREAD]
    assert list(table[table.impl == "flash_triton_python"].what) == whole
    assert list(table[table.impl == "autograd.Function doing nothing"].what) == whole
    in_python = table[table.impl == "SDPA flash kernels in a Python autograd.Function"]
    assert list(in_python.what) == whole
    assert list(table[table.impl == "sdpa_flash"].what) == ["forward"] + whole
    assert list(table[table.impl == "flash"].what) == whole  # our fastest, whichever kernels it takes here
    cuda = table[table.impl == "flash_cuda"]
    if not torch.cuda.is_available():
        assert list(in_python.host_us) == [flash_sweep.UNSUPPORTED] * 2  # SDPA's flash kernels need a GPU
        assert list(cuda.what) == whole and list(cuda.host_us) == [flash_sweep.UNSUPPORTED] * 2
        assert "flash_hopper" not in set(table.impl)  # the operators alone are timed on a GPU only
    timed = table[table.host_us != flash_sweep.UNSUPPORTED]
    assert set(timed.impl) >= {"flash_triton", "flash", "autograd.Function doing nothing"}
    assert all(0 < h <= w for h, w in zip(timed.host_us, timed.wall_us))


def test_call_overhead_command_says_why_it_cannot_run_without_a_gpu_or_the_interpreter(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(SystemExit) as refused:
        call_overhead.main([])
    assert refused.value.code == 2
    assert "needs a CUDA GPU (or TRITON_INTERPRET=1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        call_overhead.main(["--calls", "0"])
    assert "--calls: must be >= 1, got 0" in capsys.readouterr().err


def test_on_calling_thread_runs_the_backward_without_autograds_device_thread():
    seen = []

    class Record(call_overhead._Nothing):
        @staticmethod
        def backward(ctx, grad):
            seen.append(torch.autograd.is_multithreading_enabled())
            return grad

    x = torch.randn(3, requires_grad=True)
    call_overhead.on_calling_thread(lambda: Record.apply(x).sum().backward())()
    assert seen == [False] and torch.autograd.is_multithreading_enabled()  # switched back afterwards


def test_backward_tile_facts_pick_the_fastest_tile_against_cudnn():
    def row(bq, bk, passes, regs, spills, ms):
        return {"impl": "flash_triton", "block_q": bq, "block_k": bk, "warps": 4, "stages": 3, "passes": passes,
                "registers": regs, "spills": spills, "shared_kib": 90.0, "ms": ms}
    rows = [{"impl": "sdpa_cudnn", "ms": 2.0}, row(64, 64, 1, 200, 0, 2.6), row(64, 64, 2, 255, 4, 2.4),
            row(128, 128, 1, 255, 60, 5.0), row(64, 128, 1, 220, 0, 2.7)]
    tiles = pd.DataFrame(rows).assign(vs_cudnn=lambda d: d.ms / 2.0)
    found = flash.backward_tile_facts(tiles)
    assert (found["best"], found["best_passes"], found["best_ms"]) == ("64 × 64, 4 warps, 3 stages", 2, 2.4)
    assert np.isclose(found["best_vs_cudnn"], 1.2) and found["cudnn_ms"] == 2.0
    assert (found["spilling"], found["tried"], found["ref"], found["ref_registers"]) == (2, 4, "64 × 64", 200)
    assert found["larger_lose"]  # one spills, the other is slower than the reference
    rows[-1]["ms"] = 2.5  # a larger tile without spills that beats the reference
    assert not flash.backward_tile_facts(pd.DataFrame(rows).assign(vs_cudnn=1.0))["larger_lose"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (compiled kernels)")
def test_backward_tiles_report_each_compiled_dkdv_kernel():
    from systems.attention.flash_triton import Tiles

    table = leaderboard.backward_tiles([Tiles(64, 64, 4, 3), Tiles(32, 64, 4, 2)], rep=5, warmup=1,
                                       shape=(2, 512, 64))
    assert list(table.impl) == ["sdpa_cudnn"] + ["flash_triton"] * 4 and list(table.passes[1:]) == [1, 2, 1, 2]
    assert list(table.block_q[1:]) == [64, 64, 32, 32]
    ours = table.iloc[1:]
    assert (ours.registers > 0).all() and (ours.spills >= 0).all() and (ours.shared_kib > 0).all()
    assert (pd.to_numeric(table.ms) > 0).all()


def test_kernel_breakdown_accounts_for_each_step():
    table = leaderboard.kernel_breakdown(("flash_triton", "sdpa_cudnn"), steps=1, top=3, shape=(1, 32, 16),
                                         dtype=torch.float32)
    ours = table[table.impl == "flash_triton"]
    if torch.cuda.is_available():  # the Triton kernels by name, the backward's longest among the three named
        assert any(name.startswith("flash_bwd_") for name in ours.kernel)
    else:  # the operators stand in for kernels: the compiled step must show our two custom ops
        assert {"systems::flash_fwd", "systems::flash_bwd"} <= set(ours.kernel)
    assert len(ours) == 4 and ours.kernel.iloc[-1] == "other"
    assert abs(ours.share.sum() - 1) < 1e-9 and (ours.ms_per_step >= 0).all()
    assert list(table[table.impl == "sdpa_cudnn"].kernel) == [flash_sweep.UNSUPPORTED]  # no cuDNN on a CPU


def test_the_sweep_times_every_implementation_mode_and_shape_by_registry_name():
    runs = flash_sweep.run([("fp32", 16, 32, 32, 2, 2, True), ("fp32", 16, 24, 40, 1, 1, False)],
                           impls=("flash_triton", "naive", "sdpa_cudnn"), rep_ms=1, warmup_ms=1)
    assert len(runs) == 2 * 3 * 3 and set(runs.impl) == {"flash_triton", "naive", "sdpa_cudnn"}
    ok = runs[runs.impl != "sdpa_cudnn"]
    assert (pd.to_numeric(ok.ms) > 0).all() and (pd.to_numeric(ok.tflops) > 0).all()
    if not torch.cuda.is_available():
        assert set(runs[runs.impl == "sdpa_cudnn"].ms) == {flash_sweep.UNSUPPORTED}  # cuDNN needs a GPU
    wide = flash_sweep.ratios(runs, against=("naive",))
    assert "flash_triton/naive" in wide and len(wide) == 2 * 3


def test_rounds_time_the_implementations_in_turn_and_keep_each_ones_fastest(monkeypatch):
    order, times = [], {"flash_triton": iter([3.0, 2.0, 4.0]), "naive": iter([5.0, 6.0, 7.0])}

    def fake_measure(impl, q, k, v, is_causal, modes, timer):
        order.append(impl)
        ms = next(times[impl])
        return {"fwd": ms, "fwd_bwd": flash_sweep.OOM if impl == "naive" and ms == 6.0 else 2 * ms}

    monkeypatch.setattr(flash_sweep, "attention", lambda impl, config=None: impl)
    monkeypatch.setattr(flash_sweep, "measure", fake_measure)
    runs = flash_sweep.run([("fp32", 16, 32, 32, 1, 1, True)], impls=("flash_triton", "naive"),
                           modes=("fwd", "fwd_bwd"), rounds=3)
    assert order == ["flash_triton", "naive"] * 3  # in turn, so a drift of the clocks falls on both alike
    ms = runs.set_index(["impl", "mode"]).ms
    assert (ms["flash_triton", "fwd"], ms["flash_triton", "fwd_bwd"], ms["naive", "fwd"]) == (2.0, 4.0, 5.0)
    assert ms["naive", "fwd_bwd"] == flash_sweep.OOM  # a round without a time is not hidden by the others'
    assert len(runs) == 4


def test_floor_facts_set_each_of_ours_over_sdpa_flash_and_leave_nan_where_one_did_not_run():
    eager = dict(zip(("flash", "flash_triton", "flash_triton_python", "flash_cuda", "sdpa_flash", "sdpa_cudnn"),
                     np.random.default_rng().uniform(50, 500, 6)))
    floor = pd.DataFrame({"impl": list(eager), "eager": pd.Series(list(eager.values()), dtype=object)})
    facts = flash_training.floor_facts(floor)
    ours = ("flash", "flash_triton", "flash_triton_python", "flash_cuda")
    assert set(facts) == {f"{impl}_over_sdpa" for impl in ours}
    assert all(np.isclose(facts[f"{impl}_over_sdpa"], eager[impl] / eager["sdpa_flash"]) for impl in ours)
    # an implementation that could not run on this machine is marked so in the table: its ratio is NaN, not a number
    floor.loc[floor.impl == "flash_cuda", "eager"] = flash_sweep.UNSUPPORTED
    facts = flash_training.floor_facts(floor)
    assert np.isnan(facts["flash_cuda_over_sdpa"]) and np.isclose(facts["flash_over_sdpa"],
                                                                   eager["flash"] / eager["sdpa_flash"])


def test_in_model_sets_ours_beside_sdpa_per_point_and_names_each_oom_once():
    runs = pd.DataFrame([
        {"size": "s", "compile": c, "context_length": 512, "attention": a, "step_ms": ms, "status": "ok",
         "step_times_ms": [ms * f for f in (1.0, 1.02, 0.98, 1.01, 0.99)]}
        for c, a, ms in [(False, "sdpa", 10.0), (False, "flash_triton", 9.0), (False, "flash", 10.5),
                         (True, "sdpa", 4.0), (True, "flash_triton", 5.0), (True, "flash", 3.0)]
    ] + [{"size": "xl", "compile": False, "context_length": 512, "attention": a, "step_ms": float("nan"),
          "status": "OOM"} for a in ("sdpa", "flash_triton", "flash")])
    table, found = flash_training.in_model(runs)
    assert list(zip(table["size"], table["mode"])) == [("s", "eager"), ("s", "compiled"), ("xl", "eager")]
    assert list(table.columns[3:7]) == ["sdpa", "flash_triton", "flash", "flash_triton/sdpa"]  # SDPA's first, then ours
    assert list(table["flash_triton/sdpa"][:2]) == [0.9, 1.25] and table["flash_triton/sdpa"].isna().iloc[2]
    assert list(table["flash/sdpa"][:2]) == [1.05, 0.75] and table["flash/sdpa"].isna().iloc[2]
    assert list(table.iloc[2][["sdpa", "flash_triton", "flash"]]) == ["OOM"] * 3  # shown as such, not as a blank
    assert list(table.status) == ["ok", "ok", "OOM"] and "nan" not in report.markdown_table(table)
    assert found["slower"] == 1 and found["worst"] == "s, compiled, context 512: 1.250×" and found["points"] == 2
    assert found["oom"] == "xl/sdpa/512, xl/flash_triton/512, xl/flash/512"
    assert (found["points_eager"], found["slower_eager"], found["gm_eager"]) == (1, 0, 0.9)
    assert (found["points_compiled"], found["slower_compiled"], found["gm_compiled"]) == (1, 1, 1.25)
    # our fastest, its own tally beside the Triton kernels'
    assert found["fastest_slower"] == 1 and found["fastest_worst"] == "s, eager, context 512: 1.050×"
    assert (found["fastest_slower_eager"], found["fastest_gm_eager"]) == (1, 1.05)
    assert (found["fastest_slower_compiled"], found["fastest_gm_compiled"]) == (0, 0.75)
    # each ratio with its interval: here the steps of a point drift together, so the interval is the ratio itself
    for ours, ratios in (("flash_triton", [0.9, 1.25]), ("flash", [1.05, 0.75])):
        assert np.allclose(table[f"{ours} low"][:2], ratios) and np.allclose(table[f"{ours} high"][:2], ratios)
        assert table[[f"{ours} low", f"{ours} high"]].iloc[2].isna().all()
    assert (found["slower_clear"], found["faster_clear"], found["slower_clear_eager"]) == (1, 1, 0)
    assert (found["fastest_slower_clear"], found["fastest_faster_clear"]) == (1, 1)
    # the figure's frame: one row per point and attention of ours
    ratios = flash_training.in_model_ratios(table)
    assert list(ratios.ours) == ["flash_triton"] * 3 + ["flash"] * 3
    assert np.allclose(ratios.ratio[:2], [0.9, 1.25]) and np.allclose(ratios.ratio[3:5], [1.05, 0.75])


def test_the_ratio_and_its_interval_pair_the_interleaved_steps():
    rng = np.random.default_rng()
    drift = np.sort(rng.uniform(1.0, 2.0, 12))  # the host's speed, shared by the two steps of a pair
    assert np.isclose(attention_steps.paired_ratio(1.05 * drift, drift), 1.05)
    low, high = attention_steps.ratio_interval(1.05 * drift, drift)
    assert np.isclose(low, 1.05) and np.isclose(high, 1.05)
    # unpaired (the fastest of ours beside the slowest of theirs, and so on), the drift blurs it
    low, high = attention_steps.ratio_interval(1.05 * drift, drift[::-1])
    assert low < 1.05 < high and high - low > 0.05
    # a pair's ratio cancels the drift the two medians let through: a slow spell in half the steps, ours 5 % slower
    spell = np.where(np.arange(12) % 2 == 0, 1.0, 1.5) * rng.uniform(0.999, 1.001, 12)
    ours, theirs = 1.05 * spell, spell.copy()
    ours[0], theirs[1] = 1.5 * 1.05, 1.0  # one step each way moves the medians apart
    assert np.isclose(attention_steps.paired_ratio(ours, theirs), 1.05, rtol=3e-3)
    assert not np.isclose(np.median(ours) / np.median(theirs), 1.05, rtol=3e-2)


def test_the_paired_ratio_refuses_steps_that_are_not_in_pairs():
    with pytest.raises(ValueError, match="as many of ours as of theirs"):
        attention_steps.paired_ratio([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="as many of ours as of theirs"):
        attention_steps.ratio_interval([], [])


def test_model_steps_time_each_attention_on_one_model_per_point(tmp_path):
    points = flash_sweep.model_step_points(["tiny", "small"], [16, 32], ["small"])
    assert points == [("tiny", 16, False), ("tiny", 32, False), ("small", 16, False), ("small", 16, True),
                      ("small", 32, False), ("small", 32, True)]
    runs = measured_sweep(tmp_path, "steps", flash_sweep.model_step_at, points[:2], tokens=64, dtype="fp32",
                          attentions=("sdpa", "naive"), warmup=1, steps=3)
    assert len(recorded_result(tmp_path / ".measured" / "steps.json")) == 4  # each point recorded as it finished
    assert list(zip(runs.context_length, runs.attention)) == [(16, "sdpa"), (16, "naive"), (32, "sdpa"), (32, "naive")]
    assert list(runs.batch_size) == [4, 4, 2, 2] and (runs.status == "ok").all()
    assert all(len(t) == 3 and ms == sorted(t)[1] for t, ms in zip(runs.step_times_ms, runs.step_ms))


def test_a_point_is_timed_here_and_in_a_fresh_process():
    table = flash_sweep.here_and_apart("tiny", 16, 32, "fp32", steps=2)
    assert list(table.process) == ["this process", "a fresh process"]
    assert (pd.to_numeric(table.flash_triton) > 0).all() and (pd.to_numeric(table.sdpa) > 0).all()
    assert table[["flash_triton low", "flash_triton high"]].notna().all().all()


def test_a_point_out_of_memory_in_one_process_is_a_row_that_says_so():
    # what interleaved returns where the model did not fit: rows without times. The chapter's sentence names the
    # process where the point did not run instead of comparing a missing ratio
    point = {"size": "xl", "context_length": 2048, "compile": False, "batch_size": 4, "dtype": "bf16"}
    oom = pd.DataFrame([{**point, "attention": a, "status": "OOM", "step_ms": float("nan")}
                        for a in ("sdpa", "flash_triton")])
    ran = pd.DataFrame([{**point, "attention": a, "status": "ok", "step_ms": ms, "step_times_ms": [ms, ms + 1, ms - 1]}
                        for a, ms in (("sdpa", 10.0), ("flash_triton", 11.0))])
    table = pd.concat([flash_sweep.model_table(ran).assign(process="this process"),
                       flash_sweep.model_table(oom).assign(process="a fresh process")], ignore_index=True)
    assert table.flash_triton.tolist() == [11.0, "OOM"] and np.isnan(table["flash_triton/sdpa"].iloc[1])
    words = flash_training.apart_facts(table)["words"]
    assert words == "The point did not run in a fresh process (OOM), so the two processes cannot be compared here."
    fine = pd.concat([flash_sweep.model_table(ran).assign(process=p) for p in ("this process", "a fresh process")],
                     ignore_index=True)
    words = flash_training.apart_facts(fine)["words"]
    assert re.match(r"Ours over SDPA's step: 1\.100× here \(1\.\d{3} to 1\.\d{3}\), 1\.100× in a fresh process "
                    r"\(1\.\d{3} to 1\.\d{3}\)\. Outside the notebook's kernel", words), words


def test_a_lower_ratio_in_the_fresh_process_within_the_intervals_is_not_called_no_better():
    # chapter 17's run at 9cd442a: 1.017 here (0.947 to 1.043), 0.992 in a fresh process (0.964 to 1.008) read "the
    # ratio is no better" outside the notebook's kernel
    rng = np.random.default_rng()
    here, fresh = rng.uniform(1.01, 1.03), rng.uniform(0.98, 1.0)
    apart = pd.DataFrame({"process": ["this process", "a fresh process"], "flash_triton": [50.0, 50.0],
                          "flash_triton/sdpa": [here, fresh], "flash_triton low": [here - 0.07, fresh - 0.03],
                          "flash_triton high": [here + 0.03, fresh + 0.02]})
    words = flash_training.apart_facts(apart)["words"]
    assert words.endswith("The ratio is lower in the fresh process, but the two intervals overlap: this run cannot "
                          "tell the two processes apart."), words


def test_the_call_words_say_more_where_the_calling_thread_costs_more():
    # the hand-off to autograd's device thread cost our call less than the calling thread on one host and more on
    # another: each call's sentence follows its own sign, never a negative "less"
    rng = np.random.default_rng()
    impls = ("flash_triton", "flash_triton_python", flash_training.PYTHON_SDPA, "sdpa_flash",
             flash_training.NOTHING)
    whole = dict(zip(impls, rng.uniform(100, 400, len(impls))))
    shifts = {"flash_triton": -rng.uniform(10, 50), "flash_triton_python": rng.uniform(10, 50),
              flash_training.NOTHING: -rng.uniform(10, 50), "sdpa_flash": rng.uniform(10, 50)}
    rows = [{"impl": impl, "what": "forward + backward", "host_us": us} for impl, us in whole.items()]
    rows += [{"impl": impl, "what": call_overhead.ON_CALLING_THREAD, "host_us": whole[impl] - shift}
             for impl, shift in shifts.items()]
    words = flash_training.call_facts(pd.DataFrame(rows))["words"]
    said = re.search(r"a call of ours from C\+\+ takes (.*) µs (more|less), one from Python (.*) µs (more|less), one "
                     r"of a Python autograd function doing nothing (.*) µs (more|less) and one of SDPA's flash back "
                     r"end (.*) µs (more|less)\.$", words)
    assert said, words
    for (amount, word), impl in zip(zip(said.groups()[::2], said.groups()[1::2]),
                                    ("flash_triton", "flash_triton_python", flash_training.NOTHING, "sdpa_flash")):
        assert word == ("less" if shifts[impl] > 0 else "more") and float(amount) == pytest.approx(abs(shifts[impl]),
                                                                                                    rel=5e-3)
    assert "-" not in words


def test_the_call_words_set_our_fastest_call_beside_its_operators_where_the_hopper_ones_ran():
    rng = np.random.default_rng()
    impls = ("flash_triton", "flash_triton_python", flash_training.PYTHON_SDPA, "sdpa_flash",
             flash_training.NOTHING, "flash")
    rows = [{"impl": impl, "what": what, "host_us": rng.uniform(100, 400)}
            for impl in impls for what in ("forward + backward", call_overhead.ON_CALLING_THREAD)]
    without = flash_training.call_facts(pd.DataFrame(rows))["words"]
    assert "fastest" not in without  # no Hopper operators timed: flash is not theirs
    operators = {impl: rng.uniform(10, 40, 2) for impl in ("flash_triton", "flash_hopper")}
    rows += [{"impl": impl, "what": what, "host_us": us} for impl, times in operators.items()
             for what, us in zip(call_overhead.OPERATORS[impl][2:], times)]
    rows += [{"impl": "flash_cuda", "what": what, "host_us": flash_sweep.UNSUPPORTED}
             for what in call_overhead.OPERATORS["flash_cuda"][2:]]
    words = flash_training.call_facts(pd.DataFrame(rows))["words"]
    assert words.startswith(without)
    fastest = next(r["host_us"] for r in rows if r["impl"] == "flash" and r["what"] == "forward + backward")
    said = re.search(r'Our fastest, attention "flash", runs the Hopper kernels here: the host spends (\d+) µs on its '
                     r"forward and backward call, (\d+) µs of it in their two C\+\+ operators alone; the Triton "
                     r"kernels' take (\d+) µs\.$", words)
    assert said, words
    assert [int(x) for x in said.groups()] == [round(fastest), round(operators["flash_hopper"].sum()),
                                               round(operators["flash_triton"].sum())]


def test_a_fresh_process_that_fails_says_why():
    cfg = flash_sweep._step_config("tiny", 16, 32, "fp32", 1, 1)
    with pytest.raises(RuntimeError, match="unknown attention implementation 'nope'"):
        attention_steps.interleaved_apart(cfg, ("sdpa", "nope"))


def test_the_fresh_process_runner_refuses_a_bad_spec_with_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "spec.json"
    no_attention = '{"config": {"model": {}}, "attentions": []}'
    for text in ("not json", '{"config": {}}', '{"attentions": ["sdpa"]}', no_attention):
        bad.write_text(text)
        with pytest.raises(SystemExit) as exit_:
            attention_steps.main([str(bad), str(tmp_path / "rows.json")])
        assert exit_.value.code == 2 and "cannot read the spec" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        attention_steps.main([])
    assert exit_.value.code == 2 and "usage:" in capsys.readouterr().err


def test_the_fresh_process_runner_times_kernels_when_asked_and_names_a_measure_it_does_not_know(tmp_path, capsys):
    cfg = flash_sweep._step_config("tiny", 16, 32, "fp32", 1, 1)
    spec, out = tmp_path / "spec.json", tmp_path / "out.json"
    spec.write_text(json.dumps({"config": asdict(cfg), "attentions": ["sdpa", "naive"], "measure": "kernels"}))
    attention_steps.main([str(spec), str(out)])
    kernels = json.loads(out.read_text())
    assert set(kernels) == {"sdpa", "naive"}
    assert all(bool(times) == torch.cuda.is_available() and all(ms > 0 for ms in times.values())
               for times in kernels.values())
    spec.write_text(json.dumps({"config": asdict(cfg), "attentions": ["sdpa"], "measure": "flops"}))
    with pytest.raises(SystemExit) as exit_:
        attention_steps.main([str(spec), str(out)])
    assert exit_.value.code == 2 and "not flops" in capsys.readouterr().err


def test_step_kernel_time_runs_a_step_per_attention():
    # on a CPU there are no kernels to sum: the kernel time is NaN, the step's wall time is measured
    table, own = flash_sweep.step_kernel_time("tiny", 32, 64, "fp32", attentions=("sdpa", "naive"), steps=1)
    assert list(table.attention) == ["sdpa", "naive"]
    assert (table.step_ms > 0).all()
    if not torch.cuda.is_available():
        assert table.kernel_ms.isna().all() and table.host_wait_ms.isna().all() and table.own_kernel_ms.isna().all()
        assert own.empty
    else:
        assert ((table.kernel_ms > 0) & (table.kernel_ms <= table.step_ms)).all()
        # an attention's own kernels ran with it alone, and add up to its own kernel time
        assert not set(own[own.attention == "sdpa"].kernel) & set(own[own.attention == "naive"].kernel)
        by = own.groupby("attention").ms.sum()
        for row in table.itertuples():
            assert row.own_kernel_ms == pytest.approx(by.get(row.attention, 0.0))
            assert 0 < row.own_kernel_ms <= row.kernel_ms


def test_sdpa_choice_names_the_back_end_the_dispatcher_would_run():
    q = torch.randn(1, 2, 8, 16)
    with sdpa_kernel(SDPBackend.MATH):
        assert sdpa_choice(q, q, q, True) == "math"
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        assert sdpa_choice(q, q, q, True) == "FlashAttention-2"
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), pytest.raises(RuntimeError, match="No viable backend"):
        sdpa_choice(q, q, q, True)  # cuDNN takes no CPU tensors


def test_model_attention_inputs_are_laid_out_as_the_model_calls_its_attention():
    seen = []

    def spy(q, k, v, is_causal):
        seen.append((q, k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    cfg = flash_sweep._step_config("tiny", 32, 64, "fp32", 0, 1)
    model = TransformerLM(cfg.model)
    for block in model.layers:
        block.attn.attend = spy
    model(torch.randint(0, cfg.model.vocab_size, (cfg.batch_size, 32)))
    expected = flash_sweep.model_attention_inputs("tiny", 32, 64, "fp32")
    for got, want in zip(seen[0], expected):
        assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)
    assert flash_sweep.model_sdpa_choice("tiny", 32, 64, "fp32") == sdpa_choice(*seen[0], True)


@pytest.mark.parametrize("softmax", [0.4, 1.3, 1.9])
def test_hopper_schedule_follows_the_compiled_order(softmax):
    # the schematic of chapter 20 as the kernel compiles: a consumer's softmax of S(j) starts once its S(j) and its
    # P(j-1) V(j-1) are both done, one product on the tensor cores at a time, and with ping-pong the tensor cores idle
    # only where a softmax is longer than the other consumer's two products
    n_tiles, product = 5, 1.0
    plan = hopper.schedule(True, n_tiles=n_tiles, product=product, softmax=softmax)
    cores = plan[plan.lane == hopper.TENSOR_CORES].sort_values("start_ms")
    assert (cores.start_ms.values[1:] >= cores.end_ms.values[:-1] - 1e-12).all()
    for c in (0, 1):
        products = cores[cores.kind.str.endswith(f"consumer {c}")]
        softmaxes = plan[plan.lane == f"consumer {c}: softmax"].sort_values("start_ms")
        assert len(softmaxes) == n_tiles and len(products) == 2 * n_tiles
        # tile j's softmax after S(j) and, from the second tile on, P(j-1) V(j-1), which follows S(j)
        ends = products.end_ms.values
        starts = [ends[0]] + [ends[2 * j] for j in range(1, n_tiles)]
        np.testing.assert_allclose(softmaxes.start_ms.values, starts)
    idle = cores.start_ms.values[1:] - cores.end_ms.values[:-1]
    steady = idle[2:-2]  # past the first tiles' start, before the last ones' end
    assert (steady <= max(0.0, softmax - 2 * product) + 1e-9).all()


def test_hopper_backward_facts_sort_shapes_by_which_backward_is_faster():
    rng = np.random.default_rng()
    shapes = [(f"1×16×{n}×128", causal) for n, causal in ((1024, True), (16384, True), (8192, False))]
    faster = {shapes[i] for i in rng.choice(3, size=int(rng.integers(0, 4)), replace=False)}
    rows = []
    for shape, causal in shapes:
        triton_ms = rng.uniform(1, 10)
        cuda_ms = triton_ms * (rng.uniform(0.8, 0.99) if (shape, causal) in faster else rng.uniform(1.01, 1.3))
        rows += [{"shape": shape, "causal": causal, "impl": impl, "ms": ms} for impl, ms in
                 (("SDPA cuDNN", triton_ms / 2), ("ours (Triton)", triton_ms), ("CUDA C++ (Hopper)", cuda_ms))]
    words = hopper.backward_facts(pd.DataFrame(rows))["vs_triton_words"]
    labels = {s: s[0] if s[1] else f"{s[0]} not causal" for s in shapes}
    said_faster, _, said_slower = words.partition("slower")
    for shape in shapes if faster else ():
        assert labels[shape] in (said_faster if shape in faster else said_slower), words
    assert ("every shape" in words) == (not faster)
    assert words.startswith("faster") == bool(faster) and ("slower" in words) == (len(faster) < 3)
    assert "not measured" in hopper.backward_facts(None)["vs_triton_words"]


def test_hopper_backward_facts_give_one_ratio_where_the_range_has_one_value():
    ratio = np.random.default_rng().uniform(1.01, 1.5)
    rows = [{"shape": "1×16×1024×128", "causal": True, "impl": impl, "ms": ms} for impl, ms in
            (("SDPA cuDNN", 1.0), ("ours (Triton)", 1.0), ("CUDA C++ (Hopper)", ratio))]
    facts = hopper.backward_facts(pd.DataFrame(rows))
    assert facts["vs_triton_words"] == f"slower than our Triton backward at every shape ({ratio:.2f} times its time)"
    assert facts["vs_cudnn_words"] == f"{ratio:.2f} times cuDNN's time"


@pytest.mark.parametrize("items, words", [([], ""), (["a"], "a"), (["a", "b"], "a and b"), (["a", "b", "c"], "a, b and c")])
def test_listed_joins_items_as_prose_does(items, words):
    assert report.listed(items) == words


@pytest.mark.parametrize("ours_minus_sdpa_us, words", [(-20.0, "explain none of it"), (40.0, "most of it."),
                                                       (2.0, "a small part of it.")])
def test_the_host_time_per_call_is_weighed_against_the_steps_extra_host_time(ours_minus_sdpa_us, words):
    rng = np.random.default_rng()
    layers, kernels, sdpa_step = 24, rng.uniform(100, 110), rng.uniform(115, 120)
    extra = 1.2 * layers * 40.0 / 1e3  # with 0.5 ms less in kernels, under twice 40 µs a layer, over twice 2 µs
    busy = pd.DataFrame({"attention": ["sdpa", "flash_triton"], "step_ms": [sdpa_step, sdpa_step + extra],
                         "kernel_ms": [kernels, kernels]})
    worst = pd.Series({"size": "medium", "context_length": 2048})
    sdpa_us = rng.uniform(200, 300)
    call = {"measured": True, "ours_us": sdpa_us + ours_minus_sdpa_us, "sdpa_us": sdpa_us}
    found = flash_training.busy_facts(busy.assign(kernel_ms=[kernels, kernels - 0.5]), worst, layers, call)
    said = found["words"]
    assert said.startswith("Most of the difference is not in the kernels") and words in said
    assert found["kernel_words"] == "while its kernels take 0.5 ms less"
    assert found["step_words"] == f"{report.fmt(extra)} ms ({report.fmt(100 * extra / sdpa_step, 2)} %) longer"
    assert not re.search(r"-\d", " ".join(found.values()))  # a saving is said as less time, not as a negative extra


@pytest.mark.parametrize("extra_step, extra_kernels, placed", [
    (0.5, -0.1, "Most of the difference is not in the kernels"),
    (2.0, 1.5, "Most of the difference is in the kernels themselves"),
    (-0.3, 0.2, "Timed again here, our step is not the longer one")])
def test_the_busy_point_places_the_difference_by_the_signs_of_both(extra_step, extra_kernels, placed):
    # a step longer with kernels shorter once read "most of the difference is in the kernels": kernels that take
    # less cannot hold a step's extra time
    rng = np.random.default_rng()
    step, kernels = rng.uniform(40, 60), rng.uniform(30, 35)
    busy = pd.DataFrame({"attention": ["sdpa", "flash_triton"], "step_ms": [step, step + extra_step],
                         "kernel_ms": [kernels, kernels + extra_kernels]})
    beyond = pd.Series({"size": "small", "context_length": 1024, "flash_triton low": 1.01, "flash_triton high": 1.08})
    assert flash_training.busy_facts(busy, beyond, 4, {"measured": False})["words"].startswith(placed)


def test_the_busy_point_places_no_difference_its_interval_holds_one_of():
    # chapter 17's run at 9cd442a: 0.114 ms longer in 57 ms, kernels 0.101 ms shorter, the point's ratio 1.039
    # (0.972 to 1.082): a split of noise is not a finding
    rng = np.random.default_rng()
    step, kernels, low = rng.uniform(40, 60), rng.uniform(30, 35), rng.uniform(0.95, 0.99)
    busy = pd.DataFrame({"attention": ["sdpa", "flash_triton"], "step_ms": [step, step + 0.114],
                         "kernel_ms": [kernels, kernels - 0.101]})
    worst = pd.Series({"size": "small", "context_length": 1024, "flash_triton low": low, "flash_triton high": 1.082})
    words = flash_training.busy_facts(busy, worst, 4, {"measured": True, "ours_us": 130.0, "sdpa_us": 200.0})["words"]
    assert words == (f"Even at this, the worst point, the model's table could not tell the two steps apart (its "
                     f"interval, {low:.3f} to 1.082, holds 1): a difference this small, and its split between kernels "
                     f"and host, is within what the steps vary by.")


@pytest.mark.parametrize("amount, words", [(1.95, "1.95 ms more"), (-1.01, "1.01 ms less"), (0.0, "0 ms more")])
def test_a_signed_difference_is_said_as_more_or_less(amount, words):
    assert report.more_or_less(amount) == words


def test_the_gpu_bound_step_says_each_difference_with_its_sign():
    rng = np.random.default_rng()
    step, own, shared = rng.uniform(400, 450), rng.uniform(10, 20), rng.uniform(300, 350)
    gains = {"step": rng.uniform(1, 3), "own": rng.uniform(2, 5), "shared": -rng.uniform(0.5, 2)}
    times = pd.DataFrame({"attention": ["sdpa", "flash_triton"], "step_ms": [step, step + gains["step"]],
                          "own_kernel_ms": [own, own + gains["own"]],
                          "kernel_ms": [own + shared, own + gains["own"] + shared + gains["shared"]]})
    kernels = pd.DataFrame({"attention": ["flash_triton", "sdpa"], "kernel": ["flash_bwd", "cudnn_bprop"],
                            "ms": [15.0, 18.0]})
    found = flash_training.bound_facts(times, kernels, pd.Series({"size": "xl", "context_length": 2048}), "cuDNN")
    assert found["step_words"] == f"{report.fmt(gains['step'])} ms longer"
    assert found["own_words"] == f"{report.fmt(gains['own'])} ms more"
    assert found["shared_words"] == f"{report.fmt(-gains['shared'])} ms less"


def test_the_largest_batch_is_the_last_power_of_two_that_fits():
    tried = []

    def fits(n):
        tried.append(n)
        return n <= 5

    assert attention_steps.largest_power_of_two(fits, 64) == 4 and tried == [1, 2, 4, 8]
    assert attention_steps.largest_power_of_two(lambda n: True, 3) == 2
    assert attention_steps.largest_power_of_two(lambda n: False, 64) is None
    with pytest.raises(ValueError, match="at least 1, got 0"):
        attention_steps.largest_power_of_two(lambda n: True, 0)


def test_compiled_steps_run_each_size_at_the_largest_batch_that_fits(monkeypatch):
    runs = flash_sweep.compiled_steps_at_largest_batch(["tiny"], 16, dtype="fp32", attentions=("sdpa", "naive"),
                                                       max_batch=4, steps=2)
    assert list(runs.attention) == ["sdpa", "naive"] and (runs.status == "ok").all()
    assert list(runs.batch_size) == [4, 4] and runs["compile"].all()
    assert all(len(t) == 2 for t in runs.step_times_ms)
    monkeypatch.setattr(flash_sweep, "largest_batch", lambda cfg, cap: None)  # not even one sequence fits
    oom = flash_sweep.compiled_steps_at_largest_batch(["tiny"], 16, dtype="fp32", attentions=("sdpa", "naive"))
    assert list(oom.status) == ["OOM", "OOM"] and list(oom.batch_size) == [0, 0]
    # the eager step fits at 8 and the compiled one only at 2: halved until it fits
    monkeypatch.setattr(flash_sweep, "largest_batch", lambda cfg, cap: 8)
    tried = []

    def interleaved(cfg, attentions):
        tried.append(cfg.batch_size)
        status = "ok" if cfg.batch_size <= 2 else "OOM"
        return pd.DataFrame([{"size": "tiny", "batch_size": cfg.batch_size, "attention": a, "status": status}
                             for a in attentions])

    monkeypatch.setattr(flash_sweep, "interleaved", interleaved)
    halved = flash_sweep.compiled_steps_at_largest_batch(["tiny"], 16, dtype="fp32", attentions=("sdpa", "naive"))
    assert tried == [8, 4, 2] and list(halved.batch_size) == [2, 2] and (halved.status == "ok").all()


def test_the_compiled_steps_table_sets_ours_beside_sdpa_with_its_interval():
    point = {"context_length": 2048, "compile": True, "dtype": "bf16"}
    rows = [{**point, "size": size, "batch_size": batch, "attention": a, "status": "ok", "step_ms": float(np.median(t)),
             "step_times_ms": t}
            for size, batch, times in (("small", 32, {"sdpa": [10, 11, 10, 12], "flash_hopper": [10.5, 11, 10.2, 12]}),
                                       ("xl", 8, {"sdpa": [100, 101, 99, 100], "flash_hopper": [99, 100, 98, 99]}))
            for a, t in times.items()]
    rows += [{**point, "size": "2.7B", "batch_size": 0, "attention": a, "status": "OOM", "step_ms": float("nan")}
             for a in ("sdpa", "flash_hopper")]
    table, facts = hopper.model_steps(pd.DataFrame(rows))
    assert list(table["size"]) == ["small", "xl", "2.7B"] and list(table.batch) == [32, 8, 0]
    assert table["flash_hopper"].tolist()[2] == "OOM" and np.isnan(table["flash_hopper / sdpa"].iloc[2])
    assert np.isclose(table["flash_hopper / sdpa"].iloc[1], 0.99) and table.high.iloc[1] < 1
    assert facts["words"] == ("The step with flash_hopper is slower than with sdpa at small (1.010 times its time; "
                              "no 95 % interval lies wholly above 1), and no slower at the other 1 of the 2 sizes "
                              "that ran.")
    slower_everywhere = [dict(r, step_times_ms=[t + 5 for t in r["step_times_ms"]]) if r["attention"] == "flash_hopper"
                         else r for r in rows[:4]]
    for r in slower_everywhere:
        r["step_ms"] = float(np.median(r["step_times_ms"]))
    assert hopper.model_steps(pd.DataFrame(slower_everywhere))[1]["words"] == (
        "The step with flash_hopper is slower than with sdpa at small and xl (1.040 to 1.487 times its time; the 95 % "
        "interval lies wholly above 1 at small and xl).")
    assert hopper.model_steps(pd.DataFrame(rows[2:]))[1]["words"] == (
        "The step with flash_hopper is no slower than with sdpa at the one size that ran (0.990 times its time).")


def test_the_training_shapes_are_summed_up_over_all_and_over_the_kernel_bound_ones():
    # the shortest sequences' ratios are the host's jitter: the summary gives the shapes from KERNEL_BOUND_FROM on
    # their own geometric means and counts, every shape counted in the overall ones
    rng = np.random.default_rng()
    seq_lens = (512, 1024, flash_training.KERNEL_BOUND_FROM, 2 * flash_training.KERNEL_BOUND_FROM)
    shapes = [dict(dtype="bf16", d=d, n_q=n, n_k=n, batch=4, heads=16, causal=c, mode="fwd_bwd")
              for d in (64, 128) for n in seq_lens for c in (False, True)]
    rows, ratio = [], {}
    for shape in shapes:
        ours = rng.uniform(0.1, 5.0)
        ratio[shape["d"], shape["n_q"], shape["causal"]] = r = rng.uniform(0.5, 2.0)
        rows += [{**shape, "impl": "flash_triton", "ms": ours}, {**shape, "impl": "sdpa_cudnn", "ms": ours / r},
                 {**shape, "impl": "sdpa_flash", "ms": ours * 2}]
    _, facts = flash_training.training_summary(pd.DataFrame(rows))
    long = [r for (d, n, c), r in ratio.items() if n >= flash_training.KERNEL_BOUND_FROM]
    assert facts["shapes"] == len(shapes) and facts["shapes_long"] == len(long) == 8
    assert facts["slower_sdpa_cudnn"] == sum(r > 1 for r in ratio.values())
    assert facts["slower_sdpa_cudnn_long"] == sum(r > 1 for r in long)
    assert facts["gm_sdpa_cudnn_long"] == pytest.approx(float(np.exp(np.mean(np.log(long)))), rel=1e-12)
    assert facts["gm_sdpa_flash"] == pytest.approx(0.5) and facts["slower_sdpa_flash_long"] == 0
