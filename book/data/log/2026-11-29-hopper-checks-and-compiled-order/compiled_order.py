# The Hopper forward's consumer loop as ptxas (CUDA 13.0) compiles it, with no GPU: the committed kernel and the
# diffs beside this file, each applied to a copy of systems/attention/flash_cpp and built for sm_90a. For each
# build, ptxas's count of kernels whose wgmmas it serialised (warning C7512) and of kernels that spill, and for three
# kernels the order of the products (G: HGMMA), the waits for them (W1: wait_group 1, W0: wait_group 0), the
# exponentials (e: MUFU.EX2), the packing of P (c: F2FP), local memory (L: LDL/STL) and branches (^: back, v:
# forward), as runs of the same token, from the consumer's first product to the end of the kernel.
# Run from the repository's root: python compiled_order.py [path to nvcc] [path to cuobjdump]
import itertools, pathlib, re, shutil, subprocess, sys, tempfile
nvcc = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda/bin/nvcc"
cuobjdump = sys.argv[2] if len(sys.argv) > 2 else "cuobjdump"
here = pathlib.Path(__file__).parent
BUILDS = {"committed": None, "two_p": "two_p.diff", "two_p_exponentials_apart": "two_p_exponentials_apart.diff",
          "two_p_no_branches": "two_p_no_branches.diff"}
KERNELS = {"head dim 128, causal, ping-pong": "bfloat16Li128ELi3ELi2ELb1ELb1",
           "head dim 64, 2 consumers, causal, ping-pong": "bfloat16Li64ELi3ELi2ELb1ELb1",
           "head dim 64, 3 consumers, causal, ping-pong": "bfloat16Li64ELi3ELi3ELb1ELb1"}


def tokens(function):
    ins = [(int(m.group(1), 16), m.group(2)) for m in
           (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?);", line) for line in function.splitlines()) if m]
    out = []
    for a, t in ins:
        m = re.search(r"BRA (?:\S+ )?0x([0-9a-f]+)", t)
        if "HGMMA" in t:
            out.append("G")
        elif m:
            out.append("^" if int(m.group(1), 16) < a else "v")
        elif "WARPGROUP.DEPBAR" in t:
            out.append("W" + t.strip()[-1])
        elif "MUFU.EX2" in t:
            out.append("e")
        elif "F2FP" in t:
            out.append("c")
        elif "LDL" in t or "STL" in t:
            out.append("L")
    return out[out.index("G"):]


for build, diff in BUILDS.items():
    tree = pathlib.Path(tempfile.mkdtemp())
    shutil.copytree("systems", tree / "systems")
    if diff:
        subprocess.run(["patch", "-s", "-p1", "-d", str(tree), "-i", str((here / diff).resolve())], check=True)
    src = tree / "systems/attention/flash_cpp/flash_hopper_forward.cu"
    built = subprocess.run([nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v", "-c",
                            str(src), "-o", str(tree / "k.o")], capture_output=True, text=True, check=True).stderr
    spilling = len(re.findall(r"[1-9]\d* bytes spill stores", built))
    print(f"== {build}: {built.count('C7512')} of 48 kernels with their wgmmas serialised, {spilling} spilling")
    sass = subprocess.run([cuobjdump, "-sass", str(tree / "k.o")], capture_output=True, text=True, check=True).stdout
    for name, key in KERNELS.items():
        function = next(f for f in re.split(r"\n\s+Function : ", sass) if key in f.split("\n", 1)[0])
        print(f"  {name}: " + " ".join(f"{k}{len(list(g))}" for k, g in itertools.groupby(tokens(function))))
