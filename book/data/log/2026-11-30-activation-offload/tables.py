"""Every number of the log entry of 2026-11-30 on activation offloading, from the records beside this file."""
import io, json, tarfile
from pathlib import Path

HERE = Path(__file__).parent


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.startswith("{")]


print("== call 1: probe.py (host memory, copies between the GPU and host memory)")
probe = rows("run1_probe.jsonl")
v = probe[0]
print(f"torch {v['torch']}, {v['gpu']}, host memory {int(v['MemTotal'].split()[0]) / 2**20:.1f} GiB, "
      f"locked-memory limit {v['memlock']}, CheckpointPolicy: {', '.join(v['policies'])}")
for r in probe:
    if r["what"] in ("d2h_pinned", "h2d_pinned", "d2h_pageable"):
        print(f"{r['what']:>13}: {r['gib']} GiB in {r['best_ms']:.1f} ms (median {r['median_ms']:.1f}), "
              f"{r['gb_s']:.1f} GB/s")
    elif r["what"] == "both_directions":
        print(f"both directions at once, 3 GiB each: to the host {r['d2h_ms']:.1f} ms "
              f"({3 * 2**30 / r['d2h_ms'] / 1e6:.1f} GB/s), to the GPU {r['h2d_ms']:.1f} ms "
              f"({3 * 2**30 / r['h2d_ms'] / 1e6:.1f} GB/s)")
    elif r["what"] == "matmuls_beside_d2h":
        copy = f", the copy beside them {r['copy_ms']:.1f} ms" if r["copying"] else ""
        print(f"120 bf16 matmuls 8192^3, {'with' if r['copying'] else 'without'} a 3 GiB copy to the host: "
              f"{r['matmul_ms']:.1f} ms, {r['tflops']:.0f} TFLOP/s{copy}")
pinned = [r for r in probe if r["what"] == "pinned_total"]
print(f"first 3 GiB pinned in {probe[1]['pin_s']:.2f} s; then 3 GiB at a time up to {pinned[-1]['gib']} GiB pinned in "
      f"all, {pinned[-1]['seconds']:.1f} s for the last {pinned[-1]['gib'] - pinned[0]['gib'] + 3} GiB "
      f"({(pinned[-1]['gib'] - pinned[0]['gib'] + 3) / pinned[-1]['seconds']:.2f} GiB/s)")
print("GPU tests of test_flash_hopper_cuda.py at 85b4e32:", (HERE / "run1_pytest.log").read_text().splitlines()[-1])


def step_table(name):
    print(f"{'blocks':>6} {'variant':<20} {'status':<6} {'ms':>8} {'MFU':>6} {'peak GiB':>9} {'reserved GiB':>12} "
          f"{'moved GiB':>9}")
    for r in rows(name):
        print(f"{r['layers']:>6} {r['variant']:<20} {r['status']:<6} {r['ms']:>8.1f} {100 * r['mfu']:>5.1f}% "
              f"{r['peak_gib']:>9.1f} {r['reserved_gib']:>12.1f} {r['moved_gib']:>9.1f}")


print("\n== call 2: offload_spike.py, 4 blocks on the whole H200, then 16 in an H100 80GB's memory")
step_table("run2_spike4.jsonl")
step_table("run2_spike16.jsonl")
print("\n== call 3: offload_spike.py, 4 blocks on the whole H200")
step_table("run3_spike4.jsonl")
c3 = {r["variant"]: r for r in rows("run3_spike4.jsonl")}
print(f"offloaded / FFN kept on the GPU: {c3['groups_ffn_offload']['ms'] / c3['groups_ffn']['ms']:.3f}; "
      f"offloaded / attention kept only: {c3['groups_ffn_offload']['ms'] / c3['groups']['ms']:.3f}")

with tarfile.open(HERE / "run3_traces.tgz") as tar:
    for member in sorted(tar.getmembers(), key=lambda m: m.name):
        events = json.load(io.TextIOWrapper(tar.extractfile(member)))["traceEvents"]
        timed = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        start, end = min(e["ts"] for e in timed), max(e["ts"] + e["dur"] for e in timed)
        busy, current = 0.0, None
        for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in timed if e["cat"] == "kernel"):
            if current is None or a > current[1]:
                busy += 0 if current is None else current[1] - current[0]
                current = [a, b]
            else:
                current[1] = max(current[1], b)
        busy += current[1] - current[0]
        out = [e for e in timed if e["cat"] == "gpu_memcpy" and "DtoH" in e["name"]]
        back = [e for e in timed if e["cat"] == "gpu_memcpy" and "HtoD" in e["name"] and e["args"].get("bytes", 0) > 2**20]
        print(f"{member.name}: two steps span {(end - start) / 1e3:.1f} ms, kernels busy {busy / 1e3:.1f}, GPU idle "
              f"{(end - start - busy) / 1e3:.1f} ms; {len(out)} copies to the host "
              f"({sum(e['args'].get('bytes', 0) for e in out) / 2**30:.2f} GiB, "
              f"{sum(e['dur'] for e in out) / 1e3:.1f} ms), {len(back)} back "
              f"({sum(e['args'].get('bytes', 0) for e in back) / 2**30:.2f} GiB, {sum(e['dur'] for e in back) / 1e3:.1f} ms)"
              + (f"; one copy of {out[0]['args']['bytes'] / 2**20:.0f} MiB in "
                 f"{min(e['dur'] for e in out) / 1e3:.1f} to {max(e['dur'] for e in out) / 1e3:.1f} ms" if out else ""))

print("\n== call 4: the landed code (654c389)")
print("GPU test of tests/test_offload.py:", (HERE / "run4_pytest.log").read_text().splitlines()[-1])
lines = (HERE / "run4_cli16.txt").read_text().splitlines()
steps = {}
for line in lines[1:]:
    t = line.split()
    ms, extra, peak, reserved, tflops, mfu = map(float, t[-6:])
    steps[t[t.index("recompute") + 1].rstrip(",")] = ms
    print(f"{t[0]} blocks, {' '.join(t[1:t.index('compiled') + 1])}: {t[-7]}, {ms:.1f} ms, MFU {100 * mfu:.1f} %, "
          f"peak {peak:.1f} GiB, reserved {reserved:.1f} GiB, {tflops:.0f} TFLOP/s")
print(f"plain PyTorch's step / ours: {steps['all'] / steps['offload']:.3f}")
whole16 = rows("run2_spike16.jsonl")[1]
print(f"ours with offload / ours keeping attention only (call 2, the model compiled whole): "
      f"{steps['offload'] / whole16['ms']:.3f}")
