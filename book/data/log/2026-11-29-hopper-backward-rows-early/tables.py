"""Every number of the log entry "The Hopper backward without the mask reads each tile's L and D before its waits ..."
(2026-11-29), from the records kept here. From the repository's root:
    python book/data/log/2026-11-29-hopper-backward-rows-early/tables.py"""
import collections, csv, gzip, json, pathlib

HERE = pathlib.Path(__file__).parent
OURS, CUDNN = "hopper backward", "cudnn backward"


def rows(name):
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


def csv_rows(name):
    return list(csv.reader(gzip.open(HERE / name, "rt")))


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


print("## Run 1: Nsight Compute, one backward each, not causal, 1x16x8192x64 bf16 (main, 984c250)")
raw = csv_rows("run1_ncu_raw.csv.gz")
header, kernels = raw[0], raw[2:]
name = header.index("Kernel Name")
METRICS = {"gpc__cycles_elapsed.max": "cycles", "gpu__time_duration.sum": "duration",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": "tensor pipe active % of elapsed",
           "sm__issue_active.avg.pct_of_peak_sustained_elapsed": "issue active % of elapsed",
           "lts__t_sectors_srcunit_tex_op_red_lookup_hit.sum": "L2 reduction sectors (hits)",
           "lts__t_sectors_srcunit_tex_op_read.sum": "L2 read sectors",
           "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared-memory load wavefronts",
           "smsp__pcsamp_warps_issue_stalled_short_scoreboard": "stall samples: short scoreboard",
           "smsp__pcsamp_warps_issue_stalled_long_scoreboard": "stall samples: long scoreboard",
           "smsp__pcsamp_warps_issue_stalled_wait": "stall samples: wait",
           "smsp__pcsamp_warps_issue_stalled_mio_throttle": "stall samples: MIO throttle",
           "smsp__pcsamp_warps_issue_stalled_barrier": "stall samples: barrier"}
column = {h: i for i, h in enumerate(header)}
for kernel in kernels:
    short = kernel[name].split("(")[0].split("<")[0].split("::")[-1][:60]
    if "elementwise" in short:
        continue  # the gradients' accumulation into q, k, v's .grad across the script's calls
    print(f"{short}: " + ", ".join(f"{label} {kernel[column[m]]}" for m, label in METRICS.items()
                                   if m in column and ("cycles" in label or "duration" in label
                                                       or "dkdv" in short or "bprop" in short)))
cycles = {("dkdv" if "dkdv" in k[name] else "bprop"): number(k[column["gpc__cycles_elapsed.max"]])
          for k in kernels if "dkdv" in k[name] or "bprop" in k[name]}
print(f"dK/dV kernel over cuDNN's backward kernel, cycles: {cycles['dkdv'] / cycles['bprop']:.3f}")

source = csv_rows("run1_ncu_source_dkdv.csv.gz")
columns, lines = source[1], [r for r in source[2:] if len(r) == len(source[1])]
first = [r[0] for r in lines].index(lines[0][0], 1) if [r[0] for r in lines].count(lines[0][0]) > 1 else len(lines)
lines = lines[:first]  # the page lists the kernel's code twice
at = {c: i for i, c in enumerate(columns)}
samples = [number(r[at["Warp Stall Sampling (All Samples)"]]) for r in lines]
executed = [number(r[at["Instructions Executed"]]) for r in lines]
loop_count = max(e for e, r in zip(executed, lines) if "HGMMA" in r[1])
print(f"dK/dV kernel: {sum(samples):.0f} stall samples; the tile loop runs {loop_count:.0f} times a warp in all")
for i, r in enumerate(lines):
    if "TRYWAIT" in r[1] and executed[i] == loop_count:  # the consumers' wait at the top of the loop
        near, barrier = sum(samples[i:i + 3]), r[1].split(",")[1]
        tries = max(e for e, x in zip(executed, lines) if "TRYWAIT" in x[1] and x[1].split(",")[1] == barrier)
        print(f"  consumers' wait for a full stage: {near:.0f} samples ({near / sum(samples):.1%}), {r[1].strip()};"
              f" its retry loop ran {tries:.0f} times")
for col in ("stall_short_sb", "stall_long_sb"):
    top = sorted(range(len(lines)), key=lambda i: -number(lines[i][at[col]]))[:6]
    print(f"  most {col} samples:", "; ".join(f"{number(lines[i][at[col]]):.0f} at {lines[i][1].strip()} "
                                               f"(after {lines[i - 1][1].strip()})" for i in top))


def ratios(name, trees):
    """The fastest of the rounds of each (shape, impl, tree): the tree's backward over main's and over cuDNN's."""
    best = collections.defaultdict(lambda: float("inf"))
    for r in rows(name):
        best[r["shape"], r["impl"], r["tree"]] = min(best[r["shape"], r["impl"], r["tree"]], r["ms"])
    shapes = dict.fromkeys(s for s, _, _ in best)
    table = {}
    for shape in shapes:
        m = best[shape, OURS, "m"]
        table[shape] = {"m": (m, m / best[shape, CUDNN, "m"])}
        for tree in trees:
            t = best[shape, OURS, tree]
            table[shape][tree] = (t / m, t / best[shape, CUDNN, tree])
    return table


def kind(shape):
    d, causal = int(shape.split()[0].split("x")[3]), "not causal" not in shape
    return f"head dim {d}, {'causal' if causal else 'not causal'}"


def show(title, name, trees):
    print(f"\n## {title}")
    table = ratios(name, trees)
    for shape, t in table.items():
        print(f"{shape:26s} main {t['m'][0]:.3f} ms (x{t['m'][1]:.3f} cuDNN's) | " +
              " | ".join(f"{tree} {t[tree][0]:.3f} of main, x{t[tree][1]:.3f} cuDNN's" for tree in trees))
    for tree in trees:
        groups = collections.defaultdict(list)
        for shape, t in table.items():
            groups[kind(shape)].append(t[tree][0])
        print(f"{tree}: " + "; ".join(f"{k} {min(v):.3f} to {max(v):.3f}" for k, v in groups.items()))
    for tree in ("m",) + tuple(trees):
        over = collections.defaultdict(list)
        for shape, t in table.items():
            over[kind(shape)].append(t[tree][1])
        print(f"{tree} over cuDNN's backward: " + "; ".join(f"{k} {min(v):.3f} to {max(v):.3f}" for k, v in over.items()))
    errors = [max(r["err"]) for r in rows(name) if "err" in r]
    print(f"largest gradient difference over cuDNN's largest: {max(errors):.1e}")


show("Run 2: the backward alone, fastest of two rounds (s4: a fourth stage; s4l: and L early; s4ld: and D early)",
     "run2_ab_bwd.jsonl", ("s4", "s4l", "s4ld"))
show("Run 3: the same with three stages (ld3: L and D early; d3: D early)", "run3_ab_bwd.jsonl", ("ld3", "d3"))
show("Run 4: main against the change kept (n: L and D early and a fourth stage at head dim 64, without the mask)",
     "run4_ab_nc.jsonl", ("n",))
print()
for run in ("run1", "run3", "run4"):
    print(f"GPU tests, {run}:", (HERE / f"{run}_pytest.log").read_text().strip().splitlines()[-1].strip("= "))
