"""The tile loop of each two-pass dQ kernel (bf16) in two objects compiled for sm_90a (argv: base.o dq.o, each
`nvcc -std=c++17 -O3 -c -gencode=arch=compute_90a,code=sm_90a` of flash_hopper_backward.cu, before and after
dq_uniform.diff): its instructions and its moves into uniform registers (R2UR), read with Triton's cuobjdump.
Run from the repository's root with the project's environment."""
import re, subprocess, sys

import triton

sys.path.insert(0, "tests")
from test_flash_hopper_cuda import innermost_product_loops  # noqa: E402

print("| kernel | tree | tile loop instructions | R2UR |")
print("|---|---|---:|---:|")
for tree, path in zip(("base", "dq"), sys.argv[1:3]):
    sass = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-sass", path], capture_output=True, text=True,
                          check=True).stdout
    for kernel in re.split(r"\n\s+Function : ", sass)[1:]:
        name = subprocess.run(["c++filt", kernel.split("\n", 1)[0].strip()], capture_output=True, text=True).stdout
        match = re.search(r"hopper_bwd_dq_kernel<__nv_bfloat16, (\d+), \d+, (\w+)>", name)
        if match:
            loop = min(innermost_product_loops(kernel), key=len)
            moves = sum(bool(re.match(r"(@!?\w+\s+)?R2UR\b", text)) for text in loop)
            print(f"| d{match[1]}, {'causal' if match[2] == 'true' else 'not causal'} | {tree} | {len(loop)} | {moves} |")
