"""Every number of the log entry "flash_hopper takes the Hopper backward at every shape" from this folder's records."""
import json
from pathlib import Path

from systems.bench.flash_sweep import ratio_interval

HERE = Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


def rule_before(causal, n, B, H):  # hopper_backward_is_faster at head dim 64, as main had it before the change
    return n >= 4096 if not causal else n >= 8192 or (n >= 1024 and B * H * n >= 1024 * 128)


def ratios(name):
    """(causal, n, B, H) -> {round: hopper ms / triton ms}"""
    found = {}
    for r in rows(name):
        found.setdefault((r["causal"], r["n"], r["B"], r["H"]), {}).setdefault(r["round"], {})[r["impl"]] = r["ms"]
    return {key: {rnd: t["hopper"] / t["triton"] for rnd, t in by.items() if len(t) == 2} for key, by in found.items()}


for name, title in (("run1_choice64.jsonl", "run 1: 512 to 4,096 keys"),
                    ("run2_tiny64.jsonl", "run 2: below 512 keys (stopped by its time)")):
    print(f"\n{title}: the Hopper backward's time over the Triton backward's, head dim 64, by round, and which the "
          "rule before the change took")
    print("| causal | keys | B×H | round 0 | round 1 | taken before |")
    print("|---|---:|---|---:|---:|---|")
    table = ratios(name)
    for (causal, n, B, H), by in table.items():
        if not by:
            continue
        cells = " | ".join(f"{by[r]:.3f}" if r in by else "—" for r in (0, 1))
        print(f"| {'yes' if causal else 'no'} | {n} | {B}×{H} | {cells} | "
              f"{'Hopper' if rule_before(causal, n, B, H) else 'Triton'} |")
    every = [v for by in table.values() for v in by.values()]
    triton_taken = [v for key, by in table.items() for v in by.values() if not rule_before(*key)]
    print(f"  all: {min(every):.3f} to {max(every):.3f} over {len(every)} timings;"
          f" where the Triton backward was taken: {min(triton_taken):.3f} to {max(triton_taken):.3f}"
          f" over {len(triton_taken)}; slower than Triton's: {sum(v > 1 for v in every)}")

print("\nrun 3: flash_hopper (8615f3d) over SDPA's cuDNN back end at head dim 64, by round: forward, forward+backward;"
      " ms; largest difference from cuDNN's O, dQ, dK, dV over cuDNN's largest")
print("| shape | causal | round | fwd / cuDNN | fwd+bwd ours | cuDNN | fwd+bwd / cuDNN | largest error |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for r in sorted(rows("run3_against_cudnn.jsonl"), key=lambda r: (r["causal"], r["shape"], r["round"])):
    print(f"| {r['shape']} | {'yes' if r['causal'] else 'no'} | {r['round']} | {r['ours_fwd'] / r['cudnn_fwd']:.3f} | "
          f"{r['ours_fwd_bwd']:.3f} | {r['cudnn_fwd_bwd']:.3f} | {r['ours_fwd_bwd'] / r['cudnn_fwd_bwd']:.3f} | "
          f"{max(r['err']):.1e} |")
steps = {r["attention"]: r for r in rows("run3_steps.jsonl")}
ours, sdpa = steps["flash_hopper"], steps["sdpa"]
low, high = ratio_interval(ours["step_times_ms"], sdpa["step_times_ms"])
print(f"\nrun 3: xl eager step, context 1024, batch 4: flash_hopper {ours['step_ms']:.2f} ms, sdpa {sdpa['step_ms']:.2f},"
      f" {ours['step_ms'] / sdpa['step_ms']:.3f} (95 % interval {low:.3f} to {high:.3f}); steps from"
      f" {min(sdpa['step_times_ms']):.1f} to {max(sdpa['step_times_ms']):.1f} (sdpa) and"
      f" {min(ours['step_times_ms']):.1f} to {max(ours['step_times_ms']):.1f} (flash_hopper)")

print("\nrun2_pytest.log:", [line for line in (HERE / "run2_pytest.log").read_text().splitlines() if "passed" in line][-1])
