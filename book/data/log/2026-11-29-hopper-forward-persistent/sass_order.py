# The order of the Hopper forward's tile loop as compiled (no GPU): nvcc (CUDA 13.0) builds flash_hopper_forward.cu
# for sm_90a, to PTX and to SASS; for three instantiations, the products (G: wgmma/HGMMA), the waits for them
# (W1: wait_group 1, W0: wait_group 0) and the exponentials (e: ex2/MUFU.EX2) in the loop over key tiles, in order,
# as runs of the same token. Run from the repository's root: python sass_order.py [path to nvcc] [path to cuobjdump]
import itertools, pathlib, re, subprocess, sys, tempfile
nvcc = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda/bin/nvcc"
cuobjdump = sys.argv[2] if len(sys.argv) > 2 else "cuobjdump"
src = pathlib.Path("systems/attention/flash_cpp/flash_hopper_forward.cu")
KERNELS = {"head dim 128, causal, ping-pong": "bfloat16Li128ELi3ELi2ELb1ELb1",
           "head dim 64, causal, ping-pong, 3 consumers": "bfloat16Li64ELi3ELi3ELb1ELb1",
           "head dim 64, not causal, ping-pong, 3 consumers": "bfloat16Li64ELi3ELi3ELb0ELb1"}
out = pathlib.Path(tempfile.mkdtemp())
flags = ["-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a"]
subprocess.run([nvcc, *flags, "-c", str(src), "-o", str(out / "k.o")], check=True)
subprocess.run([nvcc, *flags, "-ptx", str(src), "-o", str(out / "k.ptx")], check=True)
sass = subprocess.run([cuobjdump, "-sass", str(out / "k.o")], capture_output=True, text=True, check=True).stdout
ptx = (out / "k.ptx").read_text()


def runs(tokens):
    return " ".join(f"{k}x{len(list(g))}" for k, g in itertools.groupby(tokens))


def sass_loop(function, exponentials=64):
    """The tokens of the smallest loop (a backward branch) that holds a tile's exponentials and more."""
    ins = [(int(m.group(1), 16), m.group(2)) for m in
           (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?);", line) for line in function.splitlines()) if m]
    at = {a: i for i, (a, _) in enumerate(ins)}
    loops = []
    for end, (a, text) in enumerate(ins):
        m = re.search(r"BRA (?:\S+ )?0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            body = [t for _, t in ins[at[int(m.group(1), 16)]:end + 1]]
            if sum("MUFU.EX2" in t for t in body) >= exponentials:
                loops.append(body)
    loop = min(loops, key=len)
    tokens = [f"({len(loop)} instructions)"]
    for t in loop:
        if "HGMMA" in t:
            tokens.append("G")
        elif "WARPGROUP.DEPBAR.LE" in t:
            tokens.append("W" + t.strip()[-1])
        elif "MUFU.EX2" in t:
            tokens.append("e")
    return tokens


def ptx_loop(function):
    """The PTX tokens between the loop's first wgmma and the wait_group 0 that follows the first wait_group 1."""
    lines = function.splitlines()
    w1 = next(i for i, l in enumerate(lines) if "wgmma.wait_group.sync.aligned 1" in l)
    start = max(i for i in range(w1) if "wgmma.fence" in lines[i] or "bar.sync" in lines[i])
    end = next(i for i in range(w1, len(lines)) if "wgmma.wait_group.sync.aligned 0" in lines[i])
    tokens = []
    for l in lines[start:end + 1]:
        if "wgmma.mma_async" in l:
            tokens.append("G")
        elif "wgmma.wait_group" in l:
            tokens.append("W" + l.strip().rstrip(";")[-1])
        elif "ex2.approx" in l:
            tokens.append("e")
    return tokens


for name, key in KERNELS.items():
    function = next(f for f in re.split(r"\n\s+Function : ", sass) if key in f.split("\n", 1)[0])
    entry = next(e for e in ptx.split(".entry ")[1:] if key in e.split("(", 1)[0])
    print(f"{name}\n  PTX:  {runs(ptx_loop(entry))}\n  SASS: {runs(sass_loop(function))}")

# beside them, the backward's one-pass dK/dV loop at head dim 64, causal (its tile's 32 exponentials)
backward = pathlib.Path("systems/attention/flash_cpp/flash_hopper_backward.cu")
subprocess.run([nvcc, *flags, "-c", str(backward), "-o", str(out / "b.o")], check=True)
sass = subprocess.run([cuobjdump, "-sass", str(out / "b.o")], capture_output=True, text=True, check=True).stdout
function = next(f for f in re.split(r"\n\s+Function : ", sass)
                if "dkdv_kernelI13__nv_bfloat16Li64ELi3ELb1ELb1" in f.split("\n", 1)[0])
print(f"backward, dK/dV one pass, head dim 64, causal\n  SASS: {runs(sass_loop(function, 32))}")
