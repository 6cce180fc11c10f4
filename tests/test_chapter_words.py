"""What the data-parallel chapters (09 DDP, 10 bucket model, 12 training, 16 FSDP on two GPUs) say of their
measurements: each sentence chosen from fresh random tables built so that the right one is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from systems import report
from systems.bench.timing import apart
from systems.chapters import bucket_model, ddp, fsdp_two_gpus, training
from systems.chapters.sharding import memory_table

RNG = np.random.default_rng()


def test_apart_takes_the_standard_error_of_the_difference():
    std, steps = RNG.uniform(1, 10), int(RNG.integers(4, 50))
    edge = 2 * (2 * std**2 / steps) ** 0.5
    assert not apart(100.0, std, 100.0 + 0.99 * edge, std, steps)
    assert apart(100.0, std, 100.0 + 1.01 * edge, std, steps)
    assert apart(100.0 + 1.01 * edge, std, 100.0, std, steps)


def _runs(step_ms: dict[str, float], std_ms: float, steps: int = 20, comm_ms: float = 40.0) -> pd.DataFrame:
    return pd.DataFrame([{"run": run, "variant": run.split()[0], "status": "ok", "step_ms": ms, "step_std_ms": std_ms,
                          "steps": steps, "comm_ms": comm_ms, "comm_share": comm_ms / ms}
                         for run, ms in step_ms.items()])


@pytest.mark.parametrize("flat_vs_naive, words", [(-40.0, "saves that much"), (40.0, "costs more than it saves"),
                                                  (0.5, "the same within their run-to-run spread")])
def test_batching_is_read_against_the_steps_spread(flat_vs_naive, words):
    naive = RNG.uniform(200, 300)
    found = ddp.step_facts(_runs({"naive": naive, "flat": naive + flat_vs_naive, "overlap": naive}, std_ms=5.0), 400)
    assert words in found["batching_words"]


@pytest.mark.parametrize("overlap_vs_sync, words", [(-40.0, "that much shorter"), (40.0, "costs more than it hides"),
                                                    (1.0, "no shorter, within its run-to-run spread")])
def test_overlap_is_read_against_the_steps_spread(overlap_vs_sync, words):
    sync = RNG.uniform(200, 300)
    found = ddp.step_facts(_runs({"naive": sync + 50, "flat": sync, "overlap": sync + overlap_vs_sync}, std_ms=5.0), 400)
    assert words in found["overlap_words"]
    assert found["overlap_saves"] == pytest.approx(-overlap_vs_sync)
    assert found["overlap_vs_sync"] == f"{abs(overlap_vs_sync):.3g} ms {'more' if overlap_vs_sync > 0 else 'less'}"


@pytest.mark.parametrize("times, words", [([290, 250, 260, 280], "the best size lies between the extremes"),
                                          ([290, 250, 260, 251], "1000 MiB (251 ms) is as fast within"),
                                          ([290, 280, 270, 250], "the largest size is the fastest"),
                                          ([250, 280, 290, 295], "the smallest size is the fastest"),
                                          ([260, 260.5, 259.8, 260.3], "All sizes take the same time")])
def test_the_bucket_sweep_has_a_shape_only_beyond_its_spread(times, words):
    sizes = [1.0, 10.0, 100.0, 1000.0]
    sweep = _runs({f"bucketed {s:g} MB": t for s, t in zip(sizes, times)}, std_ms=3.0).assign(bucket_size_mb=sizes)
    shuffled = sweep.sample(frac=1, random_state=int(RNG.integers(1 << 31)))
    found = ddp.bucket_facts(pd.concat([shuffled[:2], shuffled[2:].reset_index(drop=True)]))  # labels repeat
    assert words in found["shape_words"]
    assert found["best_ms"] == min(times) and found["best_mb"] == sizes[int(np.argmin(times))]


def test_the_bucket_model_reads_sweeps_joined_with_repeated_labels():
    # chapter 10 joins chapter 09's coarse and fine sweeps: row labels repeat, and the fastest size must still be one
    sizes = RNG.permutation([1.0, 10.0, 100.0, 1000.0, 250.0, 500.0, 2000.0, 4000.0])
    step_ms = RNG.uniform(250, 300, sizes.size)
    runs = pd.DataFrame({"variant": "bucketed", "status": "ok", "bucket_size_mb": sizes, "step_ms": step_ms})
    joined = pd.concat([runs[:4], runs[4:].reset_index(drop=True)])
    assert joined.index.has_duplicates
    model = bucket_model.model_vs_measured(joined, base_ms=200.0, s=10 * 2**30, o=1e-4, w=3e11)
    found = bucket_model.findings(model, s=10 * 2**30, o=1e-4, w=3e11, base_ms=200.0)
    assert found["best_mb"] == sizes[step_ms.argmin()]
    assert found["best_ms"] == pytest.approx(step_ms.min() - 200.0)


@pytest.mark.parametrize("measured, words", [([9.0, 9.0, 9.0], "larger than the model's at every size"),
                                             ([0.1, 0.1, 0.1], "smaller than the model's at every size"),
                                             ([0.1, 9.0, 9.0], "cross. Where the measurement lies below the model (at 1 MiB)")])
def test_the_bucket_model_says_on_which_side_the_measurement_lies(measured, words):
    model = pd.DataFrame({"bucket_size_mb": [1.0, 10.0, 100.0], "n_buckets": [100, 10, 1], "step_ms": 0.0,
                          "measured_ms": measured, "predicted_ms": [1.0, 1.0, 1.0]})
    assert words in bucket_model.findings(model, s=100 * 2**20, o=1e-5, w=1e11, base_ms=100.0)["sign_words"]


def test_the_training_runs_losses_are_compared_at_every_step():
    steps = 6
    records = pd.DataFrame([{"attention": a, "wrapper": w, "step": i, "loss": 5.0 - 0.1 * i}
                            for a in ("naive", "sdpa") for w in ("none", "torch", "fsdp") for i in range(steps)])
    gap = RNG.uniform(1e-6, 1e-3)
    middle = (records.wrapper == "fsdp") & (records.step == steps // 2)
    records.loc[middle, "loss"] += gap  # apart at one step in the middle, equal at the last
    summary = pd.DataFrame([{"attention": a, "wrapper": w, "tokens_per_s": RNG.uniform(1e4, 1e5)}
                            for a in ("naive", "sdpa") for w in ("none", "torch", "fsdp")])
    assert training.findings(summary, records, 2)["loss_spread"] == pytest.approx(gap)


def test_the_attentions_are_ranked_with_how_many_wrappers_agree():
    wrappers = ["none", "torch", "flat", "fsdp"]
    base = {w: RNG.uniform(1e4, 1e5) for w in wrappers}
    base["fsdp"] = 0.5 * min(base.values())  # the one wrapper sdpa wins stays below every median
    slower = RNG.uniform(0.5, 0.9)  # naive: slower under every wrapper; sdpa: faster than flash under one only
    rows = [{"attention": "flash", "wrapper": w, "tokens_per_s": base[w]} for w in wrappers]
    rows += [{"attention": "sdpa", "wrapper": w, "tokens_per_s": base[w] * (1.01 if w == "fsdp" else 0.99)}
             for w in wrappers]
    rows += [{"attention": "naive", "wrapper": w, "tokens_per_s": base[w] * slower} for w in wrappers]
    said = training.ranking(pd.DataFrame(rows))
    assert said.startswith("flash (") and ", then sdpa (" in said and ", then naive (" in said
    assert "flash the faster under 3 of 4 wrappers" in said and "sdpa the faster under 4 of 4 wrappers" in said


@pytest.mark.parametrize("bf16_ratio, words", [(1.05, "within the 10 % we aim for in both"),
                                               (1.21, "within the 10 % we aim for in fp32 only")])
def test_our_fsdps_time_goal_is_read_for_each_precision(bf16_ratio, words):
    params, world = int(RNG.integers(1e9, 4e9)), 2
    share = 16 * params / world / 2**30
    fp32, bf16 = RNG.uniform(500, 1000), RNG.uniform(200, 300)
    summary = pd.DataFrame({"setup": ["FSDP (ours)", "FSDP2", "FSDP (ours) bf16", "FSDP2 bf16"], "status": "ok",
                            "step_ms": [fp32, fp32, bf16 * bf16_ratio, bf16],
                            "after step (GiB)": [share * 1.01, share, share, share],
                            "step peak (GiB)": [40.0, 40.0, 30.0, 30.0]})
    found = fsdp_two_gpus.goal_facts(summary, params, world)
    assert words in found["time_words"] and f"{bf16_ratio:.3g} times in bf16" in found["time_words"]
    assert found["state_ratio"] == pytest.approx(1.01) and "(within 5 % of what sharding" in found["memory_words"]


def test_a_setup_out_of_memory_is_a_row_that_says_so_and_leaves_the_goals_unsaid():
    params, world = int(RNG.integers(1e9, 4e9)), 2
    memory = [{"iteration": 1, "point": "after step", "allocated_mb": RNG.uniform(1e3, 1e4),
               "peak_mb": RNG.uniform(1e4, 2e4)}]
    rows = [{"optimizer": name, "status": "ok", "step_ms": RNG.uniform(100, 300), "memory": memory}
            for name in ("FSDP (ours)", "FSDP2", "FSDP (ours) bf16")]
    rows.append({"optimizer": "FSDP2 bf16", "status": "OOM", "params": params})
    summary = fsdp_two_gpus.setup_summary(rows)
    assert list(summary.status) == ["ok", "ok", "ok", "OOM"] and summary.iloc[3, 2:].isna().all()
    found = fsdp_two_gpus.goal_facts(summary, params, world)
    assert found["time_words"].startswith("FSDP2 bf16 did not run") and found["memory_words"] == ""
    table = memory_table(rows)
    assert list(table["FSDP2 bf16"]) == ["OOM"] and table["FSDP2"].iloc[0].count(" / ") == 1


def test_the_memory_table_of_setups_that_all_ran_out_of_memory_says_so_in_each_column():
    names = ["FSDP (ours)", "FSDP2", "FSDP (ours) bf16", "FSDP2 bf16"]
    table = memory_table([{"optimizer": name, "status": "OOM", "params": 10**9} for name in names])
    assert list(table.columns) == ["iteration", "point"] + names and table[names].iloc[0].tolist() == ["OOM"] * 4
    assert "nan" not in report.markdown_table(table)


@pytest.mark.parametrize("ours_vs_torch, words", [(-30.0, "faster than PyTorch's reducer"),
                                                  (30.0, "PyTorch's reducer is ahead"),
                                                  (1.0, "as fast as PyTorch's C++ reducer within")])
def test_ours_against_pytorchs_ddp_is_read_against_the_steps_spread(ours_vs_torch, words):
    theirs = RNG.uniform(200, 300)
    runs = _runs({"torch": theirs, "bucketed 100 MB": theirs + ours_vs_torch, "naive": theirs + 60}, std_ms=5.0)
    table, found = ddp.against_torch(runs)
    assert words in found["words"] and found["best_run"] == "bucketed 100 MB"
    assert found["best_vs_torch"] == pytest.approx((theirs + ours_vs_torch) / theirs)
    assert "nothing to compare" in ddp.against_torch(runs[runs.run != "torch"])[1]["words"]


def _intervals(run: str, compute: list[tuple[float, float]], comm: list[tuple[float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"run": run, "lane": lane, "kind": kind, "start_ms": s, "end_ms": e}
                         for kind, lane, spans in (("compute", "stream 7", compute), ("communication", "stream 9", comm))
                         for s, e in spans])


def test_the_fsdp_timelines_count_idle_time_and_collectives_per_run():
    gap = RNG.uniform(1, 5)
    runs = pd.concat([
        _intervals("fsdp", [(0, 10), (10 + gap, 20)], [(2, 4), (16, 18)]),  # both under compute, whatever the gap
        _intervals("fsdp2", [(0, 20)], [(1, 3)]),
        _intervals("fsdp bfloat16", [(0, 2), (2 + 3 * gap, 6 + 3 * gap)], [(1, 2), (3, 4), (5, 6), (7, 8)]),
        _intervals("fsdp2 bfloat16", [(0, 6)], [(1, 2)])])
    found = fsdp_two_gpus.timeline_facts(runs)
    assert found["ours_idle"] == pytest.approx(gap) and found["ours_span"] == pytest.approx(20)
    assert found["ours_overlap"] == pytest.approx(4) and found["theirs_idle"] == pytest.approx(0)
    assert found["verdict"].startswith("do not all arrive in time" if gap > 1 else "arrive in time")
    assert f"idles {3 * gap:.3g} ms" in found["bf16_words"]
    assert "runs 4 communication kernels a step where FSDP2 runs 1" in found["bf16_words"]
    assert "Ours leaves the GPU idle for the larger share of its step" in found["bf16_words"]
    busy = {"fsdp bfloat16": "fsdp2 bfloat16", "fsdp2 bfloat16": "fsdp bfloat16"}
    swapped = fsdp_two_gpus.timeline_facts(runs.assign(run=runs.run.replace(busy)))
    assert swapped["bf16_words"].endswith("FSDP2 leaves the GPU idle for the larger share of its step.")
    alike = pd.concat([runs[~runs.run.str.endswith("bfloat16")], _intervals("fsdp bfloat16", [(0, 6)], [(1, 2)]),
                       _intervals("fsdp2 bfloat16", [(0, 3), (3 + 0.02 * gap, 6)], [(1, 2)])])
    assert fsdp_two_gpus.timeline_facts(alike)["bf16_words"].endswith("about as busy, within 5 % of the step.")
    assert fsdp_two_gpus.timeline_facts(runs[~runs.run.str.endswith("bfloat16")])["bf16_words"].startswith("No bf16")
