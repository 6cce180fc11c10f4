"""Every number of the log entry "dQ by column halves at head dim 128": the faster of the two rounds per tree, shape
and implementation (ab.jsonl: the second call, the change as in change.diff), and what the first call's hanging
tree left (ab_first_try.jsonl: base's rows alone)."""
import json
from pathlib import Path

HERE = Path(__file__).parent


def best_of(name):
    best = {}
    for r in map(json.loads, (HERE / name).read_text().splitlines()):
        key = (r["tree"], r["shape"], r["impl"])
        best[key] = min(best.get(key, float("inf")), r["ms"])
    return best


rows = [json.loads(line) for line in (HERE / "ab.jsonl").read_text().splitlines()]
best = best_of("ab.jsonl")
print("| shape | base ms | halves ms | halves / base | cuDNN ms | base / cuDNN | halves / cuDNN |")
for shape in dict.fromkeys(r["shape"] for r in rows):
    base, new = best[("base", shape, "hopper backward")], best[("new", shape, "hopper backward")]
    cudnn = min(best[(t, shape, "cudnn backward")] for t in ("base", "new"))
    print(f"| {shape} | {base:.3f} | {new:.3f} | {new / base:.3f} | {cudnn:.3f} | {base / cudnn:.3f} | {new / cudnn:.3f} |")
errs = {(r["tree"], r["shape"], r["round"]): r["err"] for r in rows if r["impl"] == "hopper backward"}
print("largest gradient difference over cuDNN's largest: %.1e" % max(max(e) for e in errs.values()))
print("the two trees' differences from cuDNN identical in each round:",
      all(errs[("base", s, k)] == errs[("new", s, k)] for (_, s, k) in errs))
first = best_of("ab_first_try.jsonl")
print("first call: rows per tree", {t: sum(1 for k in first if k[0] == t) for t in ("base", "new")})
