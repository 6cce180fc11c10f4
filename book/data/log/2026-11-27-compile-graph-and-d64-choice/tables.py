"""The log entry's tables, from this directory's records: python tables.py"""
import csv, json, re, statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent


def kernels(path):
    return {r["name"]: float(r["self_us_per_step"]) / 1e3 for r in csv.DictReader(open(path))}


def block_row(run, tag, path, graphs):
    k = kernels(path)
    sub = lambda *keys: sum(v for n, v in k.items() if any(n.startswith(x) for x in keys))  # noqa: E731
    fwd = sub("void systems_flash_hopper::hopper_fwd", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop")
    bwd = sub("void systems_flash_hopper::hopper_bwd", "cudnn_generated_fort_native_sdpa_sm90_flash_bprop",
              "void systems_flash_hopper::dq_from", "void systems_flash_cuda::delta", "void cudnn::fusion",
              "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor")
    extra = sub("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy",
                "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add")
    return f"| {run} | {tag} | {graphs} | {fwd:.2f} | {bwd:.2f} | {extra:.2f} | {k['aten::mm']:.2f} |"


graphs = dict(re.findall(r"(run\d_\w+ block_\w+): compiled graphs called (\d+)", (HERE / "graphs_from_traces.txt").read_text()))
print("| run | attention | compiled graphs | attention forward | attention backward | copies and adds | matrix products |")
print("|---|---|---:|---:|---:|---:|---:|")
for run, names in (("run1_bb7c974", ("block_sdpa_cudnn", "block_flash_hopper")),
                   ("run2_39c299c", ("block_flash_hopper_0", "block_sdpa_cudnn_1", "block_flash_hopper_2"))):
    for name in names:
        print(block_row(run.split("_")[1], name.removeprefix("block_"), HERE / f"{run}_{name}.csv",
                        graphs[f"{run} {name}"]))

print()
rows = [json.loads(line) for line in open(HERE / "run3_39c299c_layout.jsonl")]
best = defaultdict(lambda: defaultdict(lambda: float("inf")))
for r in rows:
    best[(r["shape"], r["layout"])][r["impl"]] = min(best[(r["shape"], r["layout"])][r["impl"]], r["ms"])
print("| shape (B×H×N×d) | layout | Hopper backward | cuDNN backward | Triton backward | Hopper / cuDNN | Triton / cuDNN |")
print("|---|---|---:|---:|---:|---:|---:|")
for (shape, layout), m in best.items():
    print(f"| {shape.replace('x', '×')} | {layout} | {m['hopper']:.3f} | {m['cudnn']:.3f} | {m['triton']:.3f} | "
          f"{m['hopper'] / m['cudnn']:.3f} | {m['triton'] / m['cudnn']:.3f} |")

print()
rows = [json.loads(line) for line in open(HERE / "run4_39c299c_sweep64.jsonl")]
best = defaultdict(lambda: defaultdict(lambda: float("inf")))
for r in rows:
    key = (r["n"], r["B"], r["H"])
    best[key][r["impl"]] = min(best[key][r["impl"]], r["ms"])


def chosen_backward(n, pairs):  # hopper_backward_is_faster at 430ffd5, causal, head dim 64
    return "Hopper" if n >= 8192 or (n >= 2048 and pairs * n >= 1536 * 128) else "Triton"


print("| keys | B×H | blocks of 128 keys | forward: Hopper / Triton | backward: Hopper / Triton | backward now | "
      "backward ms, Hopper | backward ms, Triton |")
print("|---:|---|---:|---:|---:|---|---:|---:|")
for (n, B, H), m in sorted(best.items()):
    print(f"| {n} | {B}×{H} | {B * H * n // 128} | {m['fwd hopper'] / m['fwd triton']:.3f} | "
          f"{m['bwd hopper'] / m['bwd triton']:.3f} | {chosen_backward(n, B * H)} | {m['bwd hopper']:.3f} | "
          f"{m['bwd triton']:.3f} |")

print()
for line in open(HERE / "run5_430ffd5_steps.jsonl"):
    r = json.loads(line)
    print(f"{r['size']}, batch {r['batch']}: sdpa {r['sdpa']:.1f} ms, flash_hopper {r['flash_hopper']:.1f} ms, "
          f"ratio {r['ratio']:.3f} (95 % interval {r['low']:.3f} to {r['high']:.3f}); medians of "
          f"{len(r['times']['sdpa'])} steps, stdev sdpa {statistics.stdev(r['times']['sdpa']):.1f}")
