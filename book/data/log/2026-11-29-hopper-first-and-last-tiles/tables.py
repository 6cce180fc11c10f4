"""Every number of the log entry "The Hopper backward's second consumer skips its first query tile ..." (2026-11-29),
from the records kept here. From the repository's root:
    python book/data/log/2026-11-29-hopper-first-and-last-tiles/tables.py"""
import collections, json, pathlib, re

HERE = pathlib.Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


def fastest(records, field, *keys):
    best = collections.defaultdict(lambda: float("inf"))
    for r in records:
        k = tuple(r[f] for f in keys)
        best[k] = min(best[k], r[field])
    return best


print("## Run 1: the registered forward (ab_fwd.py), m = main, h = half_tile.diff, the faster of two rounds")
fwd = rows("run1_ab_fwd.jsonl")
ours, cudnn = fastest(fwd, "ours_ms", "shape", "causal", "tree"), fastest(fwd, "cudnn_ms", "shape", "causal", "tree")
for shape, causal in dict.fromkeys((r["shape"], r["causal"]) for r in fwd):
    m, h = ours[shape, causal, "m"], ours[shape, causal, "h"]
    cm, ch = cudnn[shape, causal, "m"], cudnn[shape, causal, "h"]
    print(f"{shape}{'' if causal else ' not causal'}: m {m:.4f} h {h:.4f} ms; h / m {h / m:.3f}; "
          f"m / cuDNN {m / cm:.3f}, h / cuDNN {h / ch:.3f}")
print("h: largest output difference over cuDNN's largest:", f"{max(r['err'] for r in fwd if r['tree'] == 'h'):.1e};",
      "largest |L - float64 log-sum-exp| (to 2,048 keys):",
      f"{max(r.get('L_err', 0) for r in fwd if r['tree'] == 'h'):.1e}")

print("\n## Run 1: chapter 20's table (table.py) on h, flash_hopper over SDPA's cuDNN back end, fastest of three calls")
table = rows("run1_table.jsonl")
best = {(r["dtype"], r["batch"], r["heads"], r["n_q"], r["d"], r["causal"], r["impl"], r["mode"]): r["ms"]
        for r in table}
for dtype, b, h, n, d, causal in dict.fromkeys(k[:6] for k in best):
    parts = [f"{mode}: {best[dtype, b, h, n, d, causal, 'flash_hopper', mode]:.3f} ms / "
             f"{best[dtype, b, h, n, d, causal, 'sdpa_cudnn', mode]:.3f} ms = "
             f"{best[dtype, b, h, n, d, causal, 'flash_hopper', mode] / best[dtype, b, h, n, d, causal, 'sdpa_cudnn', mode]:.3f}"
             for mode in ("fwd", "fwd_bwd")]
    print(f"{dtype} {b}x{h}x{n}x{d}{'' if causal else ' not causal'}: " + "; ".join(parts))

print("\n## Runs 2 and 3: compiled training steps at context 2048 (steps.py) on main, flash_hopper over sdpa")
for name in ("run2_steps.jsonl", "run3_steps.jsonl"):
    steps = rows(name)
    for size in dict.fromkeys(r["size"] for r in steps):
        by = {r["attention"]: r for r in steps if r["size"] == size}
        print(f"{name[:4]} {size}, batch {by['sdpa']['batch_size']}: sdpa {by['sdpa']['step_ms']:.1f} ms, "
              f"flash_hopper {by['flash_hopper']['step_ms']:.1f} ms, ratio "
              f"{by['flash_hopper']['step_ms'] / by['sdpa']['step_ms']:.3f}")

print("\n## Run 4: the backward alone (ab_bwd.py), m = main, e = first_tile.diff, the faster of two rounds")
ab = rows("run4_ab_bwd.jsonl")
best = fastest(ab, "ms", "shape", "impl", "tree")
for shape in dict.fromkeys(r["shape"] for r in ab):
    m, e = best[shape, "hopper backward", "m"], best[shape, "hopper backward", "e"]
    rounds = {t: [round(r["ms"], 4) for r in ab if r["shape"] == shape and r["impl"] == "hopper backward"
                  and r["tree"] == t] for t in "me"}
    print(f"{shape}: m {m:.4f} e {e:.4f} ms; e / m {e / m:.3f}; m / cuDNN {m / best[shape, 'cudnn backward', 'm']:.3f}, "
          f"e / cuDNN {e / best[shape, 'cudnn backward', 'e']:.3f}; rounds {rounds}")
print("e: largest gradient difference over cuDNN's largest:",
      f"{max(max(r['err']) for r in ab if 'err' in r and r['tree'] == 'e'):.1e}")
print("GPU tests on e:", re.findall(r"=+ (.*) in [0-9.]+s.*=+", (HERE / "run4_pytest.log").read_text())[-1])
run5 = (HERE / "run5_pytest.log").read_text()
print("Run 5 on main as committed:", run5.count(" PASSED"), "passed,", run5.count(" FAILED"), "failed, of",
      re.search(r"(\d+) selected", run5).group(1), "selected")
