# Every number of the log entry of 2026-11-30, "The Hopper backward at head dim 64 ...", from this folder's records.
import json
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent


def fastest(name):
    """(passes, shape, tree) -> the fastest ms of the rounds; cuDNN's under the tree 'cudnn', over every round."""
    best = defaultdict(lambda: float("inf"))
    for row in map(json.loads, (HERE / name).read_text().splitlines()):
        tree = row["tree"] if "hopper" in row["impl"] else "cudnn"
        key = (row.get("passes", "one"), row["shape"], tree)
        best[key] = min(best[key], row["ms"])
    return best


def worst_error(name, tree):
    rows = map(json.loads, (HERE / name).read_text().splitlines())
    return max(max(row["err"]) for row in rows if "err" in row and row["tree"] == tree)


print("run 1: one pass (and two), the trees' times over main's (m) and main's over cuDNN's")
run1 = fastest("run1_ab_bwd.jsonl")
for passes, shape in dict.fromkeys((p, s) for p, s, _ in run1):
    m, cudnn = run1[passes, shape, "m"], run1[passes, shape, "cudnn"]
    cells = [f"{passes} {shape:28s} m {m:8.4f} ms  m/cuDNN {m / cudnn:.3f}"]
    cells += [f"{t}/m {run1[passes, shape, t] / m:.3f}" for t in ("e3", "e4") if (passes, shape, t) in run1]
    print("  ".join(cells))
print(f"largest gradient difference over cuDNN's largest: e3 {worst_error('run1_ab_bwd.jsonl', 'e3'):.1e}, "
      f"e4 {worst_error('run1_ab_bwd.jsonl', 'e4'):.1e}")

print("\nrun 2: q (the consumers take turns at dQ) over m")
run2 = fastest("run2_ab_bwd.jsonl")
for _, shape, _ in dict.fromkeys((p, s, 0) for p, s, _ in run2):
    m, q, cudnn = (run2["one", shape, t] for t in ("m", "q", "cudnn"))
    print(f"{shape:28s} q/m {q / m:.3f}  m/cuDNN {m / cudnn:.3f}  q/cuDNN {q / cudnn:.3f}")
print(f"largest gradient difference over cuDNN's largest: q {worst_error('run2_ab_bwd.jsonl', 'q'):.1e}")

# The one pass's time per query tile of a key block at the 2025 leaderboard's shape (1 x 16 x 16384 x 64, causal):
# each head has 128 key blocks of 128 keys, block kb walking the 256 - 2 kb query tiles of 64 that see it.
tiles = 16 * sum(256 - 2 * kb for kb in range(128))
ms = run2["one", "1x16x16384x64", "m"]
cycles = ms * 1e-3 * 1.98e9 / (tiles / 132)
products = 2 * 5 * 4 * 32  # two consumers, five products of four k16 steps, 32 cycles each at the measured rate
print(f"\nleaderboard shape, m: {tiles} block-tiles, {tiles / 132:.0f} a multiprocessor; {cycles:.0f} cycles a tile at "
      f"1980 MHz; the tile's products at full rate {products} cycles: {products / cycles:.1%}")

# Shared memory a block moves per query tile in the one pass at head dim 64, from the operands' sizes (an estimate,
# KiB): per consumer S^T, dP^T and dQ read A and B from shared memory (4 KiB a k16 product, four each), dV and dK
# read B alone (2 KiB), dS^T is stored (8), and L and D are read (16 two-float loads a warp, a wavefront each); per
# block the dQ hand-over (16 written, read, written again, and read by the copy engine) and the copy engine's Q and dO.
consumer = {"products": 3 * 4 * 4 + 2 * 4 * 2, "dS^T stores": 8, "L and D": 16 * 4 * 128 / 1024}
block = {k: 2 * v for k, v in consumer.items()} | {"dQ hand-over": 4 * 16, "Q and dO copied in": 16}
total = sum(block.values())
print(f"shared memory a tile (estimate): {block}; {total:.0f} KiB, {total * 1024 / 128:.0f} cycles at 128 bytes a "
      f"cycle; held K and V: {2 * 2 * 4 * 2} KiB less")
import csv, gzip
ncu = HERE.parent / "2026-11-29-hopper-backward-rows-early" / "run1_ncu_raw.csv.gz"
with gzip.open(ncu, "rt") as f:
    rows = list(csv.reader(f))
metric = "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed"
for row in rows[2:]:
    name = row[rows[0].index("Kernel Name")]
    if "dkdv" in name or "bprop" in name:
        print(f"Nsight Compute, 1x16x8192x64 not causal ({ncu.parent.name}): shared-memory wavefronts "
              f"{float(row[rows[0].index(metric)]):.1f} % of peak, {'ours' if 'dkdv' in name else 'cuDNN'}")

print("\nCPU: instructions a tile in the loops of the one-pass dK/dV kernel at head dim 64 (bf16), every way through")
for row in map(json.loads, (HERE / "cpu_loop_paths.jsonl").read_text().splitlines()):
    if row["kernel"] == "hopper_bwd_dkdv_kernel" and row["head_dim"] == 64 and row["one_pass"] and row["paths"]:
        print(f"{row['tree']:3s} causal {row['causal']} stages {row['stages']}: loop {row['instructions']}, "
              f"paths {min(row['paths'])} to {max(row['paths'])} ({len(row['paths'])}), R2UR {row['r2ur']}")

print("\nrun 3: wgmma alone, FLOP a multiprocessor cycle over the dense peak (mean of two rounds), cycles a product")
rates = defaultdict(list)
for row in map(json.loads, (HERE / "run3_wgmma_rate.jsonl").read_text().splitlines()):
    if "kind" in row:
        rates[row["kind"], row["warpgroups"]].append(row)
for (kind, warpgroups), rows in rates.items():
    share = sum(r["of_peak"] for r in rows) / len(rows)
    per_product = rows[-1]["mean_cycles"] / (4096 * 4 * warpgroups)
    print(f"{kind:24s} {warpgroups} warpgroups: {share:.4f} of peak, {per_product:.2f} cycles a k16 product")

print("\nrun 4: K (h1) and K and V (h2) held in registers, over m (m's two passes: one round, the trees' two)")
run4 = fastest("run4_ab_bwd.jsonl")
for passes, shape in dict.fromkeys((p, s) for p, s, _ in run4):
    m, cudnn = run4[passes, shape, "m"], run4[passes, shape, "cudnn"]
    tree = "h1" if passes == "one" else "h2"
    print(f"{passes} {shape:28s} {tree}/m {run4[passes, shape, tree] / m:.3f}  m/cuDNN {m / cudnn:.3f}")
print(f"largest gradient difference over cuDNN's largest: h1 {worst_error('run4_ab_bwd.jsonl', 'h1'):.1e}, "
      f"h2 {worst_error('run4_ab_bwd.jsonl', 'h2'):.1e}")
print("as compiled (bf16, head dim 64: stages, causal, one pass):")
print((HERE / "cpu_spills.txt").read_text().strip())

print("\nGPU tests")
for name in ("run2_pytest_q.log", "run2_pytest_m.log", "run3_pytest_main.log"):
    text = (HERE / name).read_text()
    print(f"{name}: {text.count(' PASSED')} passed, {text.count(' FAILED')} failed; last line: "
          f"{text.strip().splitlines()[-1][:100]}")
