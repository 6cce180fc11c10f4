"""Every number of the log entry of 2026-11-30 on the Hopper forward's halved last key tile, from the rows here: the
forward over main's (m) per shape, the faster of each tree's rounds (runs 2 and 3), and over cuDNN's forward (the
faster of its rounds in the same run), with the largest differences from cuDNN's O and from the float64 L; chapter
20's table on main (run 1) and on the change (run 3), flash_hopper over cuDNN; the compiled training steps in an
H100 80GB's memory (run 4); the GPU tests (runs 3 and 5)."""
import collections
import json
from pathlib import Path

HERE = Path(__file__).parent

for run, trees in {2: ["m", "h", "h0"], 3: ["m", "f"]}.items():
    rows = [json.loads(line) for line in open(HERE / f"run{run}_ab_fwd.jsonl")]
    best = collections.defaultdict(lambda: float("inf"))
    for row in rows:
        shape = (row["shape"], "causal" if row["causal"] else "not causal")
        best[shape, row["tree"]] = min(best[shape, row["tree"]], row["ours_ms"])
        best[shape, "cudnn"] = min(best[shape, "cudnn"], row["cudnn_ms"])
    print(f"\nrun {run}: largest |O - cuDNN's| / max|cuDNN's| {max(r['err'] for r in rows):.1e}, largest |L - float64 L| "
          f"{max(r.get('L_err', 0.0) for r in rows):.1e}")
    print("| shape | | m ms | " + " | ".join(f"{t} / m" for t in trees[1:]) + " | m / cuDNN | "
          + f"{trees[1]} / cuDNN |")
    for shape in dict.fromkeys((r["shape"], "causal" if r["causal"] else "not causal") for r in rows):
        m = best[shape, "m"]
        print(f"| {shape[0]} | {shape[1]} | {m:.4f} | " + " | ".join(f"{best[shape, t] / m:.3f}" for t in trees[1:])
              + f" | {m / best[shape, 'cudnn']:.3f} | {best[shape, trees[1]] / best[shape, 'cudnn']:.3f} |")

tables = {}
for run in (1, 3):
    for row in map(json.loads, open(HERE / f"run{run}_table.jsonl")):
        key = (row["dtype"], f"{row['batch']}x{row['heads']}x{row['n_q']}x{row['d']}", row["causal"], row["mode"])
        tables.setdefault(key, {})[run, row["impl"]] = row["ms"]
print("\nchapter 20's table, flash_hopper / cuDNN: | dtype | shape | causal | mode | run 1 (m) | run 3 (f) |")
for (dtype, shape, causal, mode), ms in tables.items():
    ratios = " | ".join(f"{ms[run, 'flash_hopper'] / ms[run, 'sdpa_cudnn']:.3f}" for run in (1, 3))
    print(f"| {dtype} | {shape} | {causal} | {mode} | {ratios} |")

steps = collections.defaultdict(dict)
for row in map(json.loads, open(HERE / "run4_steps.jsonl")):
    steps[row["size"], row["batch_size"]][row["attention"]] = row["step_ms"]
print("\nrun 4, " + open(HERE / "run4_hold.txt").read().strip())
print("| preset | batch | sdpa ms | flash_hopper ms | flash_hopper / sdpa |")
for (size, batch), ms in steps.items():
    print(f"| {size} | {batch} | {ms['sdpa']:.1f} | {ms['flash_hopper']:.1f} | {ms['flash_hopper'] / ms['sdpa']:.3f} |")
for run in (3, 5):
    print(f"\nrun {run} GPU tests:", open(HERE / f"run{run}_pytest.log").read().strip().splitlines()[-1])
