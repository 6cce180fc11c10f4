"""Every number of the log entry "The compiled step of small and medium with the Hopper kernels" from this folder's
records."""
import json
from pathlib import Path

from systems.bench.flash_sweep import ratio_interval

HERE = Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


print("runs 1 and 2: training steps, sdpa and flash_hopper interleaved on one model, medians of 10 (ms), the ratio's"
      " 95 % interval (paired bootstrap), and each attention's fastest and slowest step")
print("| preset | context | batch | compiled | sdpa | flash_hopper | flash_hopper / sdpa | 95 % interval | "
      "sdpa min–max | flash_hopper min–max |")
print("|---|---:|---:|---|---:|---:|---:|---|---|---|")
for name in ("run1_steps.jsonl", "run2_steps.jsonl"):
    found = rows(name)
    for r in found:
        if r["attention"] != "sdpa":
            continue
        o = next(x for x in found if x["attention"] == "flash_hopper" and (x["size"], x["context_length"],
                 x["compile"]) == (r["size"], r["context_length"], r["compile"]))
        low, high = ratio_interval(o["step_times_ms"], r["step_times_ms"])
        print(f"| {r['size']} | {r['context_length']} | {r['batch_size']} | {'yes' if r['compile'] else 'no'} | "
              f"{r['step_ms']:.2f} | {o['step_ms']:.2f} | {o['step_ms'] / r['step_ms']:.3f} | {low:.3f}–{high:.3f} | "
              f"{min(r['step_times_ms']):.1f}–{max(r['step_times_ms']):.1f} | "
              f"{min(o['step_times_ms']):.1f}–{max(o['step_times_ms']):.1f} |")

print("\nrun1_pytest.log (stopped by the call's time):", (HERE / "run1_pytest.log").read_text().count("."),
      "dots (tests passed), failures:", (HERE / "run1_pytest.log").read_text().count("F"))
print("run2_pytest.log:", [line for line in (HERE / "run2_pytest.log").read_text().splitlines() if "passed" in line][-1])
print("tests left after run 1:", len((HERE / "tests_left.txt").read_text().split()))
