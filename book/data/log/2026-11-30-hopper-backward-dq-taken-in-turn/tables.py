"""Every number of the log entry of 2026-11-30 on the Hopper backward's consumers taking dQ in turn, from the rows
here: per run and shape, the faster of the rounds of each tree (ms), each tree over main's
(m), main's and the kept tree's over cuDNN's backward (the faster of its rounds in the same run), and the largest
gradient difference from cuDNN's over cuDNN's largest, across dQ, dK, dV and every tree of the run."""
import collections
import json
from pathlib import Path

HERE = Path(__file__).parent

RUNS = {1: ["m", "a", "s", "as"], 2: ["m", "a2", "as2", "h2"], 3: ["m", "af", "asf", "af3", "afl"]}
for run, trees in RUNS.items():
    rows = [json.loads(line) for line in open(HERE / f"run{run}_ab_bwd.jsonl")]
    best, err = collections.defaultdict(lambda: float("inf")), collections.defaultdict(float)
    for row in rows:
        who = row["tree"] if row["impl"] == "hopper backward" else "cudnn"
        best[row["shape"], who] = min(best[row["shape"], who], row["ms"])
        err[row["shape"]] = max(err[row["shape"]], *row.get("err", [0.0]))
    kept = trees[-1] if run == 3 else trees[1]
    print(f"\nrun {run}: | shape | m ms | " + " | ".join(f"{t} / m" for t in trees[1:])
          + f" | m / cuDNN | {kept} / cuDNN | largest difference |")
    for shape in dict.fromkeys(row["shape"] for row in rows):
        m, cudnn = best[shape, "m"], best[shape, "cudnn"]
        print(f"| {shape} | {m:.3f} | " + " | ".join(f"{best[shape, t] / m:.3f}" for t in trees[1:])
              + f" | {m / cudnn:.3f} | {best[shape, kept] / cudnn:.3f} | {err[shape]:.1e} |")
