# Every number of the log entry of 2026-11-30, "The Hopper backward's two passes hold their products' A operands
# ...", from this folder's records.
import json
import re
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent


def fastest(name):
    """(passes, shape, tree) -> the fastest ms of the rounds; cuDNN's under (passes, shape, 'cudnn ' + tree)."""
    best = defaultdict(lambda: float("inf"))
    for row in map(json.loads, (HERE / name).read_text().splitlines()):
        tree = row["tree"] if "hopper" in row["impl"] else "cudnn " + row["tree"]
        key = (row["passes"], row["shape"], tree)
        best[key] = min(best[key], row["ms"])
    return best


def worst_error(name, tree):
    rows = map(json.loads, (HERE / name).read_text().splitlines())
    return max(max(row["err"]) for row in rows if "err" in row and row["tree"] == tree)


def table(name, passes, tree):
    """tree's time over m's and each over cuDNN's in the same process; the head-dim-64 ratios."""
    best, at64 = fastest(name), []
    print(f"\n{name}, {'one pass' if passes == 'one' else 'two passes'}: {tree} over m")
    for shape in dict.fromkeys(s for p, s, _ in best if p == passes):
        m, x = best[passes, shape, "m"], best[passes, shape, tree]
        ratio = x / m
        at64 += [ratio] if "x64" in shape else []
        print(f"  {shape:28s} m {m:8.4f} ms  {tree}/m {ratio:.3f}  m/cuDNN {m / best[passes, shape, 'cudnn m']:.3f}  "
              f"{tree}/cuDNN {x / best[passes, shape, 'cudnn ' + tree]:.3f}")
    print(f"  head dim 64: {tree}/m {min(at64):.3f} to {max(at64):.3f}; largest gradient difference over cuDNN's "
          f"largest: m {worst_error(name, 'm'):.1e}, {tree} {worst_error(name, tree):.1e}")


table("run1_ab_bwd.jsonl", "one", "k")
table("run1_ab_bwd.jsonl", "two", "t2")
table("run2_ab_bwd.jsonl", "two", "h")
table("run4_ab_bwd.jsonl", "one", "pp")

print()
for log in sorted(HERE.glob("run*_pytest*.log")):
    summary = re.search(r"(\d+ passed[^=]*)", log.read_text().splitlines()[-1]).group(1).strip()
    print(f"{log.name}: {summary}")
for machine in sorted(HERE.glob("run*_machine.txt")):
    print(f"{machine.name}: {machine.read_text().splitlines()[1]}")

print("\nthe dK/dV kernels' spills at head dim 64 (nvcc 13.0, sm_90a), one pass; k: K held, kv: K and V held, "
      "pp: turns at issuing")
for line in (HERE / "cpu_spills.txt").read_text().splitlines():
    tree, dtype, d, _, causal, one_pass, *_, stores, _, loads = line.split()
    if d == "d64" and one_pass == "one_pass1":
        print(f"  {tree:2s} {dtype[dtype.index('_'):]:15s} {causal}: {stores} bytes stored, {loads} loaded")
