"""The consumers' tile loop of each dK/dV kernel in cuobjdump's SASS of flash_hopper_backward.cu (argv: one listing
per tree, compiled for sm_90a on a CPU machine: nvcc -std=c++17 -O3 -c -gencode=arch=compute_90a,code=sm_90a):
its instructions and R2UR moves. The loop: the shortest innermost loop of products holding no copy of the producer
warps (LDGSTS, UTMALDG), as tests/test_flash_hopper_cuda.py finds it in the change."""
import re
import sys

sys.path.insert(0, "tests")
from test_flash_hopper_cuda import innermost_product_loops  # noqa: E402

for listing in sys.argv[1:]:
    sass = open(listing).read()
    for kernel in re.split(r"\n\s+Function : ", sass)[1:]:
        name = kernel.split("\n", 1)[0]
        if "dkdv_kernel" not in name:
            continue
        loops = [loop for loop in innermost_product_loops(kernel)
                 if not any(re.search(r"\b(LDGSTS|UTMALDG)\b", text) for text in loop)]
        loop = min(loops, key=len)
        moves = sum(bool(re.match(r"(@!?\w+\s+)?R2UR\b", text)) for text in loop)
        args = re.search(r"kernelI(\w+?)Li(\d+)ELi(\d)ELb(\d)ELb(\d)", name).groups()
        print(f"{listing}: {args[0]} d{args[1]} causal={args[3]} one_pass={args[4]}: {len(loop)} instructions, "
              f"{moves} R2UR")
