"""Every number of the log entry "The fused head's time by kernel, per chunk" (2026-12-02), from head_profile.json
(head_profile.py's output): per variant the do_bench means of three rounds, the extra memory of one call, and the
kernel time of one call by torch.profiler, grouped into products that overwrite their output, the weight's gradient
accumulated into its output (cuBLAS's beta = 1 kernels, "badd"), and the rest."""
import json
import statistics
from pathlib import Path

runs = json.loads((Path(__file__).parent / "head_profile.json").read_text())


def groups(top):
    accumulate = sum(ms for name, (ms, _) in top.items() if name.startswith("nvjet") and "_badd_" in name)
    products = sum(ms for name, (ms, _) in top.items() if name.startswith("nvjet") and "_badd_" not in name)
    loss = sum(ms for name, (ms, _) in top.items() if "loss_and_grad" in name or name.startswith("triton_"))
    return products, accumulate, loss


compiled = statistics.median(runs["compiled"]["ms"])
print(f"{'variant':<12}{'do_bench ms':>12}{'/compiled':>10}{'extra GiB':>10}{'kernels':>9}{'products':>9}"
      f"{'dW accum':>9}{'loss':>7}  (ms a call)")
for name, run in runs.items():
    ms = statistics.median(run["ms"])
    products, accumulate, loss = groups(run["top"])
    print(f"{name:<12}{ms:>12.1f}{ms / compiled:>10.4f}{run['extra_gib']:>10.3f}{run['kernel_ms']:>9.1f}"
          f"{products:>9.1f}{accumulate:>9.1f}{loss:>7.1f}")
print("accumulating calls of the weight's gradient, per chunk, ms:")
for name, run in runs.items():
    for kernel, (ms, calls) in run["top"].items():
        if "_badd_" in kernel:
            print(f"  {name:<12} {kernel}: {calls} calls, {ms / calls:.2f} ms each")
