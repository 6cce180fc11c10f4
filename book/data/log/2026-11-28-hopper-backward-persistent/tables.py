# Every number of the log entry "The Hopper backward's dK/dV kernel as a persistent grid" (2026-11-28), from the
# records beside this file. Run from anywhere: python tables.py
import collections, csv, gzip, json, pathlib

HERE = pathlib.Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


def dkdv_us(row):
    return sum(us for kernel, us in row["us"].items() if "dkdv" in kernel)


print("== Run 1 (24a5c46): the dK/dV kernel by torch.profiler, us a call; non-causal shapes of 33 heads' key blocks")
probe = rows("run1_probe_at_24a5c46.jsonl")
for d in (64, 128):
    fits = [(r["shape"][2] // 64, dkdv_us(r) / (r["shape"][0] * r["shape"][1] * r["shape"][2] // 128 / 132))
            for r in probe if not r["causal"] and r["shape"][3] == d and r["shape"][0] == 3]
    print(f"head dim {d}: (tiles a block, us a wave of 132 blocks):", [(t, round(w, 1)) for t, w in fits])
    for (t1, w1), (t2, w2) in zip(fits, fits[1:]):
        per_tile = (w2 - w1) / (t2 - t1)
        print(f"  from {t1} to {t2} tiles: {per_tile:.3f} us a tile, {w1 - t1 * per_tile:.1f} us a block besides")
for r in probe:
    if r["causal"]:
        print("causal", "x".join(map(str, r["shape"])), f"dK/dV kernel {dkdv_us(r):.1f} us")

print("\n== Run 1: Nsight Compute, one-pass dK/dV kernel at 4x16x2048x64 (bf16, causal)")
table = list(csv.reader(gzip.open(HERE / "run1_ncu_source_4x16x2048x64.csv.gz", "rt")))
header, data = table[1], table[2:]
col = {name: header.index(name) for name in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed")}
source = [r[col["Source"]].strip() for r in data]
samples = [float(r[col["Warp Stall Sampling (All Samples)"]] or 0) for r in data]
executed = [float(r[col["Instructions Executed"]] or 0) for r in data]
start = next(i for i, s in enumerate(source) if "USETMAXREG.TRY_ALLOC" in s)
end = next(i for i, s in enumerate(source) if "USETMAXREG.DEALLOC" in s)
consumers = sum(samples[start:end])
blocks_times_warps = 1024 * 8  # 1,024 blocks of 8 consumer warps
per_block = sum(samples[i] for i in range(start, end) if 0 < executed[i] <= blocks_times_warps)
print(f"consumer warps' share of the samples: {consumers / sum(samples):.3f}")
print(f"of the consumers' samples, on instructions run once a block (prologue and epilogue): {per_block / consumers:.3f}")
waits = [i for i in range(start, end) if source[i].startswith("@!P0") and "BRA" in source[i]
         and any("TRYWAIT" in source[k] for k in range(i - 3, i))]
for i in waits:
    kind = "once a block" if executed[i] <= blocks_times_warps else "in the tile loop"
    print(f"  a barrier wait {kind} (executed {executed[i]:.0f}): {samples[i] / consumers:.3f} of the consumers' samples")
details = (HERE / "run1_ncu_details_4x16x2048x64.txt").read_text()
for metric in ("Duration", "Compute (SM) Throughput", "uncoalesced global accesses"):
    line = next(l for l in details.splitlines() if metric in l)
    print("  details:", " ".join(line.split()))

print("\n== Runs 2 to 4: backward alone (ab64.py, the model's layout, do_bench medians, the faster of two rounds, ms)")
for run in (2, 3, 4):
    best = collections.defaultdict(lambda: float("inf"))
    for r in rows(f"run{run}_ab.jsonl"):
        best[r["shape"], r["impl"], r["tree"]] = min(best[r["shape"], r["impl"], r["tree"]], r["ms"])
    print(f"run {run}: shape | before | persistent | ratio | cuDNN | persistent / cuDNN")
    for shape in dict.fromkeys(s for s, _, _ in best):
        before, after = best[shape, "hopper backward", "base"], best[shape, "hopper backward", "new"]
        cudnn = min(best[shape, "cudnn backward", "base"], best[shape, "cudnn backward", "new"])
        print(f"  {shape:26s} {before:7.3f} {after:7.3f} {after / before:6.3f} {cudnn:7.3f} {after / cudnn:6.3f}")
    print(f"run {run}: the dK/dV kernel alone (probe_overhead.py, contiguous, us): shape | before | persistent | ratio")
    for b, n in zip(rows(f"run{run}_probe_base.jsonl"), rows(f"run{run}_probe_new.jsonl")):
        causal = "causal" if b["causal"] else "not causal"
        print(f"  {'x'.join(map(str, b['shape'])):16s} {causal:10s} {dkdv_us(b):8.1f} {dkdv_us(n):8.1f} "
              f"{dkdv_us(n) / dkdv_us(b):6.3f}")
    errors = [max(r["err"]) for r in rows(f"run{run}_ab.jsonl") if r["tree"] == "new" and "err" in r]
    print(f"run {run}: largest gradient difference from cuDNN's over cuDNN's largest value, persistent: "
          f"{max(errors):.1e}")
    log = (HERE / f"run{run}_pytest.log").read_text().strip().splitlines()
    print(f"run {run}: GPU tests:", log[-1].strip("= "))

print("\n== The consumers' tile loop in SASS (sass_loops.py, no GPU): instructions, and R2UR among them")
print((HERE / "sass_loops.txt").read_text().strip())
