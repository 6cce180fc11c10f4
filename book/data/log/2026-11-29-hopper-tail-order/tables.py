"""Every number of the log entry "The last heads taken tile by tile across them": the faster of each tree's rounds
per shape, from the runs' rows beside this file (run 1: fwd_ab and breakdown on base, the kernel as committed at
8ff1a7d, and expo, its forward with two_p_exponentials_apart.diff; run 2: bench_modes on base and fz, the dQ
accumulator zeroed by the delta kernel; run 3: fwd_ab and bwd_ab on fz and tail, fz with head_rank)."""
import json
from pathlib import Path

HERE = Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines()]


def best(rs, key="ms", by=("tree", "shape")):
    out = {}
    for r in rs:
        k = tuple(r[b] for b in by)
        out[k] = min(out.get(k, float("inf")), r[key])
    return out


def shapes(rs):
    return list(dict.fromkeys(r["shape"] for r in rs))


def ab_table(name, old, new, triton=False):
    rs = rows(name)
    ms, cudnn = best(rs), {s: min(r["cudnn_ms"] for r in rs if r["shape"] == s) for s in shapes(rs)}
    head = f"| shape | {old} ms | {new} / {old} | {old} / cuDNN | {new} / cuDNN |" + (" Triton / cuDNN |" if triton else "")
    print(head)
    for s in shapes(rs):
        a, b = ms[(old, s)], ms[(new, s)]
        line = f"| {s} | {a:.4f} | {b / a:.3f} | {a / cudnn[s]:.3f} | {b / cudnn[s]:.3f} |"
        if triton:
            t = [r["triton_ms"] for r in rs if r["shape"] == s and "triton_ms" in r]
            line += f" {min(t) / cudnn[s]:.3f} |" if t else " |"
        print(line)
    err = max(max(r["err"]) if isinstance(r["err"], list) else r["err"] for r in rs)
    print(f"largest difference from cuDNN's output over cuDNN's largest: {err:.1e}\n")


print("## Run 1: the forward alone, base and expo (fwd_ab.py)")
ab_table("run1_fwd_ab.jsonl", "base", "expo", triton=True)

print("## Run 1: device time per kernel of one forward+backward, base (breakdown.py), us")
for r in rows("run1_breakdown.jsonl"):
    print(f"{r['shape']} {r['layout']} {r['impl']}: steps {r['wall_us']:.1f} us apart, kernels {r['device_us']:.1f}")
    for k, us, c in r["kernels"]:
        print(f"    {us:8.2f} x{c} {k}")
print()

print("## Run 2: forward+backward three ways, base and fz (bench_modes.py), faster of two rounds and two processes, ms")
rs = rows("run2_modes.jsonl")
print("| shape | tree | mode | flash_hopper | sdpa_cudnn | ours / cuDNN |")
for s in shapes(rs):
    for tree in ("base", "fz"):
        for mode in ("table", "no_flush", "loop", "flushed_calls_median"):
            t = best([r for r in rs if mode in r], mode, ("tree", "shape", "impl"))
            ours, cud = t[(tree, s, "flash_hopper")], t[(tree, s, "sdpa_cudnn")]
            print(f"| {s} | {tree} | {mode} | {ours:.4f} | {cud:.4f} | {ours / cud:.3f} |")
print("fz / base, flash_hopper:")
for mode in ("table", "loop", "flushed_calls_median"):
    t = best([r for r in rs if mode in r], mode, ("tree", "shape", "impl"))
    print("  " + mode + ": " + ", ".join(
        f"{s} {t[('fz', s, 'flash_hopper')] / t[('base', s, 'flash_hopper')]:.3f}" for s in shapes(rs)))
print("spread of one measurement across its four rows (max / min), sdpa_cudnn, table:", ", ".join(
    f"{s} {max(r['table'] for r in rs if r['shape'] == s and r['impl'] == 'sdpa_cudnn') / min(r['table'] for r in rs if r['shape'] == s and r['impl'] == 'sdpa_cudnn'):.3f}"
    for s in shapes(rs)))
print("kernels of one call after do_bench's flush (round 0 of each process), us:")
for r in rs:
    if "flushed_kernels_us" in r:
        ks = {k: us for k, us, _ in r["flushed_kernels_us"]}
        side = {k[:60]: us for k, us in ks.items() if "FillFunctor<int>" not in k}
        print(f"  {r['tree']} {r['shape']} {r['impl']}: " + "; ".join(f"{k} {us:.1f}" for k, us in side.items()))
run1 = {r["impl"]: {k[:60]: us for k, us, _ in r["kernels"]} for r in rows("run1_breakdown.jsonl")
        if r["shape"] == "8x32x1024x128" and r["layout"] == "bhnd"}
ratios = [us / run1[r["impl"]][k[:60]] for r in rs if r["shape"] == "8x32x1024x128" and "flushed_kernels_us" in r
          for k, us, _ in r["flushed_kernels_us"] if us > 100]
print(f"8x32x1024x128, the main kernels after a flush over run 1's: {min(ratios):.3f} to {max(ratios):.3f}")
print()

print("## Run 3: the forward alone, fz and tail (fwd_ab.py)")
ab_table("run3_fwd_ab.jsonl", "fz", "tail", triton=True)
print("## Run 3: the backward alone, one pass, causal, the model's layout, fz and tail (bwd_ab.py)")
ab_table("run3_bwd_ab.jsonl", "fz", "tail")
for name in ("fwd_ab", "bwd_ab"):
    rs = rows(f"run3_{name}.jsonl")
    spread = max((abs(a["ms"] / b["ms"] - 1), a["tree"], a["shape"]) for a in rs for b in rs
                 if a["tree"] == b["tree"] and a["shape"] == b["shape"] and a["round"] < b["round"])
    print(f"{name}: largest difference between a tree's two rounds at one shape: {spread[0]:.3f} ({spread[1]}, "
          f"{spread[2]})")
print()

for log in ("run1_pytest.log", "run2_pytest.log", "run3_pytest.log", "run4_pytest_bwd.log", "run4_pytest_att.log"):
    text = (HERE / log).read_text()
    lines = text.splitlines()
    count = lambda word: sum(word in line and "::" in line for line in lines)  # one line a test, -v or -rA
    print(f"{log}: {count('PASSED')} passed, {count('FAILED')} failed, {count('ERROR')} errors; "
          f"last line: {text.strip().splitlines()[-1][:100]}")
