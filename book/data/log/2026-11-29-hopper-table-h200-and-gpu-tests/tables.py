"""Every number of the log entry "Chapter 20's table at `13ade22` on one H200 ..." (2026-11-29), from the records
kept here. From the repository's root:
    python book/data/log/2026-11-29-hopper-table-h200-and-gpu-tests/tables.py"""
import collections, json, pathlib, re

HERE = pathlib.Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


def fastest(records, *fields):
    best = collections.defaultdict(lambda: float("inf"))
    for r in records:
        key = tuple(r[f] for f in fields)
        best[key] = min(best[key], r["ms"])
    return best


def passed(name):
    return re.findall(r"=+ (.*) in [0-9.]+s.*=+", (HERE / name).read_text())[-1]


print("## Run 1: chapter 20's table (table.py), flash_hopper over SDPA's cuDNN back end, fastest of three calls")
table = rows("run1_table.jsonl")
best = {(r["tree"], r["dtype"], r["batch"], r["heads"], r["n_q"], r["d"], r["causal"], r["impl"], r["mode"]): r["ms"]
        for r in table}
for tree, dtype, b, h, n, d, causal in dict.fromkeys(k[:7] for k in best):
    parts = []
    for mode in ("fwd", "fwd_bwd"):
        ours, cudnn = best.get((tree, dtype, b, h, n, d, causal, "flash_hopper", mode)), \
            best.get((tree, dtype, b, h, n, d, causal, "sdpa_cudnn", mode))
        if ours is not None:
            parts.append(f"{mode}: {ours:.3f} ms / {cudnn:.3f} ms = {ours / cudnn:.3f}")
    print(f"{tree} {dtype} {b}x{h}x{n}x{d}{'' if causal else ' not causal'}: " + "; ".join(parts))

print("\n## Run 1: the backward alone (ab_bwd.py), m = main, a = alt_summer.diff, the faster of two rounds")
ab = rows("run1_ab_bwd.jsonl")
best = fastest(ab, "shape", "impl", "tree")
for shape in dict.fromkeys(r["shape"] for r in ab):
    m, a = best[shape, "hopper backward", "m"], best[shape, "hopper backward", "a"]
    cudnn = min(best[shape, "cudnn backward", t] for t in "ma")
    print(f"{shape}: m {m:.4f} a {a:.4f} ms; a / m {a / m:.3f}; m / cuDNN {m / cudnn:.3f}, a / cuDNN {a / cudnn:.3f}")
print("largest gradient difference over cuDNN's largest:", f"{max(max(r['err']) for r in ab if 'err' in r):.1e}")
# work per (query tile of 64, key block of 128) and multiprocessor (the H200's 132): causal, key block k of a head
# sees the query tiles from 2 k on
MULTIPROCESSORS = 132
causal_tiles = sum(16384 // 64 - 2 * k for k in range(16384 // 128))
for shape, tiles in (("1x16x16384x64", 16 * causal_tiles), ("1x16x8192x64 not causal", 16 * (8192 // 128) * 128)):
    per_tile = best[shape, "hopper backward", "m"] * 1e3 * MULTIPROCESSORS / tiles
    print(f"{shape}: {tiles} tiles ({tiles // 16} a head); m {per_tile:.3f} us a tile per multiprocessor")
print("GPU tests on a:", passed("run1_pytest.log"))

print("\n## Run 2: the two-pass backward (ab_det.py), m = main, p = 984c250, the faster of two rounds")
det = rows("run2_ab_det.jsonl")
best = fastest(det, "shape", "impl", "tree")
ours = "hopper backward, two passes"
for shape in dict.fromkeys(r["shape"] for r in det):
    m, p = best[shape, ours, "m"], best[shape, ours, "p"]
    cudnn = min(best[shape, "cudnn backward", t] for t in "mp")
    print(f"{shape}: p {p:.4f} m {m:.4f} ms; m / p {m / p:.3f}; m / cuDNN's one pass {m / cudnn:.3f}")
print("largest gradient difference over cuDNN's largest:", f"{max(max(r['err']) for r in det if 'err' in r):.1e}",
      "; two calls equal bit for bit at every shape:", all(r["repeats_equal"] for r in det if "err" in r))

print("\n## GPU tests on m")
print("run 2, tests/test_flash_hopper_cuda.py:", passed("run2_pytest.log"))
print("run 3, the other files with GPU tests:", passed("run3_pytest.log"))
print("run 4, the backward's oracle cases of both CUDA C++ kernels on c:", passed("run4_pytest.log"))
