# Every number of the log entry "The Hopper forward's grid made persistent" (2026-11-29), from the records beside
# this file. Run from anywhere: python tables.py
import collections, json, pathlib

HERE = pathlib.Path(__file__).parent


def fastest(name):
    """{(shape, tree, column): the fastest round's ms} of one run's rows."""
    best = collections.defaultdict(lambda: float("inf"))
    for line in (HERE / name).read_text().splitlines():
        r = json.loads(line)
        for column in ("ms", "cudnn_ms", "triton_ms"):
            if column in r:
                best[r["shape"], r["tree"], column] = min(best[r["shape"], r["tree"], column], r[column])
    return best


runs = {run: fastest(f"{run}_fwd_ab.jsonl") for run in ("run1", "run2", "run3")}
shapes = list(dict.fromkeys(json.loads(l)["shape"] for l in (HERE / "run3_fwd_ab.jsonl").read_text().splitlines()))

print("== Run 3 (the tree as committed): the forward alone, fastest of the rounds, ms and ratios")
print(f"{'shape':26s} {'base':>8s} {'flat/base':>9s} {'new/base':>8s} {'new/flat':>8s} {'base/cuDNN':>10s} "
      f"{'new/cuDNN':>9s} {'new/Triton':>10s}")
m = runs["run3"]
for s in shapes:
    base, flat, new = m[s, "base", "ms"], m[s, "flat", "ms"], m[s, "new", "ms"]
    triton = m.get((s, "new", "triton_ms"))
    print(f"{s:26s} {base:8.4f} {flat / base:9.3f} {new / base:8.3f} {new / flat:8.3f} "
          f"{base / m[s, 'base', 'cudnn_ms']:10.3f} {new / m[s, 'new', 'cudnn_ms']:9.3f} "
          + (f"{new / triton:10.3f}" if triton else f"{'':>10s}"))

print("\n== new / base in each run (run 1: the persistent grid alone; run 2: and the consumer's index warp-uniform;"
      " run 3: and the first consumer taking the last turn given)")
for s in shapes:
    print(f"{s:26s} " + " ".join(f"{r} {runs[r][s, 'new', 'ms'] / runs[r][s, 'base', 'ms']:.3f}" for r in runs))

print("\n== flat / base in runs 2 and 3 (a block per query tile: the new code without the persistent grid)")
for s in shapes:
    print(f"{s:26s} " + " ".join(f"{r} {runs[r][s, 'flat', 'ms'] / runs[r][s, 'base', 'ms']:.3f}"
                                  for r in ("run2", "run3")))

m2 = runs["run2"]
s = "2x32x32768x128"
print(f"\nrun 2 at {s}: base / cuDNN {m2[s, 'base', 'ms'] / m2[s, 'base', 'cudnn_ms']:.3f}, "
      f"new / cuDNN {m2[s, 'new', 'ms'] / m2[s, 'new', 'cudnn_ms']:.3f}")
uniform = [(runs["run2"][s, "new", "ms"] / runs["run2"][s, "base", "ms"])
           / (runs["run1"][s, "new", "ms"] / runs["run1"][s, "base", "ms"]) for s in shapes if s.endswith("x64")]
print(f"the uniform index (run 2's new / base over run 1's), causal head dim 64: {min(uniform):.3f} to "
      f"{max(uniform):.3f}")
new_over_flat = [m[s, "new", "ms"] / m[s, "flat", "ms"] for s in shapes]
print(f"run 3, new / flat: {min(new_over_flat):.3f} to {max(new_over_flat):.3f}")

errors = [json.loads(l)["err"] for r in runs for l in (HERE / f"{r}_fwd_ab.jsonl").read_text().splitlines()]
print(f"\nlargest difference from cuDNN's output over cuDNN's largest, every row: {max(errors):.1e}")
for r in runs:
    print(f"{r} pytest: {(HERE / f'{r}_pytest.log').read_text().strip().splitlines()[-1][-90:]}")
