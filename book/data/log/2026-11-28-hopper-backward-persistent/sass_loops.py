# The consumers' tile loop of the one-pass dK/dV kernels (bf16) in SASS, per version of flash_hopper_backward.cu:
# instructions in the loop, and how many move a value from a lane's registers to the uniform ones (R2UR); for a
# version of flash_hopper_forward.cu (a NAME beginning "forward"), the R2UR in each whole bf16 forward kernel.
# Run from the repository root with nvcc and cuobjdump on the PATH:
#   python sass_loops.py NAME=path/to/flash_hopper_backward.cu ... forward_NAME=path/to/flash_hopper_forward.cu
import collections, pathlib, re, shutil, subprocess, sys, tempfile
import torch

SOURCES = pathlib.Path("systems/attention/flash_cpp")
KERNELS = {"d64 causal": ("Li64ELi3ELb1ELb1", 12, 31), "d64 not causal": ("Li64ELi3ELb0ELb1", 12, 31),
           "d128 causal": ("Li128ELi2ELb1ELb1", 0, 23), "d128 not causal": ("Li128ELi2ELb0ELb1", 0, 23)}


def sass(source: pathlib.Path) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        here = SOURCES / "_sass_loops.cu"
        shutil.copy(source, here)
        try:
            subprocess.run(["nvcc", "-std=c++17", "-O3", "-cubin", "-gencode", "arch=compute_90a,code=sm_90a",
                            f"-I{pathlib.Path(torch.__file__).parent / 'include'}", str(here), "-o", f"{tmp}/k.cubin"],
                           check=True)
        finally:
            here.unlink()
        return subprocess.run(["cuobjdump", "-sass", f"{tmp}/k.cubin"], check=True, capture_output=True, text=True).stdout


def tile_loop(text: str, mangled: str, first: int, last: int) -> list[str]:
    """The innermost backward branch's body that holds the wgmma products first..last of the bf16 kernel."""
    for function in re.split(r"\n\s+Function : ", text)[1:]:
        if "dkdv_kernelI13__nv_bfloat16" + mangled not in function.split("\n")[0]:
            continue
        lines = [(int(m.group(1), 16), m.group(2)) for m in
                 (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line) for line in function.split("\n")) if m]
        products = [i for i, (_, text) in enumerate(lines) if "HGMMA" in text]
        best = None
        for i, (address, text) in enumerate(lines):
            target = re.search(r"BRA\s.*?0x([0-9a-f]+)", text)
            if not target or int(target.group(1), 16) >= address:
                continue
            start = next((k for k, (a, _) in enumerate(lines) if a == int(target.group(1), 16)), None)
            if start is not None and start < products[first] and i > products[last]:
                if best is None or i - start < best[1] - best[0]:
                    best = (start, i)
        return [text for _, text in lines[best[0]:best[1] + 1]]
    raise LookupError(mangled)


def opcode(text: str) -> str:
    words = text.split()
    return words[1] if words[0].startswith("@") else words[0]


for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    text = sass(pathlib.Path(path))
    if name.startswith("forward"):
        kernels = [f for f in re.split(r"\n\s+Function : ", text)[1:] if "nv_bfloat16" in f.split("\n")[0]]
        moves = [sum(1 for line in f.split("\n") if re.search(r"\*/\s+(@\S+\s+)?R2UR\b", line)) for f in kernels]
        print(f"{name}\t{len(kernels)} bf16 kernels\tR2UR {min(moves)} to {max(moves)}")
        continue
    for kernel, (mangled, first, last) in KERNELS.items():
        counts = collections.Counter(opcode(t) for t in tile_loop(text, mangled, first, last))
        print(f"{name}\t{kernel}\tinstructions {sum(counts.values())}\tR2UR {counts['R2UR']}", flush=True)
