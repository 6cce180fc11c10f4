"""Prints every number of the log entry "The two-pass dQ kernel with its consumers' index warp-uniform" from its
records: run1_ab.jsonl (ab.sh, the backward in two passes on each tree, two rounds; the faster kept)."""
import json
from pathlib import Path

rows = [json.loads(line) for line in Path(__file__).with_name("run1_ab.jsonl").read_text().splitlines()]
best = {}
for r in rows:
    key = (r["tree"], r["shape"], r["impl"])
    best[key] = min(best.get(key, float("inf")), r["ms"])
shapes = list(dict.fromkeys(r["shape"] for r in rows))
print("| shape | base, ms | dq, ms | dq / base | base / cuDNN's backward | dq / cuDNN's backward |")
print("|---|---:|---:|---:|---:|---:|")
for s in shapes:
    base, dq = (best[(t, s, "hopper backward, two passes")] for t in ("base", "dq"))
    cudnn = {t: best[(t, s, "cudnn backward")] for t in ("base", "dq")}
    print(f"| {s} | {base:.3f} | {dq:.3f} | {dq / base:.3f} | {base / cudnn['base']:.3f} | {dq / cudnn['dq']:.3f} |")
errs = [max(r["err"]) for r in rows if "err" in r]
same = all(a["err"] == b["err"] for a in rows for b in rows if "err" in a and "err" in b
           and a["shape"] == b["shape"] and a["round"] == b["round"])
print(f"largest gradient difference over cuDNN's largest: {max(errs):.1e}; the trees' gradients alike: {same}")
