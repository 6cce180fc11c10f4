"""The 2026 leaderboard's step and its parts (systems.bench.leaderboard_2026, systems.bench.leaderboard_step) run
end to end at toy sizes: on a CPU the one-GPU parts, and the whole step sharded over two processes joined by gloo,
with every technique the GPU run uses (FSDP2 and our FSDP, the Triton attention, the fused loss and AdamW, the
recomputation) against the plain-PyTorch recipe on the same weights."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from systems import resumable
from systems.bench import leaderboard_2026 as parts
from systems.bench import leaderboard_step as whole
from systems.bench.kernel_groups import group_times
from systems.memory.checkpointing import kept_attention_bytes, kept_groups_that_fit
from systems.kernel_names import kernel_group
from systems.model import LEADERBOARD_2026
from systems.recompute import check_stored_groups

TINY = replace(LEADERBOARD_2026, vocab_size=300, context_length=32, d_model=64, d_ff=96, num_heads=4, num_layers=2)

RNG = np.random.default_rng()


def test_the_parts_run_and_report_every_variant():
    head = parts.head_and_loss(64, cfg=TINY, dtype=torch.float32, rep=1, warmup=1)
    assert head.variant.tolist() == list(parts.HEAD_VARIANTS) and (head.ms > 0).all()
    assert head.gradients_gib.iloc[0] == pytest.approx((64 + 300) * 64 * 4 / 2**30)
    chunks = parts.head_chunks(64, [1], cfg=TINY, dtype=torch.float32, rep=1, warmup=1)
    assert chunks.chunk_tokens.tolist() == [64] and (chunks.status == "ok").all()  # a MiB holds all 64 tokens' scores
    adamw = parts.adamw_step(30_000, cfg=TINY, rep=1, warmup=1)
    assert adamw.variant.tolist() == list(parts.ADAMW_VARIANTS) and (adamw.tb_per_s > 0).all()
    assert adamw.params.iloc[0] == 300 * 64 + 64 + 2 * 64 * 64  # the embedding, a norm, the first two projections
    block = parts.block_step(["sdpa"], compiled=[False], cfg=TINY, dtype=torch.float32, rep=1, warmup=1)
    assert block.recompute.tolist() == list(parts.RECOMPUTE) and (block.ms > 0).all()
    step = parts.model_step([1], [replace(parts.Recipe(), compiled=False), replace(parts.PLAIN, attention="sdpa",
                                                                                   compiled=False)],
                            cfg=TINY, dtype=torch.float32, rep=1, warmup=1)
    assert len(step) == 2 and (step.status == "ok").all() and (step.ms > 0).all()


def test_a_point_that_does_not_fit_is_a_row_that_says_so():
    huge = replace(TINY, vocab_size=2**40)  # a weight of 2^46 values: no machine allocates it
    head = parts.head_and_loss(8, ["eager"], cfg=huge, dtype=torch.float32, rep=1, warmup=1)
    assert head.status.tolist() == ["OOM"] and head.ms.isna().all() and head.extra_gib.isna().all()


@pytest.mark.distributed
@pytest.mark.parametrize("sharding", whole.SHARDINGS)
def test_the_whole_step_runs_sharded_on_two_processes_and_agrees_with_the_plain_recipe(sharding):
    caches_before = {name: os.environ.get(name) for name in whole.CACHE_VARIABLES}
    rows = [whole.launched(2, whole.TOY, whole.on_this_machine(recipe), sharding, batch=2, rep=1, warmup=1,
                           trace=True, timeout_s=600, empty_caches=recipe is parts.PLAIN)
            for recipe in (parts.Recipe(), parts.PLAIN)]
    ours, plain = rows
    assert {name: os.environ.get(name) for name in whole.CACHE_VARIABLES} == caches_before  # the parent's are kept
    assert [row["empty_caches"] for row in rows] == [False, True]
    for row in rows:
        assert row["status"] == "ok" and row["ms"] > 0 and row["gpus"] == 2 and row["wall_s"] > row["ms"] / 1e3
        assert len(row["peak_gib_per_rank"]) == 2 and row["trace"]
        assert abs(row["first_loss"] - math.log(whole.TOY.vocab_size)) < 1.0  # near chance for a fresh model
    # the same weights, two ways to compute the step: Triton attention, fused loss and AdamW against SDPA,
    # unfused loss and PyTorch's AdamW
    assert ours["first_loss"] == pytest.approx(plain["first_loss"], rel=1e-5)


@pytest.mark.distributed
def test_the_command_that_runs_it_on_two_gpus_runs_on_two_processes(tmp_path):
    out = tmp_path / "step.json"
    torchrun = Path(sys.executable).parent / "torchrun"
    run = subprocess.run([str(torchrun), "--nproc_per_node", "2", "-m", "systems.bench.leaderboard_step", "--toy",
                          "--sharding", "fsdp2", "--recompute", "keep_attention", "--stored-blocks", "1", "--rep", "1",
                          "--warmup", "0", "--json", str(out)],
                         env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    (row,) = json.loads(out.read_text())
    assert row["sharding"] == "fsdp2" and row["layers"] == whole.TOY.num_layers and row["ms"] > 0
    assert row["stored_groups"] == 1 and "recompute keep_attention, the last 1 stored," in row["recipe"]


@pytest.mark.parametrize("args, words", [(["--stored-blocks", "3"], r"in [0, 2], got 3"),
                                         (["--stored-blocks", "1", "--recompute", "none"], "no block is checkpointed")])
def test_stored_blocks_the_model_does_not_checkpoint_are_refused_before_any_process_starts(args, words):
    run = subprocess.run([sys.executable, "-m", "systems.bench.leaderboard_step", "--toy", *args],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--stored-blocks: " in run.stderr and words in run.stderr


@pytest.mark.parametrize("args, words", [(["--sharding", "fsdp2", "fsdp"], "our FSDP gathers each layer's weight"),
                                         (["--sharding", "fsdp2"], "on GPUs only")])
@pytest.mark.parametrize("recompute", ["offload", "keep_attention_and_ffn"])
def test_keeping_the_ffn_is_refused_with_our_fsdp_and_without_a_gpu_before_any_process_starts(
        recompute, args, words, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the command's recipes uncompiled, as on a CPU
    with pytest.raises(SystemExit) as stopped:
        whole.main(["--toy", "--recompute", recompute, *args])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and f"--recompute {recompute}" in err and words in err, err


def test_the_one_gpu_command_stores_the_same_last_blocks_in_every_recipe_and_refuses_counts_that_do_not_fit(
        monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(parts, "model_step", lambda layers, recipes, **kw: asked.extend(recipes) or pd.DataFrame())
    parts.main(["model", "--layers", "4", "6", "--attention", "sdpa", "--recompute", "keep_attention",
                "--stored-blocks", "3"])
    assert [(r.attention, r.recompute, r.stored_groups) for r in asked] == \
        [("sdpa", "keep_attention", 3), (parts.PLAIN.attention, "all", 3)]
    for args, words in ((["--layers", "2", "4", "--stored-blocks", "3"], "--stored-blocks: stored_groups must be a "
                                                                         "count of checkpointed groups in [0, 2], got 3"),
                        (["--recompute", "keep_attention", "--kept-groups", "2", "--stored-blocks", "1"],
                         "--stored-blocks: kept_groups=2 first and stored_groups=1 last groups overlap")):
        with pytest.raises(SystemExit) as exit_:
            parts.main(["model", *args])
        assert exit_.value.code == 2 and words in capsys.readouterr().err


def test_the_one_gpu_command_names_the_kernels_flash_takes_here(monkeypatch):
    asked = []
    monkeypatch.setattr(parts, "model_step", lambda layers, recipes, **kw: asked.extend(recipes) or pd.DataFrame())
    monkeypatch.setattr("systems.attention.fastest.fastest_flash", lambda device: "flash_hopper")  # as on an H100
    for argv in (["model"], ["model", "--attention", "flash", "flash_hopper", "sdpa"]):
        asked.clear()
        parts.main(argv)
        assert [r.attention for r in asked][:-1] == (["sdpa_cudnn", "flash_hopper"] if argv == ["model"] else
                                                     ["flash_hopper", "sdpa"])  # the same kernels once
    # a part without attention does not ask (on an H100 asking builds the Hopper kernels)
    monkeypatch.setattr("systems.attention.fastest.fastest_flash",
                        lambda device: pytest.fail("asked which attention flash takes"))
    monkeypatch.setattr(parts, "adamw_step", lambda *a, **kw: pd.DataFrame())
    parts.main(["adamw"])


def test_the_commands_say_where_our_triton_kernels_cannot_run_before_starting(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # on a CPU without the interpreter
    for main, argv in ((parts.main, ["adamw"]), (whole.main, ["--toy"])):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2 and "Triton kernels (" in (err := capsys.readouterr().err) and \
            "cannot run here: needs a CUDA GPU (or TRITON_INTERPRET=1 to run in Triton's interpreter), not cpu" in err


def test_the_command_outside_torchrun_says_how_to_start_it():
    run = subprocess.run([sys.executable, "-m", "systems.bench.leaderboard_step", "--toy"], capture_output=True,
                         text=True, timeout=120, env={k: v for k, v in os.environ.items()
                                                     if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")})
    assert run.returncode == 2 and "start it with torchrun" in run.stderr


def test_the_chapters_words_name_what_fits_and_where_ours_wins():
    import pandas as pd

    from systems.chapters import leaderboard as words

    gib = 2**30
    memory = {name: {"total": total * gib} for name, total in (("fused loss, recomputed blocks", 83.3),
                                                                 ("fused loss, kept blocks", 232.0),
                                                                 ("unfused loss, recomputed blocks", 129.0),
                                                                 ("unfused loss, kept blocks", 278.0))}
    plan = {"step": 5.48, "compute": 5.43, "exposed": 0.0108, "optimizer": 0.0412}
    said = words.plan_words(memory, plan, 131 * gib, (121e-6, 326e9))
    assert "2 fit in 131 GiB: “fused loss, recomputed blocks” and “unfused loss, recomputed blocks”;" in said
    assert "one fits in 100 GiB: “fused loss, recomputed blocks”;" in words.plan_words(memory, plan, 100 * gib,
                                                                                        (121e-6, 326e9))
    blocks = pd.DataFrame([dict(attention=a, recompute=r, compiled=True, status="ok", ms=ms, mfu=0.5)
                           for a, r, ms in (("ours", "none", 10.0), ("plain", "none", 8.0), ("ours", "all", 12.0),
                                            ("plain", "all", 13.0))])
    comparison = words.block_comparison(blocks, "ours", "plain")
    assert comparison["ours / plain"].tolist() == pytest.approx([12 / 13, 10 / 8])
    assert "ours is faster at 1 (compiled, recompute all)." in words.block_words(comparison, "ours", "plain")
    assert "ours is faster at none of them." in words.block_words(comparison[comparison.recompute == "none"],
                                                                     "ours", "plain")


def test_the_head_words_hold_the_whole_footprint_to_the_budget():
    import pandas as pd

    from systems.chapters import leaderboard as words

    grads, workspace = RNG.uniform(1.0, 1.9), RNG.uniform(0.05, 2.0)
    head = pd.DataFrame([dict(variant="fused", status="ok", ms=380.0, tflops=640.0, extra_gib=grads + workspace,
                              gradients_gib=grads),
                         dict(variant="compiled", status="ok", ms=390.0, tflops=620.0, extra_gib=20.0,
                              gradients_gib=grads)])
    said = words.head_words(head, "GPU")
    assert f"{grads:.3g} GiB are the two gradients every head returns, {workspace:.3g} GiB its workspace" in said
    assert ("The whole is below the 2 GiB" if grads + workspace < 2 else "The whole is above the 2 GiB") in said
    assert "eager one not run" in said


def test_the_chunk_words_find_the_largest_chunk_under_the_budget_and_the_recipe_its_faster_recomputation():
    import pandas as pd

    from systems.chapters import leaderboard as words

    head = pd.DataFrame([dict(variant="compiled", status="ok", ms=380.0, extra_gib=20.2, gradients_gib=1.66)])
    chunks = pd.DataFrame([dict(chunk_mib=m, chunk_tokens=t, status="ok", ms=ms, extra_gib=g)
                           for m, t, ms, g in ((128, 384, 490.0, 1.79), (256, 768, 423.0, 1.91),
                                               (1024, 3456, 391.0, 2.66))])
    said = words.chunk_words(chunks, head)
    assert "goes from 391 to 490 ms, 1.25× slower." in said
    assert "The largest chunk that keeps the whole under 2 GiB is 256 MiB: 1.91 GiB and 423 ms, 1.11× slower" in said
    assert "No chunk size" in words.chunk_words(chunks.assign(extra_gib=3.0), head)
    assert "GPU only" in words.chunk_words(chunks.assign(extra_gib=math.nan), head)

    blocks = pd.DataFrame([dict(attention=a, recompute=r, compiled=c, status=s, ms=ms)
                           for a, r, c, s, ms in (("ours", "none", True, "ok", 5.0), ("ours", "all", True, "ok", 9.0),
                                                  ("ours", "keep_attention", True, "ok", 8.0),
                                                  ("ours", "keep_attention", False, "ok", 20.0),
                                                  ("ours", "all", False, "OOM", math.nan),
                                                  ("plain", "all", True, "ok", 1.0))])
    assert words.faster_recompute(blocks, "ours", True) == "keep_attention"  # "none" is not a recomputation
    assert words.faster_recompute(blocks, "ours", False) == "keep_attention"
    assert words.faster_recompute(blocks, "other", True) == "all"
    said = words.keeping_words(blocks.assign(extra_gib=[1.0, 3.0, 2.0, 4.0, math.nan, 1.0]), ["ours", "plain"])
    assert said == ("Keeping attention's output instead of recomputing it, a block runs with ours, compiled 1 ms "
                    "faster (1 GiB less at the peak).")  # eager: "all" did not fit; plain: "all" alone
    said = words.keeping_words(blocks.assign(extra_gib=[1.0, 3.0, 3.0, 4.0, math.nan, 1.0]), ["ours"])
    assert said.endswith("compiled 1 ms faster (the same peak).")  # not "0 GiB more"
    assert words.keeping_words(blocks, ["plain"]) == "No block ran both ways here."


def test_the_deepest_words_say_which_recipe_ran_deeper_alone():
    import pandas as pd

    from systems.chapters import leaderboard as words

    steps = pd.DataFrame([dict(layers=n, recipe=r, status=s, ms=ms, mfu=0.546 if r == "a" else 0.5, extra_gib=1.0)
                          for n, r, s, ms in ((2, "a", "ok", 10.0), (2, "b", "ok", 11.0), (4, "a", "OOM", math.nan),
                                              (4, "b", "ok", 20.0))])
    said = words.deepest(steps, "a", "b")
    assert said.startswith("Both recipes ran with up to 2 blocks (the plain one alone with up to 4 blocks). There our")
    assert words.deepest(steps, "b", "a").startswith("Both recipes ran with up to 2 blocks (ours alone with up to 4")
    assert "alone" not in words.deepest(steps[steps.layers == 2], "a", "b")
    assert "at an MFU of 54.6% against 50.0%" in said  # not rounded up to 55 %


def test_the_ablation_words_name_the_fastest_recomputing_recipe():
    import pandas as pd

    from systems.chapters import leaderboard as words

    steps = pd.DataFrame([dict(recipe=r, recompute=c, status=s, ms=ms, mfu=m)
                          for r, c, s, ms, m in (("all on", "keep_attention", "ok", 100.0, 0.5),
                                                 ("cudnn", "keep_attention", "ok", 90.0, 0.55),
                                                 ("kept", "none", "ok", 80.0, 0.6),
                                                 ("huge", "all", "OOM", math.nan, math.nan),
                                                 ("plain", "all", "ok", 101.0, 0.5))])
    said = words.ablation_words(steps, "all on", "plain")
    assert said.startswith("Of the variants that recompute their blocks, the fastest is “cudnn”, at an MFU of 55%: 1.11× "
                    "faster than ours with every technique on, and 1.12× faster than plain PyTorch's recipe.")
    assert words.ablation_words(steps.assign(ms=[100.0, 90.0, 80.0, math.nan, 85.0]), "all on", "plain").startswith(
        "Of the variants that recompute their blocks, plain PyTorch's recipe is the fastest, at an MFU of 50%, 1.18× "
        "faster than ours with every technique on.")
    assert words.ablation_words(steps[steps.recipe != "cudnn"], "all on", "plain").startswith(
        "Of the variants that recompute their blocks, ours with every technique on is the fastest, at an MFU of 50%")
    just_short = steps.assign(mfu=[0.5, 0.546, 0.6, math.nan, 0.5])  # not rounded up to 55 %
    assert "the fastest is “cudnn”, at an MFU of 54.6%:" in words.ablation_words(just_short, "all on", "plain")


def test_the_ablation_words_say_what_each_swap_did_and_which_did_not_run():
    import pandas as pd

    from systems.chapters import leaderboard as words

    ours = dict(attention="flash_hopper", fused_loss=True, fused_adamw=True, recompute="keep_attention",
                compiled=True)
    base_ms, base_gib, slower = RNG.uniform(900, 1100), RNG.uniform(60, 80), RNG.uniform(1.05, 1.2)
    rows = [dict(ours, recipe="ours", status="ok", ms=base_ms, mfu=0.5),
            dict(ours, recipe="cudnn", attention="sdpa_cudnn", status="ok", ms=base_ms / slower, mfu=0.55),
            dict(ours, recipe="unfused", fused_loss=False, status="OOM", ms=math.nan, mfu=math.nan),
            dict(ours, recipe="all", recompute="all", status="ok", ms=base_ms * slower, mfu=0.45),
            dict(ours, recipe="plain", attention="sdpa_cudnn", fused_loss=False, fused_adamw=False, recompute="all",
                 status="ok", ms=base_ms, mfu=0.5)]
    gib = [base_gib, base_gib + 0.01, math.nan, base_gib - 4.0, base_gib + 40.0]
    for column in ("extra_gib", "peak GiB (fuller rank)"):
        said = words.ablation_words(pd.DataFrame(rows).assign(**{column: gib}), "ours", "plain")
        assert (f"One technique at a time, against ours: with sdpa_cudnn in place of flash_hopper the step is "
                f"{slower:.3g}× faster, the same memory; with the unfused loss the step ran out of memory; with "
                f"recomputation “all” the step is {slower:.3g}× slower, 4 GiB less.") in said
        assert "plain" not in said.split("One technique")[1]
    assert "GiB" not in words.ablation_words(pd.DataFrame(rows), "ours", "plain").split("One technique")[1]


def test_the_two_gpu_step_runs_ours_as_the_one_gpu_chapter_chose_it(tmp_path):
    import pandas as pd

    from systems.chapters import leaderboard_two_gpus as words

    ours = parts.Recipe(attention="flash_hopper")
    faster = "keep_attention" if torch.rand(()) < 0.5 else "all"
    pd.DataFrame([dict(attention="flash_hopper", recompute=r, compiled=True, status="ok",
                       ms=1.0 if r == faster else 2.0) for r in ("all", "keep_attention")]).to_csv(tmp_path / "block.csv")
    assert words.recomputed_as_chosen(str(tmp_path), ours) == replace(ours, recompute=faster)
    assert words.recomputed_as_chosen(None, ours) == ours
    assert words.recomputed_as_chosen(str(tmp_path / "absent"), ours) == ours


def test_the_ablation_swaps_one_technique_at_a_time_and_reads_any_memory_column():
    import pandas as pd

    from systems.chapters import leaderboard as words

    ours = parts.Recipe(attention="flash_hopper", recompute="keep_attention")
    recipes = parts.ablation_recipes(ours, parts.PLAIN)
    assert recipes[0] == ours and recipes[-1] == parts.PLAIN
    changed = [{k for k in vars(ours) if getattr(r, k) != getattr(ours, k)} for r in recipes[1:-1]]
    assert changed == [{"attention"}, {"fused_loss"}, {"fused_adamw"}, {"recompute"}, {"recompute"}, {"compiled"}]
    assert {r.recompute for r in recipes[1:-1]} >= {"all", "none"}

    gib = torch.rand(len(recipes)).tolist()
    steps = pd.DataFrame([dict(recipe=r.label, status="ok", ms=100.0 + i, mfu=0.5, peak=g)
                          for i, (r, g) in enumerate(zip(recipes, gib))])
    table = words.ablation_table(steps, ours.label, "peak")
    assert table["× all on"].tolist() == pytest.approx([(100.0 + i) / 100.0 for i in range(len(recipes))])
    assert table["GiB − all on"].tolist() == pytest.approx([g - gib[0] for g in gib], abs=5e-4)

    steps.loc[1:, "peak"] = steps.peak[0] + torch.tensor([1.9e-06, -3.1e-11, 2.0, 0.25, -0.5, 0, 1.0]).tolist()
    differences = words.ablation_table(steps, ours.label, "peak")["GiB − all on"].tolist()
    assert differences == [0.0, 0.0, 0.0, 2.0, 0.25, -0.5, 0.0, 1.0]
    assert all(str(d) != "-0.0" for d in differences)  # a table printing -0 for the same memory would read oddly


def test_an_offloading_recipe_comes_from_one_keeping_attention_compiled_and_its_swaps_build_their_models():
    from systems.chapters import leaderboard as words

    keeping = parts.Recipe(attention="sdpa", recompute="keep_attention")
    ours = words.offloading(keeping)
    assert ours == replace(keeping, recompute="offload") and "recompute offload," in ours.label
    for other in (replace(keeping, compiled=False), replace(keeping, recompute="all"), replace(keeping, kept_groups=1),
                  replace(keeping, stored_groups=1)):
        assert words.offloading(other) == other
    for recompute in ("offload", "keep_attention_and_ffn"):
        with pytest.raises(ValueError, match=f"recompute='{recompute}' runs each group compiled.*an eager recipe"):
            replace(ours, recompute=recompute, compiled=False).check(2)
    recipes = parts.ablation_recipes(ours, parts.PLAIN)
    changed = [{k for k in vars(ours) if getattr(r, k) != getattr(ours, k)} for r in recipes[1:-1]]
    assert changed == [{"attention"}, {"fused_loss"}, {"fused_adamw"}, {"recompute"}, {"recompute"},
                       {"compiled", "recompute"}]
    assert recipes[4].recompute == recipes[6].recompute == "keep_attention"
    for recipe in recipes:
        recipe.check(TINY.num_layers)
        with torch.device("meta"):
            assert recipe.model(TINY).recompute == ("all" if recipe.recompute == "none" else recipe.recompute)


def test_a_recipe_keeping_attention_in_some_blocks_builds_that_model_and_its_swaps_build_theirs():
    ours = parts.Recipe(attention="sdpa", recompute="keep_attention", kept_groups=1)
    assert "recompute keep_attention in 1 block," in ours.label
    assert "recompute keep_attention in 2 blocks," in replace(ours, kept_groups=2).label
    assert " in " not in parts.Recipe(attention="sdpa", recompute="keep_attention").label
    for recompute in ("none", "all"):  # a count of kept blocks where nothing is kept names the recomputation
        with pytest.raises(ValueError, match=f"only recompute='keep_attention' keeps; got recompute='{recompute}'"):
            replace(ours, recompute=recompute).model(TINY)
    for recipe in parts.ablation_recipes(ours, parts.PLAIN):  # the swaps to "all" and "none" keep nothing
        with torch.device("meta"):
            model = recipe.model(TINY)
        assert model.kept_groups == (1 if recipe.recompute == "keep_attention" else None)
    step = parts.model_step([2], [replace(ours, compiled=False)], cfg=TINY, dtype=torch.float32, rep=1, warmup=1)
    assert step.status.tolist() == ["ok"] and step.kept_groups.tolist() == [1]
    stored = replace(ours, kept_groups=0, stored_groups=1, compiled=False)  # the last block stores everything
    assert "recompute keep_attention in 0 blocks, the last 1 stored," in stored.label
    with torch.device("meta"):
        assert stored.model(TINY).stored_groups == 1
    for recipe in parts.ablation_recipes(stored, parts.PLAIN):  # without recomputation nothing is "stored" apart
        with torch.device("meta"):
            assert recipe.model(TINY).stored_groups == (0 if recipe.recompute == "none" or recipe is parts.PLAIN else 1)
    step = parts.model_step([2], [stored], cfg=TINY, dtype=torch.float32, rep=1, warmup=1)
    assert step.status.tolist() == ["ok"] and step.kept_blocks.tolist() == [1] and step.stored_groups.tolist() == [1]


def test_the_kept_blocks_that_fit_come_from_a_line_through_the_shallower_depths():
    slope, intercept, per_block = RNG.uniform(0.5, 2.0), RNG.uniform(10, 40), RNG.uniform(0.2, 0.6)
    depths = [2, 4, 8, 12]
    peaks = [intercept + slope * n for n in depths]
    target, limit = 16, intercept + slope * 16 - 3.3 * per_block  # every block kept overshoots by 3.3 blocks' worth
    kept = kept_groups_that_fit(depths, peaks, target, limit, per_block, headroom=0.0)
    assert kept == target - 4  # the fewest recomputed blocks that bring it under
    assert kept_groups_that_fit(depths, peaks, target, limit / 0.9, per_block) == target - 4  # 10 % spare
    assert kept_groups_that_fit(depths, peaks, target, limit / 0.9 - per_block, per_block) == target - 5
    assert kept_groups_that_fit(depths, peaks, target, limit + 10, per_block, headroom=0.0) == target - 1
    assert kept_groups_that_fit(depths, peaks, target, 0.0, per_block) == 0
    assert kept_groups_that_fit([2, 2], peaks[:2], target, limit, per_block) is None  # no line
    assert kept_groups_that_fit(depths, [math.nan] * 4, target, limit, per_block) is None  # not measured


def test_the_kept_blocks_predicted_for_the_16_block_step_on_an_h100():
    # on an H100 80GB (78.66 GiB allocatable), 2026-11-27: our step keeping attention in every block peaked at these
    # GiB (chapter 18's run at 0bf3356 measured what each added; what existed before is 10 bytes a parameter, as
    # measured at 16 blocks); at 16 blocks keeping it in 12 fitted (70.7 GiB) and in 14 did not (6247bf1)
    cfg = LEADERBOARD_2026
    per_block = kept_attention_bytes(2, cfg.context_length, cfg.d_model, cfg.num_heads, 2) / parts.GIB
    assert per_block == pytest.approx((2 * 32768 * 4096 * 2 + 2 * 32 * 32768 * 4) / 2**30)
    kept = kept_groups_that_fit([2, 4, 8, 12], [31.58, 37.36, 48.93, 60.50], 16, 78.66, per_block)
    assert kept == 13  # one more than fitted: the try after it, one fewer, fits


OURS_KEEPING = parts.Recipe(attention="sdpa", recompute="keep_attention")


def a_30_gib_gpu(monkeypatch) -> None:
    """A GPU of 30 GiB, 27 of them usable by the rule's headroom, on which a block keeping attention allocates 1 GiB
    more than one recomputed whole, and the step fits while its peak is at most 25.5 GiB."""
    per_block = 1.0
    peak = lambda recipe, n: 5 + n + per_block * recipe.kept_blocks(n)  # noqa: E731
    monkeypatch.setattr(parts, "_model", lambda cfg, recipe, batch, dtype: (recipe, cfg.num_layers))
    monkeypatch.setattr(parts, "kept_attention_bytes", lambda *shape: per_block * parts.GIB)

    def measure(make, rep, warmup):
        recipe, n = make()
        gib = peak(recipe, n)
        return ({"status": "ok", "ms": 100.0 * n, "extra_gib": gib - 5, "peak_gib": gib, "reserved_gib": gib + 2}
                if gib <= 25.5 else {"status": parts.OOM, **dict.fromkeys(("ms", "extra_gib", "peak_gib",
                                                                              "reserved_gib"), math.nan)})

    monkeypatch.setattr(parts, "measure", measure)


def test_a_step_that_keeps_attention_everywhere_and_does_not_fit_tries_fewer_kept_blocks(monkeypatch):
    a_30_gib_gpu(monkeypatch)
    ours = OURS_KEEPING
    steps = parts.model_step([2, 4, 8, 12], [ours, parts.PLAIN], cfg=TINY, capacity_gib=30.0)
    tries = steps[steps.recipe == ours.label]
    # 12 blocks keeping it everywhere peak at 29 GiB; the line through 2, 4 and 8 says 10 of them fit in 27, but
    # they peak at 27 and do not fit under 25.5: 9 do not either, 8 do
    assert tries.layers.tolist() == [2, 4, 8, 12, 12, 12, 12] and tries.kept_blocks.tolist() == [2, 4, 8, 12, 10, 9, 8]
    assert tries.status.tolist() == ["ok", "ok", "ok", "OOM", "OOM", "OOM", "ok"]
    assert tries.kept_groups.tolist()[-3:] == [10, 9, 8] and tries.kept_groups.isna().sum() == 4
    assert steps[steps.recipe == parts.PLAIN.label].kept_blocks.tolist() == [0, 0, 0, 0]  # every block recomputed
    said = words_of_deepest(steps, ours, parts.PLAIN)
    assert "keeping attention's output in the first 8 of its 12 blocks (keeping it in 9 ran out of memory)," in said
    # a recipe that names its kept blocks is measured as asked, and tries stop after ``tries``
    named = parts.model_step([12], [replace(ours, kept_groups=12)], cfg=TINY, capacity_gib=30.0)
    assert named.status.tolist() == ["OOM"]
    few = parts.model_step([2, 4, 8, 12], [ours], cfg=TINY, capacity_gib=30.0, tries=1)
    assert few.status.tolist() == ["ok", "ok", "ok", "OOM", "OOM"]


def test_the_retries_of_a_step_that_stores_its_last_blocks_count_them_among_those_keeping_attention(monkeypatch):
    a_30_gib_gpu(monkeypatch)
    tries = parts.model_step([2, 4, 8, 12], [replace(OURS_KEEPING, stored_groups=2)], cfg=TINY, capacity_gib=30.0)
    # the peaks of the recipe that stores nothing (the mock counts a stored block as one keeping attention): the
    # same tries, each keeping it in 2 groups fewer, since the last 2 keep it already
    assert tries.kept_blocks.tolist() == [2, 4, 8, 12, 10, 9, 8] and tries.status.tolist()[-1] == "ok"
    assert tries.kept_groups.tolist()[-3:] == [8, 7, 6]
    for kept in tries.kept_groups.dropna():  # every try is a model that can be built
        check_stored_groups(2, 12, int(kept))


def test_the_step_swept_point_by_point_and_resumed_retries_as_the_whole_sweep_does(monkeypatch, tmp_path):
    a_30_gib_gpu(monkeypatch)
    steps = parts.model_step([2, 4, 8, 12], [OURS_KEEPING, parts.PLAIN], cfg=TINY, capacity_gib=30.0)
    points, timed, stopped = list(product([2, 4, 8, 12], [OURS_KEEPING, parts.PLAIN])), parts.measure, []

    def stopping_at_the_deepest(make, rep, warmup):  # a run killed in its first try at 12 blocks
        recipe, n = make()
        if n == 12 and not stopped:
            stopped.append(n)
            raise KeyboardInterrupt
        return timed(lambda: (recipe, n), rep, warmup)

    monkeypatch.setattr(parts, "measure", stopping_at_the_deepest)
    with pytest.raises(KeyboardInterrupt):
        resumable.measured_sweep(tmp_path, "model_step", parts.step_at, points, cfg=TINY, capacity_gib=30.0)
    # the resumed run reads the shallower depths' peaks back from the record and predicts from them as before
    swept = resumable.measured_sweep(tmp_path, "model_step", parts.step_at, points, cfg=TINY, capacity_gib=30.0)
    columns = ["layers", "recipe", "kept_blocks", "status", "ms", "peak_gib"]
    pd.testing.assert_frame_equal(swept[columns], steps[columns])


def words_of_deepest(steps, ours, plain):
    from systems.chapters import leaderboard as words

    return words.deepest(steps, ours.label, plain.label)


def test_the_cold_start_words_hold_the_run_to_the_handouts_ten_minutes():
    from systems.chapters import leaderboard_two_gpus as words

    assert words.cold_start_words({"status": "ok", "wall_s": 412.4, "ms": 5321.7}) == (
        "It took 412 s from start to end, within the handout's 10 minutes, and timed the step at 5321.7 ms.")
    assert "over the handout's 10 minutes" in words.cold_start_words({"status": "ok", "wall_s": 600.2, "ms": 1.0})
    assert words.cold_start_words({"status": "OOM"}) == "The run from empty caches did not finish here (OOM)."


def test_the_step_kernels_are_grouped_by_what_they_do_and_a_recipe_that_does_not_fit_says_so():
    recipes = [replace(parts.Recipe(), compiled=False), replace(parts.PLAIN, attention="sdpa", compiled=False)]
    kernels = parts.step_kernels(1, recipes, cfg=TINY, dtype=torch.float32, steps=1, warmup=1)
    assert kernels.recipe.unique().tolist() == [r.label for r in recipes] and (kernels.status == "ok").all()
    assert (kernels.ms > 0).all() and (kernels.calls > 0).all() and kernels.layers.eq(1).all()
    # on a CPU the operators stand in for the kernels: the projections are matmuls in both recipes, and each
    # attention's operators are attention
    for label, its in kernels.groupby("recipe"):
        assert {"matmuls", "attention"} <= set(its.group), (label, its.kernel.tolist())
    shares = group_times(kernels)
    assert shares.groupby("recipe").share.sum().to_numpy() == pytest.approx([1.0, 1.0])
    assert shares.ms.sum() == pytest.approx(kernels.ms.sum())
    # an offloading step's copies run beside its kernels: a share of their time, not a part of it
    copies = pd.DataFrame({"recipe": ["r"] * 3, "kernel": ["gemm", "flash", "Memcpy DtoH (Device -> Pinned)"],
                           "ms": RNG.uniform(1, 10, 3), "status": "ok"})
    copies["group"] = copies.kernel.map(kernel_group)
    shares = group_times(copies).set_index("group").share
    assert shares[["matmuls", "attention"]].sum() == pytest.approx(1.0)
    assert shares["copies to and from host memory"] == pytest.approx(copies.ms[2] / copies.ms[:2].sum())
    huge = replace(TINY, vocab_size=2**40)  # a weight of 2^46 values: no machine allocates it
    missing = parts.step_kernels(1, recipes[:1], cfg=huge, dtype=torch.float32)
    assert missing.status.tolist() == ["OOM"] and missing.recipe.tolist() == [recipes[0].label]


@pytest.mark.parametrize("name, group", [  # names from the leaderboard's step on an H200 (book/log.md, 2026-11-29)
    ("void systems_flash_hopper::hopper_fwd_kernel<__nv_bfloat16, 128, 3, 2, true, true>(CUtensorMap_st)", "attention"),
    ("void systems_flash_cuda::delta_kernel<__nv_bfloat16, 128>(systems_flash_cuda::Problem)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0",
     "attention"),
    ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*)", "attention"),
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "matmuls"),
    ("triton_poi_fused__unsafe_view_add_hopper_attention_backward_mul_slice_stack_sub_transpose_view_6",
     "fused by the compiler"),
    ("triton_red_fused__log_softmax__to_copy__unsafe_view_nll_loss_forward_sub_view_8", "fused by the compiler"),
    ("_loss_and_grad_kernel", "loss"),
    ("_adamw_kernel", "optimizer"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<4>>()", "optimizer"),
    ("Memset (Device)", "other"),
    ("aten::mm", "matmuls"),
    ("Memcpy DtoH (Device -> Pinned)", "copies to and from host memory"),
    ("Memcpy HtoD (Pinned -> Device)", "copies to and from host memory"),
    ("Memcpy DtoD (Device -> Device)", "other"),
])
def test_kernel_names_fall_in_the_group_of_what_they_do(name, group):
    assert kernel_group(name) == group


def test_the_kernel_words_give_the_shares_and_what_the_mfu_mark_asks_of_each_block():
    from systems.chapters import leaderboard as words

    ours, plain = "ours", "plain"
    rows = [(ours, "nvjet_a", "matmuls", 600.0), (ours, "hopper_fwd", "attention", 120.0),
            (ours, "hopper_bwd", "attention", 360.0), (ours, "triton_poi_x", "fused by the compiler", 120.0),
            (plain, "nvjet_a", "matmuls", 600.0), (plain, "cudnn_fprop", "attention", 250.0),
            (plain, "cudnn_bprop", "attention", 360.0), (plain, "_adamw", "optimizer", 40.0)]
    kernels = pd.DataFrame([{"recipe": r, "kernel": k, "group": g, "ms": ms, "calls": 1.0, "status": "ok",
                             "layers": 4} for r, k, g, ms in rows])
    steps = pd.DataFrame([{"recipe": ours, "layers": 8, "status": "ok", "ms": 3000.0, "mfu": 0.50},
                          {"recipe": ours, "layers": 16, "status": "ok", "ms": 4800.0, "mfu": 0.52},
                          {"recipe": ours, "layers": 20, "status": "OOM", "ms": math.nan, "mfu": math.nan}])
    said = words.kernel_words(kernels, steps, ours, plain)
    assert said.startswith("At 4 blocks the matmuls take 50% of our step's kernel time and the attention 40%; in "
                           "plain PyTorch's step 48% and 49%.")
    assert "the attention costs our step 120 ms a block and plain PyTorch's 152.5," in said
    # 4800 ms at 52 % is 4538 ms at 55 %: 262 ms less in 16 blocks, 16.4 a block, 14 % of 120
    assert said.endswith("At 16 blocks, the deepest it ran, our step reached 52.0% MFU; 55% would need 16.4 ms less "
                         "a block, 14% of what its attention takes a block here.")
    # just short of the mark: the MFU does not read as 55.0%, the share not as 0%
    near = pd.DataFrame([{"recipe": ours, "layers": 20, "status": "ok", "ms": 5639.0, "mfu": 0.5498}])
    assert words.kernel_words(kernels, near, ours, plain).endswith(
        "our step reached 54.98% MFU; 55% would need 0.103 ms less a block, 0.085% of what its attention takes a "
        "block here.")
    table = words.kernel_group_table(kernels, ours, plain)
    assert table.group.tolist()[0] == "matmuls" and table["ours, percent"].sum() == pytest.approx(100.0)
    assert table.loc[table.group == "optimizer", "ours, ms"].item() == 0.0
    missing = pd.concat([kernels[kernels.recipe == ours], pd.DataFrame([{"recipe": plain, "status": "OOM"}])])
    assert words.kernel_words(missing, steps, ours, plain) == "Plain PyTorch's step did not run under the profiler (OOM)."
    neither = pd.DataFrame([{"recipe": r, "status": "OOM"} for r in (ours, plain)])
    assert words.kernel_words(neither, steps, ours, plain) == ("Our step did not run under the profiler (OOM); plain "
                                                               "PyTorch's step did not run under the profiler (OOM).")
    assert words.kernel_group_table(neither, ours, plain).empty
