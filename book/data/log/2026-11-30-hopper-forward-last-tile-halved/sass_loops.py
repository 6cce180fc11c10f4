"""The Hopper forward's loops over key tiles, main (9fcce7e, argv[1]) against the change (04b34d6, argv[2]): cuobjdump
-sass listings of flash_hopper_forward.cu compiled for sm_90a by nvcc -cubin. Per kernel of main, its twin's
innermost product loops: their lengths in instructions, and the lines in which they differ (branch targets and
addresses left out); per halved kernel, its loops' lengths and R2UR moves. Run from the repository's root."""
import difflib
import re
import sys

sys.path.insert(0, "tests")
from test_flash_hopper_cuda import innermost_product_loops  # noqa: E402


def kernels(path):
    listing = open(path).read()
    return {part.split("\n", 1)[0].strip(): part for part in re.split(r"\n\s+Function : ", listing)[1:]}


def loops(kernel):
    return [[re.sub(r"0x[0-9a-f]+", "ADDR", re.sub(r"/\*[0-9a-f]{4,}\*/|\s+", " ", t)).strip() for t in loop]
            for loop in innermost_product_loops(kernel)]


main, change = kernels(sys.argv[1]), kernels(sys.argv[2])
for name, kernel in sorted(change.items()):
    parts = re.match(r".*hopper_fwd_kernelI(\w+?Li\d+ELi\d+ELi\d+ELb\dELb\d)ELb(\d)E", name)
    short, halved = parts.group(1), parts.group(2) == "1"
    ours = loops(kernel)
    if halved:
        moves = [sum(bool(re.match(r"(@!?\w+\s+)?R2UR\b", t)) for t in loop) for loop in ours]
        print(f"halved    {short}: loops {[len(l) for l in ours]}, R2UR {moves}")
        continue
    twin = loops(next(k for n, k in main.items() if re.search(short + "EEEv", n)))
    differing = [sum(line[:1] in "+-" and line[:3] not in ("+++", "---")
                     for line in difflib.unified_diff(a, b, lineterm="", n=0)) for a, b in zip(twin, ours)]
    print(f"unhalved  {short}: loops {[len(l) for l in twin]} -> {[len(l) for l in ours]}, lines differing {differing}")
