# Every number of the log entry "The Hopper backward's persistent grid kept, with the consumer's index warp-uniform"
# (2026-11-28), from the records beside this file. Run from anywhere: python tables.py
import collections, json, pathlib, statistics

HERE = pathlib.Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


def fastest(records, key, value="ms"):
    """The fastest round of each key(row): {key: ms}."""
    best = collections.defaultdict(lambda: float("inf"))
    for r in records:
        best[key(r)] = min(best[key(r)], r[value])
    return best


print("== Run 1: the backward alone, three trees (base = df8e3c2; uniform; persistent = persistent + uniform), "
      "fastest of two rounds, ms")
ab = rows("run1_ab.jsonl")
ms = fastest(ab, lambda r: (r["shape"], r["impl"], r["tree"]))
for shape in dict.fromkeys(r["shape"] for r in ab):
    base, cudnn = ms[shape, "hopper backward", "base"], ms[shape, "cudnn backward", "base"]
    line = [f"{shape:24s} base {base:.3f} (x{base / cudnn:.3f} cuDNN's)"]
    for tree in ("uniform", "persistent"):
        t = ms[shape, "hopper backward", tree]
        line.append(f"{tree} {t / base:.3f} of base (x{t / ms[shape, 'cudnn backward', tree]:.3f} cuDNN's)")
    print(", ".join(line))
cudnn_small = [r["ms"] for r in ab if r["shape"] == "8x12x1024x64" and r["impl"] == "cudnn backward"]
print(f"cuDNN's backward at 8x12x1024x64 over the turns: {min(cudnn_small):.3f} to {max(cudnn_small):.3f} ms")
print("largest gradient difference over cuDNN's largest, any tree:",
      f"{max(max(r['err']) for r in ab if r['impl'] == 'hopper backward'):.1e}")

print("\n== Run 1: the Hopper forward alone (default ring, ping-pong, consumers), fastest of two rounds, ratio to base")
fwd = rows("run1_fwd.jsonl")
f = fastest(fwd, lambda r: (r["shape"], r["tree"]))
for shape in dict.fromkeys(r["shape"] for r in fwd):
    print(f"{shape:26s}", ", ".join(f"{t} {f[shape, t] / f[shape, 'base']:.3f}" for t in ("uniform", "persistent")),
          "(persistent's forward is base's: their ratio is the run's noise)")

print("\n== Run 2 (persistent + uniform in place): head dim 64, causal, hopper / Triton backward, median of two rounds")
sweep = rows("run2_sweep.jsonl")
by = collections.defaultdict(list)
for r in sweep:
    by[r["n"], r["B"], r["H"], r["impl"]].append(r["ms"])
for n, B, H in dict.fromkeys((r["n"], r["B"], r["H"]) for r in sweep):
    ratio = statistics.median(by[n, B, H, "bwd hopper"]) / statistics.median(by[n, B, H, "bwd triton"])
    blocks = B * H * n // 128
    rule = n >= 8192 or (n >= 1024 and blocks >= 1024)
    print(f"{B}x{H}x{n}: {blocks:5d} key blocks, {ratio:.3f}; the rule takes {'hopper' if rule else 'triton'}")
print("GPU tests:", (HERE / "run2_pytest.log").read_text().strip().splitlines()[-1])
for r in rows("run2_probe.jsonl"):
    dkdv = sum(us for k, us in r["us"].items() if "dkdv" in k)
    print("dK/dV kernel alone", "x".join(map(str, r["shape"])), "causal" if r["causal"] else "not causal",
          f"{dkdv:.1f} us")

print("\n== Run 3: flash_hopper forward + backward (its rules) and cuDNN's, base = df8e3c2 against main = the tree kept "
      "with its bound at 768 key blocks, not 1,024 (8x12x1024x64 took the Hopper backward; the tree kept takes Triton's)")
final = rows("run3_ab_final.jsonl")
for shape in dict.fromkeys(r["shape"] for r in final):
    line = [f"{shape:16s}"]
    for tree in ("base", "main"):
        mine = [r for r in final if r["shape"] == shape and r["tree"] == tree]
        ours = [r["flash_hopper"] for r in mine]
        line.append(f"{tree}: {min(ours):.4f} ms (rounds {min(ours):.4f} to {max(ours):.4f}), "
                    f"x{min(ours) / min(r['sdpa_cudnn'] for r in mine):.3f} cuDNN's")
    print(", ".join(line))
print(f"largest gradient difference over cuDNN's largest: {max(max(r['err']) for r in final):.1e}")

print("\n== Run 4 (the tree kept): head dim 64, causal, 1,024 keys, hopper / Triton backward, median of five rounds")
edge = rows("run4_edge.jsonl")
by = collections.defaultdict(list)
for r in edge:
    by[r["B"], r["H"], r["impl"]].append(r["ms"])
for B, H in dict.fromkeys((r["B"], r["H"]) for r in edge):
    hopper, triton = by[B, H, "bwd hopper"], by[B, H, "bwd triton"]
    each = [round(a / b, 3) for a, b in zip(hopper, triton)]
    print(f"{B}x{H}x1024: {B * H * 8:4d} key blocks, {statistics.median(hopper) / statistics.median(triton):.3f} "
          f"(rounds {min(each)} to {max(each)})")
