"""Every number of the log entry "Chapter 20's row without the mask by kernel time" (2026-12-01), from the outputs
beside this file: run1_nc.jsonl (nc.py) and run2_kt.jsonl (kt.py)."""
import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
OURS, CUDNN = "flash_hopper", "sdpa_cudnn"


def lines(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines()]


def shape_name(row):
    return "×".join(map(str, row["shape"])) + ("" if row["causal"] else ", not causal")


def events_ms(row):
    """Run 2: forward+backward by CUDA events with the host ahead."""
    return row["events_fwd_ms"] + row["events_bwd_ms"]


def kernel_ms(row):
    """Run 2: forward+backward by kernel time."""
    return row["kernel_fwd_ms"] + row["kernel_bwd_ms"]


CLOCKS = {"do_bench": lambda r: r["do_bench"]["fwd_bwd"], "events": events_ms, "kernels": kernel_ms}
run1 = lines("run1_nc.jsonl")


def backward_kernel_ms(row):
    """Run 1: the kernels of one iteration after the forward's, in ms (the flush and the sleep left out)."""
    return sum(k["us_per_iter"] for name, k in row["kernels"].items()
               if not any(s in name for s in ("FillFunctor", "spin_kernel", "hopper_fwd", "fprop"))) / 1e3


print("Run 1 (nc.py): kernel time of the backward, sequence A (forward, backward) and B (an L2 flush between), ms")
for row in run1:
    if row["kind"] == "kernels":
        print(f"  {shape_name(row):28s} {row['impl']:13s} {row['seq']}  backward kernels {backward_kernel_ms(row):8.3f}")
print("Run 1: CUDA events with the host ahead, medians of ten, ms; and do_bench's three rounds of bwd")
for row in run1:
    if row["kind"] == "events":
        print(f"  {shape_name(row):28s} {row['impl']:13s} {row['seq']}  fwd {statistics.median(row['fwd_ms']):.3f}"
              f"  bwd {statistics.median(row['bwd_ms']):.3f}")
for row in run1:
    if row["kind"] == "do_bench":
        print(f"  {shape_name(row):28s} {row['impl']:13s} round {row['round']}  fwd {row['fwd']:.3f}"
              f"  bwd {row['bwd']:.3f}  fwd_bwd {row['fwd_bwd']:.3f}")

print("\nRun 2 (kt.py): ours over cuDNN's, forward+backward by three clocks; forward and backward by kernel time")
rows = {(tuple(r["shape"]), r["causal"], r["impl"]): r for r in lines("run2_kt.jsonl")}
for shape, causal in dict.fromkeys((s, c) for s, c, _ in rows):
    o, c = rows[shape, causal, OURS], rows[shape, causal, CUDNN]
    cells = "  ".join(f"{k} {f(o):.3f}/{f(c):.3f} = {f(o) / f(c):.3f}" for k, f in CLOCKS.items())
    print(f"  {shape_name(o):28s} {cells}  | forward {o['kernel_fwd_ms'] / c['kernel_fwd_ms']:.3f}"
          f"  backward {o['kernel_bwd_ms'] / c['kernel_bwd_ms']:.3f}")
short, balanced = ((1, 16, 8192, 64), False), ((1, 16, 8448, 64), False)
print(f"\n8,192 -> 8,448 keys without the mask: work x{(8448 / 8192) ** 2:.4f}; backward kernel time "
      + ", ".join(f"{impl} x{rows[balanced + (impl,)]['kernel_bwd_ms'] / rows[short + (impl,)]['kernel_bwd_ms']:.3f}"
                  for impl in (OURS, CUDNN)))

events_vs_kernels = max(abs(events_ms(r) / kernel_ms(r) - 1) for r in rows.values())
print(f"forward+backward by CUDA events over kernel time, every row and implementation: within {events_vs_kernels:.1%}")
board_2026 = [r for r in run1 if r["kind"] == "do_bench" and r["shape"] == [2, 32, 32768, 128]]
for mode in ("bwd", "fwd_bwd"):
    print(f"2x32x32768x128, run 1's do_bench rounds, {mode}: " + ", ".join(
        f"{impl} {min(r[mode] for r in board_2026 if r['impl'] == impl):.3f} to "
        f"{max(r[mode] for r in board_2026 if r['impl'] == impl):.3f}" for impl in (OURS, CUDNN)))
