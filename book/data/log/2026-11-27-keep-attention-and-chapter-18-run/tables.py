"""The log entry's tables, from this directory's records: python tables.py"""
import csv
from pathlib import Path

HERE = Path(__file__).parent
BEFORE, AFTER = HERE / "chapter18_d8156ec", HERE / "run1_8ad6b2b_chapter18"


def rows(folder, name):
    return list(csv.DictReader(open(folder / f"{name}.csv")))


def ms(row):
    return float(row["ms"]) if row["status"] == "ok" else float("nan")


def block(folder):
    return {(r["attention"], r["recompute"], r["compiled"]): ms(r) for r in rows(folder, "block")}


before, after = block(BEFORE), block(AFTER)
print("| recompute | compiled | ours, d8156ec | ours, 8ad6b2b | cuDNN, d8156ec | cuDNN, 8ad6b2b |"
      " ours / cuDNN, d8156ec | ours / cuDNN, 8ad6b2b |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for recompute in ("none", "all", "keep_attention"):
    for compiled in ("False", "True"):
        h0, h1 = before["flash_hopper", recompute, compiled], after["flash_hopper", recompute, compiled]
        c0, c1 = before["sdpa_cudnn", recompute, compiled], after["sdpa_cudnn", recompute, compiled]
        print(f"| {recompute} | {'yes' if compiled == 'True' else 'no'} | {h0:.1f} | {h1:.1f} | {c0:.1f} | {c1:.1f} |"
              f" {h0 / c0:.3f} | {h1 / c1:.3f} |")

print()
print("| blocks | ours, d8156ec (keep_attention) | plain, d8156ec | ours / plain | ours, 8ad6b2b (all) | plain, 8ad6b2b |"
      " ours / plain | MFU ours, 8ad6b2b | GiB ours / plain, 8ad6b2b |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
steps = {}
for tag, folder in (("before", BEFORE), ("after", AFTER)):
    for r in rows(folder, "model_step"):
        steps[tag, r["layers"], r["attention"]] = r
for n in ("2", "4", "8", "12", "16"):
    o0, p0 = steps["before", n, "flash_hopper"], steps["before", n, "sdpa_cudnn"]
    o1, p1 = steps["after", n, "flash_hopper"], steps["after", n, "sdpa_cudnn"]
    old = f"{ms(o0):.0f} | {ms(p0):.0f} | {ms(o0) / ms(p0):.3f}" if o0["status"] == "ok" else f"{o0['status']} | {ms(p0):.0f} | —"
    print(f"| {n} | {old} | {ms(o1):.0f} | {ms(p1):.0f} | {ms(o1) / ms(p1):.3f} | {float(o1['mfu']):.1%} |"
          f" {float(o1['extra_gib']):.1f} / {float(p1['extra_gib']):.1f} |")

print()
print("| recipe (8ad6b2b, 2 blocks) | ms | MFU | extra GiB |")
print("|---|---:|---:|---:|")
for r in rows(AFTER, "ablation"):
    print(f"| {r['recipe']} | {ms(r):.1f} | {float(r['mfu']):.1%} | {float(r['extra_gib']):.2f} |")

print()
print("| part | d8156ec ms | 8ad6b2b ms |")
print("|---|---:|---:|")
for name, key in (("head_and_loss", "variant"), ("head_chunks", "chunk_mib"), ("adamw", "variant")):
    old = {r[key]: ms(r) for r in rows(BEFORE, name)}
    for r in rows(AFTER, name):
        print(f"| {name} {r[key]} | {old.get(r[key], float('nan')):.1f} | {ms(r):.1f} |")
