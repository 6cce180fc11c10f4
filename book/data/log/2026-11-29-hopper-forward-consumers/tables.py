"""Every number of the log entry "The Hopper forward with two consumer warpgroups ..." (2026-11-29), from the rows
of the five runs kept here. From the repository's root:
    python book/data/log/2026-11-29-hopper-forward-consumers/tables.py"""
import collections, json, pathlib, statistics

from systems.bench.flash_sweep import ratio_interval

HERE = pathlib.Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines()]


def fastest_of_rounds(records, impls, tree="m"):
    best = collections.defaultdict(dict)
    for r in records:
        if r["tree"] == tree:
            key = (r["shape"], r["causal"], r["layout"])
            for impl in impls:
                best[key][impl] = min(best[key].get(impl, float("inf")), r[impl + "_ms"])
    return best


print("## Run 1: every variant of the Hopper forward at head dim 64 without the mask (main), over cuDNN's time")
for r in rows("run1_fwd_layouts.jsonl"):
    if not r["causal"]:
        variants = [k[:-3] for k in r if k.endswith("_ms") and k != "cudnn_ms"]
        print(r["round"], r["shape"], " ".join(f"{v} {r[v + '_ms'] / r['cudnn_ms']:.3f}" for v in variants))

print("\n## Run 2: the faster of two rounds, main; c2 and c3: the Hopper forward with two and three consumers")
run2 = rows("run2_fwd_variants.jsonl")
best = fastest_of_rounds(run2, ("triton", "c2", "c3", "reg", "cudnn"))
for (shape, causal, layout), b in best.items():
    print(f"{shape:>14} {'causal' if causal else 'not causal':10} {layout:5} triton {b['triton'] * 1e3:7.1f} us  "
          f"c2/triton {b['c2'] / b['triton']:.3f}  c3/triton {b['c3'] / b['triton']:.3f}  "
          f"c3/c2 {b['c3'] / b['c2']:.3f}  over cuDNN: triton {b['triton'] / b['cudnn']:.3f} "
          f"c2 {b['c2'] / b['cudnn']:.3f} c3 {b['c3'] / b['cudnn']:.3f}")
groups = {"causal, below 2,048 keys": lambda s, c: c and int(s.split("x")[2]) < 2048,
          "causal, from 2,048 keys": lambda s, c: c and int(s.split("x")[2]) >= 2048,
          "not causal": lambda s, c: not c}
for name, keep in groups.items():
    picked = [b for (s, c, _), b in best.items() if keep(s, c)]
    for a, z in (("c2", "triton"), ("c3", "triton"), ("c3", "c2")):
        ratios = [b[a] / b[z] for b in picked]
        print(f"  {name}: {a}/{z} {min(ratios):.3f} to {max(ratios):.3f}")
print("  every row of both rounds, causal below 2,048 keys, c2/triton above 1:",
      [(r["round"], r["shape"], r["layout"], round(r["c2_ms"] / r["triton_ms"], 3)) for r in run2
       if r["tree"] == "m" and r["causal"] and int(r["shape"].split("x")[2]) < 2048 and r["c2_ms"] > r["triton_ms"]])
nu = fastest_of_rounds(run2, ("c3", "c2"), tree="nu")
print("  uniform_if_masked (nu) over main, not causal, the faster of two rounds each:")
for key, b in nu.items():
    print(f"    {key[0]}: c3 {b['c3'] / best[key]['c3']:.3f}  c2 {b['c2'] / best[key]['c2']:.3f}")
for impl in ("c2", "c3", "triton"):
    print(f"  largest |{impl} - cuDNN's| over cuDNN's largest, every row: {max(r[impl + '_err'] for r in run2):.1e}")

print("\n## Run 3: the registered attention, main (m) and the variant chosen for the shape (c), fastest of 3 calls "
      "in each of two processes a tree")
run3 = rows("run3_fwd_bwd.jsonl")
ms = collections.defaultdict(lambda: float("inf"))
for r in run3:
    ms[(r["tree"], r["impl"], r["mode"], r["batch"], r["heads"], r["n_q"], r["causal"])] = min(
        ms[(r["tree"], r["impl"], r["mode"], r["batch"], r["heads"], r["n_q"], r["causal"])], r["ms"])
points = sorted({k[3:] for k in ms})
for mode in ("fwd", "fwd_bwd"):
    for p in points:
        m, c = ms[("m", "flash_hopper", mode, *p)], ms[("c", "flash_hopper", mode, *p)]
        mc, cc = ms[("m", "sdpa_cudnn", mode, *p)], ms[("c", "sdpa_cudnn", mode, *p)]
        print(f"{mode:7} {p[0]}x{p[1]}x{p[2]}x64 {'causal' if p[3] else 'not causal':10} m {m:.4f} c {c:.4f} ms  "
              f"c/m {c / m:.3f}  m/cuDNN {m / mc:.3f}  c/cuDNN {c / cc:.3f}")
print("  the 12-head forward+backward rows, every process:")
for r in run3:
    if r["heads"] == 12 and r["mode"] == "fwd_bwd":
        print(f"    {r['tree']} {r['impl']:12} {r['n_q']:5} {r['ms']:.4f} ms")
for n in (512, 1024):
    c, m = (ms[(tree, "sdpa_cudnn", "fwd_bwd", 16 if n == 512 else 8, 12, n, True)] for tree in "cm")
    print(f"  cuDNN's fastest forward+backward at 12 heads, {n} keys, c's processes over m's: {c / m:.2f}")

print("\n## Runs 4 and 5: eager steps, flash_hopper over sdpa (ratio of medians, 95 % interval)")
for run in (4, 5):
    for tree in ("m", "c"):
        by = {(r["size"], r["context_length"], r["attention"]): r for r in rows(f"run{run}_preset_steps_{tree}.jsonl")}
        for (size, context, attention), r in by.items():
            if attention == "flash_hopper":
                ours, theirs = r["step_times_ms"], by[(size, context, "sdpa")]["step_times_ms"]
                low, high = ratio_interval(ours, theirs)
                ratio = statistics.median(ours) / statistics.median(theirs)
                print(f"run {run} {tree} {size:5} {context:5} {ratio:.4f} [{low:.4f}, {high:.4f}] "
                      f"({(high - low) * 100:.1f} % wide)  sdpa {statistics.median(theirs):.1f} ms")

for name in ("run1_pytest.log", "run3_pytest.log"):
    print(name, (HERE / name).read_text().strip().splitlines()[-1])
