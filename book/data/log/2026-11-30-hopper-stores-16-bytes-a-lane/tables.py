"""Every number of book/log.md's entry of 2026-11-30 on the Hopper kernels' 16-byte stores, from the rows here."""
import collections
import json
import re
from pathlib import Path

HERE = Path(__file__).parent
rows = lambda name: [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]

print("## Where a query tile's time goes (median SM cycles per query tile; loop: per key tile after the first)")
KEYS = ["q_wait", "first", "loop", "last", "epi", "gap", "total"]
print("| run | shape | causal | consumers | " + " | ".join(KEYS) + " | ours / cuDNN |")
for run in ("run1", "run3"):
    for r in rows(f"{run}_timeline.jsonl"):
        cells = " | ".join(f"{r[k]:.0f}" for k in KEYS)
        print(f"| {run} | {r['shape']} | {r['causal']} | {r['consumers']} | {cells} | {r['ours_ms'] / r['cudnn_ms']:.3f} |")

print("\n## Sweep at 16,384 tokens a batch, 32 heads (run 2: m n n m; the faster of each tree's two)")
by = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows("run2_sweep.jsonl"):
    point = by[(r["shape"], r["causal"])]
    for k in ("ours_fwd", "ours_fwd_bwd", "cudnn_fwd", "cudnn_fwd_bwd"):
        point[(r["tree"], k)].append(r[k])
    point[(r["tree"], "err")].append(max(r["err"]))
print("| shape | causal | n/m fwd | n/m fwd+bwd | n/m bwd | n/cuDNN fwd | n/cuDNN fwd+bwd | m/cuDNN fwd+bwd | "
      "largest err n | largest err m |")
for (shape, causal), p in by.items():
    best = lambda tree, k: min(p[(tree, k)])
    bwd = lambda tree: best(tree, "ours_fwd_bwd") - best(tree, "ours_fwd")
    cudnn_fwd = min(p[("m", "cudnn_fwd")] + p[("n", "cudnn_fwd")])
    cudnn_fb = min(p[("m", "cudnn_fwd_bwd")] + p[("n", "cudnn_fwd_bwd")])
    print(f"| {shape} | {causal} | {best('n', 'ours_fwd') / best('m', 'ours_fwd'):.3f} | "
          f"{best('n', 'ours_fwd_bwd') / best('m', 'ours_fwd_bwd'):.3f} | {bwd('n') / bwd('m'):.3f} | "
          f"{best('n', 'ours_fwd') / cudnn_fwd:.3f} | {best('n', 'ours_fwd_bwd') / cudnn_fb:.3f} | "
          f"{best('m', 'ours_fwd_bwd') / cudnn_fb:.3f} | {max(p[('n', 'err')]):.1e} | {max(p[('m', 'err')]):.1e} |")

print("\n## Run 1's sweep (m alone, one round): ours / cuDNN")
for r in rows("run1_sweep.jsonl"):
    print(f"| {r['shape']} | {r['causal']} | fwd {r['ours_fwd'] / r['cudnn_fwd']:.3f} | "
          f"fwd+bwd {r['ours_fwd_bwd'] / r['cudnn_fwd_bwd']:.3f} |")

print("\n## Chapter 20's table on n (run 3): flash_hopper / sdpa_cudnn, the fastest of three calls")
table = collections.defaultdict(dict)
for r in rows("run3_table.jsonl"):
    table[(r["dtype"], r["batch"], r["heads"], r["n_q"], r["d"], r["causal"], r["mode"])][r["impl"]] = r["ms"]
for (dtype, b, h, n, d, causal, mode), ms in table.items():
    print(f"| {dtype} {b}x{h}x{n}x{d} | causal {causal} | {mode} | {ms['flash_hopper']:.4f} ms | "
          f"{ms['sdpa_cudnn']:.4f} ms | {ms['flash_hopper'] / ms['sdpa_cudnn']:.3f} |")

print("\n## GPU tests (run 3):", (HERE / "run3_pytest.log").read_text().strip().splitlines()[-1])

print("\n## The compiled large step's kernels (run 4), ms a step")
steps = rows("run4_prof_step.jsonl")
attention = lambda name: "cudnn" in name or "systems_flash" in name
for r in steps:
    grouped = collections.Counter()
    for name, ms in r["kernels"].items():
        grouped[re.sub(r"_\d+$", "", name)] += ms  # inductor numbers its kernels per graph
    r["grouped"] = grouped
    att = sum(ms for name, ms in grouped.items() if attention(name))
    print(f"{r['attention']}: step {r['step_ms']:.2f} (wall, median), kernels {r['kernel_ms']:.2f}, attention's "
          f"{att:.2f}, the rest {r['kernel_ms'] - att:.2f}")
print(f"flash_hopper / sdpa, the step: {steps[1]['step_ms'] / steps[0]['step_ms']:.3f}")
names = set(steps[0]["grouped"]) | set(steps[1]["grouped"])
for name in sorted(names, key=lambda n: -abs(steps[1]["grouped"][n] - steps[0]["grouped"][n]))[:14]:
    a, b = steps[0]["grouped"][name], steps[1]["grouped"][name]
    print(f"| {a:.2f} | {b:.2f} | {b - a:+.2f} | {name[:100]} |")

print("\n## The compiled xl step (run 5, batch 4): sdpa's alone, flash_hopper's stopped by the call's time")
for r in rows("run5_prof_step.jsonl"):
    print(f"{r['attention']}: step {r['step_ms']:.2f}, kernels {r['kernel_ms']:.2f}, attention's "
          f"{sum(ms for name, ms in r['kernels'].items() if attention(name)):.2f}")
