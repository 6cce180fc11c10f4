# Every number of the log entry "The Hopper kernels checked on one H200 ..." (2026-11-29), from the records beside
# this file. Run from anywhere: python tables.py
import collections, csv, json, pathlib, re

HERE = pathlib.Path(__file__).parent


def tests(name):
    return re.findall(r"^=* ?(\d+ passed.*?) in ", (HERE / name).read_text(), re.M)[-1]


print("== Run 1: main as committed (f71d1b0). " + " | ".join((HERE / "run1_machine.txt").read_text().splitlines()[:2]))
rows = list(csv.DictReader((HERE / "run1_table.csv").open()))
ms = {(r["batch"], r["heads"], r["n_q"], r["d"], r["causal"], r["mode"], r["impl"]): float(r["ms"]) for r in rows}
impls = ("flash_hopper", "flash_triton", "sdpa_cudnn", "sdpa_flash")
print(f"{'shape':22s} {'pass':8s} " + " ".join(f"{i:>12s}" for i in impls) + f" {'ours/cuDNN':>10s}")
for key in dict.fromkeys(k[:6] for k in ms):
    b, h, n, d, causal, mode = key
    shape = f"{b}x{h}x{n}x{d}" + ("" if causal == "True" else " not causal")
    print(f"{shape:22s} {mode:8s} " + " ".join(f"{ms[key + (i,)]:12.3f}" for i in impls)
          + f" {ms[key + ('flash_hopper',)] / ms[key + ('sdpa_cudnn',)]:10.3f}")
print("chapter 18's kernel groups of the 4-block step (ms a step, share):")
for line in (HERE / "run1_kernels.log").read_text().splitlines():
    if re.search(r"compiled +(attention|matmuls|fused by|loss|optimizer|other)", line):
        print("  " + re.sub(r"\s+NaN$", "", line.strip()))
print("GPU tests:", tests("run1_pytest.log"))

print("\n== Run 2: the mask at every key tile (mask) against main (base), the forward alone, fastest of two rounds")
best, per_round = collections.defaultdict(lambda: float("inf")), {}
for line in (HERE / "run2_fwd_ab.jsonl").read_text().splitlines():
    r = json.loads(line)
    per_round[r["shape"], r["tree"], r["round"]] = r["ms"]
    for column in ("ms", "cudnn_ms"):
        best[r["shape"], r["tree"], column] = min(best[r["shape"], r["tree"], column], r[column])
print(f"{'shape':26s} {'base ms':>8s} {'mask/base':>9s} {'round 0':>7s} {'round 1':>7s} {'base/cuDNN':>10s} "
      f"{'mask/cuDNN':>10s}")
for s in dict.fromkeys(k[0] for k in per_round):
    b, m = best[s, "base", "ms"], best[s, "mask", "ms"]
    rounds = [per_round[s, "mask", k] / per_round[s, "base", k] for k in (0, 1)]
    print(f"{s:26s} {b:8.4f} {m / b:9.3f} {rounds[0]:7.3f} {rounds[1]:7.3f} {b / best[s, 'base', 'cudnn_ms']:10.3f} "
          f"{m / best[s, 'mask', 'cudnn_ms']:10.3f}")
print("GPU tests of the mask tree:", tests("run2_pytest.log"))

print("\n== Run 3: the per-call floor, forward + backward, wall µs a call: dfdcc41 (old) against main (new)")
rows = [json.loads(line) for line in (HERE / "run3_floor_ab.jsonl").read_text().splitlines()]
for shape in dict.fromkeys(r["shape"] for r in rows):
    for mode in ("eager", "compiled", "CUDA graph"):
        cells = []
        for rnd in (0, 1):
            v = {(r["tree"], r["impl"]): r[mode] for r in rows if r["shape"] == shape and r["round"] == rnd}
            cells.append(f"round {rnd}: old {v['old', 'flash_hopper']:6.1f} new {v['new', 'flash_hopper']:6.1f} "
                         f"new-old {v['new', 'flash_hopper'] - v['old', 'flash_hopper']:+6.1f} "
                         f"(new/old {v['new', 'flash_hopper'] / v['old', 'flash_hopper']:.3f}), cuDNN "
                         f"{v['old', 'sdpa_cudnn']:6.1f} / {v['new', 'sdpa_cudnn']:6.1f}")
        print(f"{shape:14s} {mode:10s} " + " | ".join(cells))
print("GPU tests (C++ operator paths, fused kernels):", tests("run3_pytest.log"))
