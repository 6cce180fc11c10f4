# The Hopper backward's tile loops as compiled (a CPU machine with nvcc: no GPU needed): argv[1] a
# flash_hopper_backward.cu (its headers beside it), compiled for sm_90a; per bf16 instance of the dK/dV and dQ kernels,
# each loop that holds wgmma products and exponentials and no other such loop: its instructions (SASS, cuobjdump),
# and the instructions of each way through it (every forward branch inside taken or not), one line as JSON each.
# Run from the repository's root: python loop_paths.py FILE.cu TAG
import json, re, subprocess, sys, tempfile
from pathlib import Path
sys.path[:0] = ["tests", "."]
import triton
from test_flash_hopper_cuda import innermost_product_loops
from systems.attention.flash_cpp import hopper
source, tag = sys.argv[1], sys.argv[2]
with tempfile.TemporaryDirectory() as tmp:
    obj = Path(tmp) / "kernel.o"
    subprocess.run(["nvcc", "-std=c++17", "-O3", "-c", *hopper.ARCH_FLAGS, source, "-o", str(obj)], check=True)
    sass = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-sass", str(obj)], capture_output=True, text=True,
                          check=True).stdout
KINDS = {"hopper_bwd_dkdv_kernel": ("T", "head_dim", "stages", "causal", "one_pass"),
         "hopper_bwd_dq_kernel": ("T", "head_dim", "stages", "causal")}
for function in re.split(r"\n\s+Function : ", sass)[1:]:
    name = function.split("\n", 1)[0]
    kind = next((k for k in KINDS if k in name), None)
    if kind is None or "bfloat16" not in name:
        continue
    args = re.findall(r"Li(\d+)E|Lb([01])E", name)
    instance = dict(zip(KINDS[kind][1:], [int(a or b) for a, b in args]))
    lines = [(int(m.group(1), 16), m.group(2)) for m in
             (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line) for line in function.splitlines()) if m]
    texts = [t for _, t in lines]
    index = {address: i for i, (address, _) in enumerate(lines)}
    for loop in innermost_product_loops(function):
        if not any("MUFU.EX2" in t for t in loop):
            continue
        start = next(i for i in range(len(texts)) if texts[i:i + len(loop)] == loop)
        lengths = set()
        def walk(j, count):
            while j < len(loop):
                text, count = texts[start + j], count + 1
                branch = re.search(r"\bBRA\s.*?0x([0-9a-f]+)", text)
                if branch and j < len(loop) - 1:
                    target = index.get(int(branch.group(1), 16), -1) - start
                    if j < target < len(loop):
                        walk(target, count)
                    if not text.startswith("@"):
                        return
                j += 1
            lengths.add(count)
        walk(0, 0)
        r2ur = sum(bool(re.match(r"(@!?\w+\s+)?R2UR\b", t)) for t in loop)
        print(json.dumps(dict(tree=tag, kernel=kind, **instance, instructions=len(loop), paths=sorted(lengths),
                              r2ur=r2ur)))
