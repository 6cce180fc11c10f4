"""Every number of the log entry of 2026-12-01 (offload: the stopped backward, the trainer, 20 blocks;
keep_attention_and_ffn), from the files beside this script."""
import json
import re
import statistics
from pathlib import Path

here = Path(__file__).parent

print("The trainer, xl preset, bf16 autocast, 16,384 tokens a step, 12 steps (median of steps 2 to 11):")
runs = {  # file: (context, sequences, how the blocks are recomputed)
    "run1_train_none": (2048, 8, "none (no checkpointing)"), "run1_train_all": (2048, 8, "all"),
    "run1_train_keep_attention": (2048, 8, "keep_attention"), "run2_train_offload_2048": (2048, 8, "offload"),
    "run2_train_all_8192": (8192, 2, "all"), "run2_train_keep_attention_8192": (8192, 2, "keep_attention"),
    "run2_train_offload_8192": (8192, 2, "offload"),
    "run7_train_keep_attention_2048": (2048, 8, "keep_attention (run 7)"),
    "run7_train_keep_attention_and_ffn_2048": (2048, 8, "keep_attention_and_ffn"),
    "run7_train_keep_attention_8192": (8192, 2, "keep_attention (run 7)"),
    "run7_train_keep_attention_and_ffn_8192": (8192, 2, "keep_attention_and_ffn"),
    "run8_train_keep_attention_compiled": (2048, 8, "keep_attention, --compile"),
    "run8_train_keep_attention_and_ffn": (2048, 8, "keep_attention_and_ffn (run 8)"),
    "run8_train_none_compiled": (2048, 8, "none, --compile"),
}
rows = {}
for name, (context, batch, recompute) in runs.items():
    steps = [json.loads(line) for line in (here / f"{name}.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "step_ms" in s]
    rows[name] = dict(context=context, batch=batch, recompute=recompute,
                      ms=statistics.median(s["step_ms"] for s in steps[2:]),
                      tokens_per_s=statistics.median(s["tokens_per_s"] for s in steps[2:]),
                      peak_mib=steps[-1]["peak_memory_mb"], loss=steps[-1]["loss"], steps=len(steps))
print("(the last column: against keep_attention eager in runs 1, 2 and 7, compiled in run 8)")
print(f"{'context':>7} {'batch':>5} {'recompute':<24} {'ms':>8} {'tokens/s':>9} {'peak MiB':>9} {'final loss':>10}"
      f" {'/ keep_attention':>16}")
for name, r in rows.items():
    run = name[:4] if name[:4] in ("run7", "run8") else "run1" if r["context"] == 2048 else "run2"
    keep = rows["run8_train_keep_attention_compiled" if run == "run8" else
                f"{run}_train_keep_attention" + ("" if run == "run1" else f"_{r['context']}")]["ms"]
    print(f"{r['context']:>7} {r['batch']:>5} {r['recompute']:<24} {r['ms']:8.1f} {r['tokens_per_s']:9.0f} "
          f"{r['peak_mib']:9.0f} {r['loss']:10.4f} {r['ms'] / keep:16.3f}")

print("\nThe leaderboard's 20-block step in an H100 80GB's memory (60.15 GiB held), each recipe in a call of its own:")
ours = json.loads((here / "run4_ours20.json").read_text())[0]
plain = json.loads((here / "run6_plain20.json").read_text())[0]
for r in (ours, plain):
    print(f"  {r['recipe']}: {r['status']}, {r['ms']:.1f} ms, MFU {100 * r['mfu']:.1f} %, "
          f"peak {r['peak_gib']:.1f} GiB, above the step's start {r['extra_gib']:.1f} GiB")
print(f"  plain / ours: {plain['ms'] / ours['ms']:.3f}")
for hold in ("run4_hold.txt", "run6_hold.txt"):
    print(f"  {hold}: {(here / hold).read_text().strip()}")

ffn = json.loads((here / "run7_ffn4.json").read_text())[0]
print(f"\nThe leaderboard's 4-block step on the whole H200 (run 7): {ffn['recipe']}: {ffn['status']}, "
      f"{ffn['ms']:.1f} ms, MFU {100 * ffn['mfu']:.1f} %, peak {ffn['peak_gib']:.1f} GiB")

print("\nThe stopped backward, probed (race_probe.py):")
for probe in ("run4_probe.txt", "run5_probe.txt"):
    print(f"  {probe}:")
    for line in (here / probe).read_text().splitlines():
        print("   ", line)
print("\nThe GPU tests (pytest summaries, one per try):")
for log in sorted(here.glob("run*_pytest*.log")):
    summaries = re.findall(r"=+ (\d+ (?:passed|failed).*?) in [\d.]+s =+", log.read_text())
    print(f"  {log.name}: {summaries}")
