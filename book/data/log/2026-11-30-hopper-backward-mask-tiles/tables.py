# Every number of the log entry "The Hopper backward's loops over tiles take the masked tiles apart ..." (book/log.md,
# 2026-11-30), from the rows and logs of this folder: python book/data/log/2026-11-30-hopper-backward-mask-tiles/tables.py
import collections, json, re
from pathlib import Path
HERE = Path(__file__).parent
rows = [json.loads(line) for line in (HERE / "run1_ab_bwd.jsonl").read_text().splitlines()]
best = collections.defaultdict(lambda: float("inf"))
for r in rows:  # the faster of a tree's rounds ("k" in the run: the change, committed as ed38c57)
    key = (r["passes"], r["shape"], r["tree"], r["impl"])
    best[key] = min(best[key], r["ms"])
for passes in ("one", "two"):
    print(f"\nthe backward, {passes} pass(es): shape | m ms | k ms | k / m | m / cuDNN | k / cuDNN")
    for shape in dict.fromkeys(r["shape"] for r in rows if r["passes"] == passes):
        m, k = best[(passes, shape, "m", "hopper backward")], best[(passes, shape, "k", "hopper backward")]
        cm, ck = best[(passes, shape, "m", "cudnn backward")], best[(passes, shape, "k", "cudnn backward")]
        print(f"{shape} | {m:.3f} | {k:.3f} | {k / m:.3f} | {m / cm:.3f} | {k / ck:.3f}")
print("\nlargest gradient difference from cuDNN's over cuDNN's largest:", f"{max(max(r['err']) for r in rows if 'err' in r):.1e}")
print("\ntile loops as compiled (bf16): kernel, head dim, causal, passes | main's ways through the loop | the change's "
      "loop without the mask")
loops = [json.loads(line) for line in (HERE / "cpu_loop_paths.jsonl").read_text().splitlines()]
loops = [l for l in loops if l["paths"]]
for l in loops:
    if l["tree"] != "m":
        continue
    same = [c for c in loops if c["tree"] == "c" and all(c.get(f) == l.get(f) for f in ("kernel", "head_dim", "causal",
                                                                                          "one_pass"))]
    unmasked = min(same, key=lambda c: c["instructions"])
    passes = {0: "two passes", 1: "one pass"}.get(l.get("one_pass"), "two passes (dQ)")
    print(f"{l['kernel']} d{l['head_dim']} causal={l['causal']} {passes} | {min(l['paths'])}-{max(l['paths'])} | "
          f"{min(unmasked['paths'])}-{max(unmasked['paths'])} (R2UR {l['r2ur']} -> {unmasked['r2ur']})")
for log in sorted(HERE.glob("run*_pytest.log")):
    text = log.read_text()
    passed = len(re.findall(r" PASSED", text))
    files = collections.Counter(m.group(1) for m in re.finditer(r"(tests/\w+\.py)::.*? PASSED", text))
    print(f"\n{log.name}: {passed} passed ({dict(files)}); last line: {text.strip().splitlines()[-1][:110]}")

# What the one pass's time leaves to its instructions at the 2025 leaderboard's shape: its FLOP rate (5 products of
# 2 n^2 d flops per head, halved by the mask), and per block-tile (128 keys by 64 queries, both consumers' products)
# the cycles at that rate over the 132 SMs at 1,980 MHz, against the instructions one of an SM's four schedulers
# issues for it (a warp of each consumer: the shortest ways through the change's loop at head dim 64, causal).
B, H, n, d = 1, 16, 16384, 64
flops = 5 * 2 * n * n * d * B * H / 2
ms = best[("one", "1x16x16384x64", "k", "hopper backward")]
tile_flops = 2 * 5 * 2 * 64 * 64 * d
cycles = tile_flops / (flops / (ms * 1e-3) / 132) * 1.98e9
c = [l for l in loops if l["tree"] == "c" and l["kernel"] == "hopper_bwd_dkdv_kernel" and l["head_dim"] == 64
     and l["causal"] == 1 and l["one_pass"] == 1]
paths = min(c, key=lambda l: l["instructions"])["paths"]
# the ways through the loop: consumer 0's (it hands its dQ share over) the shorter, consumer 1's (it sums both) longer
shortest = paths[0] + next(p for p in paths if p > paths[1])
print(f"\none pass at {B}x{H}x{n}x{d}: {flops / (ms * 1e-3) / 1e12:.0f} TFLOP/s ({flops / (ms * 1e-3) / 989e12:.0%} of "
      f"989); a block-tile takes {cycles:.0f} cycles at that rate; a scheduler issues {shortest} instructions or more "
      f"for it (ways through the loop {paths}), {shortest / cycles:.0%} of those cycles")
