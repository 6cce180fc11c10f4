"""Every number of the log entry "The Hopper backward at head dim 128 stores its dQ share under dK's product": the
faster of the two rounds per tree, shape and implementation, from ab.jsonl."""
import json
from pathlib import Path

HERE = Path(__file__).parent
rows = [json.loads(line) for line in (HERE / "ab.jsonl").read_text().splitlines()]
best = {}
for r in rows:
    key = (r["tree"], r["shape"], r["impl"])
    best[key] = min(best.get(key, float("inf")), r["ms"])
print("| shape | base ms | new ms | new / base | cuDNN ms | base / cuDNN | new / cuDNN |")
for shape in dict.fromkeys(r["shape"] for r in rows):
    base, new = best[("base", shape, "hopper backward")], best[("new", shape, "hopper backward")]
    cudnn = min(best[(t, shape, "cudnn backward")] for t in ("base", "new"))
    print(f"| {shape} | {base:.3f} | {new:.3f} | {new / base:.3f} | {cudnn:.3f} | {base / cudnn:.3f} | {new / cudnn:.3f} |")
errs = [max(r["err"]) for r in rows if r["impl"] == "hopper backward"]
print("largest gradient difference over cuDNN's largest, either tree: %.1e" % max(errs))
same = all(max(a["err"]) == max(b["err"]) for a in rows for b in rows if a["impl"] == b["impl"] == "hopper backward"
           and a["shape"] == b["shape"] and a["round"] == b["round"])
print("the two trees' differences from cuDNN identical in each round:", same)

# the 16-block step of the second call, against plain PyTorch's three steps in an 80 GB GPU's memory from the
# previous entry's records (other machines of the same kind: a ratio across runs)
step = json.loads((HERE / "step16.jsonl").read_text())
print("ours, 16 blocks, 80 GB, expandable: %.1f ms, MFU %.1f %%, peak %.1f GiB, reserved %.1f GiB, kept %d" % (
    step["ms"], 100 * step["mfu"], step["peak_gib"], step["reserved_gib"], step["kept_blocks"]))
prev = HERE.parent / "2026-11-28-expandable-segments-in-80-gb"
plain = [r["ms"] for r in map(json.loads, (prev / "fit_h100.jsonl").read_text().splitlines())
         if r["recipe"].startswith("sdpa_cudnn") and r["cap"] == "h100"]
lines = (prev / "cli16.txt").read_text().splitlines()
plain += [float(line.split()[-6]) for line in lines[1:] if "sdpa_cudnn" in line]
ours_before = [r["ms"] for r in map(json.loads, (prev / "fit_h100.jsonl").read_text().splitlines())
               if r["recipe"].startswith("flash_hopper") and r["cap"] == "h100" and r["status"] == "ok"]
ours_before += [float(line.split()[-6]) for line in lines[1:] if "flash_hopper" in line]
print("plain in 80 GB: " + ", ".join("%.1f" % p for p in sorted(plain)),
      "-> plain / ours %.3f to %.3f" % (min(plain) / step["ms"], max(plain) / step["ms"]))
print("ours before the change in 80 GB: " + ", ".join("%.1f" % p for p in sorted(ours_before)),
      "-> now / before %.3f to %.3f" % (step["ms"] / max(ours_before), step["ms"] / min(ours_before)))
