"""Every number of the log entry "Where the leaderboard's step spends its time": the kernels of the 4-block step
by group (kernels.jsonl, steps.jsonl), the matmuls of the 2-block step by shape (matmuls.jsonl), and the 16-block
step of ours and plain PyTorch's in one process in an H100 80GB's memory (cli16.txt)."""
import json
from pathlib import Path

HERE = Path(__file__).parent
PEAK = 989.4e12  # the dense bf16 peak the harness's MFU counts against (H100 SXM, which the H200 shares)


def lines(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines()]


def group(name: str) -> str:
    if name.startswith("triton_"):  # Inductor's fusions: norms, SwiGLU, rotary, casts (some named after attention)
        return "Inductor's fusions"
    if "systems_flash_hopper" in name or "systems_flash_cuda" in name or "cudnn" in name:
        return "attention"
    if name.startswith("nvjet") or "gemm" in name:
        return "matmuls (cuBLAS)"
    if "loss" in name:
        return "loss"
    if "adam" in name.lower():
        return "AdamW"
    return "other"


steps = {s["recipe"]: s for s in lines("steps.jsonl")}
kernels = lines("kernels.jsonl")
for r, s in steps.items():
    print(f"{r}: {s['label']}; steps under the profiler {', '.join('%.1f' % t for t in s['ms'])} ms, "
          f"kernels {sum(k['us_per_step'] for k in kernels if k['recipe'] == r) / 1e3:.1f} ms a step")
print("| group | ours ms | share | plain ms | share |")
totals = {r: sum(k["us_per_step"] for k in kernels if k["recipe"] == r) for r in steps}
for g in ("matmuls (cuBLAS)", "attention", "Inductor's fusions", "loss", "AdamW", "other"):
    cells = []
    for r in ("ours", "plain"):
        us = sum(k["us_per_step"] for k in kernels if k["recipe"] == r and group(k["name"]) == g)
        cells += [f"{us / 1e3:.1f}", f"{100 * us / totals[r]:.1f} %"]
    print(f"| {g} | " + " | ".join(cells) + " |")
print("attention kernels (ms per call, calls a step):")
for k in kernels:
    if group(k["name"]) == "attention":
        print(f"  {k['recipe']}: {k['name'][:90]}  {k['us_per_step'] / k['calls'] / 1e3:.2f} ms x {k['calls']:g}")

print("| matmul (2 blocks) | calls a step | ms a call | TFLOP/s |")
per_call = {}
for m in lines("matmuls.jsonl"):
    a, b = (m["shapes"][0], m["shapes"][1]) if m["op"] == "aten::mm" else (m["shapes"][1], m["shapes"][2])
    ms = m["ms_per_step"] / m["calls"]
    per_call[(tuple(a), tuple(b))] = ms
    print(f"| {a} x {b} | {m['calls']:g} | {ms:.3f} | {2 * a[0] * a[1] * b[1] / ms / 1e9:.0f} |")
# what a block's recomputation runs again of them: q, k, v and the output projection, and W1 and W3
qkvo, w13 = per_call[((65536, 4096), (4096, 4096))], per_call[((65536, 4096), (4096, 11008))]
print(f"a block's recomputed matmuls: 4 x {qkvo:.2f} + 2 x {w13:.2f} = {4 * qkvo + 2 * w13:.1f} ms")

rows = [line.split() for line in (HERE / "cli16.txt").read_text().splitlines()[1:]]
ms = {row[1].rstrip(","): float(row[-6]) for row in rows}
mfu = {row[1].rstrip(","): float(row[-1]) for row in rows}
peak = {row[1].rstrip(","): (float(row[-4]), float(row[-3])) for row in rows}
for r in ms:
    print(f"16 blocks, {r}: {ms[r]:.1f} ms, MFU {100 * mfu[r]:.1f} %, peak {peak[r][0]:.1f} GiB, "
          f"reserved {peak[r][1]:.1f} GiB")
print(f"plain / ours, one run: {ms['sdpa_cudnn'] / ms['flash_hopper']:.4f}")
flops = mfu["flash_hopper"] * PEAK * ms["flash_hopper"] / 1e3
at55 = flops / (0.55 * PEAK) * 1e3
per_block = (ms["flash_hopper"] - at55) / 16
print(f"the step's FLOPs {flops / 1e15:.3f} PFLOP; 55 % MFU is {at55:.0f} ms: {ms['flash_hopper'] - at55:.0f} ms "
      f"({100 * (1 - at55 / ms['flash_hopper']):.1f} %) less, {per_block:.1f} ms a block")

# what keeping, rather than recomputing, would buy a block: its outputs' bytes (bf16, 2 x 32,768 tokens) against the
# matmuls it would not run again, at the 2-block step's rates
tokens, gib = 2 * 32768, 2**30
for what, bytes_, ms_saved in (("q, k and v", 3 * tokens * 4096 * 2, 3 * qkvo), ("W1 x and W3 x", 2 * tokens * 11008 * 2,
                                                                              2 * w13)):
    print(f"keeping {what}: {bytes_ / gib:.2f} GiB a block for {ms_saved:.1f} ms, {ms_saved / (bytes_ / gib):.1f} ms a GiB")
allocatable = 79.13  # hold.txt: what the allocator could give with the H100's memory played
print(f"between the 16-block step's peak and what the allocator could give: {allocatable - peak['flash_hopper'][0]:.1f} GiB")
head_dw = [k for k in kernels if k["recipe"] == "ours" and "badd" in k["name"]]
for k in head_dw:
    print(f"the head's weight gradient added chunk by chunk, 4 blocks: {k['calls']:g} calls, "
          f"{k['us_per_step'] / k['calls'] / 1e3:.2f} ms a call")
ours_attention = sum(k["us_per_step"] for k in kernels if k["recipe"] == "ours" and group(k["name"]) == "attention") / 4e3
print(f"our attention a block: {ours_attention:.1f} ms; {per_block:.1f} ms is {per_block / ours_attention:.0%} of it, "
      f"{per_block / (4 * qkvo + 2 * w13):.0%} of the recomputed matmuls")
rate = min(2 * w13 / (2 * tokens * 11008 * 2 / gib), 3 * qkvo / (3 * tokens * 4096 * 2 / gib))
print(f"what that memory would save at {rate:.1f} ms a GiB: {(allocatable - peak['flash_hopper'][0]) * rate:.0f} ms")
per_call_of = {(k["recipe"], k["name"]): k["us_per_step"] / k["calls"] for k in kernels}
fwd = [v for (r, n), v in per_call_of.items() if r == "ours" and "hopper_fwd" in n][0]
bwd = [v for (r, n), v in per_call_of.items() if r == "ours" and "dkdv" in n][0]
cfwd = [v for (r, n), v in per_call_of.items() if r == "plain" and "fprop" in n][0]
cbwd = [v for (r, n), v in per_call_of.items() if r == "plain" and "bprop" in n][0]
print(f"our forward / cuDNN's {fwd / cfwd:.3f}, our backward / cuDNN's {bwd / cbwd:.3f}")
before = json.loads((HERE.parent / "2026-11-28-hopper-backward-128-dq-under-dk" / "step16.jsonl").read_text())["ms"]
print(f"ours here / ours in 2026-11-28-hopper-backward-128-dq-under-dk (another machine): {ms['flash_hopper'] / before:.4f} ({before:.1f} ms)")
