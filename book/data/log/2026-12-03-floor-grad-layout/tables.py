"""Every number of the log entry of 2026-12-03, "The eager floor with a gradient of o's shape", from the records."""
import json
import re
from pathlib import Path

import pandas as pd

here = Path(__file__).parent


def lines(name):
    return [json.loads(line) for line in (here / name).read_text().splitlines() if line.strip()]


print("Run 1 (floor_grad.py, 7 rounds): median wall µs per eager forward+backward call, 1x1x128x64 bf16 causal")
grad = pd.DataFrame(lines("run1_floor_grad.jsonl")).pivot(index="impl", columns="grad", values="median_us")
grad = grad.reindex(["flash", "flash_triton", "flash_cuda", "sdpa_flash", "sdpa_cudnn", "copy of the expanded dO"])
grad["o.sum() less dO"] = grad["o.sum()"] - grad["dO of o's shape"]
for column in ("o.sum()", "dO of o's shape"):
    grad[f"{column} less flash_triton"] = grad[column] - grad.loc["flash_triton", column]
    grad[f"{column} over sdpa_flash"] = grad[column] / grad.loc["sdpa_flash", column]
print(grad.round(3).to_string())

print("\nRun 1 (call_overhead twice): host µs of each C++ operator alone, and its ratio to the Triton kernels' operator")
for run in ("run1_co1.txt", "run1_co2.txt"):
    rows = {}
    for line in (here / run).read_text().splitlines()[1:]:
        m = re.match(r"\s*(\S.*?)\s{2,}(\S.*?)\s+([\d.]+|unsupported)\s+([\d.]+|unsupported)$", line)
        if m:
            rows[m.group(1), m.group(2)] = float(m.group(3))
    for kind in ("forward", "backward"):
        triton = next(v for (i, w), v in rows.items() if i == "flash_triton" and w.startswith(f"{kind}, C++ operator"))
        for impl in ("flash_cuda", "flash_hopper"):
            ours = next(v for (i, w), v in rows.items() if i == impl and w.startswith(f"{kind}, C++ operator"))
            print(f"  {run}  {kind:8s}  {impl:12s} {ours:6.2f}  flash_triton {triton:6.2f}  ratio {ours / triton:.3f}")
    for impl in ("flash", "flash_triton", "flash_cuda", "sdpa_flash", "sdpa_cudnn"):
        print(f"  {run}  whole call, forward + backward (a gradient of o's shape)  {impl:12s} {rows[impl, 'forward + backward']:7.2f}")

for run, gradient in (("run4_floor.txt", "o.sum()"), ("run6_floor.txt", "a gradient of O's shape")):
    print(f"\n{run} (call_overhead --floor, {gradient}): wall µs per call, and over sdpa_flash's in the same mode")
    floor_rows = [line.split() for line in (here / run).read_text().splitlines()[1:]]
    floor = pd.DataFrame([[float(x) for x in row[1:]] for row in floor_rows],
                         columns=["eager", "compiled", "CUDA graph"], index=[row[0] for row in floor_rows])
    floor["eager less flash_triton"] = floor.eager - floor.loc["flash_triton", "eager"]
    ratios = (floor[["eager", "compiled", "CUDA graph"]] / floor.loc["sdpa_flash", ["eager", "compiled", "CUDA graph"]])
    print(pd.concat([floor, ratios.add_suffix(" / sdpa_flash")], axis=1).round(3).to_string())

print("\nRun 4 (eager_steps.py): eager training step, median ms of 20, and over sdpa's")
steps = pd.DataFrame(lines("run4_steps.jsonl"))
steps["min_ms"] = steps.step_times_ms.map(min)
steps["max_ms"] = steps.step_times_ms.map(max)
steps["over_sdpa"] = steps.step_ms / steps.groupby(["size", "context_length"]).step_ms.transform(
    lambda s: s[steps.loc[s.index, "attention"] == "sdpa"].iloc[0])
print(steps[["size", "context_length", "batch_size", "attention", "step_ms", "min_ms", "max_ms", "over_sdpa"]]
      .round(3).to_string(index=False))

print("\nGPU tests at 88b69f3 (runs 1 to 3)")
passed = set()
for run in ("run1_pytest.log", "run2_pytest.log", "run3_pytest.log"):
    text = (here / run).read_text()
    ids = set(re.findall(r"^(tests/.+?) PASSED", text, re.M))
    failed = re.findall(r"^(tests/.+?) (?:FAILED|ERROR)", text, re.M)
    summary = re.findall(r"=+ (.*(?:passed|failed).*) =+$", text, re.M)
    print(f"  {run}: {len(ids)} passed, {len(failed)} failed; {summary[-1] if summary else 'stopped by its limit'}")
    passed |= ids
print(f"  distinct tests passed over the three runs: {len(passed)}")
