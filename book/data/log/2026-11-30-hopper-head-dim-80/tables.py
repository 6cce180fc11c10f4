"""Every number of the log entry "Head dims 72 and 80 in the Hopper kernels" from this folder's records."""
import json
from pathlib import Path

HERE = Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


print("run 1: SDPA's back ends and the Triton kernels by head dim, causal, bf16; fwd / fwd+bwd ms, and d / d=128")
print("| shape | cuDNN fwd | cuDNN fwd+bwd | of d128 | FA-2 fwd+bwd | Triton fwd+bwd | Triton / cuDNN |")
print("|---|---:|---:|---:|---:|---:|---:|")
spike = rows("run1_spike.jsonl")
for r in spike:
    d128 = next(x for x in spike if (x["b"], x["n"], x["d"]) == (r["b"], r["n"], 128))
    print(f"| {r['b']}×{r['h']}×{r['n']}×{r['d']} | {r['sdpa_cudnn'][0]:.3f} | {r['sdpa_cudnn'][1]:.3f} | "
          f"{r['sdpa_cudnn'][1] / d128['sdpa_cudnn'][1]:.3f} | {r['sdpa_flash'][1]:.3f} | "
          f"{r['flash_triton_python'][1]:.3f} | {r['flash_triton_python'][1] / r['sdpa_cudnn'][1]:.3f} |")

print("\nrun 2: flash_hopper at head dims 80 and 72 (ms; ratios of medians)")
print("| shape | causal | fwd / cuDNN | fwd+bwd ours | cuDNN | Triton | ours / cuDNN | ours / Triton | "
      "bwd ours / Triton | ours d80 / d128 | largest error |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows("run2_sweep80.jsonl"):
    d128 = f"{r['ours_fwd_bwd'] / r['ours_fwd_bwd_d128']:.3f}" if "ours_fwd_bwd_d128" in r else "—"
    print(f"| {r['shape']} | {'yes' if r['causal'] else 'no'} | {r['ours_fwd'] / r['cudnn_fwd']:.3f} | "
          f"{r['ours_fwd_bwd']:.3f} | {r['cudnn_fwd_bwd']:.3f} | {r['triton_fwd_bwd']:.3f} | "
          f"{r['ours_fwd_bwd'] / r['cudnn_fwd_bwd']:.3f} | {r['ours_fwd_bwd'] / r['triton_fwd_bwd']:.3f} | "
          f"{r['ours_bwd'] / r['triton_bwd']:.3f} | {d128} | {max(r['err']):.1e} |")
print("  flash_hopper at head dim 128 / cuDNN at 80, forward+backward:",
      ", ".join(f"{r['shape']} {r['ours_fwd_bwd_d128'] / r['cudnn_fwd_bwd']:.3f}"
                for r in rows("run2_sweep80.jsonl") if "ours_fwd_bwd_d128" in r))
print("  forward alone, ms (ours, cuDNN, Triton):",
      "; ".join(f"{r['shape']} {r['ours_fwd']:.3f} {r['cudnn_fwd']:.3f} {r['triton_fwd']:.3f}"
                for r in rows("run2_sweep80.jsonl")))

print("\nruns 3 and 4: training steps, sdpa and flash_hopper interleaved on one model, medians of 10 (ms)")
print("| preset | context | batch | compiled | sdpa | flash_hopper | flash_hopper / sdpa |")
print("|---|---:|---:|---|---:|---:|---:|")
for name in ("run3_step27.jsonl", "run4_steps.jsonl"):
    found = rows(name)
    for r in found:
        if r["attention"] != "sdpa":
            continue
        o = next(x for x in found if x["attention"] == "flash_hopper" and (x["size"], x["context_length"],
                 x["compile"]) == (r["size"], r["context_length"], r["compile"]))
        print(f"| {r['size']} | {r['context_length']} | {r['batch_size']} | {'yes' if r['compile'] else 'no'} | "
              f"{r['step_ms']:.2f} | {o['step_ms']:.2f} | {o['step_ms'] / r['step_ms']:.4f} |")

for name in ("run2_pytest.log", "run5_pytest.log"):
    print(f"\n{name}:", [line for line in (HERE / name).read_text().splitlines() if "passed" in line][-1])
