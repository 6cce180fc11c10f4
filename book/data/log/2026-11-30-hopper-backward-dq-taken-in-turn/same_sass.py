"""Which kernels two cuobjdump -sass listings of flash_hopper_backward.cu (compiled for sm_90a by nvcc -cubin) hold
alike, instruction for instruction (addresses left out): argv[1], argv[2]."""
import re
import sys


def kernels(path):
    listing = open(path).read()
    return {part.split("\n", 1)[0].strip(): re.sub(r"/\*[0-9a-f]{4,}\*/", "", part.split("\n", 1)[1])
            for part in re.split(r"\n\s+Function : ", listing)[1:]}


first, second = kernels(sys.argv[1]), kernels(sys.argv[2])
for name in sorted(first):
    short = re.sub(r"_ZN\d+systems_flash_(hopper|cuda)\d+|14CUtensorMap.*|EEEv.*|NS_7Problem.*|NS\d_?\w*$", "", name)
    print("same" if first[name] == second.get(name) else "DIFF", short)
